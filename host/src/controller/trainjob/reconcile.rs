//! One reconcile of one TrainJob (upstream's `trainjob_controller.go`
//! Reconcile, HEAD semantics; see the module docs of
//! [`crate::controller::trainjob`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::Value;
use tracing::{Instrument, info, info_span, warn};
use trainforge_api::plugin::{Info, KindRef, PluginError};
use trainforge_api::trainer::v1alpha1::TrainJob;
use trainforge_api::trainer::v1alpha1::constants::{
    CONDITION_FAILED, MANAGED_BY_TRAINJOB_CONTROLLER, REASON_TRAINING_RUNTIME_NOT_SUPPORTED,
};

use super::apply::{self, Outcome};
use super::conditions::{self, Deadline};
use super::events::{self, ACTION_RECONCILING, REASON_CREATION_FAILED};
use super::snapshot::{self, SnapshotError};
use super::{CONTROLLER_NAME, Context};
use crate::pipeline::run::{RuntimeObject, run as run_pipeline};
use crate::plugin::{self, PluginSet};

/// Why a reconcile must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Building or applying the objects failed (also reported as an Event).
    #[error("{0}")]
    Resources(String),
    /// Writing the status failed.
    #[error("updating status: {0}")]
    Status(#[source] kube::Error),
    /// A blocking task panicked or was cancelled.
    #[error("plugin task: {0}")]
    Task(String),
}

impl ReconcileError {
    fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Resources(_) => "Resources",
            ReconcileError::Status(_) => "Status",
            ReconcileError::Task(_) => "Task",
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

fn jobset_kind() -> KindRef {
    KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet")
}

/// Reconcile one TrainJob (entry point for kube-runtime).
pub async fn reconcile(job: Arc<TrainJob>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let span =
        info_span!("reconcile", controller = CONTROLLER_NAME, trainjob = %format!("{ns}/{name}"));
    let start = Instant::now();
    let result = Reconcile {
        job: &job,
        ctx: &ctx,
        ns: &ns,
        name: &name,
        writes: 0,
    }
    .run()
    .instrument(span)
    .await;
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
    writes: u32,
}

/// What the plugin phases produced, if they ran.
struct Built {
    info: Info,
}

impl Reconcile<'_> {
    async fn run(mut self) -> Result<Action, ReconcileError> {
        let job = self.job;
        if let Some(m) = job
            .spec
            .managed_by
            .as_deref()
            .filter(|m| *m != MANAGED_BY_TRAINJOB_CONTROLLER)
        {
            info!(managed_by = %m, "managed by another controller: left alone");
            return Ok(Action::await_change());
        }
        let old_status = job
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Value::Null);
        let mut status = old_status.clone();
        let now = Timestamp::now();

        if let Err(e) = snapshot::check_supported(job) {
            conditions::set(
                &mut status,
                CONDITION_FAILED,
                true,
                REASON_TRAINING_RUNTIME_NOT_SUPPORTED,
                &e.to_string(),
                now,
            );
            if old_status != status {
                warn!(error = %e, "unsupported runtime");
                events::publish(
                    self.ctx,
                    job,
                    true,
                    REASON_TRAINING_RUNTIME_NOT_SUPPORTED,
                    ACTION_RECONCILING,
                    e.to_string(),
                )
                .await;
            }
            self.write_status(&old_status, &status).await?;
            return Ok(Action::await_change());
        }

        let plugins = self.ctx.plugins.current();
        let finished = conditions::is_finished(&old_status);
        let mut errors: Vec<String> = Vec::new();
        let mut built: Option<Built> = None;
        let runtime = match self.resolve_runtime().await {
            Ok(r) => Some(r),
            Err(e) => {
                errors.push(e.to_string());
                None
            }
        };
        if let (false, Some((runtime, has_snapshot))) = (finished, &runtime) {
            match self
                .build_and_apply(runtime.clone(), *has_snapshot, plugins.clone())
                .await
            {
                Ok(b) => built = Some(b),
                Err(e) => errors.push(e),
            }
        }
        if let Some(e) = errors.first() {
            let note = events::creation_failed_note(e);
            warn!(error = %e, "TrainJob resources reconciliation failed");
            if events::publish(
                self.ctx,
                job,
                true,
                REASON_CREATION_FAILED,
                ACTION_RECONCILING,
                note,
            )
            .await
            {
                self.writes += 1;
            }
        }

