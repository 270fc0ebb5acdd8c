//! The operator's start-up stages, one function each, in the order
//! [`run`](super::run) calls them, and the tasks they spawn (each a named
//! async function). A stage that waits returns `None` when the process
//! shuts down first: start-up stops there, with nothing to undo.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use trainforge_api::plugin::KindRef;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND, VERSION,
};

use super::{OperatorArgs, OperatorError};
use crate::controller::catalog::PluginCatalog;
use crate::controller::catalog::fetch::FetchOptions;
use crate::controller::tenants::TenantPlugins;
use crate::controller::trainjob::batch::ChildChange;
use crate::controller::trainjob::serving::{self, NotServing};
use crate::controller::trainjob::{self, Context, FixedPlugins, ObjectCache, Plugins, Settings};
use crate::ops::health::{self, Readiness, ReadyFlag};
use crate::ops::leader::{LeaderElection, LeaderOptions};
use crate::ops::metrics::Metrics;
use crate::plugin::{self, PluginRuntime, PluginSet, RuntimeConfig};

/// What every stage may use.
pub(super) struct Operator {
    /// The API client.
    pub(super) client: kube::Client,
    /// The same, never resending: what the fence wraps (`ops::client`).
    pub(super) unretried: kube::Client,
    /// The flags.
    pub(super) args: OperatorArgs,
    /// The process's metrics.
    pub(super) metrics: Arc<Metrics>,
    /// Cancelled when the process stops (signal, or the controllers ended).
    pub(super) shutdown: CancellationToken,
}

/// The secure metrics server: bound at start-up, served once the serving
/// certificate exists (so a first start never serves a missing one).
pub(super) struct SecureMetrics {
    /// The metrics address, bound.
    listener: tokio::net::TcpListener,
    /// Whether scrapers are authenticated and authorised (`--metrics-auth`).
    auth: bool,
}

/// The readiness checks of `/readyz`.
pub(super) struct Checks {
    /// The plugin set in service can serve TrainJobs.
    pub(super) plugins: ReadyFlag,
    /// The watch caches have listed.
    pub(super) caches: ReadyFlag,
    /// The admission webhooks are served.
    pub(super) admission: ReadyFlag,
}

/// **health**: register the readiness checks (`plugins`, `caches`,
/// `admission`, each failing until its stage passes it), then bind the
/// `/healthz`, `/readyz` and `/metrics` servers (one per distinct address;
/// `0` disables one) and serve them until shutdown, so that probes answer
/// from the start. With `--metrics-secure` the metrics address is only
/// bound here (served by [`admission`] once the certificate exists) and
/// must differ from the probe address, which then has no `/metrics`.
pub(super) async fn health(
    op: &Operator,
) -> Result<(Checks, Option<SecureMetrics>), OperatorError> {
    let readiness = Readiness::new();
    let checks = Checks {
        plugins: readiness.register("plugins", "the plugin set is not loaded yet"),
        caches: readiness.register("caches", "the watch caches are not synced yet"),
        admission: readiness.register("admission", "the admission webhooks are not served yet"),
    };
    let args = &op.args;
    if args.metrics_secure {
        let (probes, metrics) = endpoints(args)?;
        let secure = match metrics {
            Some(addr) => Some(SecureMetrics {
                listener: tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| health::Error::Bind { addr, source })?,
                auth: args.metrics_auth,
            }),
            None => None,
        };
        if let Some(addr) = probes {
            let server = health::Server::bind(addr, health::probes_router(readiness)).await?;
            info!(addr = %server.local_addr(), "serving /healthz, /readyz");
            tokio::spawn(serve_health(server, op.shutdown.clone()));
        }
        return Ok((checks, secure));
    }
    let router = health::router(op.metrics.clone(), readiness.clone());
    let mut addrs = Vec::new();
    for text in [&args.health_probe_bind_address, &args.metrics_bind_address] {
        if let Some(addr) = health::parse_bind_address(text)?
            && !addrs.contains(&addr)
        {
            addrs.push(addr);
        }
    }
    for addr in addrs {
        let server = health::Server::bind(addr, router.clone()).await?;
        info!(addr = %server.local_addr(), "serving /healthz, /readyz, /metrics");
        tokio::spawn(serve_health(server, op.shutdown.clone()));
    }
    Ok((checks, None))
}

