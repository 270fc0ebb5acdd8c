//! The operator's HTTP endpoints (axum): `/healthz`, `/readyz`, `/metrics`.
//!
//! - `/healthz`: 200 `ok` while the process serves requests (liveness).
//! - `/readyz`: 200 `ok` only when every check registered on the
//!   [`Readiness`] passes (e.g. `plugins` can serve TrainJobs, `caches`
//!   synced); 503 with `not ready: <failing names>` otherwise.
//! - `/readyz?verbose`: the same status code, and one line per check in
//!   registration order, `[+]<name> ok` or `[-]<name> failed: <reason>`,
//!   then `readyz check passed` or `readyz check failed` (the layout
//!   kube-apiserver uses for its own `/readyz?verbose`).
//! - A check can pass *degraded* ([`ReadyFlag::set_degraded`]): the
//!   operator is ready, but something it was configured with is missing
//!   (e.g. a `ClusterTrainerPlugin` that does not serve, so TrainJobs whose
//!   runtime needs it wait). The code stays 200; the verbose line reads
//!   `[+]<name> ok, degraded: <note>` and the plain body
//!   `ok (degraded: <name>: <note>)`, so the degradation is never silent.
//! - `/metrics`: [`Metrics::encode`] as OpenMetrics text.
//!
//! A check that changes state (or, while failing, its reason) logs it:
//! passing at `info`, failing with the reason at `warn`.
//!
//! Served in plain HTTP, the same [`router`] can be served on both the
//! metrics and the health-probe address (`--metrics-bind-address`,
//! `--health-probe-bind-address`): each port then answers all three paths.
//! Served securely (`--metrics-secure`), `/metrics` is only on the metrics
//! address, over HTTPS and, with `--metrics-auth`, only to authorised
//! scrapers ([`authorized_metrics_router`]); the probe port then answers
//! `/healthz` and `/readyz` alone ([`probes_router`]), since probes carry no
//! credentials. [`parse_bind_address`] reads controller-runtime style
//! addresses (`:8080`, `0` = disabled).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};
use super::metrics_auth::{MetricsAuth, Reviews, guard};

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
/// Cheap to clone (shared state). A check fails, with the reason given to
/// [`Readiness::register`], until it is set passing.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<Vec<ReadyFlag>>>,
}

/// One named readiness check: passing, or failing with a reason.
#[derive(Debug, Clone)]
pub struct ReadyFlag {
    name: Arc<str>,
    /// `None` while the check passes; the reason while it fails.
    failing: Arc<Mutex<Option<String>>>,
    /// What is degraded while the check passes (`None`: nothing).
    degraded: Arc<Mutex<Option<String>>>,
}

/// The state of one check, as `/readyz?verbose` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckState {
    /// The check's name.
    pub name: String,
    /// `None` when the check passes; why it fails otherwise.
    pub failing: Option<String>,
    /// What is degraded (shown only while the check passes).
    pub degraded: Option<String>,
}

impl ReadyFlag {
    fn state(&self) -> MutexGuard<'_, Option<String>> {
        // A panic while holding the lock cannot leave an Option half-written.
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Mark the check as passing.
    pub fn set_ready(&self) {
        self.set(Ok(()));
    }