        // Suspended, then the status plugin (it starts from the status so far).
        conditions::apply_suspend(&mut status, job.spec.suspend.unwrap_or(false), now);
        let remembered = conditions::deadline_exceeded(&old_status);
        let mut retry_soon = false;
        if let Some((runtime, _)) = &runtime {
            match self
                .plugin_status(runtime.clone(), &status, built.map(|b| b.info), plugins)
                .await
            {
                Ok(Some(s)) => status = s,
                Ok(None) => {}
                Err(StatusFailure::Unavailable(why)) => {
                    info!(%why, "status not available yet");
                    retry_soon = true;
                }
                Err(StatusFailure::Failed(e)) => errors.push(e),
            }
        }
        if let Some(c) = remembered {
            conditions::restore(&mut status, c);
        }

        // The active deadline.
        let created = job.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let mut requeue = self.ctx.settings.resync;
        match conditions::deadline(
            job.spec.active_deadline_seconds,
            job.spec.suspend.unwrap_or(false),
            created,
            &status,
            now,
        ) {
            Deadline::None => {}
            Deadline::Remaining(left) => requeue = requeue.min(left),
            Deadline::Exceeded => {
                conditions::fail_deadline(&mut status, now);
                self.delete_jobset().await;
            }
        }
        if retry_soon {
            requeue = requeue.min(Duration::from_secs(2));
        }

