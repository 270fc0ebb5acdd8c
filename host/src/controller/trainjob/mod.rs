//! The TrainJob controller: where a TrainJob becomes a JobSet.
//!
//! For each TrainJob ([`reconcile`](reconcile::reconcile)):
//! 1. `managedBy` someone else → leave it alone;
//! 2. resolve the runtime through its snapshot ([`snapshot`]);
//! 3. unless the job has finished, build the objects with the pure
//!    [`pipeline`](crate::pipeline) and the plugin set in service — only if
//!    the set can serve TrainJobs ([`serving`]) — and server-side apply
//!    every object ([`apply`]; manager `trainer`, force; unchanged objects
//!    are not written);
//! 4. conditions (`Suspended`, the status plugin's `Complete`/`Failed` and
//!    `jobsStatus`, the active deadline, `Failed/InvalidTrainJob`, and the
//!    extensions `PluginsReady`, `Blocked`, `RuntimePatchesIgnored` —
//!    [`conditions`]) written through the status subresource only when they
//!    changed;
//! 5. Events for the important transitions ([`events`]).
//!
//! A TrainJob is reconciled when it changes apart from its status (the
//! operator's own status writes trigger nothing), when an object it
//! controls changes, and every resync period. Steps 3's plugin calls and
//! apply are skipped when nothing the last render depended on changed
//! ([`render_memo`]).
//!
//! Child objects of every kind the plugins declared are watched
//! ([`objects`]) and map back to their controlling TrainJob. A TrainJob
//! that found no plugin set able to serve it, or no serving plugin for a
//! policy of its runtime, is reconciled again as soon as the set in service
//! changes to one that can serve.

pub mod apply;
pub mod batch;
pub mod conditions;
pub mod events;
pub mod legacy;
pub mod objects;
pub mod reconcile;
pub mod render_memo;
pub mod serving;
pub mod snapshot;

use crate::ops::events::{Recorder, Reporter};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::Controller;
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use trainforge_api::trainer::v1alpha1::TrainJob;

use crate::ops::metrics::Metrics;
use crate::plugin::PluginSet;

pub use objects::ObjectCache;
pub use reconcile::ReconcileError;
pub use serving::{Degraded, NotServing};

/// The controller's name (metrics label, logs).
pub const CONTROLLER_NAME: &str = "trainjob_controller";
/// The Event reporter, as upstream names it.
pub const EVENT_REPORTER: &str = "trainer-trainjob-controller";

/// Where reconciles get the plugin set in service. A reconcile takes it once
/// and uses that set throughout, so a swap never shows a half-loaded set.
pub trait Plugins: Send + Sync {
    /// The set in service now.
    fn current(&self) -> Arc<PluginSet>;

    /// Why `set` (as taken from [`Plugins::current`]) cannot serve
    /// TrainJobs, naming the configured plugins that are not serving;
    /// `None` when it can ([`serving::can_serve`]).
    fn not_serving(&self, set: &PluginSet) -> Option<NotServing>;

    /// The configured plugins that are not serving now, and why; `None`
    /// when every configured plugin serves (a fixed set always does).
    fn degraded(&self) -> Option<serving::Degraded> {
        None
    }

    /// A receiver that changes whenever the set in service changes; `None`
    /// when the set never changes.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// A fixed plugin set: the builtin plugins (`--builtin-plugins`).
#[derive(Debug, Clone)]
pub struct FixedPlugins(pub Arc<PluginSet>);

impl Plugins for FixedPlugins {
    fn current(&self) -> Arc<PluginSet> {
        self.0.clone()
    }