    /// Mark the check as failing because of `reason` (one line; line breaks
    /// are shown as spaces).
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.set(Err(reason.into()));
    }

    /// Mark the check as passing (`Ok`) or failing with a reason (`Err`).
    /// A change of state, or of the reason while failing, is logged.
    pub fn set(&self, state: Result<(), String>) {
        let new = state.err().map(|r| one_line(&r));
        let mut current = self.state();
        if *current == new {
            return;
        }
        match &new {
            None => tracing::info!(check = %self.name, "readiness check passes"),
            Some(reason) => tracing::warn!(check = %self.name, %reason, "readiness check fails"),
        }
        *current = new;
    }

    /// Why the check fails (`None` while it passes).
    pub fn reason(&self) -> Option<String> {
        self.state().clone()
    }

    /// Record what is degraded (one line; `None`: nothing). A change is
    /// logged: a new degradation at `warn`, its end at `info`.
    pub fn set_degraded(&self, note: Option<String>) {
        let new = note.map(|n| one_line(&n));
        let mut current = self.degraded.lock().unwrap_or_else(PoisonError::into_inner);
        if *current == new {
            return;
        }
        match &new {
            None => tracing::info!(check = %self.name, "readiness check no longer degraded"),
            Some(note) => tracing::warn!(check = %self.name, %note, "readiness check degraded"),
        }
        *current = new;
    }

    /// What is degraded (`None`: nothing).
    pub fn degradation(&self) -> Option<String> {
        self.degraded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// `text` with every line break replaced by a space.
fn one_line(text: &str) -> String {
    text.split(['\r', '\n'])
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Readiness {
    /// No checks (ready).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<ReadyFlag>> {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        self.checks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Register a check named `name`, failing with `reason` until set.
    /// Registering a name twice returns the existing check (its state
    /// unchanged).
    pub fn register(&self, name: &str, reason: &str) -> ReadyFlag {
        let mut checks = self.lock();
        if let Some(existing) = checks.iter().find(|c| &*c.name == name) {
            return existing.clone();
        }
        let flag = ReadyFlag {
            name: Arc::from(name),
            failing: Arc::new(Mutex::new(Some(one_line(reason)))),
            degraded: Arc::new(Mutex::new(None)),
        };
        checks.push(flag.clone());
        flag
    }

    /// Every check with its state, in registration order.
    pub fn checks(&self) -> Vec<CheckState> {
        self.lock()
            .iter()
            .map(|c| CheckState {
                name: c.name.to_string(),
                failing: c.reason(),
                degraded: c.degradation(),
            })
            .collect()
    }

    /// Names of the failing checks, in registration order.
    pub fn failing(&self) -> Vec<String> {
        self.checks()
            .into_iter()
            .filter(|c| c.failing.is_some())
            .map(|c| c.name)
            .collect()
    }
}

/// The body of `/readyz?verbose`: one line per check, then the verdict.
pub fn verbose_report(checks: &[CheckState]) -> String {
    let mut out = String::new();
    for c in checks {
        match (&c.failing, &c.degraded) {
            (None, None) => out.push_str(&format!("[+]{} ok\n", c.name)),
            (None, Some(note)) => out.push_str(&format!("[+]{} ok, degraded: {note}\n", c.name)),
            (Some(reason), _) => out.push_str(&format!("[-]{} failed: {reason}\n", c.name)),
        }
    }
    if checks.iter().all(|c| c.failing.is_none()) {
        out.push_str("readyz check passed\n");
    } else {
        out.push_str("readyz check failed\n");
    }
    out
}

/// Whether a query string asks for the verbose report (`verbose` present,
/// with or without a value).
fn wants_verbose(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.split('=').next() == Some("verbose"))
    })
}

/// The router with `/healthz`, `/readyz` and `/metrics`.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    probes_router(readiness).merge(metrics_router(metrics))
}

/// The router with `/healthz` and `/readyz` only (the probe port when
/// `/metrics` is served securely on its own).
pub fn probes_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// The router with `/metrics` only.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

