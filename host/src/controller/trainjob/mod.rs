//! The TrainJob controller: where a TrainJob becomes a JobSet.
//!
//! For each TrainJob ([`reconcile`](reconcile::reconcile)):
//! 1. `managedBy` someone else → leave it alone;
//! 2. resolve the runtime through its snapshot ([`snapshot`]);
//! 3. unless the job has finished, run the pure [`pipeline`](crate::pipeline)
//!    with the plugin set in service and server-side apply every object
//!    ([`apply`]; manager `trainer`, force; unchanged objects are not written);
//! 4. conditions (`Suspended`, the status plugin's `Complete`/`Failed` and
//!    `jobsStatus`, the active deadline — [`conditions`]) written through the
//!    status subresource only when they changed;
//! 5. Events for the important transitions ([`events`]).
//!
//! Child objects of every kind the plugins declared are watched
//! ([`objects`]) and map back to their controlling TrainJob.

pub mod apply;
pub mod conditions;
pub mod events;
pub mod objects;
pub mod reconcile;
pub mod snapshot;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use trainforge_api::trainer::v1alpha1::TrainJob;

use crate::controller::ops::metrics::Metrics;
use crate::plugin::PluginSet;

pub use objects::ObjectCache;
pub use reconcile::ReconcileError;

/// The controller's name (metrics label, logs).
pub const CONTROLLER_NAME: &str = "trainjob_controller";
/// The Event reporter, as upstream names it.
pub const EVENT_REPORTER: &str = "trainer-trainjob-controller";

/// Where reconciles get the plugin set in service. A reconcile takes it once
/// and uses that set throughout, so a swap never shows a half-loaded set.
pub trait Plugins: Send + Sync {
    /// The set in service now.
    fn current(&self) -> Arc<PluginSet>;
}

/// A fixed plugin set (tests, or an operator run without plugin CRs).
#[derive(Debug, Clone)]
pub struct FixedPlugins(pub Arc<PluginSet>);

impl Plugins for FixedPlugins {
    fn current(&self) -> Arc<PluginSet> {
        self.0.clone()
    }
}

/// Tunables of the TrainJob controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reconcile every TrainJob at least this often (a resync).
    pub resync: Duration,
    /// TrainJobs reconciled at once.
    pub concurrency: u16,
    /// Only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resync: Duration::from_secs(600),
            concurrency: 5,
            namespace: None,
        }
    }
}

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: kube::Client,
    /// The plugin set in service.
    pub plugins: Arc<dyn Plugins>,
    /// Watch cache of the plugins' kinds.
    pub objects: Arc<ObjectCache>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Event recorder.
    pub recorder: Recorder,
    /// What was applied last, for no-op detection.
    pub memo: apply::AppliedMemo,
    /// Consecutive failures per TrainJob, for the retry backoff.
    failures: Mutex<HashMap<ObjectRef<TrainJob>, u32>>,
    /// Tunables.
    pub settings: Settings,
}

impl Context {
    /// A context; `instance` identifies this replica in Events.
    pub fn new(
        client: kube::Client,
        plugins: Arc<dyn Plugins>,
        objects: Arc<ObjectCache>,
        metrics: Arc<Metrics>,
        instance: Option<String>,
        settings: Settings,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: EVENT_REPORTER.into(),
                instance,
            },
        );
        Context {
            client,
            plugins,
            objects,
            metrics,
            recorder,
            memo: apply::AppliedMemo::default(),
            failures: Mutex::new(HashMap::new()),
            settings,
        }
    }

    fn backoff(&self, job: &TrainJob) -> Duration {
        let key = ObjectRef::from_obj(job);
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        Duration::from_millis(500u64.saturating_mul(1u64 << n.min(10)))
            .min(Duration::from_secs(300))
    }

    fn succeeded(&self, job: &TrainJob) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Drop what is remembered about objects and TrainJobs that are gone:
    /// deleted TrainJobs get no reconcile, so without this the no-op memo
    /// and the failure counts would grow with every TrainJob ever seen.
    fn prune(&self, trainjob_exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
        let objects = self
            .memo
            .retain_existing(|kind, ns, name| self.objects.live(kind, ns, name).is_some());
        let failures = self.failures.lock().map_or(0, |mut f| {
            let before = f.len();
            f.retain(|r, _| trainjob_exists(r));
            before - f.len()
        });
        let remembered = self.memo.len();
        self.metrics.set_remembered(remembered);
        if objects + failures > 0 {
            debug!(
                objects,
                failures, remembered, "pruned state of deleted objects"
            );
        }
    }
}

/// Prune [`Context`] state every resync period until `shutdown`.
async fn prune_periodically(
    ctx: Arc<Context>,
    trainjobs: Store<TrainJob>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(ctx.settings.resync);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => ctx.prune(|r| trainjobs.get(r).is_some()),
        }
    }
}

fn error_policy(job: Arc<TrainJob>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let wait = ctx.backoff(&job);
    warn!(trainjob = %ObjectRef::from_obj(job.as_ref()), %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// Run the TrainJob controller until `shutdown`. `triggers` carries the
/// TrainJobs whose child objects changed (from [`ObjectCache`]).
pub async fn run(
    ctx: Arc<Context>,
    triggers: UnboundedReceiver<ObjectRef<TrainJob>>,
    shutdown: CancellationToken,
) {
    let api: Api<TrainJob> = match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let triggers = futures::stream::unfold(triggers, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let config = ControllerConfig::default().concurrency(ctx.settings.concurrency);
    info!(
        concurrency = ctx.settings.concurrency,
        "TrainJob controller starting"
    );
    let controller = Controller::new(api, watcher::Config::default()).with_config(config);
    let pruner = tokio::spawn(prune_periodically(
        ctx.clone(),
        controller.store(),
        shutdown.clone(),
    ));
    controller
        .reconcile_on(triggers)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
    pruner.abort();
    info!("TrainJob controller stopped");
}
