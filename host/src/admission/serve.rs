//! The admission webhooks of `trainforge operator`: flags, the runtime
//! lookup over the watch cache, certificates, and the HTTPS listener.
//!
//! Every replica serves admission, leader or not: the plugin set and the
//! watch caches are loaded on every replica. What is checked is
//! [`crate::admission`] (pure handlers); this module only connects it to the
//! cluster.
//!
//! Certificates come from one of two places:
//! - the operator's own CA and serving certificate, kept in a Secret of its
//!   namespace and rotated before expiry; the CA bundle is written into the
//!   webhook configurations (every replica may renew; writes are
//!   optimistic, so replicas converge on one Secret);
//! - `--webhook-cert-dir`: files mounted from a Secret another issuer
//!   (cert-manager) keeps current; they are re-read when they change.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kube::Api;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::controller::tenants::TenantPlugins;
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainingRuntime};

use crate::admission::{self, AdmissionState, PluginsNow, RuntimeLookup, certs};
use crate::controller::trainjob::Plugins;
use crate::ops::metrics::Metrics;
use crate::ops::tls;
use crate::plugin::{PluginRuntime, PluginSet};

/// Flags of the admission server.
#[derive(Debug, Clone, Args)]
pub struct AdmissionArgs {
    /// Where the HTTPS admission server listens (`0` disables it).
    #[arg(long, default_value = ":9443")]
    pub webhook_bind_address: String,
    /// Read `tls.crt` and `tls.key` from this directory (kept current by
    /// another issuer, e.g. cert-manager) instead of managing certificates.
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,
    /// Secret (in the operator's namespace) holding the operator's own CA
    /// and serving certificate.
    #[arg(long, default_value = "trainforge-webhook-cert")]
    pub webhook_cert_secret: String,
    /// Service in front of the admission server: its DNS names go into the
    /// serving certificate.
    #[arg(long, default_value = "trainforge-webhook-service")]
    pub webhook_service: String,
    /// More names (DNS or IP addresses) the serving certificate is valid
    /// for, e.g. `127.0.0.1` when the API server calls a URL.
    #[arg(long = "webhook-host")]
    pub webhook_hosts: Vec<String>,
    /// MutatingWebhookConfiguration whose CA bundle the operator keeps.
    #[arg(long, default_value = "defaulter.trainer.kubeflow.org")]
    pub mutating_webhook_configuration: String,
    /// ValidatingWebhookConfiguration whose CA bundle the operator keeps.
    #[arg(long, default_value = "validator.trainer.kubeflow.org")]
    pub validating_webhook_configuration: String,
    /// Time one admission request may take in all (milliseconds); every
    /// plugin's `validate` gets at most what remains of it. Keep it well
    /// under the webhooks' `timeoutSeconds`.
    #[arg(long, default_value_t = 3000)]
    pub admission_budget_ms: u64,
    /// TrainJob validations by plugins one namespace may have running at
    /// once; more wait up to the budget, then are answered as the plugins'
    /// failure policy says.
    #[arg(long, default_value_t = 2)]
    pub admission_validations_per_namespace: u16,
    /// Plugin memory (MiB) all TrainJob validations in flight may reserve
    /// together (each reserves its plugins' largest memory limit): keeps
    /// admission within the operator's memory limit.
    #[arg(long, default_value_t = 384)]
    pub admission_validate_memory_mib: u32,
    /// Lifetime of the serving certificates the operator issues (seconds;
    /// each is renewed past 2/3 of it). The CA lives a year.
    #[arg(long, default_value_t = 30 * 86_400)]
    pub webhook_cert_validity_seconds: u64,
    /// How often the certificate Secret and the CA bundles are checked
    /// (seconds).
    #[arg(long, default_value_t = 600)]
    pub webhook_cert_check_seconds: u64,
}

/// Why the admission server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--webhook-bind-address` is not an address.
    #[error("--webhook-bind-address {0:?}: expected host:port, :port or 0")]
    BindAddress(String),
    /// The port could not be bound.
    #[error("binding the admission server to {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The certificates could not be set up.
    #[error("admission certificates: {0}")]
    Certs(#[from] certs::Error),
}

/// The plugin set in service, as the admission handlers read it; a
/// TrainJob is validated by its own set (with its namespace's tenant
/// plugins).
struct CurrentPlugins(Arc<dyn Plugins>, Option<Arc<TenantPlugins>>);

impl PluginsNow for CurrentPlugins {
    fn current(&self) -> Arc<PluginSet> {
        self.0.current()
    }

    fn for_trainjob(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Arc<PluginSet> {
        let cluster = self.0.current();
        match &self.1 {
            // A set that cannot be put together is reported by the
            // controller; admission validates with the cluster's plugins.
            Some(t) => t
                .compose(cluster.clone(), namespace, labels)
                .map_or(cluster, |c| c.set),
            None => cluster,
        }
    }
}

/// Runtimes from the watch cache; a miss (a runtime created a moment ago)
/// is read from the API server, bounded by [`LIVE_READ_TIMEOUT`].
struct CachedRuntimes {
    client: kube::Client,
    namespaced: Store<TrainingRuntime>,
    cluster: Store<ClusterTrainingRuntime>,
    handle: tokio::runtime::Handle,
}

/// Deadline of reading a runtime the cache does not have yet.
const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(2);

impl CachedRuntimes {
    /// Read `name` through `api` (from a blocking thread).
    fn live<K>(&self, api: Api<K>, name: &str) -> Result<Option<K>, String>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let name = name.to_owned();
        self.handle.block_on(async move {
            match tokio::time::timeout(LIVE_READ_TIMEOUT, api.get_opt(&name)).await {
                Ok(Ok(found)) => Ok(found),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!(
                    "reading {name:?} timed out after {}s",
                    LIVE_READ_TIMEOUT.as_secs()
                )),
            }
        })
    }
}