/// `/metrics` only, each request let through by `auth` first (see
/// [`metrics_auth`](super::metrics_auth)): the router of the secure
/// metrics server, served over HTTPS by [`super::tls::serve`].
pub fn authorized_metrics_router<R: Reviews>(
    metrics: Arc<Metrics>,
    auth: Arc<MetricsAuth<R>>,
) -> Router {
    metrics_router(metrics).layer(axum::middleware::from_fn_with_state(auth, guard::<R>))
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(
    State(readiness): State<Readiness>,
    RawQuery(query): RawQuery,
) -> (StatusCode, String) {
    let checks = readiness.checks();
    let code = if checks.iter().all(|c| c.failing.is_none()) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if wants_verbose(query.as_deref()) {
        return (code, verbose_report(&checks));
    }
    let failing: Vec<&str> = checks
        .iter()
        .filter(|c| c.failing.is_some())
        .map(|c| c.name.as_str())
        .collect();
    if failing.is_empty() {
        let degraded: Vec<String> = checks
            .iter()
            .filter_map(|c| Some(format!("{}: {}", c.name, c.degraded.as_ref()?)))
            .collect();
        if degraded.is_empty() {
            (code, "ok".to_owned())
        } else {
            (code, format!("ok (degraded: {})", degraded.join("; ")))
        }
    } else {
        (code, format!("not ready: {}", failing.join(", ")))
    }
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        metrics.encode(),
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

        let plugins = readiness.register("plugins", "not loaded yet");
        let caches = readiness.register("caches", "not synced yet");
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "not ready: plugins, caches");
        let r = http.get(url("/readyz?verbose")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.text().await.unwrap(),
            "[-]plugins failed: not loaded yet\n[-]caches failed: not synced yet\nreadyz check failed\n"
        );

        plugins.set_ready();
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "not ready: caches");
        let r = http.get(url("/readyz?verbose=1")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.text().await.unwrap(),
            "[+]plugins ok\n[-]caches failed: not synced yet\nreadyz check failed\n"
        );

        caches.set_ready();
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "ok");
        let r = http.get(url("/readyz?verbose")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.text().await.unwrap(),
            "[+]plugins ok\n[+]caches ok\nreadyz check passed\n"
        );

        // A check can fail again, with a new reason.
        plugins.set_not_ready("no plugin in service builds JobSets");
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.text().await.unwrap(), "not ready: plugins");
        let r = http.get(url("/readyz?verbose")).send().await.unwrap();
        assert!(
            r.text()
                .await
                .unwrap()
                .starts_with("[-]plugins failed: no plugin in service builds JobSets\n"),
        );

        // Passing but degraded: still ready, and the body says what.
        plugins.set_ready();
        plugins.set_degraded(Some(
            "ClusterTrainerPlugins not serving:\ntorch (NotFound: gone)".into(),
        ));
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.text().await.unwrap(),
            "ok (degraded: plugins: ClusterTrainerPlugins not serving: torch (NotFound: gone))"
        );
        let r = http.get(url("/readyz?verbose")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.text().await.unwrap(),
            "[+]plugins ok, degraded: ClusterTrainerPlugins not serving: torch (NotFound: gone)\n\
             [+]caches ok\nreadyz check passed\n"
        );
        // A failing check shows its failure, not the degradation.
        plugins.set_not_ready("no plugin in service builds JobSets");
        let r = http.get(url("/readyz?verbose")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert!(
            r.text()
                .await
                .unwrap()
                .starts_with("[-]plugins failed: no plugin in service builds JobSets\n")
        );
        plugins.set_ready();
        plugins.set_degraded(None);
        let r = http.get(url("/readyz")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "ok");

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
        let a = r.register("plugins", "first");
        let b = r.register("plugins", "second");
        assert_eq!(b.reason().as_deref(), Some("first"), "the state is kept");
        a.set_ready();
        assert_eq!(b.reason(), None);
        assert_eq!(r.checks().len(), 1);
        assert!(r.failing().is_empty());
    }

    #[test]
    fn reasons_follow_the_check_and_are_one_line() {
        let r = Readiness::new();
        let a = r.register("plugins", "not loaded\nyet");
        assert_eq!(a.reason().as_deref(), Some("not loaded yet"));
        a.set(Err("none\r\nserves".into()));
        assert_eq!(
            r.checks(),
            [CheckState {
                name: "plugins".into(),
                failing: Some("none serves".into()),
                degraded: None,
            }]
        );
        assert_eq!(r.failing(), ["plugins"]);
        a.set(Ok(()));
        assert_eq!(a.reason(), None);
        assert!(r.failing().is_empty());
    }

    #[test]
    fn verbose_is_asked_by_the_query_key() {
        assert!(wants_verbose(Some("verbose")));
        assert!(wants_verbose(Some("verbose=true")));
        assert!(wants_verbose(Some("exclude=x&verbose")));
        assert!(!wants_verbose(Some("verbosely")));
        assert!(!wants_verbose(Some("")));
        assert!(!wants_verbose(None));
    }
}