    fn not_serving(&self, set: &PluginSet) -> Option<NotServing> {
        serving::check_fixed(set)
    }
}

/// How long a TrainJob waits, at most, before it retries a reconcile that
/// found no plugin set able to serve it (a change of the set wakes it
/// sooner).
pub const NO_PLUGINS_RETRY: Duration = Duration::from_secs(30);

/// Tunables of the TrainJob controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reconcile every TrainJob at least this often (a resync).
    pub resync: Duration,
    /// TrainJobs reconciled at once.
    pub concurrency: u16,
    /// Only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Changes of a TrainJob's child objects within this period trigger
    /// one reconcile (see [`batch`]); zero reconciles on every change.
    pub child_batch: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resync: Duration::from_secs(600),
            concurrency: 5,
            namespace: None,
            child_batch: batch::DEFAULT_PERIOD,
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
    /// Each TrainJob's last render, reused while nothing it depends on
    /// changes.
    pub renders: render_memo::RenderMemo,
    /// Runtimes parsed from snapshot ConfigMaps.
    pub snapshots: snapshot::ParsedSnapshots,
    /// Consecutive failures per TrainJob, for the retry backoff.
    failures: Mutex<HashMap<ObjectRef<TrainJob>, u32>>,
    /// TrainJobs whose last reconcile found no plugin set able to serve
    /// them: reconciled again when the set changes to one that can.
    waiting: Mutex<HashSet<ObjectRef<TrainJob>>>,
    /// Per TrainJob, the `runtimePatches` hash whose ignored edit was last
    /// reported by an Event: a reconcile that reads a status older than
    /// its own last write does not report the same edit twice.
    patches_reported: Mutex<HashMap<ObjectRef<TrainJob>, String>>,
    /// Tenant plugins (`None`: no `TrainerPlugin` is served).
    pub tenants: Option<Arc<crate::controller::tenants::TenantPlugins>>,
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
            renders: render_memo::RenderMemo::default(),
            snapshots: snapshot::ParsedSnapshots::default(),
            failures: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashSet::new()),
            patches_reported: Mutex::new(HashMap::new()),
            tenants: None,
            settings,
        }
    }

    /// Serve `tenants`' plugins to the TrainJobs of their namespaces.
    #[must_use]
    pub fn with_tenants(
        mut self,
        tenants: Option<Arc<crate::controller::tenants::TenantPlugins>>,
    ) -> Self {
        self.tenants = tenants;
        self
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
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Remember that `job` waits for a plugin set that can serve it.
    fn wait_for_plugins(&self, job: &TrainJob) {
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(ObjectRef::from_obj(job));
        }
    }

    /// The TrainJobs waiting for a plugin set, forgotten (they are about to
    /// be reconciled).
    fn take_waiting(&self) -> Vec<ObjectRef<TrainJob>> {
        self.waiting
            .lock()
            .map(|mut w| w.drain().collect())
            .unwrap_or_default()
    }

    /// Whether the ignored `runtimePatches` edit hashing to `hash` still
    /// needs its Event for `job` (then it is remembered as reported).
    fn report_patches_once(&self, job: &TrainJob, hash: &str) -> bool {
        self.patches_reported.lock().is_ok_and(|mut m| {
            m.insert(ObjectRef::from_obj(job), hash.to_owned())
                .is_none_or(|previous| previous != hash)
        })
    }

    /// Forget the reported edit of `job` (its patches no longer diverge).
    fn patches_agree(&self, job: &TrainJob) {
        if let Ok(mut m) = self.patches_reported.lock() {
            m.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Whether the set in service can serve TrainJobs now.
    fn plugins_can_serve(&self) -> bool {
        self.plugins.not_serving(&self.plugins.current()).is_none()
    }

    /// Drop what is remembered about objects and TrainJobs that are gone:
    /// deleted TrainJobs get no reconcile, so without this the no-op memo
    /// and the failure counts would grow with every TrainJob ever seen.
    fn prune(&self, trainjob_exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
        let objects = self
            .memo
            .retain_existing(|kind, ns, name| self.objects.live_metadata(kind, ns, name).is_some());
        let failures = self.failures.lock().map_or(0, |mut f| {
            let before = f.len();
            f.retain(|r, _| trainjob_exists(r));
            before - f.len()
        });
        if let Ok(mut w) = self.waiting.lock() {
            w.retain(|r| trainjob_exists(r));
        }
        if let Ok(mut m) = self.patches_reported.lock() {
            m.retain(|r, _| trainjob_exists(r));
        }
        self.renders.retain(&trainjob_exists);
        self.objects.prune_writes();
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
    let mut wait = ctx.backoff(&job);
    if error.waits_for_plugins() {
        // Registered before looking at the set again, so a swap between the
        // reconcile and now is never missed.
        ctx.wait_for_plugins(&job);
        wait = if ctx.plugins_can_serve() {
            Duration::from_millis(100)
        } else {
            wait.min(NO_PLUGINS_RETRY)
        };
    }
    warn!(trainjob = %ObjectRef::from_obj(job.as_ref()), step = error.reason(), %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

/// How long the set in service must stay unchanged before the TrainJobs
/// waiting for it are woken: several `ClusterTrainerPlugin`s applied at once
/// swap the set once each, and a woken TrainJob should be built with all of
/// them, not with the first that could serve.
pub const WAKE_SETTLE: Duration = Duration::from_secs(2);

/// The longest a burst of swaps delays the wake-up.
const WAKE_SETTLE_MAX: Duration = Duration::from_secs(10);

/// Until `shutdown`: each time the set in service changes and then stays
/// unchanged for `settle` (at most [`WAKE_SETTLE_MAX`] after the first
/// change), if it can serve TrainJobs, send the TrainJobs waiting for it to
/// `wake`.
async fn wake_waiting(
    ctx: Arc<Context>,
    mut changes: watch::Receiver<u64>,
    wake: UnboundedSender<ObjectRef<TrainJob>>,
    settle: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let latest = tokio::time::Instant::now() + WAKE_SETTLE_MAX;
        loop {
            let quiet = tokio::time::sleep(settle);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if tokio::time::Instant::now() < latest {
                        continue;
                    }
                }
                _ = quiet => {}
            }
            break;
        }
        if ctx.plugins_can_serve() {
            let woken = ctx.take_waiting();
            if !woken.is_empty() {
                info!(
                    trainjobs = woken.len(),
                    "the plugin set in service can serve TrainJobs again: reconciling those that waited"
                );
            }
            for r in woken {
                if wake.send(r).is_err() {
                    return;
                }
            }
        }
    }
}

/// What a TrainJob's reconcile acts on, hashed: everything but its status,
/// `resourceVersion` and `managedFields`. A watch event that changes none of
/// it (the operator's own status write) reconciles nothing.
fn reconciled_state(job: &TrainJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let m = &job.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        &m.uid,
        m.generation,
        &m.labels,
        &m.annotations,
        &m.finalizers,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_second()),
    )
        .hash(&mut h);
    serde_json::to_string(&m.owner_references)
        .unwrap_or_default()
        .hash(&mut h);
    // The spec too: `generation` covers it on the API server, but a
    // TrainJob's spec is small and this keeps the rule independent of that.
    serde_json::to_string(&job.spec)
        .unwrap_or_default()
        .hash(&mut h);
    Some(h.finish())
}