/// The probe and metrics addresses (`None`: disabled), checked: with
/// `--metrics-secure` they must differ. Called before anything starts, so
/// that a wrong flag stops the operator at once.
pub(super) fn endpoints(
    args: &OperatorArgs,
) -> Result<(Option<std::net::SocketAddr>, Option<std::net::SocketAddr>), OperatorError> {
    let probes = health::parse_bind_address(&args.health_probe_bind_address)?;
    let metrics = health::parse_bind_address(&args.metrics_bind_address)?;
    if let Some(addr) = metrics
        && args.metrics_secure
        && Some(addr) == probes
    {
        return Err(OperatorError::MetricsAddress(addr));
    }
    Ok((probes, metrics))
}

/// Serve `/metrics` over HTTPS until `stop`.
async fn serve_secure_metrics(
    listener: tokio::net::TcpListener,
    resolver: Arc<crate::ops::tls::Resolver>,
    router: axum::Router,
    stop: CancellationToken,
) {
    if let Err(e) = crate::ops::tls::serve(listener, resolver, router, stop).await {
        error!(error = %e, "secure metrics server stopped");
    }
}

/// Serve one health/metrics server until `stop`.
async fn serve_health(server: health::Server, stop: CancellationToken) {
    if let Err(e) = server.run(stop).await {
        error!(error = %e, "health/metrics server stopped");
    }
}

/// **plugin runtime**: the Wasm runtime (compiling in a child process of
/// this executable, within the flags' limits; shipped precompiled builtins
/// read first unless `--no-plugin-artifacts`), observed by the metrics, and
/// the sweeper that lets idle builtins' code go.
pub(super) fn plugin_runtime(op: &Operator) -> Result<Arc<PluginRuntime>, OperatorError> {
    let args = &op.args;
    let compiler = plugin::Compiler::this_executable().map_err(OperatorError::Compiler)?;
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig {
        cache_dir: args.plugin_cache_dir.clone(),
        shipped_artifacts: if args.no_plugin_artifacts {
            None
        } else {
            shipped_artifacts(args.plugin_artifacts_dir.as_deref())
        },
        compiler,
        compile_limits: plugin::CompileLimits {
            timeout: Duration::from_secs(args.plugin_compile_timeout_seconds.max(1)),
            memory_bytes: args
                .plugin_compile_memory_mib
                .max(64)
                .saturating_mul(1 << 20),
        },
        ..RuntimeConfig::default()
    })?);
    match &runtime.config().shipped_artifacts {
        Some(dir) => {
            info!(dir = %dir.display(), "precompiled builtin plugins are read from here first")
        }
        None => info!(
            "no precompiled builtin plugins: builtins are compiled or read from the plugin cache"
        ),
    }
    runtime.set_observer(op.metrics.clone());
    // With the status server on, plugins that inject its URL and CA wait
    // for its certificate rather than render pods without them.
    if let Some(addr) = args.status_server.address()? {
        let url = args
            .status_server
            .url(addr, &args.admission.webhook_service);
        runtime
            .config()
            .facts
            .set_status_server(plugin::StatusServer::Starting { url });
    }
    tokio::spawn(sweep_idle_code(runtime.clone(), op.shutdown.clone()));
    Ok(runtime)
}

/// Builtins keep their compiled code mapped only while in use: every
/// [`PLUGIN_CODE_SWEEP`], release the code of those idle for
/// [`PLUGIN_CODE_IDLE`], until `stop`.
async fn sweep_idle_code(runtime: Arc<PluginRuntime>, stop: CancellationToken) {
    let mut every = tokio::time::interval(PLUGIN_CODE_SWEEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        let released = runtime.release_idle(PLUGIN_CODE_IDLE);
        if released > 0 {
            tracing::debug!(released, "released the code of idle builtin plugins");
        }
    }
}