        let transitions = conditions::transitions(&old_status, &status);
        self.write_status(&old_status, &status).await?;
        for t in &transitions {
            if let Some((warning, reason, note)) = events::for_transition(t)
                && events::publish(self.ctx, job, warning, &reason, ACTION_RECONCILING, note).await
            {
                self.writes += 1;
            }
        }
        if self.writes == 0 {
            self.ctx.metrics.noop_resync();
        }
        if errors.is_empty() {
            Ok(Action::requeue(requeue))
        } else {
            Err(ReconcileError::Resources(errors.join("; ")))
        }
    }

    /// The runtime, and whether its snapshot already exists.
    async fn resolve_runtime(&self) -> Result<(RuntimeObject, bool), SnapshotError> {
        let cm_kind = KindRef::new("v1", "ConfigMap");
        let snap_name = snapshot::snapshot_name(self.name);
        let cached = self.ctx.objects.live(&cm_kind, self.ns, &snap_name);
        let cm = match cached {
            Some(o) => serde_json::to_value(o.as_ref())
                .ok()
                .and_then(|v| serde_json::from_value(v).ok()),
            None => snapshot::get_snapshot(&self.ctx.client, self.job).await?,
        };
        match cm {
            Some(cm) => Ok((snapshot::from_snapshot(self.job, &cm)?, true)),
            None => Ok((
                snapshot::live_runtime(&self.ctx.client, self.job).await?,
                false,
            )),
        }
    }

    /// Run the pipeline and apply its objects, stopping at the first error.
    async fn build_and_apply(
        &mut self,
        runtime: RuntimeObject,
        has_snapshot: bool,
        plugins: Arc<PluginSet>,
    ) -> Result<Built, String> {
        let job = self.job.clone();
        let rendered = tokio::task::spawn_blocking(move || run_pipeline(&job, &runtime, &plugins))
            .await
            .map_err(|e| format!("plugin task: {e}"))?
            .map_err(|e| e.to_string())?;
        let snap_name = snapshot::snapshot_name(self.name);
        for object in &rendered.objects {
            let kind = kind_of(object);
            let obj_name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if has_snapshot && kind.kind == "ConfigMap" && obj_name == snap_name {
                continue; // the snapshot is written once, never refreshed
            }
            let (resource, namespaced) = self.ctx.objects.resource(&kind).await.map_err(|e| {
                self.ctx.metrics.apply_error(&kind.kind);
                e.to_string()
            })?;
            let live: Option<Arc<DynamicObject>> = self.ctx.objects.live(&kind, self.ns, obj_name);
            let outcome = apply::apply(
                &self.ctx.client,
                &resource,
                namespaced,
                object,
                live.as_deref(),
                self.job.metadata.uid.as_deref().unwrap_or_default(),
                &self.ctx.memo,
            )
            .await
            .map_err(|e| {
                self.ctx.metrics.apply_error(&kind.kind);
                e.to_string()
            })?;
            if outcome != Outcome::Unchanged {
                self.writes += 1;
                self.ctx.metrics.api_write("apply", &kind.kind);
            }
            if outcome == Outcome::Created && kind == jobset_kind() {
                if let Some(created) = &self.job.metadata.creation_timestamp {
                    let elapsed = created.0.duration_until(Timestamp::now()).unsigned_abs();
                    self.ctx.metrics.jobset_ready(elapsed);
                }
                let note = format!("Created JobSet {}/{}", self.ns, obj_name);
                if events::publish(
                    self.ctx,
                    self.job,
                    false,
                    "JobSetCreated",
                    ACTION_RECONCILING,
                    note,
                )
                .await
                {
                    self.writes += 1;
                }
            }
        }
        for w in &rendered.warnings {
            info!(warning = %w, "TrainJob warning");
        }
        Ok(Built {
            info: rendered.info,
        })
    }

    /// The status plugin's view, starting from `status`.
    async fn plugin_status(
        &self,
        runtime: RuntimeObject,
        status: &Value,
        info: Option<Info>,
        plugins: Arc<PluginSet>,
    ) -> Result<Option<Value>, StatusFailure> {
        let mut job_json =
            serde_json::to_value(self.job).map_err(|e| StatusFailure::Failed(e.to_string()))?;
        if let Some(m) = job_json.as_object_mut() {
            m.insert("status".into(), status.clone());
        }
        let job = self.job.clone();
        tokio::task::spawn_blocking(move || {
            let info = match info {
                Some(i) => i,
                None => {
                    let merged = crate::pipeline::merge::merge(&job, runtime.spec())
                        .map_err(|e| StatusFailure::Failed(e.to_string()))?;
                    crate::pipeline::info::runtime_info(&merged)
                        .map_err(|e| StatusFailure::Failed(e.to_string()))?
                }
            };
            match plugins.status_report(&job_json, &info) {
                Ok(out) => {
                    for w in &out.warnings {
                        warn!(warning = %w, "status plugin failure ignored by its failurePolicy");
                    }
                    Ok(out.status)
                }
                Err(plugin::Error::Plugin {
                    error: PluginError::Unavailable(why),
                    ..
                }) => Err(StatusFailure::Unavailable(why)),
                Err(e) => Err(StatusFailure::Failed(e.to_string())),
            }
        })
        .await
        .map_err(|e| StatusFailure::Failed(format!("plugin task: {e}")))?
    }

    async fn delete_jobset(&mut self) {
        let kind = jobset_kind();
        let Ok((resource, _)) = self.ctx.objects.resource(&kind).await else {
            return;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.ctx.client.clone(), self.ns, &resource);
        match api.delete(self.name, &DeleteParams::background()).await {
            Ok(_) => {
                self.writes += 1;
                self.ctx.metrics.api_write("delete", "JobSet");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => warn!(error = %e, "deleting the JobSet after the deadline failed"),
        }
    }

    async fn write_status(&mut self, old: &Value, new: &Value) -> Result<(), ReconcileError> {
        // An empty status is no status (the CRD requires at least one property).
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
        if old == new || (empty(old) && empty(new)) {
            return Ok(());
        }
        let api: Api<TrainJob> = Api::namespaced(self.ctx.client.clone(), self.ns);
        let patch = conditions::status_patch(old, new);
        api.patch_status(self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(ReconcileError::Status)?;
        self.writes += 1;
        self.ctx.metrics.api_write("patch", "TrainJob/status");
        Ok(())
    }
}

/// Why the status plugin gave no status.
enum StatusFailure {
    /// The JobSet is not in the cache yet: try again shortly.
    Unavailable(String),
    /// A real failure.
    Failed(String),
}