/// Run the TrainJob controller until `shutdown`. `triggers` carries the
/// TrainJobs whose child objects changed (from [`ObjectCache`]), batched
/// by `settings.child_batch` ([`batch`]).
pub async fn run(
    ctx: Arc<Context>,
    triggers: UnboundedReceiver<ObjectRef<TrainJob>>,
    shutdown: CancellationToken,
) {
    let api: Api<TrainJob> = match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let receive = |rx: UnboundedReceiver<ObjectRef<TrainJob>>| {
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
    };
    let (wake_tx, wake_rx) = tokio::sync::mpsc::unbounded_channel();
    let waker = ctx.plugins.changes().map(|changes| {
        tokio::spawn(wake_waiting(
            ctx.clone(),
            changes,
            wake_tx,
            WAKE_SETTLE,
            shutdown.clone(),
        ))
    });
    let triggers = futures::stream::select(
        batch::batched(triggers, ctx.settings.child_batch),
        receive(wake_rx),
    );
    let config = ControllerConfig::default().concurrency(ctx.settings.concurrency);
    info!(
        concurrency = ctx.settings.concurrency,
        "TrainJob controller starting"
    );
    let (reader, writer) = reflector::store();
    // No step reads a TrainJob's managedFields (nor are plugins given
    // them): the store and every plugin input are smaller without them.
    let trainjobs = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|job: &mut TrainJob| job.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(reconciled_state, PredicateConfig::default());
    let controller = Controller::for_stream(trainjobs, reader).with_config(config);
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
    if let Some(w) = waker {
        w.abort();
    }
    info!("TrainJob controller stopped");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use trainforge_api::trainer::v1alpha1::TrainJobSpec;

    /// A plugin set that tests swap by hand.
    struct Switch {
        set: Mutex<Arc<PluginSet>>,
        swaps: watch::Sender<u64>,
    }

    impl Switch {
        fn swap(&self, set: PluginSet) {
            *self.set.lock().unwrap() = Arc::new(set);
            self.swaps.send_modify(|g| *g += 1);
        }
    }

    impl Plugins for Switch {
        fn current(&self) -> Arc<PluginSet> {
            self.set.lock().unwrap().clone()
        }

        fn not_serving(&self, set: &PluginSet) -> Option<NotServing> {
            serving::check_fixed(set)
        }

        fn changes(&self) -> Option<watch::Receiver<u64>> {
            Some(self.swaps.subscribe())
        }
    }

    /// A context with an empty set; the client points nowhere (nothing here
    /// talks to an API server).
    fn context() -> (Arc<Context>, Arc<Switch>) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let switch = Arc::new(Switch {
            set: Mutex::new(Arc::new(PluginSet::default())),
            swaps: watch::channel(0).0,
        });
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let ctx = Context::new(
            client.clone(),
            switch.clone(),
            Arc::new(ObjectCache::new(client, tx)),
            Arc::new(Metrics::new()),
            None,
            Settings::default(),
        );
        (Arc::new(ctx), switch)
    }

    fn job(name: &str) -> TrainJob {
        let mut j = TrainJob::new(name, TrainJobSpec::default());
        j.metadata.namespace = Some("ns".into());
        j
    }

    fn no_plugins() -> ReconcileError {
        ReconcileError::NoServingPlugins(serving::check_fixed(&PluginSet::default()).unwrap())
    }

    #[tokio::test]
    async fn a_set_that_can_serve_wakes_the_trainjobs_that_waited() {
        let (ctx, switch) = context();
        let (waiting, other) = (job("waits"), job("other"));
        let _ = error_policy(Arc::new(waiting.clone()), &no_plugins(), ctx.clone());
        let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let settle = Duration::from_millis(200);
        let task = tokio::spawn(wake_waiting(
            ctx.clone(),
            switch.changes().unwrap(),
            tx,
            settle,
            stop.clone(),
        ));

        // A new set that still cannot serve wakes nobody.
        switch.swap(PluginSet::default());
        let nothing = tokio::time::timeout(settle * 3, woken.recv()).await;
        assert!(nothing.is_err(), "woken by a set that cannot serve");

        // A burst of swaps ending in a set that can serve wakes exactly the
        // job that waited, once, after the burst.
        let burst = std::time::Instant::now();
        switch.swap(serving::jobset_set());
        for _ in 0..3 {
            tokio::time::sleep(settle / 2).await;
            switch.swap(serving::jobset_set());
        }
        let first = tokio::time::timeout(Duration::from_secs(5), woken.recv())
            .await
            .unwrap();
        assert!(
            burst.elapsed() >= settle / 2 * 3 + settle,
            "woken before the set settled: {:?}",
            burst.elapsed()
        );
        assert_eq!(first, Some(ObjectRef::from_obj(&waiting)));
        assert_ne!(first, Some(ObjectRef::from_obj(&other)));
        assert!(ctx.take_waiting().is_empty(), "forgotten once woken");
        switch.swap(serving::jobset_set());
        let again = tokio::time::timeout(settle * 3, woken.recv()).await;
        assert!(again.is_err(), "woken twice");

        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn an_ignored_patches_edit_is_reported_once() {
        let (ctx, _switch) = context();
        let (a, b) = (job("a"), job("b"));
        assert!(ctx.report_patches_once(&a, "h1"));
        assert!(!ctx.report_patches_once(&a, "h1"), "the same edit again");
        assert!(ctx.report_patches_once(&b, "h1"), "per TrainJob");
        assert!(ctx.report_patches_once(&a, "h2"), "a new edit");
        ctx.patches_agree(&a);
        assert!(ctx.report_patches_once(&a, "h2"), "diverging again");
        ctx.prune(|r| r.name == "a");
        assert!(
            ctx.report_patches_once(&b, "h1"),
            "pruned with its TrainJob"
        );
    }

    #[tokio::test]
    async fn only_the_missing_plugin_set_makes_a_trainjob_wait() {
        let (ctx, _switch) = context();
        let j = job("a");
        let build = ReconcileError::Build(crate::pipeline::run::PipelineError::Runtime("x".into()));
        let _ = error_policy(Arc::new(j.clone()), &build, ctx.clone());
        assert!(ctx.take_waiting().is_empty());
        let _ = error_policy(Arc::new(j.clone()), &no_plugins(), ctx.clone());
        assert_eq!(ctx.take_waiting(), [ObjectRef::from_obj(&j)]);
        let _ = error_policy(Arc::new(j.clone()), &no_plugins(), ctx.clone());
        ctx.succeeded(&j);
        assert!(
            ctx.take_waiting().is_empty(),
            "a reconcile that succeeds stops the wait"
        );
    }
}