/// **leader election**: join the election for the `trainforge-operator`
/// Lease (in `--lease-namespace`, else `$POD_NAMESPACE`, else
/// `trainforge-system`) with `--leader-elect`; without it this replica
/// leads alone. Every replica loads the plugins and keeps the watch caches:
/// each one answers admission requests. Only the leader reconciles
/// TrainJobs and writes ClusterTrainerPlugin statuses.
pub(super) async fn leader_election(op: &Operator) -> Result<LeaderElection, OperatorError> {
    if !op.args.leader_elect {
        return Ok(LeaderElection::disabled());
    }
    let ns = op
        .args
        .lease_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "trainforge-system".into());
    Ok(LeaderElection::start(
        op.client.clone(),
        LeaderOptions::new(ns),
        op.shutdown.clone(),
    )
    .await?)
}

/// The TrainJob triggers of the watch cache while this replica does not
/// lead: dropped (the TrainJob controller lists everything when it starts).
pub(super) struct ParkedTriggers {
    /// Cancelled when this replica leads.
    go: CancellationToken,
    /// The task dropping triggers; it hands the channel back.
    drain: JoinHandle<UnboundedReceiver<ChildChange>>,
}

impl ParkedTriggers {
    /// Stop dropping triggers; the channel, from now on.
    async fn release(self) -> Result<UnboundedReceiver<ChildChange>, OperatorError> {
        self.go.cancel();
        self.drain
            .await
            .map_err(|e| OperatorError::Startup(format!("trigger drain task: {e}")))
    }
}

/// **object cache**: the watch cache every reader shares (plugins,
/// admission, the controllers); the TrainJob triggers it sends are parked
/// until this replica leads.
pub(super) fn object_cache(op: &Operator) -> (Arc<ObjectCache>, ParkedTriggers) {
    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::unbounded_channel();
    let go = CancellationToken::new();
    let drain = tokio::spawn(drop_triggers(go.clone(), trigger_rx));
    let objects = Arc::new(ObjectCache::new(op.client.clone(), trigger_tx));
    (objects, ParkedTriggers { go, drain })
}

/// Drop every trigger until `go` (or until the senders are gone), then hand
/// the channel back.
async fn drop_triggers(
    go: CancellationToken,
    mut rx: UnboundedReceiver<ChildChange>,
) -> UnboundedReceiver<ChildChange> {
    loop {
        tokio::select! {
            _ = go.cancelled() => return rx,
            m = rx.recv() => if m.is_none() { return rx },
        }
    }
}

/// The plugins in service, as the controllers, admission and the watches
/// use them.
#[derive(Clone)]
struct Served {
    /// The cluster's set.
    plugins: Arc<dyn Plugins>,
    /// The namespaces' tenant plugins (none for the builtin set).
    tenants: Option<Arc<TenantPlugins>>,
}

impl Served {
    /// The kinds the watch cache keeps: [`host_kinds`], and what each
    /// plugin of the set in service (and each tenant plugin) may emit, read
    /// or watch after the administrator's narrowing, never more.
    fn watched_kinds(&self) -> BTreeSet<KindRef> {
        let mut k = host_kinds();
        for p in self.plugins.current().plugins() {
            k.extend(p.allowed_emits().iter().cloned());
            k.extend(p.allowed_reads().iter().cloned());
            k.extend(p.descriptor().watches.iter().cloned());
        }
        if let Some(t) = &self.tenants {
            k.extend(t.kinds());
        }
        k
    }
}

/// What the [`plugins`] stage started.
pub(super) struct Loaded {
    /// The plugins in service.
    served: Served,
    /// Swaps of the catalog's set (none for the builtin set).
    generations: Option<watch::Receiver<u64>>,
    /// The catalog (none for the builtin set).
    catalog: Option<Arc<PluginCatalog>>,
    /// The ClusterTrainerPlugin controller (none for the builtin set).
    catalog_task: Option<JoinHandle<Result<(), crate::controller::catalog::Error>>>,
}

