//! `trainforge operator`: wires the controllers, the plugin catalog, the
//! watch cache, health/metrics endpoints and leader election together.
//!
//! Start-up: endpoints (so probes answer at once) → plugin runtime → plugin
//! catalog synced from the `ClusterTrainerPlugin`s (or the builtin set) →
//! watches of every kind the plugins declared → admission webhooks → Lease
//! (standby replicas wait here) → TrainJob controller. Every replica loads
//! the plugins and serves admission; only the leader reconciles TrainJobs
//! and writes `ClusterTrainerPlugin` statuses. Shutdown (SIGTERM, Ctrl-C, or
//! losing the Lease): controllers drain, then the Lease is released so a
//! standby takes over at once. Losing the Lease is an error
//! ([`OperatorError::LeaseLost`], exit code 1): the pod restarts and rejoins
//! the election as a standby, as controller-runtime operators do.
//!
//! Readiness (`/readyz`): `caches` passes once the watches have listed;
//! `plugins` passes exactly while the plugin set in service can serve
//! TrainJobs (one of its plugins calls `build`), which can change at any
//! time with the `ClusterTrainerPlugin`s. While it fails, its reason names
//! the plugins not serving and why (`/readyz?verbose`, and the log); while
//! it passes with configured plugins not serving, it is degraded and names
//! them and why (the operator stays ready: TrainJobs that do not need them
//! are served).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use trainforge_api::plugin::KindRef;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND, VERSION,
};

use crate::controller::catalog::PluginCatalog;
use crate::controller::tenants::TenantPlugins;
use crate::controller::trainjob::serving::{self, NotServing};
use crate::controller::trainjob::{self, Context, FixedPlugins, ObjectCache, Plugins, Settings};
use crate::ops::health::{self, Readiness, ReadyFlag};
use crate::ops::leader::{LeaderElection, LeaderOptions};
use crate::ops::metrics::Metrics;
use crate::plugin::{self, PluginRuntime, PluginSet, RuntimeConfig};

/// Flags of `trainforge operator`.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Run only while holding the `trainforge-operator` Lease (for more than one replica).
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else `trainforge-system`).
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// Where `/metrics` is served (`0` disables).
    #[arg(long, default_value = ":8080")]
    pub metrics_bind_address: String,
    /// Where `/healthz` and `/readyz` are served (`0` disables).
    #[arg(long, default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Directory for precompiled plugin artifacts (none: compile in memory).
    #[arg(long)]
    pub plugin_cache_dir: Option<PathBuf>,
    /// Precompiled builtin plugins shipped with the binary
    /// (`trainforge plugin precompile --out DIR`), read before compiling
    /// anything; default `trainforge-artifacts` next to the executable when
    /// that directory exists.
    #[arg(long, conflicts_with = "no_plugin_artifacts")]
    pub plugin_artifacts_dir: Option<PathBuf>,
    /// Compile every plugin, ignoring shipped artifacts.
    #[arg(long)]
    pub no_plugin_artifacts: bool,
    /// Serve the builtin plugin set and ignore `ClusterTrainerPlugin`s.
    #[arg(long)]
    pub builtin_plugins: bool,
    /// Reconcile every TrainJob at least this often (seconds).
    #[arg(long, default_value_t = 600)]
    pub resync_seconds: u64,
    /// TrainJobs reconciled at once.
    #[arg(long, default_value_t = 5)]
    pub concurrency: u16,
    /// Changes of a TrainJob's child objects (its JobSet's status, …)
    /// within this many milliseconds trigger one reconcile, so one status
    /// write (0: one per change).
    #[arg(long, default_value_t = 1000)]
    pub child_batch_ms: u64,
    /// Watch TrainJobs of this namespace only.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Deadline of compiling one plugin component (seconds; the compiler
    /// runs in a child process that is killed when it passes).
    #[arg(long, default_value_t = 60)]
    pub plugin_compile_timeout_seconds: u64,
    /// Memory the compiler of one plugin component may use (MiB).
    #[arg(long, default_value_t = 1024)]
    pub plugin_compile_memory_mib: u64,
    /// A network (CIDR) `https://` plugin sources may reach although it is
    /// loopback, link-local, private or otherwise special (repeatable; e.g.
    /// an in-cluster file server's Service network). Public addresses are
    /// always allowed.
    #[arg(long = "plugin-fetch-allow-cidr", value_name = "CIDR")]
    pub plugin_fetch_allow_cidrs: Vec<ipnet::IpNet>,
    /// CA certificates (PEM) trusted for `https://` plugin sources and
    /// `oci://` registries besides the system's.
    #[arg(long)]
    pub plugin_fetch_ca_file: Option<PathBuf>,
    /// A registry (`host[:port]`) `oci://` plugin sources are pulled from
    /// over plain HTTP instead of HTTPS (repeatable; development and
    /// in-cluster registries). Its address must still be allowed.
    #[arg(long = "plugin-registry-plain-http", value_name = "HOST[:PORT]")]
    pub plugin_registry_plain_http: Vec<String>,
    /// Refuse every plugin that is not builtin unless a key of its
    /// `spec.verification` signed it (a spec without one is refused with
    /// `SignatureRequired`).
    #[arg(long)]
    pub require_plugin_signatures: bool,
    /// TrainJobs of one namespace reconciled at once when tenant plugins
    /// (`TrainerPlugin`s) apply to them: a namespace with slow plugins
    /// never holds more reconcile workers than this.
    #[arg(long, default_value_t = 1)]
    pub tenant_concurrency: u16,
    /// The admission webhooks.
    #[command(flatten)]
    pub admission: crate::admission::serve::AdmissionArgs,
}

