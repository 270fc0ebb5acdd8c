//! One reconcile of one TrainJob, as a chain of named steps (`Reconcile::run`,
//! one method each):
//!
//! First the **gate** (a job managed by another controller is left alone,
//! v2.1 override fields move into a runtime patch, an unsupported runtime
//! fails the job), then the job's **plugin set** (the cluster's plugins
//! with its namespace's tenant plugins that apply); then
//!
//! 1. **resolve** the runtime through its snapshot ([`snapshot`]);
//! 2. **build** the objects: the pure [`pipeline`](crate::pipeline) with the
//!    plugin set in service, no I/O. While no plugin of the set calls
//!    `build`, nothing is built (the TrainJob gets `PluginsReady=False` and
//!    a Warning Event instead: [`serving`]);
//! 3. **apply** every object (server-side apply; objects already as desired
//!    are not written), then **report** a failure of steps 1–3;
//! 4. **status**: `Suspended`, the status plugin's view, then the pure
//!    decision ([`decide`]: the remembered deadline, `PluginsReady`,
//!    `Blocked`, `RuntimePatchesIgnored`, the active deadline, when to come
//!    back); written as a merge patch only when changed, then announced as
//!    Events.
//!
//! Build and apply run only for unfinished jobs (no `Complete=True` or
//! `Failed=True`). A failure of steps 1–3 (other than missing plugins)
//! gives upstream's Warning Event `TrainJobResourcesCreationFailed`; the
//! status step still runs, and the reconcile returns the first failure as
//! a [`ReconcileError`] naming its step.
//!
//! What a failure of steps 1–3 means for the TrainJob ([`Stuck`]):
//! - the TrainJob or its runtime is invalid (admission rules, overrides
//!   that do not fit the runtime) and it was never built: terminal
//!   `Failed=True/InvalidTrainJob`;
//! - anything else that can go away (runtime not found, plugins not
//!   serving, a plugin failing, an object refused; or an invalid TrainJob
//!   that was built before): `Blocked=True` with the cause as reason, while
//!   its JobSet is not running, removed once steps 1–3 succeed;
//! - transient API trouble: no condition change.
//!
//! `spec.runtimePatches` is immutable while the job runs (upstream's
//! admission refuses the edit): the hash of the patches a JobSet was built
//! from is recorded on it ([`ANNOTATION_RUNTIME_PATCHES_HASH`]); while the
//! TrainJob and its JobSet are not suspended and the TrainJob's patches
//! hash differently, nothing is built or applied, the TrainJob gets
//! `RuntimePatchesIgnored=True` and, once per distinct edit, a Warning
//! Event. Edits made while suspended are applied as always.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use tokio::task::JoinError;
use tracing::{Instrument, debug, info, info_span, warn};
use trainforge_api::plugin::{Info, KindRef, Phase, PluginError};
use trainforge_api::trainer::v1alpha1::constants::{
    CONDITION_FAILED, GROUP, REASON_TRAINING_RUNTIME_NOT_SUPPORTED, VERSION,
};
use trainforge_api::trainer::v1alpha1::{TrainJob, TrainJobStatus};

use super::apply::ApplyError as ApplyStepError;
use super::apply::{self, ApplyError, Outcome};
use super::conditions::{self, ConditionStatus, StatusError};
use super::decide::{self, Decision, Stuck};
use super::events::{self, ACTION_RECONCILING, EventType, REASON_CREATION_FAILED};
use super::legacy;
use super::objects::ObjectsError;
use super::render_memo::ObjectId;
use super::rollout::Attempt;
use super::serving::{self, NotServing};
use super::snapshot::{self, SnapshotError};
use super::{CONTROLLER_NAME, Context};
use crate::controller::tenants::TenantRef;
use crate::pipeline::run::{
    PipelineError, Rendered, RuntimeObject, run as run_pipeline, runtime_patches_hash,
};
use crate::plugin::{self, PluginSet};