/// **plugins**: with `--builtin-plugins`, the builtin set (never changes:
/// the `plugins` check is decided once). Otherwise the catalog synced from
/// the `ClusterTrainerPlugin`s: its controller (statuses written while this
/// replica leads) and the `plugins` check following it start, then the
/// stage waits until every `ClusterTrainerPlugin` listed at start-up was
/// attempted; then the `TrainerPlugin` controller starts (TrainJobs never
/// wait for tenant plugins). `None`: shut down while waiting.
pub(super) async fn plugins(
    op: &Operator,
    runtime: &Arc<PluginRuntime>,
    objects: &Arc<ObjectCache>,
    leader: &LeaderElection,
    check: &ReadyFlag,
) -> Result<Option<Loaded>, OperatorError> {
    if op.args.builtin_plugins {
        let set = builtin_set(runtime, objects.clone())?;
        let fixed = FixedPlugins(Arc::new(set));
        check.set(readiness_of(Plugins::not_serving(&fixed, &fixed.current())));
        return Ok(Some(Loaded {
            served: Served {
                plugins: Arc::new(fixed),
                tenants: None,
            },
            generations: None,
            catalog: None,
            catalog_task: None,
        }));
    }
    let fetch = fetch_options(&op.args)?;
    let catalog = Arc::new(PluginCatalog::new(runtime.clone(), objects.clone()));
    // Statuses are written by the leader only, through its fence.
    let fenced = leader.fence().client(op.unretried.clone());
    let task = tokio::spawn(crate::controller::catalog::run_with(
        fenced.clone(),
        catalog.clone(),
        op.shutdown.clone(),
        crate::controller::catalog::Options {
            status_writes: Some(leader.subscribe()),
            fetch: fetch.clone(),
            ..Default::default()
        },
    ));
    tokio::spawn(follow_plugins(
        catalog.clone(),
        check.clone(),
        op.metrics.clone(),
        op.shutdown.clone(),
    ));
    let mut generations = catalog.subscribe();
    while !catalog.is_synced() {
        tokio::select! {
            _ = op.shutdown.cancelled() => return Ok(None),
            _ = generations.changed() => {},
            _ = tokio::time::sleep(Duration::from_millis(200)) => {},
        }
    }
    let tenants = Arc::new(TenantPlugins::new(usize::from(op.args.tenant_concurrency)));
    tokio::spawn(run_tenant_controller(
        fenced,
        catalog.clone(),
        tenants.clone(),
        op.shutdown.clone(),
        leader.subscribe(),
        fetch,
    ));
    Ok(Some(Loaded {
        served: Served {
            plugins: catalog.clone(),
            tenants: Some(tenants),
        },
        generations: Some(generations),
        catalog: Some(catalog),
        catalog_task: Some(task),
    }))
}

/// The `TrainerPlugin` controller until `shutdown` (statuses written while
/// `writes` says this replica leads).
async fn run_tenant_controller(
    client: kube::Client,
    catalog: Arc<PluginCatalog>,
    tenants: Arc<TenantPlugins>,
    shutdown: CancellationToken,
    writes: watch::Receiver<bool>,
    fetch: FetchOptions,
) {
    let run =
        crate::controller::tenants::run(client, catalog, tenants, shutdown, Some(writes), &fetch);
    if let Err(e) = run.await {
        error!(error = %e, "TrainerPlugin controller stopped");
    }
}

/// **admission**: certificates and the admission webhooks, started beside
/// the controllers, never in their way: the certificate may wait on the
/// API (RBAC, a namespace not there yet) while this replica leads and
/// reconciles; the `admission` check says so meanwhile. It starts before
/// the watches, so that its certificate and the caches get ready at the
/// same time. The secure metrics server, when configured, is served with
/// the same certificate.
pub(super) fn admission(
    op: &Operator,
    loaded: &Loaded,
    runtime: &Arc<PluginRuntime>,
    check: &ReadyFlag,
    secure_metrics: Option<SecureMetrics>,
) {
    tokio::spawn(serve_admission(
        op.args.admission.clone(),
        op.args.status_server.clone(),
        op.client.clone(),
        loaded.served.clone(),
        runtime.clone(),
        op.metrics.clone(),
        secure_metrics,
        op.shutdown.clone(),
        check.clone(),
    ));
}

