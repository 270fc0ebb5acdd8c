//! The HTTP side: [`AdmissionState`], [`router`] and one handler per
//! webhook path.
//!
//! Per request: the body (at most [`MAX_BODY_BYTES`]) is decoded (a body
//! that is not an `AdmissionReview` with a request is answered with HTTP 400
//! and a message, no review); a request for another kind than the path's is
//! denied (400 `BadRequest`); the decision runs on a blocking thread under
//! `budget +` [`DEADLINE_MARGIN`]. Should that run out, the answer follows
//! the failure policy of the plugin still running (`Fail`: denied naming
//! it; `Ignore`: admitted with a warning naming it), or is a denial saying
//! `admission deadline exceeded` when no plugin is running — except for
//! a (Cluster)TrainerPlugin, whose review then answers with the checks that
//! need no plugin and a warning that the plugin was not tried. Every request
//! has a tracing span (webhook, kind, name, namespace, operation, uid) and
//! is counted in the admission metrics.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tracing::Instrument;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND, TRAINJOB_KIND,
};

use super::defaulting::{format_time, mutate_trainjob};
use super::gates::{AdmissionLimits, Full, Gates, Pass};
use super::plugins::{TryWith, review_plugin, review_trainer_plugin};
use super::review::{Operation, Request, Verdict, parse_review, response_body};
use super::runtimes::{RuntimeKind, review_runtime};
use super::trainjob::{RuntimeLookup, legacy_fields_movable, review_trainjob};
use crate::ops::metrics::Metrics;
use crate::plugin::{
    CallOutcome, FailurePolicy, PluginRuntime, PluginSet, RuntimeConfig, ValidateBudget,
};

/// The TrainJob defaulting path.
pub const PATH_MUTATE_TRAINJOB: &str = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob";
/// The TrainJob validation path.
pub const PATH_VALIDATE_TRAINJOB: &str = "/validate-trainer-kubeflow-org-v1alpha1-trainjob";
/// The TrainingRuntime validation path.
pub const PATH_VALIDATE_TRAINING_RUNTIME: &str =
    "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime";
/// The ClusterTrainingRuntime validation path.
pub const PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME: &str =
    "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime";
/// The ClusterTrainerPlugin validation path.
pub const PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN: &str =
    "/validate-trainforge-dev-v1alpha1-clustertrainerplugin";
/// The TrainerPlugin validation path.
pub const PATH_VALIDATE_TRAINER_PLUGIN: &str = "/validate-trainforge-dev-v1alpha1-trainerplugin";

/// Largest request body accepted (the API server sends objects of up to
/// about 3 MiB, twice on UPDATE).
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Default time budget of one request's plugin calls (the API server's
/// webhook timeout is 10 s).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(3);

/// Extra time given to a request's blocking work beyond its budget before
/// the handler answers without it.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// The plugin set in service right now.
pub trait PluginsNow: Send + Sync {
    /// The current set (each request takes it once, at its start).
    fn current(&self) -> Arc<PluginSet>;

    /// The set a TrainJob of `namespace` with `labels` is validated by (the
    /// cluster's plugins and the tenant plugins that apply to it).
    fn for_trainjob(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Arc<PluginSet> {
        let _ = (namespace, labels);
        self.current()
    }
}

/// The current time, as the defaulting webhook stamps runtime patches.
pub type Clock = Arc<dyn Fn() -> k8s_openapi::jiff::Timestamp + Send + Sync>;

/// Everything the handlers share.
pub struct AdmissionState {
    plugins: Arc<dyn PluginsNow>,
    runtimes: Arc<dyn RuntimeLookup>,
    metrics: Arc<Metrics>,
    budget: Duration,
    clock: Clock,
    plugin_runtime: OnceLock<Arc<PluginRuntime>>,
    gates: Gates,
}

impl AdmissionState {
    /// The state: the plugins in service, the runtime lookup, the metrics,
    /// and the time budget of one request's plugin calls
    /// ([`DEFAULT_BUDGET`] is a good value). The clock is the system clock
    /// and builtins are tried on a plugin runtime created when first needed
    /// (see [`AdmissionState::with_clock`] and
    /// [`AdmissionState::with_plugin_runtime`]).
    pub fn new(
        plugins: Arc<dyn PluginsNow>,
        runtimes: Arc<dyn RuntimeLookup>,
        metrics: Arc<Metrics>,
        budget: Duration,
    ) -> Self {
        AdmissionState {
            plugins,
            runtimes,
            metrics,
            budget,
            clock: Arc::new(k8s_openapi::jiff::Timestamp::now),
            plugin_runtime: OnceLock::new(),
            gates: Gates::new(AdmissionLimits::default()),
        }
    }

