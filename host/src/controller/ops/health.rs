//! The operator's HTTP endpoints (axum): `/healthz`, `/readyz`, `/metrics`.
//!
//! - `/healthz`: 200 `ok` while the process serves requests (liveness).
//! - `/readyz`: 200 `ok` only when every check registered on the
//!   [`Readiness`] passes (e.g. `plugins` compiled, `caches` synced); 503
//!   with `not ready: <failing names>` otherwise.
//! - `/metrics`: [`Metrics::encode`] as OpenMetrics text.
//!
//! The same [`router`] can be served on both the metrics and the health-probe
//! address (`--metrics-bind-address`, `--health-probe-bind-address`): each
//! port then answers all three paths, which is harmless. [`parse_bind_address`]
//! reads controller-runtime style addresses (`:8080`, `0` = disabled).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};

/// Errors of the health/metrics server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (in use, no permission, ...).
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// Serving failed after the bind.
    #[error("serving on {addr}: {source}")]
    Serve {
        /// The bound address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// A bind address that is neither `host:port`, `:port` nor `0`.
    #[error("invalid bind address {0:?}: expected host:port, :port, or 0 to disable")]
    InvalidAddress(String),
}

/// Named readiness checks; `/readyz` is 200 only when all pass.
///
/// Cheap to clone (shared state). A check starts failing when registered
/// ([`Readiness::register`]) and passes once set.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<Vec<ReadyFlag>>>,
}

/// One named readiness check: set it when the condition holds.
#[derive(Debug, Clone)]
pub struct ReadyFlag {
    name: Arc<str>,
    flag: Arc<AtomicBool>,
}

impl ReadyFlag {
    /// Mark the check as passing (`true`) or failing (`false`).
    pub fn set(&self, ready: bool) {
        self.flag.store(ready, Ordering::Release);
    }

    /// Whether the check passes.
    pub fn is_ready(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// The check's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Readiness {
    /// No checks (ready).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<ReadyFlag>> {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        self.checks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register a check named `name`, failing until set. Registering a name
    /// twice returns the existing check.
    pub fn register(&self, name: &str) -> ReadyFlag {
        let mut checks = self.lock();
        if let Some(existing) = checks.iter().find(|c| &*c.name == name) {
            return existing.clone();
        }
        let flag = ReadyFlag {
            name: Arc::from(name),
            flag: Arc::new(AtomicBool::new(false)),
        };
        checks.push(flag.clone());
        flag
    }

    /// Names of the failing checks, in registration order.
    pub fn failing(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|c| !c.is_ready())
            .map(|c| c.name.to_string())
            .collect()
    }

    /// Whether every registered check passes.
    pub fn is_ready(&self) -> bool {
        self.lock().iter().all(ReadyFlag::is_ready)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The router with `/healthz`, `/readyz` and `/metrics`.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, readiness })
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    let failing = state.readiness.failing();
    if failing.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", failing.join(", ")),
        )
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.encode(),
    )
}

/// Parse a controller-runtime style bind address: `host:port`, `:port`
/// (all interfaces) or `0` (disabled → `None`).
pub fn parse_bind_address(text: &str) -> Result<Option<SocketAddr>, Error> {
    let text = text.trim();
    if text == "0" {
        return Ok(None);
    }
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| Error::InvalidAddress(text.to_owned()))?;
        return Ok(Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        )));
    }
    text.parse()
        .map(Some)
        .map_err(|_| Error::InvalidAddress(text.to_owned()))
}

/// A bound (not yet serving) endpoint server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
}

impl Server {
    /// Bind `addr` (port 0 picks a free port; see [`Server::local_addr`]).
    pub async fn bind(addr: SocketAddr, router: Router) -> Result<Self, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr, source })?;
        Ok(Self {
            listener,
            addr,
            router,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve until `shutdown` is cancelled, then stop accepting and let
    /// in-flight requests finish.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let addr = self.addr;
        tracing::info!(%addr, "serving /healthz, /readyz, /metrics");
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(|source| Error::Serve { addr, source })
    }
}

/// Bind `addr` and serve [`router`] until `shutdown` is cancelled.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    Server::bind(addr, router(metrics, readiness))
        .await?
        .run(shutdown)
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn start() -> (
        SocketAddr,
        Arc<Metrics>,
        Readiness,
        CancellationToken,
        tokio::task::JoinHandle<Result<(), Error>>,
    ) {
        let metrics = Arc::new(Metrics::new());
        let readiness = Readiness::new();
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            router(metrics.clone(), readiness.clone()),
        )
        .await
        .unwrap();
        let addr = server.local_addr();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server.run(shutdown.clone()));
        (addr, metrics, readiness, shutdown, task)
    }

    fn client() -> reqwest::Client {
        // reqwest is built without a default TLS provider (plain HTTP here).
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    #[tokio::test]
    async fn healthz_readyz_and_metrics() {
        let (addr, metrics, readiness, shutdown, task) = start().await;
        let http = client();
        let url = |p: &str| format!("http://{addr}{p}");

        let r = http.get(url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");

        // no checks registered: ready
        assert_eq!(http.get(url("/readyz")).send().await.unwrap().status(), 200);

        let plugins = readiness.register("plugins");
        let caches = readiness.register("caches");
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "not ready: plugins, caches");

        plugins.set(true);
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "not ready: caches");

        caches.set(true);
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);

        caches.set(false);
        assert_eq!(http.get(url("/readyz")).send().await.unwrap().status(), 503);

        metrics.noop_resync();
        let r = http.get(url("/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()[reqwest::header::CONTENT_TYPE],
            OPENMETRICS_CONTENT_TYPE
        );
        let body = r.text().await.unwrap();
        assert!(body.contains("trainforge_noop_resyncs_total 1"), "{body}");

        assert_eq!(http.get(url("/nope")).send().await.unwrap().status(), 404);

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            http.get(url("/healthz")).send().await.is_err(),
            "still serving after shutdown"
        );
    }

    #[tokio::test]
    async fn bind_error_is_an_error() {
        let (addr, _m, _r, shutdown, _task) = start().await;
        let err = serve(
            addr,
            Arc::new(Metrics::new()),
            Readiness::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::Bind { .. }), "{err}");
        shutdown.cancel();
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert_eq!(
            parse_bind_address(":8080").unwrap(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:9").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert!(parse_bind_address(":http").is_err());
        assert!(parse_bind_address("localhost").is_err());
    }

    #[test]
    fn registering_twice_shares_the_flag() {
        let r = Readiness::new();
        let a = r.register("plugins");
        let b = r.register("plugins");
        a.set(true);
        assert!(b.is_ready());
        assert!(r.is_ready());
        assert_eq!(a.name(), "plugins");
    }
}