/// Start the admission webhooks, the TrainJob status server and the secure
/// metrics server (each unless disabled) with one certificate; `check`
/// passes once they are served and fails with the reason when they cannot
/// be.
#[allow(clippy::too_many_arguments)]
async fn serve_admission(
    args: crate::admission::serve::AdmissionArgs,
    status: crate::statusserver::StatusServerArgs,
    client: kube::Client,
    served: Served,
    runtime: Arc<PluginRuntime>,
    metrics: Arc<Metrics>,
    secure_metrics: Option<SecureMetrics>,
    shutdown: CancellationToken,
    check: ReadyFlag,
) {
    let not_served = |what: &str, e: &dyn std::fmt::Display| {
        error!(error = %e, "{what} not served");
        check.set_not_ready(format!("{what} not served: {e}"));
    };
    let status_addr = match status.address() {
        Ok(a) => a,
        Err(e) => return not_served("TrainJob status server", &e),
    };
    let admission_on = !matches!(
        crate::admission::serve::bind_address(&args.webhook_bind_address),
        Ok(None)
    );
    if !admission_on && status_addr.is_none() && secure_metrics.is_none() {
        info!("admission server and TrainJob status server disabled");
        check.set_ready();
        return;
    }
    let resolver = match crate::admission::serve::certificates(
        &args,
        client.clone(),
        shutdown.clone(),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return not_served("HTTPS servers (serving certificate)", &e),
    };
    if let Some(SecureMetrics { listener, auth }) = secure_metrics {
        let router = if auth {
            let reviews = crate::ops::metrics_auth::ApiReviews::new(client.clone());
            let gate = Arc::new(crate::ops::metrics_auth::MetricsAuth::new(reviews));
            health::authorized_metrics_router(metrics.clone(), gate)
        } else {
            health::metrics_router(metrics.clone())
        };
        let addr = listener.local_addr().ok();
        info!(?addr, auth, "serving /metrics over HTTPS");
        tokio::spawn(serve_secure_metrics(
            listener,
            resolver.clone(),
            router,
            shutdown.clone(),
        ));
    }
    if !admission_on && status_addr.is_none() {
        info!("admission server and TrainJob status server disabled");
        check.set_ready();
        return;
    }
    if let Some(addr) = status_addr {
        let url = status.url(addr, &args.webhook_service);
        let facts = runtime.config().facts.clone();
        if let Err(e) = crate::statusserver::start(
            addr,
            url,
            client.clone(),
            metrics.clone(),
            resolver.clone(),
            facts,
            shutdown.clone(),
        )
        .await
        {
            return not_served("TrainJob status server", &e);
        }
    }
    let Served { plugins, tenants } = served;
    match crate::admission::serve::start(
        &args, client, plugins, tenants, runtime, metrics, resolver, shutdown,
    )
    .await
    {
        Ok(_) => check.set_ready(),
        Err(e) => not_served("admission webhooks", &e),
    }
}

/// **watches**: watch every kind the plugins need and wait until they have
/// listed (the `caches` check passes then), then follow the plugin set:
/// on every swap of the catalog's or the tenants' plugins, and every
/// [`trainjob::objects::RETRY_DISCOVERY`] while a kind is missing, watch
/// what is wanted then. `None`: shut down while listing.
pub(super) async fn watches(
    op: &Operator,
    objects: &Arc<ObjectCache>,
    loaded: &mut Loaded,
    check: &ReadyFlag,
) -> Option<()> {
    let wanted = loaded.served.watched_kinds();
    let missing = tokio::select! {
        _ = op.shutdown.cancelled() => return None,
        missing = objects.ensure(&wanted) => missing,
    };
    check.set_ready();
    tokio::spawn(follow_plugin_set(
        objects.clone(),
        loaded.served.clone(),
        loaded.generations.take(),
        loaded.served.tenants.as_ref().map(|t| t.subscribe()),
        !missing.is_empty(),
        op.shutdown.clone(),
    ));
    Some(())
}