/// Why the operator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No API client.
    #[error("connecting to the API server: {0}")]
    Client(#[from] kube::Error),
    /// The API client could not be configured.
    #[error(transparent)]
    ClientConfig(#[from] crate::ops::client::Error),
    /// Another replica took the Lease (or it could not be renewed in time):
    /// the controllers were stopped.
    #[error("lost the leader-election Lease; exiting so that this replica restarts as a standby")]
    LeaseLost,
    /// An endpoint could not start.
    #[error(transparent)]
    Health(#[from] crate::ops::health::Error),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] crate::ops::leader::Error),
    /// Signal handlers could not be installed.
    #[error(transparent)]
    Shutdown(#[from] crate::ops::shutdown::Error),
    /// The plugin runtime or the builtin plugins failed.
    #[error(transparent)]
    Plugin(#[from] plugin::Error),
    /// The compile worker (this executable) could not be located.
    #[error("plugin compiler: {0}")]
    Compiler(String),
    /// A start-up task failed.
    #[error("start-up: {0}")]
    Startup(String),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
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

/// Blocking entry point for the CLI.
pub fn main(args: OperatorArgs) -> Result<(), OperatorError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = crate::ops::shutdown::on_signal()?;
        let client = crate::ops::client::operator_client().await?;
        run(client, args, shutdown).await
    })
}

/// Run the operator until `shutdown` is cancelled (`Ok`) or the Lease is
/// lost ([`OperatorError::LeaseLost`]).
pub async fn run(
    client: kube::Client,
    args: OperatorArgs,
    shutdown: CancellationToken,
) -> Result<(), OperatorError> {
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::new();
    let ready_plugins = readiness.register("plugins", "the plugin set is not loaded yet");
    let ready_caches = readiness.register("caches", "the watch caches are not synced yet");
    let ready_admission =
        readiness.register("admission", "the admission webhooks are not served yet");
    let router = health::router(metrics.clone(), readiness.clone());
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
        let stop = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = server.run(stop).await {
                error!(error = %e, "health/metrics server stopped");
            }
        });
    }

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
    runtime.set_observer(metrics.clone());
    // Builtins keep their compiled code mapped only while in use.
    {
        let (runtime, stop) = (runtime.clone(), shutdown.clone());
        tokio::spawn(async move {
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
        });
    }

    // Every replica loads the plugins and keeps the watch caches: each one
    // answers admission requests. Only the leader reconciles TrainJobs and
    // writes ClusterTrainerPlugin statuses.
    let leader = if args.leader_elect {
        let ns = args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "trainforge-system".into());
        LeaderElection::start(client.clone(), LeaderOptions::new(ns), shutdown.clone()).await?
    } else {
        LeaderElection::disabled()
    };

    let (trigger_tx, trigger_rx) = tokio::sync::mpsc::unbounded_channel();
    // Until this replica leads, nobody reconciles: drop the triggers (the
    // TrainJob controller lists everything when it starts).
    let go = CancellationToken::new();
    let drain = {
        let go = go.clone();
        let mut rx = trigger_rx;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = go.cancelled() => return rx,
                    m = rx.recv() => if m.is_none() { return rx },
                }
            }
        })
    };
    let objects = Arc::new(ObjectCache::new(client.clone(), trigger_tx));
    let (plugins, generations, catalog_task, tenants): (Arc<dyn Plugins>, _, _, _) =
        if args.builtin_plugins {
            let set = builtin_set(&runtime, objects.clone())?;
            let fixed = FixedPlugins(Arc::new(set));
            // The set never changes: the check is decided once.
            ready_plugins.set(readiness_of(Plugins::not_serving(&fixed, &fixed.current())));
            (Arc::new(fixed) as Arc<dyn Plugins>, None, None, None)
        } else {
            let fetch = fetch_options(&args)?;
            let catalog = Arc::new(PluginCatalog::new(runtime.clone(), objects.clone()));
            let task = tokio::spawn(crate::controller::catalog::run_with(
                client.clone(),
                catalog.clone(),
                shutdown.clone(),
                crate::controller::catalog::Options {
                    status_writes: Some(leader.subscribe()),
                    fetch: fetch.clone(),
                    ..Default::default()
                },
            ));
            tokio::spawn(follow_plugins(
                catalog.clone(),
                ready_plugins.clone(),
                shutdown.clone(),
            ));
            let mut generations = catalog.subscribe();
            while !catalog.is_synced() {
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = generations.changed() => {},
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {},
                }
            }
            // Tenant plugins load beside the cluster's; TrainJobs never wait
            // for them.
            let tenants = Arc::new(TenantPlugins::new(usize::from(args.tenant_concurrency)));
            {
                let (client, catalog, tenants, shutdown, writes) = (
                    client.clone(),
                    catalog.clone(),
                    tenants.clone(),
                    shutdown.clone(),
                    leader.subscribe(),
                );
                let fetch = fetch.clone();
                tokio::spawn(async move {
                    let run = crate::controller::tenants::run(
                        client,
                        catalog,
                        tenants,
                        shutdown,
                        Some(writes),
                        &fetch,
                    );
                    if let Err(e) = run.await {
                        error!(error = %e, "TrainerPlugin controller stopped");
                    }
                });
            }
            (
                catalog.clone() as Arc<dyn Plugins>,
                Some((catalog, generations)),
                Some(task),
                Some(tenants),
            )
        };

    // Admission comes up beside the controllers, never in their way: its
    // certificate may wait on the API (RBAC, a namespace not there yet)
    // while this replica leads and reconciles. `/readyz` says so meanwhile.
    // It starts before the watches, so that its certificate and the caches
    // get ready at the same time.
    {
        let (args, client, plugins, runtime, metrics, shutdown, ready, tenants) = (
            args.admission.clone(),
            client.clone(),
            plugins.clone(),
            runtime.clone(),
            metrics.clone(),
            shutdown.clone(),
            ready_admission.clone(),
            tenants.clone(),
        );
        tokio::spawn(async move {
            match crate::admission::serve::start(
                &args, client, plugins, tenants, runtime, metrics, shutdown,
            )
            .await
            {
                Ok(_) => ready.set_ready(),
                Err(e) => {
                    error!(error = %e, "admission webhooks not served");
                    ready.set_not_ready(format!("admission webhooks not served: {e}"));
                }
            }
        });
    }

    // Watches follow the plugin set: what each plugin may emit, read or
    // watch (after the administrator's narrowing), never more.
    let kinds_of = {
        let (plugins, tenants) = (plugins.clone(), tenants.clone());
        move || {
            let mut k = host_kinds();
            for p in plugins.current().plugins() {
                k.extend(p.allowed_emits().iter().cloned());
                k.extend(p.allowed_reads().iter().cloned());
                k.extend(p.descriptor().watches.iter().cloned());
            }
            if let Some(t) = &tenants {
                k.extend(t.kinds());
            }
            k
        }
    };
    let wanted = kinds_of();
    let missing = tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        missing = objects.ensure(&wanted) => missing,
    };
    ready_caches.set_ready();
    {
        let objects = objects.clone();
        let stop = shutdown.clone();
        let mut generations = generations.map(|(_, g)| g);
        let mut tenant_generations = tenants.as_ref().map(|t| t.subscribe());
        let mut retry = !missing.is_empty();
        tokio::spawn(async move {
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
                let wanted = kinds_of();
                retry = tokio::select! {
                    _ = stop.cancelled() => return,
                    missing = objects.ensure(&wanted) => !missing.is_empty(),
                };
            }
        });
    }

    info!(identity = %leader.identity(), "waiting for leadership");
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        acquired = leader.acquired() => if !acquired { return Ok(()) },
    }
    info!("leading");
    // Stop the controllers when the process stops or the Lease is lost.
    let stop = shutdown.child_token();
    let lease_lost = Arc::new(AtomicBool::new(false));
    let lost = {
        let (stop, shutdown, lease_lost) = (stop.clone(), shutdown.clone(), lease_lost.clone());
        let mut leading = leader.subscribe();
        tokio::spawn(async move {
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
        })
    };
    go.cancel();
    let trigger_rx = match drain.await {
        Ok(rx) => rx,
        Err(e) => return Err(OperatorError::Startup(format!("trigger drain task: {e}"))),
    };

    let settings = Settings {
        resync: Duration::from_secs(args.resync_seconds.max(1)),
        concurrency: args.concurrency.max(1),
        namespace: args.namespace.clone(),
        child_batch: Duration::from_millis(args.child_batch_ms),
    };
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            plugins,
            objects,
            metrics,
            Some(leader.identity().to_owned()),
            settings,
        )
        .with_tenants(tenants),
    );
    trainjob::run(ctx, trigger_rx, stop.clone()).await;
    stop.cancel();
    lost.abort();
    // The controllers are done (shut down, or the Lease lost): so is
    // everything every replica runs (catalog, watches, admission).
    shutdown.cancel();
    if let Some(task) = catalog_task {
        match task.await {
            Ok(Err(e)) => warn!(error = %e, "plugin configuration controller ended with an error"),
            Err(e) => warn!(error = %e, "plugin configuration controller task failed"),
            Ok(Ok(())) => {}
        }
    }
    if let Err(e) = leader.release().await {
        warn!(error = %e, "releasing the Lease failed");
    }
    if lease_lost.load(Ordering::SeqCst) {
        error!("operator stopped: the Lease was lost");
        return Err(OperatorError::LeaseLost);
    }
    info!("operator stopped");
    Ok(())
}

/// How https plugin sources are fetched, from the flags.
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

fn fetch_options(
    args: &OperatorArgs,
) -> Result<crate::controller::catalog::fetch::FetchOptions, OperatorError> {
    let extra_roots_pem = match &args.plugin_fetch_ca_file {
        None => None,
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            OperatorError::Startup(format!("--plugin-fetch-ca-file {}: {e}", path.display()))
        })?),
    };
    Ok(crate::controller::catalog::fetch::FetchOptions {
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

/// Keep the `plugins` readiness check in step with the catalog until
/// `stop`: on every swap, and every [`PLUGINS_CHECK_INTERVAL`].
async fn follow_plugins(catalog: Arc<PluginCatalog>, check: ReadyFlag, stop: CancellationToken) {
    let mut swaps = catalog.subscribe();
    let mut open = true;
    loop {
        check.set(catalog_readiness(&catalog));
        check.set_degraded(Plugins::degraded(catalog.as_ref()).map(|d| d.to_string()));
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
                "no plugin set can serve TrainJobs: no plugin in service calls build; \
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
            why.starts_with("no plugin set can serve TrainJobs: no plugin in service calls build; this binary embeds no builtin plugin"),
            "{why}"
        );
    }
}