    /// Bound TrainJob validations by plugins with `limits` (per namespace
    /// and in all; see [`super::gates`]) instead of the defaults.
    #[must_use]
    pub fn with_limits(mut self, limits: AdmissionLimits) -> Self {
        self.gates = Gates::new(limits);
        self
    }

    /// Use `clock` for the current time (tests).
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Try builtins (ClusterTrainerPlugin admission) on `runtime`, e.g. the
    /// operator's own, instead of one created when first needed.
    #[must_use]
    pub fn with_plugin_runtime(self, runtime: Arc<PluginRuntime>) -> Self {
        let _ = self.plugin_runtime.set(runtime);
        self
    }

    /// The request budget.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    fn plugin_runtime(&self) -> Result<Arc<PluginRuntime>, String> {
        if let Some(rt) = self.plugin_runtime.get() {
            return Ok(rt.clone());
        }
        let rt = Arc::new(PluginRuntime::new(RuntimeConfig::default()).map_err(|e| e.to_string())?);
        Ok(self.plugin_runtime.get_or_init(|| rt).clone())
    }
}

/// The five webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Webhook {
    MutateTrainJob,
    ValidateTrainJob,
    ValidateTrainingRuntime,
    ValidateClusterTrainingRuntime,
    ValidateClusterTrainerPlugin,
    ValidateTrainerPlugin,
}

impl Webhook {
    /// The `webhook` metric label.
    fn label(self) -> &'static str {
        match self {
            Webhook::MutateTrainJob => "trainjob-defaulter",
            Webhook::ValidateTrainJob => "trainjob",
            Webhook::ValidateTrainingRuntime => "trainingruntime",
            Webhook::ValidateClusterTrainingRuntime => "clustertrainingruntime",
            Webhook::ValidateClusterTrainerPlugin => "clustertrainerplugin",
            Webhook::ValidateTrainerPlugin => "trainerplugin",
        }
    }

    /// The group and kind the path reviews.
    fn group_kind(self) -> (&'static str, &'static str) {
        match self {
            Webhook::MutateTrainJob | Webhook::ValidateTrainJob => (GROUP, TRAINJOB_KIND),
            Webhook::ValidateTrainingRuntime => (GROUP, TRAINING_RUNTIME_KIND),
            Webhook::ValidateClusterTrainingRuntime => (GROUP, CLUSTER_TRAINING_RUNTIME_KIND),
            Webhook::ValidateClusterTrainerPlugin => ("trainforge.dev", "ClusterTrainerPlugin"),
            Webhook::ValidateTrainerPlugin => ("trainforge.dev", "TrainerPlugin"),
        }
    }
}