/// Keep the watches in step with the plugin set until `stop`: ensure the
/// [`Served::watched_kinds`] on every change of `generations` or
/// `tenant_generations`, and, while `retry` (a kind was missing), every
/// [`trainjob::objects::RETRY_DISCOVERY`].
async fn follow_plugin_set(
    objects: Arc<ObjectCache>,
    served: Served,
    mut generations: Option<watch::Receiver<u64>>,
    mut tenant_generations: Option<watch::Receiver<u64>>,
    mut retry: bool,
    stop: CancellationToken,
) {
    loop {
        let changed = async {
            match (generations.as_mut(), tenant_generations.as_mut()) {
                (Some(g), Some(t)) => tokio::select! {
                    r = g.changed() => r.is_ok(),
                    r = t.changed() => r.is_ok(),
                },
                (Some(g), None) => g.changed().await.is_ok(),
                _ => futures::future::pending::<bool>().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            ok = changed => if !ok { return },
            _ = tokio::time::sleep(trainjob::objects::RETRY_DISCOVERY), if retry => {},
        }
        let wanted = served.watched_kinds();
        retry = tokio::select! {
            _ = stop.cancelled() => return,
            missing = objects.ensure(&wanted) => !missing.is_empty(),
        };
    }
}

/// Whether the controllers stopped because the Lease was lost.
pub(super) struct LeaseLost(Arc<AtomicBool>);

/// **controllers**: wait for leadership (`None`: shut down first, or never
/// acquired), then run the TrainJob controller with the parked triggers
/// until the process stops or the Lease is lost (a watcher stops the
/// controllers then).
pub(super) async fn controllers(
    op: &Operator,
    leader: &LeaderElection,
    triggers: ParkedTriggers,
    loaded: &Loaded,
    objects: Arc<ObjectCache>,
) -> Result<Option<LeaseLost>, OperatorError> {
    info!(identity = %leader.identity(), "waiting for leadership");
    let mut leading = leader.subscribe();
    tokio::select! {
        _ = op.shutdown.cancelled() => return Ok(None),
        // Held, or lost (again) before the controllers started.
        changed = leading.wait_for(|held| *held || leader.has_lost()) => if changed.is_err() {
            return Ok(None);
        },
    }
    // The Lease was held, then lost while the plugins or watches were
    // still loading: as when it is lost while leading, exit (the pod
    // restarts as a standby), never lead again from this process.
    if leader.has_lost() {
        error!("lost the Lease before the controllers started: exiting with an error");
        return Err(OperatorError::LeaseLost);
    }
    info!("leading");
    // Stop the controllers when the process stops or the Lease is lost.
    let stop = op.shutdown.child_token();
    let lease_lost = Arc::new(AtomicBool::new(false));
    let lost = tokio::spawn(watch_lease(
        leader.subscribe(),
        stop.clone(),
        op.shutdown.clone(),
        lease_lost.clone(),
    ));
    let trigger_rx = triggers.release().await?;

    let args = &op.args;
    let settings = Settings {
        resync: Duration::from_secs(args.resync_seconds.max(1)),
        concurrency: args.concurrency.max(1),
        namespace: args.namespace.clone(),
        child_batch: Duration::from_millis(args.child_batch_ms),
        write_bytes_per_minute: args.namespace_write_mib_per_minute.saturating_mul(1 << 20),
        features: args.feature_gates,
    };
    // Every write of the controllers passes the fence: none once this
    // replica cannot be sure it holds the Lease (`ops::fence`).
    let ctx = Arc::new(
        Context::new(
            leader.fence().client(op.unretried.clone()),
            loaded.served.plugins.clone(),
            objects,
            op.metrics.clone(),
            Some(leader.identity().to_owned()),
            settings,
        )
        .with_tenants(loaded.served.tenants.clone()),
    );
    // How far each plugin swap has reached, on the ClusterTrainerPlugins.
    if let Some(catalog) = &loaded.catalog {
        tokio::spawn(crate::controller::catalog::rollout::report(
            kube::Api::all(leader.fence().client(op.unretried.clone())),
            catalog.clone(),
            ctx.rollouts.subscribe(),
            stop.clone(),
        ));
    }
    trainjob::run(ctx, trigger_rx, stop.clone()).await;
    stop.cancel();
    lost.abort();
    Ok(Some(LeaseLost(lease_lost)))
}

/// Wait until this replica no longer leads; unless the process is stopping
/// anyway, record that the Lease was lost and stop the controllers.
async fn watch_lease(
    mut leading: watch::Receiver<bool>,
    stop: CancellationToken,
    shutdown: CancellationToken,
    lease_lost: Arc<AtomicBool>,
) {
    while *leading.borrow() {
        if leading.changed().await.is_err() {
            break;
        }
    }
    if !shutdown.is_cancelled() {
        error!("lost the Lease: stopping controllers, then exiting with an error");
        lease_lost.store(true, Ordering::SeqCst);
        stop.cancel();
    }
}

/// **shutdown**: the controllers are done (shut down, or the Lease lost),
/// so is everything every replica runs (catalog, watches, admission):
/// wait for the catalog's controller, release the Lease so a standby takes
/// over at once, and end with [`OperatorError::LeaseLost`] when it was
/// lost.
pub(super) async fn shutdown(
    op: &Operator,
    loaded: Loaded,
    leader: LeaderElection,
    lease: LeaseLost,
) -> Result<(), OperatorError> {
    op.shutdown.cancel();
    if let Some(task) = loaded.catalog_task {
        match task.await {
            Ok(Err(e)) => warn!(error = %e, "plugin configuration controller ended with an error"),
            Err(e) => warn!(error = %e, "plugin configuration controller task failed"),
            Ok(Ok(())) => {}
        }
    }
    if let Err(e) = leader.release().await {
        warn!(error = %e, "releasing the Lease failed");
    }
    if lease.0.load(Ordering::SeqCst) {
        error!("operator stopped: the Lease was lost");
        return Err(OperatorError::LeaseLost);
    }
    info!("operator stopped");
    Ok(())
}

/// Kinds watched whatever the plugins declare: the runtime snapshot
/// ConfigMaps (the host writes them) and JobSets (deadline deletion).
fn host_kinds() -> BTreeSet<KindRef> {
    let trainer = format!("{GROUP}/{VERSION}");
    [
        KindRef::new("v1", "ConfigMap"),
        KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet"),
        // Runtimes are read from the cache when a TrainJob is first built.
        KindRef::new(trainer.clone(), TRAINING_RUNTIME_KIND),
        KindRef::new(trainer, CLUSTER_TRAINING_RUNTIME_KIND),
    ]
    .into_iter()
    .collect()
}

/// The directory of shipped artifacts: `flag` when given, else
/// `trainforge-artifacts` beside the executable if it is a directory.
fn shipped_artifacts(flag: Option<&std::path::Path>) -> Option<PathBuf> {
    match flag {
        Some(p) => Some(p.to_owned()),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join("trainforge-artifacts")))
            .filter(|d| d.is_dir()),
    }
}

