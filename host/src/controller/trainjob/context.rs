//! What every reconcile of the TrainJob controller shares: the plugin set in
//! service ([`Plugins`]), the settings, and the [`Context`] (API client,
//! caches, metrics, Event recorder, per-TrainJob memory).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::BackoffBuilder as _;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;
use tracing::debug;
use trainforge_api::trainer::v1alpha1::TrainJob;

use crate::ops::events::{Recorder, Reporter};
use crate::ops::metrics::Metrics;
use crate::plugin::PluginSet;

use super::objects::ObjectCache;
use super::render_memo;
use super::serving::{self, NotServing};
use super::{apply, batch, snapshot};

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

/// The first retry delay of a failing TrainJob.
pub const RETRY_FIRST: Duration = Duration::from_millis(500);

/// The longest retry delay of a failing TrainJob (before jitter).
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// The retry delays of a TrainJob failing in a row (a well-kept crate's
/// exponential backoff with jitter rather than our own).
fn retry_delays() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::new()
        .with_min_delay(RETRY_FIRST)
        .with_factor(2.0)
        .with_max_delay(RETRY_MAX)
        .with_jitter()
        .without_max_times()
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
    /// Changes of a TrainJob's child objects within this period trigger
    /// one reconcile (see [`batch`]); zero reconciles on every change.
    pub child_batch: Duration,
    /// Bytes of objects each namespace's TrainJobs may write a minute
    /// ([`super::write_budget`]); zero: unlimited.
    pub write_bytes_per_minute: u64,
    /// Upstream's feature gates ([`crate::pipeline::features`]).
    pub features: crate::pipeline::features::Features,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            resync: Duration::from_secs(600),
            concurrency: 5,
            namespace: None,
            child_batch: batch::DEFAULT_PERIOD,
            write_bytes_per_minute: super::write_budget::DEFAULT_PER_MINUTE,
            features: crate::pipeline::features::Features::default(),
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
    /// Bytes each namespace's TrainJobs may write a minute
    /// ([`super::write_budget`]).
    pub writes: super::write_budget::WriteBudget,
    /// Each TrainJob's last render, reused while nothing it depends on
    /// changes.
    pub renders: render_memo::RenderMemo,
    /// Runtimes parsed from snapshot ConfigMaps.
    pub snapshots: snapshot::ParsedSnapshots,
    /// Per TrainJob failing in a row, its retry delays (see
    /// [`Context::backoff`]).
    failures: Mutex<HashMap<ObjectRef<TrainJob>, backon::ExponentialBackoff>>,
    /// TrainJobs whose last reconcile found no plugin set able to serve
    /// them: reconciled again when the set changes to one that can.
    waiting: Mutex<HashSet<ObjectRef<TrainJob>>>,
    /// Per TrainJob, the `runtimePatches` hash whose ignored edit was last
    /// reported by an Event: a reconcile that reads a status older than
    /// its own last write does not report the same edit twice.
    patches_reported: Mutex<HashMap<ObjectRef<TrainJob>, String>>,
    /// The rollout of the latest change of the plugin set
    /// ([`super::rollout`]).
    pub rollouts: Arc<super::rollout::Rollouts>,
    /// Pods that cannot be created, per TrainJob ([`super::pod_failures`]).
    pub pod_failures: Arc<super::pod_failures::PodFailures>,
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
            rollouts: Arc::new(super::rollout::Rollouts::new(metrics.clone())),
            client,
            plugins,
            objects,
            metrics,
            recorder,
            memo: apply::AppliedMemo::default(),
            writes: super::write_budget::WriteBudget::new(settings.write_bytes_per_minute),
            renders: render_memo::RenderMemo::default(),
            snapshots: snapshot::ParsedSnapshots::default(),
            failures: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashSet::new()),
            patches_reported: Mutex::new(HashMap::new()),
            pod_failures: Arc::default(),
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

    /// The delay before retrying `job` after one more failure in a row:
    /// exponential from [`RETRY_FIRST`] (doubling, at most [`RETRY_MAX`]),
    /// each delay plus a random part of up to itself, so that TrainJobs
    /// that failed together do not retry together. A success starts over.
    pub(super) fn backoff(&self, job: &TrainJob) -> Duration {
        let key = ObjectRef::from_obj(job);
        let next = self.failures.lock().ok().and_then(|mut f| {
            f.entry(key)
                .or_insert_with(|| retry_delays().build())
                .next()
        });
        next.unwrap_or(RETRY_MAX)
    }

    pub(super) fn succeeded(&self, job: &TrainJob) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&ObjectRef::from_obj(job));
        }
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Remember that `job` waits for a plugin set that can serve it.
    pub(super) fn wait_for_plugins(&self, job: &TrainJob) {
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(ObjectRef::from_obj(job));
        }
    }

    /// The TrainJobs waiting for a plugin set, forgotten (they are about to
    /// be reconciled).
    pub(super) fn take_waiting(&self) -> Vec<ObjectRef<TrainJob>> {
        self.waiting
            .lock()
            .map(|mut w| w.drain().collect())
            .unwrap_or_default()
    }

    /// Whether the ignored `runtimePatches` edit hashing to `hash` still
    /// needs its Event for `job` (then it is remembered as reported).
    pub(super) fn report_patches_once(&self, job: &TrainJob, hash: &str) -> bool {
        self.patches_reported.lock().is_ok_and(|mut m| {
            m.insert(ObjectRef::from_obj(job), hash.to_owned())
                .is_none_or(|previous| previous != hash)
        })
    }

    /// Forget the reported edit of `job` (its patches no longer diverge).
    pub(super) fn patches_agree(&self, job: &TrainJob) {
        if let Ok(mut m) = self.patches_reported.lock() {
            m.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Whether the set in service can serve TrainJobs now.
    pub(super) fn plugins_can_serve(&self) -> bool {
        self.plugins.not_serving(&self.plugins.current()).is_none()
    }

    /// Drop what is remembered about objects and TrainJobs that are gone:
    /// deleted TrainJobs get no reconcile, so without this the no-op memo
    /// and the failure counts would grow with every TrainJob ever seen.
    pub(super) fn prune(&self, trainjob_exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
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
        self.pod_failures.retain(&trainjob_exists);
        self.rollouts.retain(&trainjob_exists);
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