/// The admission routes (POST only), with the body limit, over `state`.
pub fn router(state: Arc<AdmissionState>) -> Router {
    let route = |w: Webhook| {
        post(move |State(s): State<Arc<AdmissionState>>, body: Bytes| handle(s, w, body))
    };
    Router::new()
        .route(PATH_MUTATE_TRAINJOB, route(Webhook::MutateTrainJob))
        .route(PATH_VALIDATE_TRAINJOB, route(Webhook::ValidateTrainJob))
        .route(
            PATH_VALIDATE_TRAINING_RUNTIME,
            route(Webhook::ValidateTrainingRuntime),
        )
        .route(
            PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
            route(Webhook::ValidateClusterTrainingRuntime),
        )
        .route(
            PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN,
            route(Webhook::ValidateClusterTrainerPlugin),
        )
        .route(
            PATH_VALIDATE_TRAINER_PLUGIN,
            route(Webhook::ValidateTrainerPlugin),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// The decision, on a blocking thread.
fn decide(
    state: &AdmissionState,
    webhook: Webhook,
    req: &Request,
    plugins: &PluginSet,
    budget: &ValidateBudget,
) -> Verdict {
    let op = req.operation();
    let bad_request =
        |e: &dyn std::fmt::Display| Verdict::deny(400, "BadRequest", e.to_string(), Vec::new());
    match webhook {
        Webhook::MutateTrainJob => {
            if !matches!(op, Operation::Create | Operation::Update) {
                return Verdict::allow(Vec::new());
            }
            let now = format_time((state.clock)());
            let old = match op {
                Operation::Update => req.old_object.as_ref(),
                _ => None,
            };
            let movable = |o: &serde_json::Value| legacy_fields_movable(o, state.runtimes.as_ref());
            match mutate_trainjob(&req.object, old, &now, &movable) {
                Ok(m) => Verdict::patched(m.patch, m.warnings),
                Err(e) => Verdict::deny(500, "InternalError", e.to_string(), Vec::new()),
            }
        }
        Webhook::ValidateTrainJob => review_trainjob(
            op,
            &req.object,
            req.old_object.as_ref(),
            state.runtimes.as_ref(),
            plugins,
            budget,
        )
        .unwrap_or_else(|e| bad_request(&e)),
        Webhook::ValidateTrainingRuntime => {
            review_runtime(RuntimeKind::Namespaced, op, &req.object)
                .unwrap_or_else(|e| bad_request(&e))
        }
        Webhook::ValidateClusterTrainingRuntime => {
            review_runtime(RuntimeKind::Cluster, op, &req.object)
                .unwrap_or_else(|e| bad_request(&e))
        }
        Webhook::ValidateClusterTrainerPlugin | Webhook::ValidateTrainerPlugin => {
            let runtime = || state.plugin_runtime();
            plugin_review(webhook, req, Some((&runtime, budget.remaining())))
                .unwrap_or_else(|| Verdict::allow(Vec::new()))
        }
    }
}

/// The review of a (Cluster)TrainerPlugin, trying its builtin as
/// `try_with` says; `None` for the other webhooks.
fn plugin_review(webhook: Webhook, req: &Request, try_with: TryWith<'_>) -> Option<Verdict> {
    let verdict = match webhook {
        Webhook::ValidateClusterTrainerPlugin => {
            review_plugin(req.operation(), &req.object, try_with)
        }
        Webhook::ValidateTrainerPlugin => review_trainer_plugin(
            req.operation(),
            &req.object,
            req.raw.namespace.as_deref().unwrap_or_default(),
            try_with,
        ),
        _ => return None,
    };
    Some(verdict.unwrap_or_else(|e| plugin_review_failed(&e)))
}

/// The answer when a plugin review could not be made.
fn plugin_review_failed(e: &super::plugins::PluginReviewError) -> Verdict {
    match e {
        super::plugins::PluginReviewError::Runtime(_) => {
            Verdict::deny(500, "InternalError", e.to_string(), Vec::new())
        }
        super::plugins::PluginReviewError::Decode { .. } => {
            Verdict::deny(400, "BadRequest", e.to_string(), Vec::new())
        }
    }
}

/// The answer when the blocking work did not finish in time.
fn deadline_verdict(plugins: &PluginSet, budget: &ValidateBudget, allowed: Duration) -> Verdict {
    let ms = allowed.as_millis();
    let Some(name) = budget.running() else {
        return Verdict::deny(
            500,
            "InternalError",
            format!("admission deadline exceeded ({ms} ms)"),
            Vec::new(),
        );
    };
    let policy = plugins
        .plugins()
        .iter()
        .find(|p| p.name() == name)
        .map_or(FailurePolicy::Fail, |p| p.failure_policy());
    let what = format!(
        "plugin {name:?} failed in validate (Timeout): still running when the {ms} ms admission deadline passed"
    );
    match policy {
        FailurePolicy::Ignore => {
            Verdict::allow(vec![format!("{what}, ignored (failurePolicy Ignore)")])
        }
        _ => Verdict::deny(500, "InternalError", what, Vec::new()),
    }
}

/// The plugins that validate TrainJobs in `plugins`.
fn validating(plugins: &PluginSet) -> impl Iterator<Item = &crate::plugin::LoadedPlugin> {
    plugins
        .plugins()
        .iter()
        .filter(|p| p.calls(trainforge_api::plugin::Phase::Validate))
}

/// Pass the gates when `req` is a TrainJob validation that calls plugins
/// (`Ok(None)` for everything else, which calls none), waiting at most the
/// request budget.
async fn enter(
    state: &AdmissionState,
    webhook: Webhook,
    req: &Request,
    plugins: &PluginSet,
) -> Result<Option<Pass>, Full> {
    if webhook != Webhook::ValidateTrainJob {
        return Ok(None);
    }
    let Some(memory) = validating(plugins).map(|p| p.memory_bytes() as u64).max() else {
        return Ok(None);
    };
    let namespace = req.raw.namespace.as_deref().unwrap_or_default();
    state
        .gates
        .enter(namespace, memory, state.budget)
        .await
        .map(Some)
}

/// The answer when a TrainJob could not be validated within the bounds:
/// admitted with a warning when every validating plugin's failure policy
/// is `Ignore`, otherwise denied (500) saying which bound.
fn bound_verdict(plugins: &PluginSet, full: &Full) -> Verdict {
    let names: Vec<&str> = validating(plugins).map(|p| p.name()).collect();
    if validating(plugins).all(|p| p.failure_policy() == FailurePolicy::Ignore) {
        return Verdict::allow(vec![format!(
            "{full}: not validated by {}, ignored (failurePolicy Ignore)",
            names.join(", ")
        )]);
    }
    Verdict::deny(
        500,
        "InternalError",
        format!("{full} (validating plugins: {})", names.join(", ")),
        Vec::new(),
    )
}

/// Decide on a blocking thread, holding `pass` until the decision is made
/// (even past the deadline), under `budget +` [`DEADLINE_MARGIN`].
async fn run(
    state: &Arc<AdmissionState>,
    webhook: Webhook,
    req: &Request,
    plugins: &Arc<PluginSet>,
    budget: &Arc<ValidateBudget>,
    pass: Option<Pass>,
) -> Verdict {
    let allowed = state.budget.saturating_add(DEADLINE_MARGIN);
    let task = {
        let (state, plugins, budget, req) =
            (state.clone(), plugins.clone(), budget.clone(), req.clone());
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _g = span.enter();
            let _pass = pass;
            decide(&state, webhook, &req, &plugins, &budget)
        })
    };
    match tokio::time::timeout(allowed, task).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => Verdict::deny(
            500,
            "InternalError",
            format!("admission review failed: {e}"),
            Vec::new(),
        ),
        // Trying a plugin is a courtesy: the checks that need no
        // plugin decide, the plugin's status tells the rest.
        Err(_) => plugin_review(webhook, req, None)
            .unwrap_or_else(|| deadline_verdict(plugins, budget, allowed)),
    }
}