/// How https plugin sources are fetched, from the flags.
fn fetch_options(args: &OperatorArgs) -> Result<FetchOptions, OperatorError> {
    let extra_roots_pem = match &args.plugin_fetch_ca_file {
        None => None,
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            OperatorError::Startup(format!("--plugin-fetch-ca-file {}: {e}", path.display()))
        })?),
    };
    Ok(FetchOptions {
        allowed_networks: args.plugin_fetch_allow_cidrs.clone(),
        extra_roots_pem,
        plain_http_registries: args.plugin_registry_plain_http.clone(),
        secrets_namespace: crate::admission::serve::own_namespace(),
        require_signatures: args.require_plugin_signatures,
    })
}

/// The builtin plugins, trusted with the capabilities they declare, reading
/// cluster objects from the watch cache.
fn builtin_set(
    runtime: &PluginRuntime,
    objects: Arc<ObjectCache>,
) -> Result<PluginSet, plugin::Error> {
    PluginSet::new(runtime.load_trusted_builtins(Some(objects as Arc<dyn plugin::ObjectSource>))?)
}

/// The `plugins` readiness check of a [`NotServing`] answer.
fn readiness_of(not_serving: Option<NotServing>) -> Result<(), String> {
    match not_serving {
        None => Ok(()),
        Some(n) => Err(format!("no plugin set can serve TrainJobs: {n}")),
    }
}

