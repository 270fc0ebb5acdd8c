//! The TrainJob controller's loop: the watches, the work queue, the wake-ups
//! of TrainJobs waiting for plugins, and the periodic pruning of what
//! [`Context`] remembers of deleted objects.

use std::sync::Arc;
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
use tracing::{info, warn};
use trainforge_api::trainer::v1alpha1::TrainJob;

use super::batch;
use super::context::{Context, NO_PLUGINS_RETRY};
use super::fair::FairGate;
use super::reconcile::{self, ReconcileError};

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

/// The retry of a failed reconcile: every error and block backs off per
/// TrainJob ([`Context::backoff`]). A TrainJob waiting for plugins (none
/// can serve, or none serves its runtime's policy) is also woken when the
/// set in service changes ([`wake_waiting`]), so its retries are capped at
/// [`NO_PLUGINS_RETRY`] only as a safety net: it is never polled. (It was
/// retried every 100 ms while the set could serve other TrainJobs: 50
/// TrainJobs on a policy no plugin serves cost 431 reconciles a second.)
fn error_policy(job: Arc<TrainJob>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let mut wait = ctx.backoff(&job);
    if let ReconcileError::Apply(super::apply::ApplyError::Throttled { source, .. }) = error {
        // Not a failure of the TrainJob: back when the budget allows.
        wait = source.retry_in.max(Duration::from_secs(1));
    }
    if error.waits_for_plugins() {
        ctx.wait_for_plugins(&job);
        wait = wait.min(NO_PLUGINS_RETRY);
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
/// change), if it can serve TrainJobs, send to `wake` the TrainJobs waiting
/// for it and every unfinished TrainJob of `trainjobs`: a swap re-renders
/// each unfinished TrainJob's objects (its render was made with the old
/// set), not only those an event or the resync happens to bring
/// (`trainforge_plugin_swap_trainjobs_total` counts them). A finished
/// TrainJob builds nothing and is left alone.
async fn wake_waiting(
    ctx: Arc<Context>,
    trainjobs: Store<TrainJob>,
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
            let mut queued: std::collections::HashSet<ObjectRef<TrainJob>> =
                woken.into_iter().collect();
            let unfinished: Vec<ObjectRef<TrainJob>> = trainjobs
                .state()
                .iter()
                .filter(|j| {
                    !j.status
                        .as_ref()
                        .is_some_and(super::conditions::is_finished)
                })
                .map(|j| ObjectRef::from_obj(j.as_ref()))
                .collect();
            ctx.metrics.swap_trainjobs(unfinished.len());
            ctx.rollouts
                .start(ctx.plugins.current().id(), unfinished.iter().cloned());
            if !unfinished.is_empty() {
                info!(
                    trainjobs = unfinished.len(),
                    "the plugin set in service changed: re-rendering every unfinished TrainJob"
                );
            }
            queued.extend(unfinished);
            for r in queued {
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

/// Reconcile `job` once it has a fair turn ([`FairGate`]), as the cache
/// holds it then (the wait may have been long): gone by then, nothing to
/// do. A reconcile still waiting at `shutdown` gives up (the controller's
/// graceful shutdown waits only for the ones running).
async fn in_turn(
    gate: FairGate,
    store: Store<TrainJob>,
    shutdown: CancellationToken,
    job: Arc<TrainJob>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let key = ObjectRef::from_obj(job.as_ref());
    let turn = gate.turn(key.namespace.as_deref().unwrap_or_default());
    ctx.metrics.reconciles_waiting(gate.waiting());
    let _turn = tokio::select! {
        t = turn => t,
        () = shutdown.cancelled() => return Ok(Action::await_change()),
    };
    ctx.metrics.reconciles_waiting(gate.waiting());
    let Some(job) = store.get(&key) else {
        ctx.rollouts
            .record(&key, super::rollout::Attempt::NotNeeded);
        return Ok(Action::await_change());
    };
    // Boxed: a waiting reconcile holds only this function's small state.
    Box::pin(reconcile::reconcile(job, ctx)).await
}

/// Run the TrainJob controller until `shutdown`. `triggers` carries the
/// TrainJobs whose child objects changed (from [`ObjectCache`](super::ObjectCache)), batched
/// by `settings.child_batch` ([`batch`]).
pub async fn run(
    ctx: Arc<Context>,
    triggers: UnboundedReceiver<super::batch::ChildChange>,
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
    // Pods that cannot be created wake their TrainJob through it too.
    let pods_tx = wake_tx.clone();
    let (reader, writer) = reflector::store();
    let waker = ctx.plugins.changes().map(|changes| {
        tokio::spawn(wake_waiting(
            ctx.clone(),
            reader.clone(),
            changes,
            wake_tx,
            WAKE_SETTLE,
            shutdown.clone(),
        ))
    });
    // Pods that cannot be created wake their TrainJob at once.
    let objects = ctx.objects.clone();
    let pod_watch = tokio::spawn(super::pod_failures::watch(
        ctx.client.clone(),
        ctx.settings.namespace.clone(),
        ctx.pod_failures.clone(),
        move |ns, name| {
            let jobset = objects.live(&super::reconcile::jobset_kind(), ns, name)?;
            super::objects::controller_trainjob(&jobset)?;
            Some(super::pod_failures::replicated_job_names(&jobset.data))
        },
        pods_tx,
        shutdown.clone(),
    ));
    let triggers = futures::stream::select(
        batch::batched(triggers, ctx.settings.child_batch),
        receive(wake_rx),
    );
    // Every queued reconcile starts at once and waits for a fair turn
    // (`fair`): `concurrency` run, round-robin across namespaces.
    let config = ControllerConfig::default().concurrency(0);
    let gate = FairGate::new(usize::from(ctx.settings.concurrency));
    info!(
        concurrency = ctx.settings.concurrency,
        "TrainJob controller starting"
    );
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
    let store = controller.store();
    let stopping = shutdown.clone();
    let before_first_list =
        crate::controller::stopped_before_ready(controller.store(), shutdown.clone());
    controller
        .reconcile_on(triggers)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            move |job, ctx| in_turn(gate.clone(), store.clone(), stopping.clone(), job, ctx),
            error_policy,
            ctx.clone(),
        )
        .take_until(before_first_list)
        .for_each(|result| {
            // Queued (by a swap, say), then deleted before its turn.
            if let Err(kube::runtime::controller::Error::ObjectNotFound(r)) = result {
                let mut job = ObjectRef::<TrainJob>::new(&r.name);
                job.namespace = r.namespace;
                ctx.rollouts
                    .record(&job, super::rollout::Attempt::NotNeeded);
            }
            futures::future::ready(())
        })
        .await;
    pruner.abort();
    pod_watch.abort();
    if let Some(w) = waker {
        w.abort();
    }
    info!("TrainJob controller stopped");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::Mutex;
    use trainforge_api::trainer::v1alpha1::TrainJobSpec;

    use crate::controller::trainjob::context::{Plugins, Settings};
    use crate::controller::trainjob::objects::ObjectCache;
    use crate::controller::trainjob::serving::{self, NotServing};
    use crate::ops::metrics::Metrics;
    use crate::plugin::PluginSet;

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

    /// A swap reaches every unfinished TrainJob, not only those that
    /// waited: each is queued once after the set settles; finished ones
    /// are left alone.
    #[tokio::test]
    async fn a_swap_queues_every_unfinished_trainjob() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        use trainforge_api::trainer::v1alpha1::TrainJobStatus;
        let (ctx, switch) = context();
        switch.swap(serving::jobset_set());
        let (store, mut writer) = reflector::store();
        let mut done = job("done");
        done.status = Some(TrainJobStatus {
            conditions: Some(vec![Condition {
                type_: "Complete".into(),
                status: "True".into(),
                reason: "JobSetCompleted".into(),
                message: String::new(),
                last_transition_time: crate::controller::trainjob::conditions::now(),
                observed_generation: None,
            }]),
            ..TrainJobStatus::default()
        });
        let running: Vec<TrainJob> = (0..50).map(|i| job(&format!("run-{i}"))).collect();
        for j in running.iter().chain([&done]) {
            writer.apply_watcher_event(&watcher::Event::Apply(j.clone()));
        }
        let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let settle = Duration::from_millis(100);
        let task = tokio::spawn(wake_waiting(
            ctx.clone(),
            store,
            switch.changes().unwrap(),
            tx,
            settle,
            stop.clone(),
        ));
        tokio::time::sleep(settle).await;
        switch.swap(serving::jobset_set());
        let mut got = std::collections::BTreeSet::new();
        while got.len() < running.len() {
            let r = tokio::time::timeout(Duration::from_secs(5), woken.recv())
                .await
                .unwrap()
                .unwrap();
            assert!(got.insert(r.name.clone()), "{} queued twice", r.name);
        }
        let more = tokio::time::timeout(settle * 3, woken.recv()).await;
        assert!(
            more.is_err(),
            "the finished TrainJob is left alone: {more:?}"
        );
        let want: std::collections::BTreeSet<String> = running
            .iter()
            .map(|j| j.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(got, want);
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
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
            reflector::store().0,
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

    /// A stop before the TrainJobs' first list (the Lease lost, or SIGTERM,
    /// the moment the controller starts) ends the controller at once: no
    /// reconcile can have started, and kube-runtime alone would wait for a
    /// list that no longer comes (the leader-election test hung on it).
    #[tokio::test]
    async fn a_stop_before_the_first_list_ends_the_controller_at_once() {
        let (ctx, _switch) = context();
        let (_tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let running = tokio::spawn(run(ctx, rx, stop.clone()));
        // Its list keeps failing (the client points nowhere).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!running.is_finished(), "runs until stopped");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("stopped within 5 s")
            .unwrap();
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