async fn handle(state: Arc<AdmissionState>, webhook: Webhook, body: Bytes) -> Response {
    let start = Instant::now();
    let req = match parse_review(&body) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(webhook = webhook.label(), error = %e, "admission request refused");
            state
                .metrics
                .admission_done(webhook.label(), "UNKNOWN", "error", start.elapsed());
            return (StatusCode::BAD_REQUEST, e.to_string()).into_response();
        }
    };
    let op = req.operation();
    let span = tracing::info_span!(
        "admission",
        webhook = webhook.label(),
        kind = %req.raw.kind.kind,
        name = %req.raw.name,
        namespace = req.raw.namespace.as_deref().unwrap_or(""),
        operation = operation_name(&op),
        uid = %req.raw.uid,
    );
    async move {
        let (group, kind) = req.group_kind();
        let (want_group, want_kind) = webhook.group_kind();
        let plugins = match webhook {
            Webhook::ValidateTrainJob => {
                let labels = req
                    .object
                    .pointer("/metadata/labels")
                    .and_then(|l| serde_json::from_value(l.clone()).ok())
                    .unwrap_or_default();
                state
                    .plugins
                    .for_trainjob(req.raw.namespace.as_deref().unwrap_or_default(), &labels)
            }
            _ => state.plugins.current(),
        };
        let budget = Arc::new(ValidateBudget::new(state.budget));
        let verdict = if (group, kind) != (want_group, want_kind) {
            Verdict::deny(
                400,
                "BadRequest",
                format!("this webhook reviews {want_kind}.{want_group}, not {kind}.{group}"),
                Vec::new(),
            )
        } else {
            match enter(&state, webhook, &req, &plugins).await {
                Err(full) => bound_verdict(&plugins, &full),
                Ok(pass) => run(&state, webhook, &req, &plugins, &budget, pass).await,
            }
        };
        for call in budget.calls() {
            let (result, failure) = match call.outcome {
                CallOutcome::Ok => ("ok", None),
                CallOutcome::Denied => ("denied", None),
                CallOutcome::Failed(r) => ("failed", Some(r)),
                CallOutcome::Ignored(r) => ("ignored", Some(r)),
            };
            state
                .metrics
                .admission_plugin_call(&call.plugin, result, failure, call.elapsed);
        }
        let result = match (verdict.allowed, verdict.code) {
            (true, _) => "allowed",
            (false, 403) => "denied",
            _ => "error",
        };
        state.metrics.admission_done(
            webhook.label(),
            operation_name(&op),
            result,
            start.elapsed(),
        );
        if verdict.allowed {
            tracing::debug!(
                warnings = verdict.warnings.len(),
                patched = verdict.patch.is_some(),
                "admitted"
            );
        } else {
            tracing::info!(code = verdict.code, message = %verdict.message, "denied");
        }
        match response_body(&req, &verdict) {
            Ok(b) => ([(header::CONTENT_TYPE, "application/json")], b).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::admission::test_support::{Fixed, lookup, torch_set, trainjob};
    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use base64::Engine as _;
    use serde_json::{Value, json};
    use tower::ServiceExt as _;

    fn state(policy: FailurePolicy, budget: Duration) -> (Arc<AdmissionState>, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new());
        let s = AdmissionState::new(
            Arc::new(Fixed(Arc::new(torch_set(policy)))),
            Arc::new(lookup()),
            metrics.clone(),
            budget,
        )
        .with_clock(Arc::new(|| "2026-11-24T09:00:00.5Z".parse().unwrap()))
        .with_plugin_runtime(crate::admission::test_support::runtime());
        (Arc::new(s), metrics)
    }

    fn review(group: &str, kind: &str, op: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "uid-7", "kind": {"group": group, "version": "v1alpha1", "kind": kind},
                "resource": {"group": group, "version": "v1alpha1", "resource": "x"},
                "name": "j", "namespace": "ns", "operation": op, "userInfo": {"username": "u"},
                "object": object, "oldObject": old}}))
        .unwrap()
    }

    async fn post(router: Router, path: &str, body: Vec<u8>) -> (StatusCode, Value, String) {
        let resp = router
            .oneshot(
                HttpRequest::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            text,
        )
    }

    fn tj(kind: &str, name: &str, trainer: Value) -> Value {
        trainjob(kind, name, trainer)
    }

    /// A CREATE review of a plain TrainJob on the `torch` TrainingRuntime.
    fn torch_create() -> Vec<u8> {
        review(
            GROUP,
            "TrainJob",
            "CREATE",
            tj("TrainingRuntime", "torch", json!({})),
            None,
        )
    }

    #[tokio::test]
    async fn trainjob_validation_allows_and_denies() {
        let (s, metrics) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        let (code, out, _) = post(router(s.clone()), PATH_VALIDATE_TRAINJOB, torch_create()).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(out["response"]["uid"], "uid-7");
        assert_eq!(out["response"]["allowed"], true, "{out}");
        let (_, out, _) = post(
            router(s),
            PATH_VALIDATE_TRAINJOB,
            review(
                GROUP,
                "TrainJob",
                "CREATE",
                tj("TrainingRuntime", "nope", json!({})),
                None,
            ),
        )
        .await;
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 403);
        assert_eq!(out["response"]["status"]["reason"], "Forbidden");
        assert_eq!(
            out["response"]["status"]["message"],
            "spec.runtimeRef: Invalid value: trainingruntimes.trainer.kubeflow.org \"nope\" not found: specified trainingRuntime must be created before the TrainJob is created"
        );
        let text = metrics.encode();
        assert!(text.contains(r#"trainforge_admission_requests_total{webhook="trainjob",operation="CREATE",result="denied"} 1"#), "{text}");
        assert!(
            text.contains(
                r#"trainforge_admission_plugin_calls_total{plugin="jobset",result="ok"} 1"#
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_spent_budget_denies_naming_the_plugin_and_counts_the_failure() {
        let (s, metrics) = state(FailurePolicy::Fail, Duration::ZERO);
        let (_, out, _) = post(router(s), PATH_VALIDATE_TRAINJOB, torch_create()).await;
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 500);
        let m = out["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.starts_with("plugin \"jobset\" failed in validate (Timeout)"),
            "{m}"
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"trainforge_admission_plugin_failures_total{plugin="jobset",reason="Timeout"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"result="error"} 1"#), "{text}");
    }

    /// A namespace whose validations are all taken: past the budget its
    /// next create is denied naming the bound (failurePolicy Fail) or
    /// admitted with a warning (Ignore); once one ends, it is validated.
    #[tokio::test]
    async fn a_namespace_at_its_bound_is_answered_by_the_failure_policy() {
        let limits = AdmissionLimits {
            per_namespace: 1,
            memory_bytes: 1 << 30,
        };
        for policy in [FailurePolicy::Fail, FailurePolicy::Ignore] {
            let (s, _) = state(policy, Duration::from_millis(100));
            let s = Arc::new(Arc::into_inner(s).unwrap().with_limits(limits));
            let running = s.gates.enter("ns", 1, Duration::ZERO).await.unwrap();
            let (_, out, _) = post(router(s.clone()), PATH_VALIDATE_TRAINJOB, torch_create()).await;
            let response = &out["response"];
            match policy {
                FailurePolicy::Fail => {
                    assert_eq!(response["allowed"], false, "{out}");
                    assert_eq!(response["status"]["code"], 500);
                    let m = response["status"]["message"].as_str().unwrap();
                    assert!(
                        m.contains("namespace ns")
                            && m.contains("--admission-validations-per-namespace")
                            && m.contains("jobset"),
                        "{m}"
                    );
                }
                FailurePolicy::Ignore => {
                    assert_eq!(response["allowed"], true, "{out}");
                    let w = response["warnings"][0].as_str().unwrap();
                    assert!(w.contains("at its bound") && w.contains("ignored"), "{w}");
                }
            }
            drop(running);
            let (_, out, _) = post(router(s), PATH_VALIDATE_TRAINJOB, torch_create()).await;
            assert_eq!(out["response"]["allowed"], true, "{out}");
            assert!(out["response"]["warnings"].is_null(), "{out}");
        }
    }

    #[tokio::test]
    async fn defaulting_answers_a_base64_json_patch() {
        let (s, _) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        let mut j = tj("TrainingRuntime", "torch", json!({}));
        j["spec"]["runtimePatches"] = json!([{"manager": "kueue.x-k8s.io/manager"}]);
        let (code, out, _) = post(
            router(s.clone()),
            PATH_MUTATE_TRAINJOB,
            review(GROUP, "TrainJob", "CREATE", j.clone(), None),
        )
        .await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&patch).unwrap(),
            json!([{"op": "add", "path": "/spec/runtimePatches/0/time", "value": "2026-11-24T09:00:00Z"}])
        );
        // Nothing to change: no patch.
        let (_, out, _) = post(router(s), PATH_MUTATE_TRAINJOB, torch_create()).await;
        assert_eq!(out["response"]["allowed"], true);
        assert!(out["response"].get("patch").is_none(), "{out}");
    }

    #[tokio::test]
    async fn runtime_paths() {
        let (s, _) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        let good = crate::admission::test_support::torch_runtime("TrainingRuntime", "t", json!({}));
        let mut bad = good.clone();
        bad["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = json!(2);
        let (_, out, _) = post(
            router(s.clone()),
            PATH_VALIDATE_TRAINING_RUNTIME,
            review(GROUP, "TrainingRuntime", "CREATE", good.clone(), None),
        )
        .await;
        assert_eq!(out["response"]["allowed"], true, "{out}");
        let (_, out, _) = post(
            router(s.clone()),
            PATH_VALIDATE_TRAINING_RUNTIME,
            review(GROUP, "TrainingRuntime", "CREATE", bad.clone(), None),
        )
        .await;
        assert_eq!(
            out["response"]["status"]["message"],
            "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1"
        );
        let mut cbad = bad.clone();
        cbad["kind"] = json!("ClusterTrainingRuntime");
        let (_, out, _) = post(
            router(s.clone()),
            PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
            review(GROUP, "ClusterTrainingRuntime", "UPDATE", cbad, Some(good)),
        )
        .await;
        assert_eq!(out["response"]["allowed"], false, "{out}");
        assert_eq!(out["response"]["status"]["code"], 403);
    }

    #[tokio::test]
    async fn plugin_path() {
        let (s, _) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        let ctp = |b: &str| {
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "ClusterTrainerPlugin",
            "metadata": {"name": "p"}, "spec": {"source": {"builtin": b}}})
        };
        let (_, out, _) = post(
            router(s.clone()),
            PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN,
            review(
                "trainforge.dev",
                "ClusterTrainerPlugin",
                "CREATE",
                ctp("torch"),
                None,
            ),
        )
        .await;
        assert_eq!(out["response"]["allowed"], true, "{out}");
        let (_, out, _) = post(
            router(s),
            PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN,
            review(
                "trainforge.dev",
                "ClusterTrainerPlugin",
                "CREATE",
                ctp("nope"),
                None,
            ),
        )
        .await;
        assert_eq!(out["response"]["allowed"], false);
        assert!(
            out["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with(
                    "spec.source.builtin: Unsupported value: \"nope\": supported values: "
                ),
            "{out}"
        );
    }

    /// A TrainerPlugin is held to its own namespace before anything else.
    #[tokio::test]
    async fn trainer_plugin_path() {
        let (s, _) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        let tp = |source: Value| {
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "TrainerPlugin",
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"source": source, "sha256": "0".repeat(64)}})
        };
        let ask = |object: Value| {
            let mut r: Value = serde_json::from_slice(&review(
                "trainforge.dev",
                "TrainerPlugin",
                "CREATE",
                object,
                None,
            ))
            .unwrap();
            r["request"]["namespace"] = json!("team-a");
            post(
                router(s.clone()),
                PATH_VALIDATE_TRAINER_PLUGIN,
                serde_json::to_vec(&r).unwrap(),
            )
        };
        for ok in [
            json!({"configMap": {"namespace": "team-a", "name": "m", "key": "k"}}),
            json!({"url": "oci://registry.example/team-a/p:v1"}),
        ] {
            let (_, out, _) = ask(tp(ok)).await;
            assert_eq!(out["response"]["allowed"], true, "{out}");
        }
        for (source, want) in [
            (
                json!({"configMap": {"namespace": "team-b", "name": "m", "key": "k"}}),
                "spec.source.configMap.namespace: Forbidden: a TrainerPlugin's ConfigMap must be in its own namespace \"team-a\", not \"team-b\"",
            ),
            (
                json!({"url": "file:///etc/passwd"}),
                "spec.source.url: Forbidden",
            ),
            (
                json!({"builtin": "nope"}),
                "spec.source.builtin: Unsupported value",
            ),
            (
                json!({"url": "oci://registry.example/p:v1", "pullSecret": "platform-regcred"}),
                "spec.source.pullSecret: Forbidden: a TrainerPlugin cannot use the operator's registry credentials",
            ),
        ] {
            let (_, out, _) = ask(tp(source.clone())).await;
            assert_eq!(out["response"]["allowed"], false, "{source}");
            let message = out["response"]["status"]["message"].as_str().unwrap();
            assert!(message.contains(want), "{source}: {message}");
        }
    }

    #[tokio::test]
    async fn garbage_wrong_kinds_and_huge_bodies() {
        let (s, metrics) = state(FailurePolicy::Fail, DEFAULT_BUDGET);
        for path in [
            PATH_MUTATE_TRAINJOB,
            PATH_VALIDATE_TRAINJOB,
            PATH_VALIDATE_TRAINING_RUNTIME,
            PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
            PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN,
            PATH_VALIDATE_TRAINER_PLUGIN,
        ] {
            let (code, _, text) = post(router(s.clone()), path, b"{not json".to_vec()).await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{path}");
            assert!(text.contains("not an AdmissionReview"), "{text}");
            let (code, _, text) = post(
                router(s.clone()),
                path,
                br#"{"kind":"AdmissionReview"}"#.to_vec(),
            )
            .await;
            assert_eq!(code, StatusCode::BAD_REQUEST, "{text}");
            // A request for another kind gets a review saying so.
            let (code, out, _) = post(
                router(s.clone()),
                path,
                review(
                    "apps",
                    "Deployment",
                    "CREATE",
                    json!({"metadata": {"name": "d"}}),
                    None,
                ),
            )
            .await;
            assert_eq!(code, StatusCode::OK);
            assert_eq!(out["response"]["allowed"], false);
            assert!(
                out["response"]["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("not Deployment.apps"),
                "{out}"
            );
            // Odd objects are answered, never a panic.
            let (group, kind) = match path {
                PATH_VALIDATE_TRAINING_RUNTIME => (GROUP, "TrainingRuntime"),
                PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME => (GROUP, "ClusterTrainingRuntime"),
                PATH_VALIDATE_CLUSTER_TRAINER_PLUGIN => ("trainforge.dev", "ClusterTrainerPlugin"),
                PATH_VALIDATE_TRAINER_PLUGIN => ("trainforge.dev", "TrainerPlugin"),
                _ => (GROUP, "TrainJob"),
            };
            let huge: Vec<Value> = (0..20_000).map(|i| json!(i)).collect();
            for object in [
                json!({}),
                json!({"metadata": {"name": "x"}, "spec": "wrong"}),
                json!({"metadata": {"name": "x"}, "spec": {"runtimePatches": huge, "template": [1]}}),
            ] {
                let (code, out, _) = post(
                    router(s.clone()),
                    path,
                    review(group, kind, "CREATE", object.clone(), None),
                )
                .await;
                assert_eq!(code, StatusCode::OK, "{path} {out}");
                assert_eq!(out["response"]["uid"], "uid-7");
                let (code, _, _) = post(
                    router(s.clone()),
                    path,
                    review(
                        group,
                        kind,
                        "UPDATE",
                        object,
                        Some(json!({"metadata": {"name": "x"}})),
                    ),
                )
                .await;
                assert_eq!(code, StatusCode::OK);
            }
        }
        let (code, _, _) = post(
            router(s),
            PATH_VALIDATE_TRAINJOB,
            vec![b' '; MAX_BODY_BYTES + 1],
        )
        .await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            metrics
                .encode()
                .contains(r#"operation="UNKNOWN",result="error""#)
        );
    }
}