/// Why a reconcile must be retried; each variant names the step that
/// failed, and [`ReconcileError::reason`] is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Resolve: the runtime could not be resolved (upstream's message for a
    /// missing runtime).
    #[error(transparent)]
    Resolve(SnapshotError),
    /// Build: no plugin of the set in service calls `build`, so nothing was
    /// built.
    #[error("build: no plugin set can serve TrainJobs: {0}")]
    NoServingPlugins(NotServing),
    /// Build: a policy of the runtime is declared by no serving plugin, so
    /// nothing was built.
    #[error("build: {message}")]
    PolicyNotServed {
        /// The policy keys no serving plugin declares.
        keys: Vec<String>,
        /// The pipeline's refusal, then the configured plugins not serving
        /// and why.
        message: String,
    },
    /// Build: the pipeline refused the TrainJob or a plugin failed.
    #[error("build: {0}")]
    Build(#[source] PipelineError),
    /// Build: the pipeline's blocking task panicked or was cancelled.
    #[error("build: the pipeline task did not finish: {0}")]
    BuildTask(#[source] JoinError),
    /// Build: the namespace's tenant plugins cannot join the cluster's
    /// (a clash), so nothing was built.
    #[error("build: {0}")]
    TenantPlugins(#[source] crate::controller::tenants::ComposeError),
    /// Apply: an object's kind is not served by the API server.
    #[error("apply: {0}")]
    ApplyKind(#[source] ObjectsError),
    /// Apply: the API server did not take an object.
    #[error("apply: {0}")]
    Apply(#[source] ApplyError),
    /// Status: the runtime info the status plugin reads could not be built.
    #[error("status: preparing the status plugin's input: {0}")]
    StatusInput(#[source] PipelineError),
    /// Status: the status plugin failed.
    #[error("status: {0}")]
    StatusPlugin(#[source] plugin::Error),
    /// Status: the status plugin returned something that is not a TrainJob
    /// status.
    #[error("status: plugin {plugin} returned an unusable status: {source}")]
    StatusInvalid {
        /// The status plugin's name.
        plugin: String,
        /// What is wrong with it.
        source: StatusError,
    },
    /// Status: the status plugin's blocking task panicked or was cancelled.
    #[error("status: the status plugin task did not finish: {0}")]
    StatusTask(#[source] JoinError),
    /// Status: the merge patch could not be computed.
    #[error("status: {0}")]
    StatusPatch(#[source] StatusError),
    /// Status: the API server did not take the status.
    #[error("status: writing the status: {0}")]
    StatusWrite(#[source] kube::Error),
    /// Delete: the TrainJob, its time to live after finishing over, could
    /// not be deleted (retried).
    #[error("delete: deleting the TrainJob after its time to live: {0}")]
    Delete(#[source] kube::Error),
}

impl ReconcileError {
    /// The label of the reconcile-error metric: the step that failed
    /// (`Resolve`, `Build`, `Apply`, `Status`, `Delete`), or `NoServingPlugins` when
    /// the build step found no plugin that builds.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Resolve(_) => "Resolve",
            ReconcileError::NoServingPlugins(_) => "NoServingPlugins",
            ReconcileError::PolicyNotServed { .. } => "PolicyNotServed",
            ReconcileError::Build(_)
            | ReconcileError::BuildTask(_)
            | ReconcileError::TenantPlugins(_) => "Build",
            ReconcileError::ApplyKind(_) | ReconcileError::Apply(_) => "Apply",
            ReconcileError::StatusInput(_)
            | ReconcileError::StatusPlugin(_)
            | ReconcileError::StatusInvalid { .. }
            | ReconcileError::StatusTask(_)
            | ReconcileError::StatusPatch(_)
            | ReconcileError::StatusWrite(_) => "Status",
            ReconcileError::Delete(_) => "Delete",
        }
    }

    /// Whether this is a failure to create the TrainJob's resources
    /// (resolve, build or apply), reported as upstream's
    /// `TrainJobResourcesCreationFailed` Event. Missing plugins (no set
    /// that can serve, or none for a policy) have their own condition and
    /// Event instead.
    pub fn is_creation_failure(&self) -> bool {
        matches!(
            self,
            ReconcileError::Resolve(_)
                | ReconcileError::Build(_)
                | ReconcileError::BuildTask(_)
                | ReconcileError::TenantPlugins(_)
                | ReconcileError::ApplyKind(_)
                | ReconcileError::Apply(_)
        )
    }

    /// Whether the TrainJob waits for the plugin set in service to change
    /// (no set that can serve, or no serving plugin for a policy).
    pub fn waits_for_plugins(&self) -> bool {
        matches!(
            self,
            ReconcileError::NoServingPlugins(_) | ReconcileError::PolicyNotServed { .. }
        )
    }
}

/// Annotation on a JobSet the controller applies: [`runtime_patches_hash`]
/// of the TrainJob it was built from.
pub const ANNOTATION_RUNTIME_PATCHES_HASH: &str = "trainforge.dev/runtime-patches-hash";

/// Reason of the Warning Event for a `runtimePatches` edit of a running job.
pub const EVENT_RUNTIME_PATCHES_IGNORED: &str = conditions::REASON_RUNTIME_PATCHES_CHANGED;

/// Whether an API status code is a refusal that retrying the same request
/// does not change (4xx other than conflicts and throttling).
fn is_refusal(code: u16) -> bool {
    (400..500).contains(&code) && code != 409 && code != 429
}

/// What `error` says about the TrainJob; `built_before`: its snapshot or
/// JobSet exists, so the pipeline accepted it once.
pub fn stuck(error: &ReconcileError, built_before: bool) -> Stuck {
    use conditions::*;
    let blocked = |reason: &'static str| Stuck::Blocked(reason, error.to_string());
    match error {
        ReconcileError::Resolve(SnapshotError::NotFound(m)) => {
            Stuck::Blocked(REASON_RUNTIME_NOT_FOUND, m.clone())
        }
        ReconcileError::Resolve(SnapshotError::Invalid(_)) => blocked(REASON_INVALID_SNAPSHOT),
        ReconcileError::NoServingPlugins(n) => Stuck::Blocked(
            REASON_NO_SERVING_PLUGINS,
            format!("no plugin set can serve TrainJobs: {n}"),
        ),
        ReconcileError::PolicyNotServed { message, .. } => {
            Stuck::Blocked(REASON_POLICY_NOT_SERVED, message.clone())
        }
        ReconcileError::Build(e) if e.is_user_error() && !built_before => {
            Stuck::Invalid(e.to_string())
        }
        ReconcileError::Build(e) if e.is_user_error() => blocked(REASON_BUILD_REFUSED),
        ReconcileError::Build(_) | ReconcileError::TenantPlugins(_) => {
            blocked(REASON_PLUGIN_FAILED)
        }
        ReconcileError::ApplyKind(_)
        | ReconcileError::Apply(ApplyStepError::Malformed(_) | ApplyStepError::Collision { .. }) => {
            blocked(REASON_APPLY_FAILED)
        }
        ReconcileError::Apply(ApplyStepError::Api {
            source: kube::Error::Api(s),
            ..
        }) if is_refusal(s.code) => blocked(REASON_APPLY_FAILED),
        ReconcileError::Apply(ApplyStepError::Throttled { .. }) => {
            blocked(REASON_WRITE_RATE_LIMITED)
        }
        _ => Stuck::Transient,
    }
}

/// Whether `object`'s controller owner reference has the uid `uid`.
fn controlled_by(object: &DynamicObject, uid: &str) -> bool {
    object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Whether a live JobSet (as JSON) is suspended.
fn is_suspended(jobset: &Value) -> bool {
    jobset
        .pointer("/spec/suspend")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The runtime-patches hash a running JobSet was built from, when the
/// TrainJob's patches (hashing to `current`) differ from it: only while
/// neither the TrainJob nor the JobSet is suspended (edits made while
/// suspended are applied), and only for a JobSet that records its hash.
pub fn patches_divergence(
    job_suspended: bool,
    jobset: Option<&Value>,
    current: &str,
) -> Option<String> {
    let jobset = jobset?;
    if job_suspended || is_suspended(jobset) {
        return None;
    }
    let recorded = jobset
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_RUNTIME_PATCHES_HASH))
        .and_then(Value::as_str)?;
    (recorded != current).then(|| recorded.to_owned())
}

/// The `RuntimePatchesIgnored` message for patches hashing to `current`
/// on a job whose running objects were built from `recorded`.
pub fn patches_ignored_message(recorded: &str, current: &str) -> String {
    format!(
        "spec.runtimePatches changed while the TrainJob is running, so the change is ignored and \
         the running objects are left as they are (RuntimePatches can only be modified when the \
         TrainJob is suspended): they were built from runtimePatches {recorded}, the spec now has \
         {current}. Suspend the TrainJob to apply the change, or restore the previous runtimePatches"
    )
}

/// Record `hash` ([`runtime_patches_hash`]) on every JobSet of `objects`.
pub fn record_patches_hash(objects: &mut [Value], hash: &str) {
    for o in objects
        .iter_mut()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("JobSet"))
    {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if !annotations.is_object() {
                *annotations = Value::Object(serde_json::Map::new());
            }
            if let Some(a) = annotations.as_object_mut() {
                a.insert(
                    ANNOTATION_RUNTIME_PATCHES_HASH.to_owned(),
                    Value::String(hash.to_owned()),
                );
            }
        }
    }
}

/// Snapshot ConfigMap, JobSet and the rest: kinds as [`KindRef`].
fn kind_of(object: &Value) -> KindRef {
    let s = |k: &str| {
        object
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    KindRef::new(s("apiVersion"), s("kind"))
}

pub(super) fn jobset_kind() -> KindRef {
    KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet")
}

/// Reconcile one TrainJob (entry point for kube-runtime).
pub async fn reconcile(job: Arc<TrainJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let span =
        info_span!("reconcile", controller = CONTROLLER_NAME, trainjob = %format!("{ns}/{name}"));
    let start = Instant::now();
    let mut reconcile = Reconcile {
        job: &job,
        ctx: &ctx,
        ns: &ns,
        name: &name,
        writes: 0,
        failure: None,
        attempt: None,
    };
    let result = reconcile.run().instrument(span).await;
    if let Some(attempt) = reconcile.attempt {
        ctx.rollouts
            .record(&ObjectRef::from_obj(job.as_ref()), attempt);
    }
    let outcome = match &result {
        Ok(_) => {
            ctx.succeeded(&job);
            Ok(())
        }
        Err(e) => Err(e.reason()),
    };
    ctx.metrics
        .reconcile_done(CONTROLLER_NAME, start.elapsed(), outcome);
    result
}

struct Reconcile<'a> {
    job: &'a TrainJob,
    ctx: &'a Context,
    ns: &'a str,
    name: &'a str,
    /// API writes made (Events included).
    writes: u32,
    /// The first failure of a step ([`keep_first`]).
    failure: Option<ReconcileError>,
    /// What the reconcile did about the job's objects, for the rollout of
    /// the plugin set ([`super::rollout`]); `None`: it did not get that far
    /// (it comes back).
    attempt: Option<Attempt>,
}

/// A runtime info as the JSON the status call is given (and the render
/// memo keeps).
fn info_json(info: &Info) -> Result<Arc<str>, PipelineError> {
    serde_json::to_string(info)
        .map(Arc::from)
        .map_err(|e| PipelineError::Serialize {
            what: "runtime info",
            reason: e.to_string(),
        })
}

/// What [`Reconcile::gate`] decided.
enum Gate {
    /// Nothing more this time: answer with this.
    Stop(Action),
    /// Reconcile on, from this stored status.
    Go(TrainJobStatus),
}

/// What the reconcile saw before acting ([`Reconcile::observe`]).
struct Seen {
    /// The status as stored.
    old: TrainJobStatus,
    /// Now, at second precision: the time of every condition this
    /// reconcile changes.
    now: Time,
    /// `Complete=True` or `Failed=True`: nothing is built or applied.
    finished: bool,
    /// `spec.suspend`.
    suspended: bool,
    /// The TrainJob's JobSet from the watch cache, as JSON.
    jobset: Option<Value>,
    /// The TrainJob's [`runtime_patches_hash`].
    patches_hash: String,
    /// The hash the running JobSet was built from, while the TrainJob's
    /// patches differ from it.
    diverged: Option<String>,
}

/// The plugins a job is built and its status read with
/// ([`Reconcile::plugin_set`]).
struct JobPlugins {
    /// The id of the cluster's set when the reconcile took it: `set` is
    /// built from that set or a newer one.
    cluster_id: u64,
    /// The cluster's set, with the namespace's tenant plugins that apply
    /// (the cluster's alone when they cannot join).
    set: Arc<PluginSet>,
    /// The tenant plugins that joined, or why they cannot (a clash).
    tenants: Result<Vec<TenantRef>, crate::controller::tenants::ComposeError>,
    /// The namespace's permit, held until the reconcile ends.
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Why the set cannot serve TrainJobs (asked for unfinished jobs only).
    not_serving: Option<NotServing>,
}

/// What steps 1–3 said about the job ([`Reconcile::verdict`]).
struct Verdict {
    /// What their failure means for the job (none: no failure).
    stuck: Option<Stuck>,
    /// The build's refusal when a runtime policy is served by no plugin.
    policy_problem: Option<String>,
}

/// The status the decision starts from ([`Reconcile::plugin_view`]).
struct Viewed {
    /// The stored status with `Suspended`, then the status plugin's view.
    status: TrainJobStatus,
    /// The status plugin's view was not available yet.
    retry_soon: bool,
}

/// Step 1's result: the runtime, and whether its snapshot already exists.
struct Resolved {
    runtime: Arc<RuntimeObject>,
    has_snapshot: bool,
}

/// What the status plugin said.
enum PluginStatus {
    /// A new status.
    New(TrainJobStatus),
    /// Nothing to change (no status plugin, or it left the status alone).
    Unchanged,
    /// Not available yet (e.g. the JobSet is not in the cache): retry soon.
    NotYet(String),
}

/// The Event note for `RuntimePatchesIgnored`, when `new` has it with a
/// message `old` did not have: once per distinct edit, not every resync.
fn patches_ignored_news(old: &TrainJobStatus, new: &TrainJobStatus) -> Option<String> {
    let now = conditions::find(new, conditions::CONDITION_RUNTIME_PATCHES_IGNORED)?;
    let before = conditions::find(old, conditions::CONDITION_RUNTIME_PATCHES_IGNORED);
    (before.map(|c| &c.message) != Some(&now.message)).then(|| now.message.clone())
}

/// Keep the first failure; log later ones.
fn keep_first(first: &mut Option<ReconcileError>, error: ReconcileError) {
    match first {
        None => *first = Some(error),
        Some(_) => warn!(step = error.reason(), %error, "a later step failed too"),
    }
}

/// What [`Reconcile::tenant_set`] found.
enum TenantSet {
    /// The set to use (the cluster's when the tenant plugins cannot join),
    /// whether the tenant plugins joined, and the namespace permit held.
    Set(
        Arc<crate::plugin::PluginSet>,
        Result<Vec<TenantRef>, crate::controller::tenants::ComposeError>,
        Option<tokio::sync::OwnedSemaphorePermit>,
    ),
    /// Every permit of the namespace is in use.
    Busy,
    /// Its tenant plugins are still loading after a start (the message
    /// says so).
    Loading(String),
}

/// When a TrainJob whose namespace's permits were taken comes back:
/// 200–400 ms, spread so that waiting jobs do not return together.
fn tenant_retry() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(200 + u64::from(nanos % 200))
}

impl Reconcile<'_> {
    /// The plugin set for this job: the cluster's, with its namespace's
    /// tenant plugins that apply.
    fn tenant_set(&self) -> TenantSet {
        let cluster = self.ctx.plugins.current();
        let Some(tenants) = &self.ctx.tenants else {
            return TenantSet::Set(cluster, Ok(Vec::new()), None);
        };
        let labels = self.job.metadata.labels.clone().unwrap_or_default();
        match tenants.compose(cluster.clone(), self.ns, &labels) {
            Ok(c) if c.tenants.is_empty() => TenantSet::Set(c.set, Ok(Vec::new()), None),
            Ok(c) => match tenants.permit(self.ns) {
                Some(p) => TenantSet::Set(c.set, Ok(c.tenants), Some(p)),
                None => TenantSet::Busy,
            },
            Err(e @ crate::controller::tenants::ComposeError::NotLoaded { .. }) => {
                TenantSet::Loading(e.to_string())
            }
            Err(e) => TenantSet::Set(cluster, Err(e), None),
        }
    }

    /// Tell the `TrainerPlugin` whose plugin made `error` (a Warning
    /// Event on it): the tenant sees its plugin's failures where it
    /// manages it.
    async fn report_tenant_failure(&self, tenants: &[TenantRef], error: &ReconcileError) {
        let ReconcileError::Build(crate::pipeline::run::PipelineError::Plugin(e)) = error else {
            return;
        };
        let text = e.to_string();
        for t in tenants
            .iter()
            .filter(|t| text.starts_with(&format!("plugin {}:", t.plugin)))
        {
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(trainforge_api::trainforge::v1alpha1::API_VERSION.to_owned()),
                kind: Some(trainforge_api::trainforge::v1alpha1::TRAINER_PLUGIN_KIND.to_owned()),
                namespace: Some(self.ns.to_owned()),
                name: Some(t.name.clone()),
                uid: Some(t.uid.clone()),
                ..Default::default()
            };
            let note = format!("TrainJob {}: {text}", self.name);
            match self
                .ctx
                .recorder
                .record_about(
                    &regarding,
                    EventType::Warning,
                    e.reason(),
                    ACTION_RECONCILING,
                    &note,
                )
                .await
            {
                Ok(()) => self.ctx.metrics.api_write("create", "Event"),
                Err(err) => warn!(error = %err, "publishing Event on the TrainerPlugin failed"),
            }
        }
    }

    /// One reconcile as its chain of steps. A failure of resolve, build or
    /// apply does not stop the chain: the status step still runs, and the
    /// first failure is the reconcile's result; without one, the reconcile
    /// comes back when the decision says.
    async fn run(&mut self) -> Result<Action, ReconcileError> {
        let old = match self.gate().await? {
            Gate::Stop(action) => return Ok(action),
            Gate::Go(old) => old,
        };
        let seen = self.observe(old);
        let plugins = match self.plugin_set(seen.finished) {
            Ok(p) => p,
            Err(loading) => {
                if let Some(message) = loading.filter(|_| !seen.finished) {
                    self.tell_waiting(&seen, &message).await;
                }
                return Ok(Action::requeue(tenant_retry()));
            }
        };
        let resolved = self.resolve().await;
        let info = self
            .build_and_apply(&seen, &plugins, resolved.as_ref())
            .await;
        self.report_failure(&plugins).await;
        let verdict = self.verdict(&seen, resolved.as_ref());
        let viewed = self
            .plugin_view(&seen, &plugins, resolved.as_ref(), info, &verdict)
            .await;
        let (status, decision) =
            self.decide_status(&seen, &plugins, &verdict, viewed, resolved.as_ref());
        let next = if decision.delete_trainjob {
            // Its objects go with it (owner references): nothing else to
            // write, and nothing to come back for.
            self.delete_trainjob().await;
            Action::await_change()
        } else {
            if decision.delete_jobset {
                self.delete_jobset().await;
            }
            self.write_and_announce(&seen, &status).await;
            Action::requeue(decision.requeue)
        };
        self.count_noop();
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(next),
        }
    }

    /// Whether this controller reconciles the job, and in which form:
    /// - a job managed by another controller (`spec.managedBy`) is left
    ///   alone;
    /// - an unfinished job's v2.1 override fields move into a runtime patch
    ///   first, so that no client with newer types can drop them; the
    ///   rewrite's watch event reconciles the TrainJob again;
    /// - a job whose runtime kind is not supported gets upstream's terminal
    ///   `Failed=True/TrainingRuntimeNotSupported` (and a Warning Event when
    ///   that is new), and nothing more.
    ///
    /// Otherwise the reconcile goes on from the stored status.
    async fn gate(&mut self) -> Result<Gate, ReconcileError> {
        let job = self.job;
        if let Some(m) = crate::pipeline::run::managed_elsewhere(job) {
            info!(managed_by = %m, "managed by another controller: left alone");
            self.attempt = Some(Attempt::NotNeeded);
            return Ok(Gate::Stop(Action::await_change()));
        }
        let old = job.status.clone().unwrap_or_default();
        if !conditions::is_finished(&old)
            && legacy::convert(self.ctx, job).await == legacy::Outcome::Rewritten
        {
            self.writes += 1;
            return Ok(Gate::Stop(Action::await_change()));
        }
        if let Err(e) = snapshot::check_supported(job) {
            // Terminal: nothing is ever built for it.
            self.attempt = Some(Attempt::NotNeeded);
            let mut status = old.clone();
            conditions::set(
                &mut status,
                CONDITION_FAILED,
                ConditionStatus::True,
                REASON_TRAINING_RUNTIME_NOT_SUPPORTED,
                &e.to_string(),
                &conditions::now(),
            );
            if old != status {
                warn!(error = %e, "unsupported runtime");
                self.publish(
                    EventType::Warning,
                    REASON_TRAINING_RUNTIME_NOT_SUPPORTED,
                    e.to_string(),
                )
                .await;
            }
            self.write_status(&old, &status).await?;
            return Ok(Gate::Stop(Action::await_change()));
        }
        Ok(Gate::Go(old))
    }

    /// What the job and its JobSet (from the watch cache) look like now.
    /// Only an unfinished job's patches can diverge
    /// ([`patches_divergence`]).
    fn observe(&self, old: TrainJobStatus) -> Seen {
        let finished = conditions::is_finished(&old);
        let suspended = self.job.spec.suspend.unwrap_or(false);
        let jobset = self.live_jobset();
        let patches_hash = runtime_patches_hash(self.job);
        let diverged = if finished {
            None
        } else {
            patches_divergence(suspended, jobset.as_ref(), &patches_hash)
        };
        Seen {
            old,
            now: conditions::now(),
            finished,
            suspended,
            jobset,
            patches_hash,
            diverged,
        }
    }

    /// The plugin set for this job: the cluster's, with the tenant plugins
    /// of its namespace that apply to it. A job with tenant plugins holds
    /// one of its namespace's permits while it reconciles; when they are
    /// all taken (or its tenant plugins are still loading after a start)
    /// there is none, and the job comes back shortly, leaving the worker to
    /// others. Only an unfinished job needs objects, so only it needs a set
    /// that can serve.
    ///
    /// `Err(Some(message))`: the tenant plugins are still loading;
    /// `Err(None)`: the namespace's permits are taken.
    fn plugin_set(&self, finished: bool) -> Result<JobPlugins, Option<String>> {
        let cluster_id = self.ctx.plugins.current().id();
        let (set, tenants, permit) = match self.tenant_set() {
            TenantSet::Set(set, composed, permit) => (set, composed, permit),
            TenantSet::Busy => {
                debug!("the namespace's tenant plugins are busy: retrying shortly");
                return Err(None);
            }
            TenantSet::Loading(message) => {
                debug!("{message}: retrying shortly");
                return Err(Some(message));
            }
        };
        let not_serving = if finished {
            None
        } else {
            self.ctx.plugins.not_serving(&set)
        };
        Ok(JobPlugins {
            cluster_id,
            set,
            tenants,
            _permit: permit,
            not_serving,
        })
    }

    /// Say on an unfinished TrainJob why it waits: `PluginsReady=False`
    /// (`TenantPluginsLoading`, `message`), written once; the next build
    /// clears it like any other plugin problem.
    async fn tell_waiting(&mut self, seen: &Seen, message: &str) {
        let mut status = seen.old.clone();
        let message = format!("{message}; the TrainJob is built once they are");
        conditions::set_plugins_problem(
            &mut status,
            Some((conditions::REASON_TENANT_PLUGINS_LOADING, &message)),
            &seen.now,
        );
        if status != seen.old {
            self.write_and_announce(seen, &status).await;
        }
    }

    /// Step 1: the runtime ([`Self::resolve_runtime`]). Its failure is
    /// kept, and the chain goes on without a runtime.
    async fn resolve(&mut self) -> Option<Resolved> {
        match self.resolve_runtime().await {
            Ok(r) => Some(r),
            Err(e) => {
                self.fail(ReconcileError::Resolve(e));
                None
            }
        }
    }

    /// Steps 2 and 3, only for an unfinished job whose runtime resolved:
    /// nothing while its `runtimePatches` diverge from those its running
    /// objects were built from; a clash of its namespace's tenant plugins
    /// fails the build; otherwise build (or reuse the last render) and
    /// apply ([`Self::build_or_reuse`]). The runtime info the plugin phases
    /// produced, when they ran; a failure is kept.
    async fn build_and_apply(
        &mut self,
        seen: &Seen,
        plugins: &JobPlugins,
        resolved: Option<&Resolved>,
    ) -> Option<Arc<str>> {
        if seen.finished {
            self.attempt = Some(Attempt::NotNeeded);
            return None;
        }
        self.attempt = Some(Attempt::Failed(plugins.cluster_id));
        let resolved = resolved?;
        if let Some(recorded) = &seen.diverged {
            warn!(%recorded, current = %seen.patches_hash, "spec.runtimePatches changed while running: ignored, nothing built");
            self.attempt = Some(Attempt::NotNeeded);
            return None;
        }
        if let Err(e) = &plugins.tenants {
            self.fail(ReconcileError::TenantPlugins(e.clone()));
            return None;
        }
        match self
            .build_or_reuse(
                resolved,
                &plugins.set,
                plugins.not_serving.as_ref(),
                &seen.patches_hash,
            )
            .await
        {
            Ok(info) => {
                self.attempt = Some(Attempt::Built(plugins.cluster_id));
                Some(info)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// Tell of a failure of steps 1–3: a creation failure (resolve, build,
    /// apply) is logged and gets upstream's Warning Event
    /// `TrainJobResourcesCreationFailed`, and one on the `TrainerPlugin`
    /// whose tenant plugin made it; missing plugins are logged (their
    /// condition tells the user).
    async fn report_failure(&mut self, plugins: &JobPlugins) {
        let Some(failure) = self.failure.take() else {
            return;
        };
        if failure.is_creation_failure() {
            warn!(step = failure.reason(), error = %failure, "TrainJob resources reconciliation failed");
            self.publish(
                EventType::Warning,
                REASON_CREATION_FAILED,
                events::creation_failed_note(&failure.to_string()),
            )
            .await;
            if let Ok(tenants) = &plugins.tenants {
                self.report_tenant_failure(tenants, &failure).await;
            }
        }
        match &failure {
            ReconcileError::NoServingPlugins(n) => {
                warn!(reason = %n, "no plugin set can serve TrainJobs: nothing built");
            }
            ReconcileError::PolicyNotServed { keys, message } => {
                warn!(?keys, %message, "a runtime policy is served by no plugin: nothing built");
            }
            _ => {}
        }
        self.failure = Some(failure);
    }

    /// What the failure of steps 1–3 says about the job ([`stuck`]), taken
    /// before the status step adds failures of its own. The job was built
    /// before when its JobSet or its runtime snapshot exists.
    fn verdict(&self, seen: &Seen, resolved: Option<&Resolved>) -> Verdict {
        let built_before = seen.jobset.is_some() || resolved.is_some_and(|r| r.has_snapshot);
        Verdict {
            stuck: self.failure.as_ref().map(|e| stuck(e, built_before)),
            policy_problem: match &self.failure {
                Some(ReconcileError::PolicyNotServed { message, .. }) => Some(message.clone()),
                _ => None,
            },
        }
    }

    /// Step 4's first part: `Suspended` ([`decide::suspend`]), then the
    /// status plugin's view of that status ([`Self::plugin_status`]) when
    /// the runtime resolved and the job is not invalid
    /// ([`decide::reads_plugin_status`]). A view not available yet brings
    /// the reconcile back soon; a failing status plugin changes nothing
    /// and its failure is kept. Rules: `trainerStatus` is the training
    /// process's, written only through the status server; whatever a
    /// plugin returns for it is replaced by the stored one. The restart
    /// counters are the JobSet's ([`decide::restarts`]), whatever the
    /// plugin returns for them.
    async fn plugin_view(
        &mut self,
        seen: &Seen,
        plugins: &JobPlugins,
        resolved: Option<&Resolved>,
        info: Option<Arc<str>>,
        verdict: &Verdict,
    ) -> Viewed {
        let mut viewed = Viewed {
            status: decide::suspend(&seen.old, seen.suspended, &seen.now),
            retry_soon: false,
        };
        let Some(resolved) =
            resolved.filter(|_| decide::reads_plugin_status(verdict.stuck.as_ref(), &seen.old))
        else {
            return viewed;
        };
        match self
            .plugin_status(resolved, &viewed.status, info, plugins.set.clone())
            .await
        {
            Ok(PluginStatus::New(s)) => {
                let (restarts, counted) = decide::restarts(&seen.old, seen.jobset.as_ref());
                viewed.status = TrainJobStatus {
                    trainer_status: seen.old.trainer_status.clone(),
                    restarts,
                    restarts_count_towards_max: counted,
                    ..s
                };
            }
            Ok(PluginStatus::Unchanged) => {
                let (restarts, counted) = decide::restarts(&seen.old, seen.jobset.as_ref());
                viewed.status.restarts = restarts;
                viewed.status.restarts_count_towards_max = counted;
            }
            Ok(PluginStatus::NotYet(why)) => {
                debug!(%why, "status not available yet (e.g. the JobSet is not in the cache yet)");
                viewed.retry_soon = true;
            }
            Err(e) => self.fail(e),
        }
        viewed
    }

    /// Step 4's decision: [`decide::decide`] on what this reconcile saw and
    /// did (pure).
    fn decide_status(
        &self,
        seen: &Seen,
        plugins: &JobPlugins,
        verdict: &Verdict,
        viewed: Viewed,
        resolved: Option<&Resolved>,
    ) -> (TrainJobStatus, Decision) {
        // The runtime's defaults, as its snapshot has them.
        let run_policy = resolved.and_then(|r| r.runtime.spec().run_policy.as_ref());
        let not_serving = plugins.not_serving.as_ref().map(ToString::to_string);
        let patches_ignored = seen
            .diverged
            .as_deref()
            .map(|recorded| patches_ignored_message(recorded, &seen.patches_hash));
        let pod_failure = self.pod_failure(seen);
        decide::decide(decide::Input {
            old: &seen.old,
            viewed: viewed.status,
            finished: seen.finished,
            suspended: seen.suspended,
            jobset_running: seen.jobset.as_ref().is_some_and(|j| !is_suspended(j)),
            jobs_all_ready: seen
                .jobset
                .as_ref()
                .is_some_and(|j| !is_suspended(j) && super::ready_edge::all_ready(j)),
            not_serving: not_serving.as_deref(),
            policy_problem: verdict.policy_problem.as_deref(),
            build: verdict.stuck.as_ref(),
            patches_ignored: patches_ignored.as_deref(),
            now: &seen.now,
            created: self.job.metadata.creation_timestamp.as_ref().map(|t| t.0),
            active_deadline_seconds: self
                .job
                .spec
                .active_deadline_seconds
                .or_else(|| run_policy.and_then(|p| p.active_deadline_seconds)),
            ttl_seconds_after_finished: self
                .job
                .spec
                .ttl_seconds_after_finished
                .or_else(|| run_policy.and_then(|p| p.ttl_seconds_after_finished))
                .map(i64::from),
            resync: self.ctx.settings.resync,
            retry_soon: viewed.retry_soon,
            pod_failure: pod_failure.as_deref(),
        })
    }

    /// Why the pods of this job's running JobSet cannot be created, while
    /// that stands ([`super::pod_failures`]): not once its jobs are all
    /// ready (the failure is forgotten then), nor while the job is finished
    /// or suspended.
    fn pod_failure(&self, seen: &Seen) -> Option<String> {
        let key = ObjectRef::from_obj(self.job);
        let jobset = seen.jobset.as_ref()?;
        if seen.finished || seen.suspended || super::ready_edge::all_ready(jobset) {
            self.ctx.pod_failures.forget(&key);
            return None;
        }
        self.ctx.pod_failures.current(&key)
    }

    /// Step 4: an Event per condition transition, each exactly once
    /// ([`events::publish_transition`]: named by the transition, so written
    /// before the status and found written when a crash or a failed write
    /// makes the next reconcile compute it again); then the write
    /// ([`Self::write_status`]: only when the status changed) and, once
    /// written, the `RuntimePatchesIgnored` Warning once per distinct edit
    /// and, while the patches agree, that the edit reported is over. A
    /// failed write is kept.
    async fn write_and_announce(&mut self, seen: &Seen, status: &TrainJobStatus) {
        let transitions = conditions::transitions(&seen.old, status);
        let patches_event = patches_ignored_news(&seen.old, status);
        let restart = events::for_restart(&seen.old, status);
        let announced = transitions
            .iter()
            .filter_map(|t| events::for_transition(t).map(|e| (t, e)))
            .chain(restart.iter().map(|(t, e)| (t, e.clone())));
        for (t, event) in announced {
            if events::publish_transition(self.ctx, self.job, t, event).await {
                self.writes += 1;
            }
        }
        if let Err(e) = self.write_status(&seen.old, status).await {
            self.fail(e);
            return;
        }
        if let Some(note) =
            patches_event.filter(|_| self.ctx.report_patches_once(self.job, &seen.patches_hash))
        {
            self.publish(EventType::Warning, EVENT_RUNTIME_PATCHES_IGNORED, note)
                .await;
        }
        if seen.diverged.is_none() {
            self.ctx.patches_agree(self.job);
        }
    }

    /// A reconcile that wrote nothing (no object, status or Event) counts
    /// as a no-op resync.
    fn count_noop(&self) {
        if self.writes == 0 {
            self.ctx.metrics.noop_resync();
        }
    }

    /// Keep `error` as the reconcile's failure unless one is kept already
    /// (then it is only logged).
    fn fail(&mut self, error: ReconcileError) {
        keep_first(&mut self.failure, error);
    }

    /// Publish an Event on the TrainJob (counted as a write when written).
    async fn publish(&mut self, event_type: EventType, reason: &str, note: String) {
        if events::publish(
            self.ctx,
            self.job,
            event_type,
            reason,
            ACTION_RECONCILING,
            note,
        )
        .await
        {
            self.writes += 1;
        }
    }

    /// Step 1: the runtime, and whether its snapshot already exists.
    ///
    /// Reads come from the watch cache. The API server is asked only when
    /// the cache does not have the snapshot although this process applied
    /// it (the cache is behind: never re-snapshot then), or does not have
    /// the runtime (it may be new; the answer names what is missing).
    async fn resolve_runtime(&self) -> Result<Resolved, SnapshotError> {
        let cm_kind = KindRef::new("v1", "ConfigMap");
        let snap_name = snapshot::snapshot_name(self.name);
        let cached = self
            .ctx
            .objects
            .live_metadata(&cm_kind, self.ns, &snap_name);
        let applied_here = || {
            self.ctx
                .memo
                .knows(&(cm_kind.clone(), self.ns.to_owned(), snap_name.clone()))
        };
        let runtime = match cached {
            Some(cm) => Some(self.ctx.snapshots.runtime(self.job, &cm)?),
            None if applied_here() => snapshot::get_snapshot(&self.ctx.client, self.job)
                .await?
                .map(|cm| snapshot::from_snapshot(self.job, &cm))
                .transpose()?
                .map(Arc::new),
            None => None,
        };
        if let Some(runtime) = runtime {
            return Ok(Resolved {
                runtime,
                has_snapshot: true,
            });
        }
        snapshot::check_supported(self.job)?;
        let (kind, ns) = snapshot::runtime_ref(self.job);
        let kind_ref = KindRef::new(format!("{GROUP}/{VERSION}"), kind);
        let name = &self.job.spec.runtime_ref.name;
        let runtime = match self.ctx.objects.live(&kind_ref, ns, name) {
            Some(o) => {
                let value = serde_json::to_value(o.as_ref())
                    .map_err(|e| SnapshotError::Invalid(format!("cached {kind}: {e}")))?;
                snapshot::runtime_from_cache(kind, &value)?
            }
            None => snapshot::live_runtime(&self.ctx.client, self.job).await?,
        };
        Ok(Resolved {
            runtime: Arc::new(runtime),
            has_snapshot: false,
        })
    }

    /// The TrainJob's JobSet from the watch cache, as JSON: only a JobSet
    /// this TrainJob (by uid) controls. One of that name controlled by
    /// another TrainJob, or by nothing, is not this TrainJob's: its status
    /// is never read as this TrainJob's (applying over it is refused as a
    /// collision naming its controller).
    fn live_jobset(&self) -> Option<Value> {
        let uid = self.job.metadata.uid.as_deref()?;
        self.ctx
            .objects
            .live(&jobset_kind(), self.ns, self.name)
            .filter(|o| controlled_by(o, uid))
            .and_then(|o| serde_json::to_value(o.as_ref()).ok())
    }

    /// Steps 2 and 3 proper; the info the plugin phases produced. Every
    /// JobSet applied records `patches_hash`. The last render is reused
    /// when nothing it depends on changed (see [`super::render_memo`]).
    async fn build_or_reuse(
        &mut self,
        resolved: &Resolved,
        plugins: &Arc<PluginSet>,
        not_serving: Option<&NotServing>,
        patches_hash: &str,
    ) -> Result<Arc<str>, ReconcileError> {
        if let Some(n) = not_serving {
            return Err(ReconcileError::NoServingPlugins(n.clone()));
        }
        let memo = &self.ctx.renders;
        let inputs = memo.inputs(self.job, &resolved.runtime, plugins.id(), patches_hash);
        let live = |(kind, ns, name): &ObjectId| self.ctx.objects.live_metadata(kind, ns, name);
        if let Some(info) = memo.reusable(self.job, inputs, self.ctx.settings.resync, live) {
            debug!("nothing the render depends on changed: reused");
            self.ctx.metrics.render_reused();
            return Ok(info);
        }
        let (rendered, taken) = match self.build(&resolved.runtime, plugins).await {
            Ok(r) => r,
            Err(e) => {
                memo.forget(self.job);
                return Err(e);
            }
        };
        let mut rendered = rendered;
        for w in &rendered.warnings {
            info!(warning = %w, "TrainJob warning");
        }
        record_patches_hash(&mut rendered.objects, patches_hash);
        match self.apply(&rendered.objects, resolved.has_snapshot).await {
            Ok(applied) => {
                let live =
                    |(kind, ns, name): &ObjectId| self.ctx.objects.live_metadata(kind, ns, name);
                let info = info_json(&rendered.info).map_err(ReconcileError::Build)?;
                memo.record(self.job, inputs, applied, taken, info.clone(), live);
                Ok(info)
            }
            Err(e) => {
                memo.forget(self.job);
                Err(e)
            }
        }
    }

    /// Step 2: the pure pipeline, on a blocking thread, with what the
    /// plugins took from outside their arguments.
    async fn build(
        &self,
        runtime: &Arc<RuntimeObject>,
        plugins: &Arc<PluginSet>,
    ) -> Result<(Rendered, plugin::HostInputs), ReconcileError> {
        let (job, runtime, plugins) = (self.job.clone(), runtime.clone(), plugins.clone());
        let features = self.ctx.settings.features;
        let (rendered, taken) = tokio::task::spawn_blocking(move || {
            plugin::record_host_inputs(|| run_pipeline(&job, &runtime, &plugins, features))
        })
        .await
        .map_err(ReconcileError::BuildTask)?;
        let rendered = rendered.map_err(|e| match e {
            PipelineError::PolicyNotServed { ref keys, .. } => ReconcileError::PolicyNotServed {
                keys: keys.clone(),
                message: serving::policy_message(
                    &e.to_string(),
                    self.ctx.plugins.degraded().as_ref(),
                ),
            },
            e => ReconcileError::Build(e),
        })?;
        Ok((rendered, taken))
    }

    /// Step 3: apply every object in order, stopping at the first error.
    /// The snapshot ConfigMap is written once, never refreshed. Returns
    /// every object's id with what the API server returned for those
    /// written (`None`: left as it was).
    async fn apply(
        &mut self,
        objects: &[Value],
        has_snapshot: bool,
    ) -> Result<Vec<(ObjectId, Option<DynamicObject>)>, ReconcileError> {
        let snap_name = snapshot::snapshot_name(self.name);
        let mut applied = Vec::with_capacity(objects.len());
        for object in objects {
            let kind = kind_of(object);
            let obj_name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let id: ObjectId = (kind.clone(), self.ns.to_owned(), obj_name.to_owned());
            if has_snapshot && kind.kind == "ConfigMap" && obj_name == snap_name {
                applied.push((id, None));
                continue;
            }
            let (outcome, written) = match self.apply_one(&kind, obj_name, object).await {
                Ok(o) => o,
                Err(e) => {
                    self.ctx.metrics.apply_error(&kind.kind);
                    return Err(e);
                }
            };
            if outcome != Outcome::Unchanged {
                self.writes += 1;
                self.ctx.metrics.api_write("apply", &kind.kind);
            }
            if outcome == Outcome::Created
                && kind == jobset_kind()
                && let Some(created) = &self.job.metadata.creation_timestamp
            {
                let elapsed = created.0.duration_until(Timestamp::now()).unsigned_abs();
                self.ctx.metrics.jobset_ready(elapsed);
            }
            if let Some(w) = &written {
                self.ctx.objects.remember_write(&kind, w.clone());
            }
            applied.push((id, written));
        }
        Ok(applied)
    }

    /// One object through [`apply::apply`].
    async fn apply_one(
        &self,
        kind: &KindRef,
        name: &str,
        object: &Value,
    ) -> Result<(Outcome, Option<DynamicObject>), ReconcileError> {
        let (resource, namespaced) = self
            .ctx
            .objects
            .resource(kind)
            .await
            .map_err(ReconcileError::ApplyKind)?;
        let live: Option<Arc<DynamicObject>> = self.ctx.objects.live(kind, self.ns, name);
        apply::apply(
            &self.ctx.client,
            &resource,
            namespaced,
            object,
            live.as_deref(),
            self.job.metadata.uid.as_deref().unwrap_or_default(),
            apply::Ledger {
                memo: &self.ctx.memo,
                writes: &self.ctx.writes,
            },
        )
        .await
        .map_err(ReconcileError::Apply)
    }

    /// Step 4's plugin part: the status plugin's view, starting from
    /// `status`, parsed into a typed status.
    async fn plugin_status(
        &self,
        resolved: &Resolved,
        status: &TrainJobStatus,
        info: Option<Arc<str>>,
        plugins: Arc<PluginSet>,
    ) -> Result<PluginStatus, ReconcileError> {
        let Some(plugin) = plugins
            .plugins()
            .iter()
            .find(|p| p.calls(Phase::Status))
            .map(|p| p.name().to_owned())
        else {
            return Ok(PluginStatus::Unchanged);
        };
        let serialise = |what: &'static str, e: serde_json::Error| {
            ReconcileError::StatusInput(PipelineError::Serialize {
                what,
                reason: e.to_string(),
            })
        };
        let mut job_json = serde_json::to_value(self.job).map_err(|e| serialise("TrainJob", e))?;
        let status_json = if conditions::is_empty(status) {
            Value::Null
        } else {
            serde_json::to_value(status).map_err(|e| serialise("TrainJob status", e))?
        };
        if let Some(m) = job_json.as_object_mut() {
            m.insert("status".into(), status_json);
        }
        let (job, runtime) = (self.job.clone(), resolved.runtime.clone());
        let answer = tokio::task::spawn_blocking(move || -> Result<_, PipelineError> {
            let info = match info {
                Some(i) => i,
                None => info_json(&trainforge_api::blueprint::runtime_info_for(
                    &job,
                    runtime.spec(),
                )?)?,
            };
            Ok(plugins.status_report_json(&job_json, &info))
        })
        .await
        .map_err(ReconcileError::StatusTask)?
        .map_err(ReconcileError::StatusInput)?;
        match answer {
            Ok(out) => {
                for w in &out.warnings {
                    warn!(warning = %w, "status plugin failure ignored by its failurePolicy");
                }
                match out.status {
                    None => Ok(PluginStatus::Unchanged),
                    Some(v) => conditions::parse_status(v)
                        .map(PluginStatus::New)
                        .map_err(|source| ReconcileError::StatusInvalid { plugin, source }),
                }
            }
            Err(plugin::Error::Plugin {
                error: PluginError::Unavailable(why),
                ..
            }) => Ok(PluginStatus::NotYet(why)),
            Err(e) => Err(ReconcileError::StatusPlugin(e)),
        }
    }

    /// Delete the TrainJob, its time to live after finishing over; its
    /// objects are deleted with it by the garbage collector (owner
    /// references, background propagation). Gone already is fine; another
    /// failure is logged and the next reconcile tries again.
    async fn delete_trainjob(&mut self) {
        let api: Api<TrainJob> = Api::namespaced(self.ctx.client.clone(), self.ns);
        // Only the TrainJob this decision was about, not one created
        // since under the same name.
        let params = DeleteParams {
            preconditions: self
                .job
                .metadata
                .uid
                .clone()
                .map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
            ..DeleteParams::background()
        };
        match api.delete(self.name, &params).await {
            Ok(_) => {
                info!("time to live after finishing is over: TrainJob deleted");
                self.writes += 1;
                self.ctx.metrics.api_write("delete", "TrainJob");
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                warn!(error = %e, "deleting the TrainJob after its time to live failed");
                self.fail(ReconcileError::Delete(e));
            }
        }
    }

    /// Delete the TrainJob's JobSet (its active deadline was exceeded); a
    /// JobSet already gone is fine, another failure is only logged.
    async fn delete_jobset(&mut self) {
        let kind = jobset_kind();
        let Ok((resource, _)) = self.ctx.objects.resource(&kind).await else {
            return;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), self.ns, &resource);
        match api.delete(self.name, &DeleteParams::background()).await {
            Ok(_) => {
                self.ctx.objects.forget_write(&kind, self.ns, self.name);
                self.writes += 1;
                self.ctx.metrics.api_write("delete", "JobSet");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => warn!(error = %e, "deleting the JobSet after the deadline failed"),
        }
    }

    /// Step 4's write: a merge patch from `old` to `new`, only when they
    /// differ.
    async fn write_status(
        &mut self,
        old: &TrainJobStatus,
        new: &TrainJobStatus,
    ) -> Result<(), ReconcileError> {
        if old == new {
            return Ok(());
        }
        let patch = conditions::status_patch(old, new).map_err(ReconcileError::StatusPatch)?;
        let api: Api<TrainJob> = Api::namespaced(self.ctx.client.clone(), self.ns);
        // Written as our field manager (not the default, `unknown`).
        let params = PatchParams {
            field_manager: Some(apply::FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        api.patch_status(self.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(ReconcileError::StatusWrite)?;
        self.writes += 1;
        self.ctx.metrics.api_write("patch", "TrainJob/status");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::controller::trainjob::serving::{Absent, Origin};

    fn not_serving() -> NotServing {
        NotServing {
            origin: Origin::Catalog,
            absent: vec![Absent {
                name: "jobset".into(),
                why: "DigestMismatch: expected sha256 00, got 11".into(),
            }],
            without_build: Vec::new(),
        }
    }

    #[test]
    fn each_error_names_its_step() {
        let resolve = ReconcileError::Resolve(SnapshotError::NotFound(
            "TrainingRuntime specified in TrainJob is not found".into(),
        ));
        assert_eq!(resolve.reason(), "Resolve");
        assert!(resolve.is_creation_failure());
        assert_eq!(
            events::creation_failed_note(&resolve.to_string()),
            "TrainJob resources reconciliation failed: TrainingRuntime specified in TrainJob is not found",
            "upstream's note for a missing runtime"
        );

        let build = ReconcileError::Build(PipelineError::Runtime("wrong kind".into()));
        assert_eq!(build.reason(), "Build");
        assert!(build.is_creation_failure());
        assert_eq!(
            events::creation_failed_note(&build.to_string()),
            "TrainJob resources reconciliation failed: build: spec.runtimeRef: wrong kind"
        );

        let apply = ReconcileError::Apply(ApplyError::Malformed("name"));
        assert_eq!(apply.reason(), "Apply");
        assert!(apply.is_creation_failure());
        assert_eq!(apply.to_string(), "apply: object without name");
        let kind = ReconcileError::ApplyKind(ObjectsError::Unknown {
            api_version: "x/v1".into(),
            kind: "Y".into(),
            reason: "no".into(),
        });
        assert_eq!(kind.reason(), "Apply");
        assert!(kind.to_string().starts_with("apply: x/v1 Y"), "{kind}");

        let none = ReconcileError::NoServingPlugins(not_serving());
        assert_eq!(none.reason(), "NoServingPlugins");
        assert!(
            !none.is_creation_failure(),
            "its own condition and Event, not TrainJobResourcesCreationFailed"
        );
        assert!(
            none.to_string()
                .contains("jobset (DigestMismatch: expected sha256 00, got 11)"),
            "{none}"
        );

        let invalid = ReconcileError::StatusInvalid {
            plugin: "jobset".into(),
            source: conditions::parse_status(serde_json::json!({"jobsStatus": 3})).unwrap_err(),
        };
        assert_eq!(invalid.reason(), "Status");
        assert!(!invalid.is_creation_failure());
        assert!(
            invalid.to_string().starts_with(
                "status: plugin jobset returned an unusable status: not a TrainJob status"
            ),
            "{invalid}"
        );
    }

    #[test]
    fn invalid_never_built_jobs_fail_and_the_rest_is_blocked_or_transient() {
        use crate::pipeline::run::Problem;
        use trainforge_api::plugin::{FieldError, FieldErrorType};
        let invalid = || {
            ReconcileError::Build(PipelineError::Invalid {
                problems: vec![Problem {
                    source: "jobset".into(),
                    error: FieldError {
                        error_type: FieldErrorType::Invalid,
                        field: "spec.runtimePatches[0]".into(),
                        bad_value: None,
                        detail: "no job nope".into(),
                    },
                }],
                warnings: Vec::new(),
            })
        };
        match stuck(&invalid(), false) {
            Stuck::Invalid(m) => assert!(
                m.contains("jobset: spec.runtimePatches[0]: no job nope"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(
                stuck(&invalid(), true),
                Stuck::Blocked(conditions::REASON_BUILD_REFUSED, _)
            ),
            "a job built before is never failed by a rebuild"
        );
        let missing = ReconcileError::Resolve(SnapshotError::NotFound(
            "not found ClusterTrainingRuntime specified in TrainJob: rt".into(),
        ));
        assert_eq!(
            stuck(&missing, false),
            Stuck::Blocked(
                conditions::REASON_RUNTIME_NOT_FOUND,
                "not found ClusterTrainingRuntime specified in TrainJob: rt".into()
            )
        );
        let policy = ReconcileError::PolicyNotServed {
            keys: vec!["mlPolicy.torch".into()],
            message: "runtime policy mlPolicy.torch served by no plugin".into(),
        };
        assert!(policy.waits_for_plugins());
        assert!(!policy.is_creation_failure());
        assert_eq!(policy.reason(), "PolicyNotServed");
        assert_eq!(
            stuck(&policy, true),
            Stuck::Blocked(
                conditions::REASON_POLICY_NOT_SERVED,
                "runtime policy mlPolicy.torch served by no plugin".into()
            )
        );
        assert!(matches!(
            stuck(&ReconcileError::NoServingPlugins(not_serving()), false),
            Stuck::Blocked(conditions::REASON_NO_SERVING_PLUGINS, m) if m.contains("jobset (DigestMismatch")
        ));
        let collision = ReconcileError::Apply(ApplyError::Collision {
            kind: "JobSet".into(),
            namespace: "n".into(),
            name: "j".into(),
            holder: "no controller".into(),
        });
        assert!(matches!(
            stuck(&collision, false),
            Stuck::Blocked(conditions::REASON_APPLY_FAILED, _)
        ));
        let api = ReconcileError::Resolve(SnapshotError::Api {
            what: "ConfigMap n/j-runtime-snapshot".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("etcd timeout", "InternalError")
                    .with_code(500)
                    .boxed(),
            ),
        });
        assert_eq!(
            stuck(&api, false),
            Stuck::Transient,
            "API trouble changes nothing"
        );
        assert!(is_refusal(422) && is_refusal(403));
        assert!(!is_refusal(409) && !is_refusal(429) && !is_refusal(500));
    }

    #[test]
    fn runtime_patches_diverge_only_while_running_with_a_recorded_hash() {
        let jobset = |suspend: bool, hash: Option<&str>| {
            let mut js =
                serde_json::json!({"metadata": {"name": "j"}, "spec": {"suspend": suspend}});
            if let Some(h) = hash {
                js["metadata"]["annotations"] =
                    serde_json::json!({ANNOTATION_RUNTIME_PATCHES_HASH: h});
            }
            js
        };
        let running = jobset(false, Some("aaaa"));
        assert_eq!(
            patches_divergence(false, Some(&running), "bbbb").as_deref(),
            Some("aaaa")
        );
        assert_eq!(patches_divergence(false, Some(&running), "aaaa"), None);
        assert_eq!(
            patches_divergence(true, Some(&running), "bbbb"),
            None,
            "a suspended TrainJob takes the edit"
        );
        assert_eq!(
            patches_divergence(false, Some(&jobset(true, Some("aaaa"))), "bbbb"),
            None,
            "a suspended JobSet is re-rendered (resume)"
        );
        assert_eq!(
            patches_divergence(false, Some(&jobset(false, None)), "bbbb"),
            None
        );
        assert_eq!(patches_divergence(false, None, "bbbb"), None);

        let mut objects = vec![
            serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "c"}}),
            serde_json::json!({"kind": "JobSet", "metadata": {"name": "j", "annotations": {"x": "1"}}}),
        ];
        record_patches_hash(&mut objects, "cccc");
        assert_eq!(objects[0]["metadata"].get("annotations"), None);
        assert_eq!(
            objects[1]["metadata"]["annotations"],
            serde_json::json!({"x": "1", ANNOTATION_RUNTIME_PATCHES_HASH: "cccc"})
        );
        assert_eq!(
            patches_divergence(false, Some(&objects[1]), "dddd").as_deref(),
            Some("cccc")
        );
    }

    #[test]
    fn the_patches_event_comes_once_per_edit() {
        let now = conditions::now();
        let old = TrainJobStatus::default();
        let mut first = old.clone();
        conditions::set_runtime_patches_ignored(
            &mut first,
            Some(&patches_ignored_message("aaaa", "bbbb")),
            &now,
        );
        let note = patches_ignored_news(&old, &first).unwrap();
        assert!(
            note.contains("RuntimePatches can only be modified when the TrainJob is suspended")
                && note.contains("aaaa")
                && note.contains("bbbb"),
            "{note}"
        );
        assert_eq!(
            patches_ignored_news(&first, &first),
            None,
            "not every resync"
        );
        let mut second = first.clone();
        conditions::set_runtime_patches_ignored(
            &mut second,
            Some(&patches_ignored_message("aaaa", "cccc")),
            &now,
        );
        assert!(
            patches_ignored_news(&first, &second).is_some(),
            "a new edit"
        );
        let mut cleared = second.clone();
        conditions::set_runtime_patches_ignored(&mut cleared, None, &now);
        assert_eq!(patches_ignored_news(&second, &cleared), None);
        assert!(conditions::is_empty(&cleared));
    }

    #[test]
    fn the_first_failure_is_kept() {
        let mut first = None;
        keep_first(&mut first, ReconcileError::NoServingPlugins(not_serving()));
        keep_first(
            &mut first,
            ReconcileError::Build(PipelineError::Runtime("later".into())),
        );
        assert_eq!(first.unwrap().reason(), "NoServingPlugins");
    }
}