/// The `plugins` readiness check of the catalog now: failing until every
/// `ClusterTrainerPlugin` listed at start-up has been attempted, then
/// failing exactly while the set in service cannot serve TrainJobs.
fn catalog_readiness(catalog: &PluginCatalog) -> Result<(), String> {
    if !catalog.is_synced() {
        return Err("loading the ClusterTrainerPlugins listed at start-up".to_owned());
    }
    readiness_of(Plugins::not_serving(catalog, &catalog.current()))
}

/// How often the `plugins` check is re-evaluated between swaps (a refused
/// attempt changes the reason without swapping the set).
const PLUGINS_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A builtin plugin not called for this long lets its compiled code go
/// (mapped again, in a few milliseconds, by its next call).
const PLUGIN_CODE_IDLE: Duration = Duration::from_secs(120);
/// How often idle plugin code is looked for.
const PLUGIN_CODE_SWEEP: Duration = Duration::from_secs(30);

/// Keep the `plugins` readiness check and `trainforge_plugins_not_serving`
/// in step with the catalog until `stop`: on every swap, and every
/// [`PLUGINS_CHECK_INTERVAL`].
async fn follow_plugins(
    catalog: Arc<PluginCatalog>,
    check: ReadyFlag,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let mut swaps = catalog.subscribe();
    let mut open = true;
    loop {
        check.set(catalog_readiness(&catalog));
        let degraded = Plugins::degraded(catalog.as_ref());
        metrics.plugins_not_serving(degraded.as_ref().map_or(0, |d| d.absent.len()));
        check.set_degraded(degraded.map(|d| d.to_string()));
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = swaps.changed(), if open => open = changed.is_ok(),
            _ = tokio::time::sleep(PLUGINS_CHECK_INTERVAL) => {},
        }
    }
}

impl Plugins for PluginCatalog {
    fn current(&self) -> Arc<PluginSet> {
        PluginCatalog::current(self)
    }

    fn not_serving(&self, set: &PluginSet) -> Option<NotServing> {
        if serving::can_serve(set) {
            return None;
        }
        serving::check_catalog(set, &self.reports())
    }

    fn degraded(&self) -> Option<serving::Degraded> {
        serving::degraded(serving::Origin::Catalog, &self.reports())
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.subscribe())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::plugin::{NoObjects, RuntimeConfig};

    #[test]
    fn an_empty_catalog_is_not_ready_until_synced_then_says_why() {
        let catalog = PluginCatalog::new(
            Arc::new(PluginRuntime::new(RuntimeConfig::default()).unwrap()),
            Arc::new(NoObjects),
        );
        assert_eq!(
            catalog_readiness(&catalog),
            Err("loading the ClusterTrainerPlugins listed at start-up".to_owned())
        );
        // A watch on a cluster without ClusterTrainerPlugins: synced at once.
        catalog.set_initial(Default::default());
        assert_eq!(
            catalog_readiness(&catalog),
            Err(
                "no plugin set can serve TrainJobs: no plugin in service builds JobSets; \
                 no ClusterTrainerPlugin is configured"
                    .to_owned()
            )
        );
    }

    #[test]
    fn an_empty_builtin_set_is_not_ready() {
        let fixed = FixedPlugins(Arc::new(PluginSet::default()));
        let why = readiness_of(fixed.not_serving(&fixed.current())).unwrap_err();
        assert!(
            why.starts_with("no plugin set can serve TrainJobs: no plugin in service builds JobSets; this binary embeds no builtin plugin"),
            "{why}"
        );
    }
}