impl RuntimeLookup for CachedRuntimes {
    fn training_runtime(&self, ns: &str, name: &str) -> Result<Option<TrainingRuntime>, String> {
        let key = reflector::ObjectRef::new(name).within(ns);
        if let Some(found) = self.namespaced.get(&key) {
            return Ok(Some((*found).clone()));
        }
        self.live(Api::namespaced(self.client.clone(), ns), name)
    }

    fn cluster_training_runtime(
        &self,
        name: &str,
    ) -> Result<Option<ClusterTrainingRuntime>, String> {
        if let Some(found) = self.cluster.get(&reflector::ObjectRef::new(name)) {
            return Ok(Some((*found).clone()));
        }
        self.live(Api::all(self.client.clone()), name)
    }
}

/// Keep a reflector of every `K` in the cluster until `shutdown`.
fn reflect<K>(client: &kube::Client, shutdown: &CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let api: Api<K> = Api::all(client.clone());
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default().any_semantic()),
    )
    .default_backoff()
    .modify(|o: &mut K| o.meta_mut().managed_fields = None);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                next = stream.next() => match next {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => warn!(error = %e, "runtime watch for admission (retried)"),
                    None => return,
                },
            }
        }
    });
    store
}

/// The operator's namespace (`$POD_NAMESPACE`, else `trainforge-system`).
pub(crate) fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "trainforge-system".into())
}

/// Parse `:9443`, `host:port` or `0` (disabled).
pub(crate) fn bind_address(text: &str) -> Result<Option<SocketAddr>, Error> {
    let t = text.trim();
    if t == "0" || t.is_empty() {
        return Ok(None);
    }
    let full = if t.starts_with(':') {
        format!("0.0.0.0{t}")
    } else {
        t.to_owned()
    };
    full.parse()
        .map(Some)
        .map_err(|_| Error::BindAddress(text.to_owned()))
}

/// Start the admission server (unless disabled): runtime watches,
/// then the listener, serving `resolver`'s certificate
/// ([`certificates`]). Returns the address it listens on.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    args: &AdmissionArgs,
    client: kube::Client,
    plugins: Arc<dyn Plugins>,
    tenants: Option<Arc<TenantPlugins>>,
    runtime: Arc<PluginRuntime>,
    metrics: Arc<Metrics>,
    resolver: Arc<tls::Resolver>,
    shutdown: CancellationToken,
) -> Result<Option<SocketAddr>, Error> {
    let Some(addr) = bind_address(&args.webhook_bind_address)? else {
        info!("admission server disabled");
        return Ok(None);
    };
    let runtimes = Arc::new(CachedRuntimes {
        client: client.clone(),
        namespaced: reflect::<TrainingRuntime>(&client, &shutdown),
        cluster: reflect::<ClusterTrainingRuntime>(&client, &shutdown),
        handle: tokio::runtime::Handle::current(),
    });
    let state = Arc::new(
        AdmissionState::new(
            Arc::new(CurrentPlugins(plugins, tenants)),
            runtimes,
            metrics,
            Duration::from_millis(args.admission_budget_ms.clamp(100, 9_000)),
        )
        .with_limits(admission::gates::AdmissionLimits {
            per_namespace: usize::from(args.admission_validations_per_namespace),
            memory_bytes: u64::from(args.admission_validate_memory_mib) << 20,
        })
        .with_plugin_runtime(runtime),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let local = listener.local_addr().unwrap_or(addr);
    info!(addr = %local, "serving admission webhooks (HTTPS)");
    let router = admission::router(state);
    tokio::spawn(tls::serve(listener, resolver, router, shutdown));
    Ok(Some(local))
}

/// The serving certificate of the operator's HTTPS servers (admission
/// webhooks, TrainJob status server): from `--webhook-cert-dir`, or the
/// operator's own CA and certificate, kept current in the background until
/// `shutdown`.
pub async fn certificates(
    args: &AdmissionArgs,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<Arc<tls::Resolver>, Error> {
    Ok(match &args.webhook_cert_dir {
        Some(dir) => certs::from_dir(dir, shutdown.clone()).await?,
        None => {
            let ns = own_namespace();
            let mut opts = certs::CertOptions::for_service(&ns, &args.webhook_service);
            for h in &args.webhook_hosts {
                match h.parse::<IpAddr>() {
                    Ok(ip) => opts.ip_addresses.push(ip),
                    Err(_) => opts.dns_names.push(h.clone()),
                }
            }
            opts.secret_name = args.webhook_cert_secret.clone();
            opts.mutating_configurations = vec![args.mutating_webhook_configuration.clone()];
            opts.validating_configurations = vec![args.validating_webhook_configuration.clone()];
            opts.check_interval = Duration::from_secs(args.webhook_cert_check_seconds.max(1));
            opts.serving_lifetime = time::Duration::seconds(
                args.webhook_cert_validity_seconds
                    .clamp(10, 10 * 365 * 86_400) as i64,
            );
            certs::CertRotator::start(client, opts, shutdown).await?
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(bind_address("0").unwrap(), None);
        assert_eq!(
            bind_address(":9443").unwrap(),
            Some("0.0.0.0:9443".parse().unwrap())
        );
        assert_eq!(
            bind_address("127.0.0.1:1").unwrap(),
            Some("127.0.0.1:1".parse().unwrap())
        );
        assert!(matches!(bind_address("nope"), Err(Error::BindAddress(_))));
    }
}
