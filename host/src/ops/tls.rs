//! The HTTPS listener of the admission webhooks, the TrainJob status server
//! and the secure metrics server, with a certificate that can be replaced
//! while it serves.
//!
//! Rules:
//! - [`Resolver`] holds the serving certificate and key in an [`ArcSwap`];
//!   [`Resolver::update`] replaces them atomically. A TLS handshake takes
//!   whatever is current when it starts: new connections get the new
//!   certificate, connections already open keep theirs until they close.
//!   The listener is never restarted for a rotation.
//! - [`serve`] accepts TCP connections, completes the TLS handshake within
//!   [`HANDSHAKE_TIMEOUT`] (a client that stalls is dropped, so it cannot
//!   hold a task forever), and serves HTTP/1.1 on each (ALPN offers
//!   `http/1.1` only: the API server then speaks HTTP/1.1 to the webhook).
//!   Sessions are not resumed, so every handshake gets the current
//!   certificate.
//! - At most [`MAX_CONNECTIONS`] connections are served at once; further
//!   clients wait in the kernel's accept backlog.
//! - A request's headers must arrive within [`HEADER_READ_TIMEOUT`].
//! - On shutdown the listener stops accepting, open connections finish their
//!   in-flight request and close, and [`serve`] returns once they are done or
//!   after [`SHUTDOWN_GRACE`], whichever comes first.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::ops::crypto::install_crypto_provider;

/// Longest a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Longest [`serve`] waits for open connections after shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Errors of the TLS listener.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate chain PEM has no certificate, or one that does not
    /// parse.
    #[error("parsing the serving certificate chain: {0}")]
    ParseCertificate(String),
    /// The private key PEM has no key, or one that does not parse.
    #[error("parsing the serving private key: {0}")]
    ParseKey(String),
    /// The key is not usable by the crypto provider, or does not match the
    /// certificate.
    #[error("loading the serving certificate and key: {0}")]
    LoadKey(rustls::Error),
    /// The server configuration could not be built.
    #[error("building the TLS server configuration: {0}")]
    Config(rustls::Error),
    /// The listener's address could not be read.
    #[error("reading the listener's address: {0}")]
    LocalAddr(std::io::Error),
}

/// The serving certificate, replaceable while the listener serves, and
/// the CA bundle clients verify it with, when known.
///
/// Cheap to read on every handshake (one atomic load).
pub struct Resolver {
    current: ArcSwap<CertifiedKey>,
    ca_bundle: ArcSwap<Option<String>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("certificates", &self.current.load().cert.len())
            .finish_non_exhaustive()
    }
}

/// A certified key from a PEM certificate chain (leaf first) and a PEM
/// private key (PKCS#8, SEC1 or PKCS#1). The key must match the leaf.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, Error> {
    install_crypto_provider();
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::ParseCertificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(Error::ParseCertificate("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| Error::ParseKey(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider).map_err(Error::LoadKey)
}

impl Resolver {
    /// A resolver serving `cert_pem` (chain, leaf first) with `key_pem`.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, Error> {
        Ok(Self {
            current: ArcSwap::from_pointee(certified_key(cert_pem, key_pem)?),
            ca_bundle: ArcSwap::from_pointee(None),
        })
    }

    /// Replace the certificate for handshakes from now on. On error the
    /// current certificate stays.
    pub fn update(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), Error> {
        let key = certified_key(cert_pem, key_pem)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// The certificate handshakes get now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Record the CA bundle (PEM) that verifies the served certificate.
    pub fn set_ca_bundle(&self, pem: Option<String>) {
        self.ca_bundle.store(Arc::new(pem));
    }

    /// The CA bundle (PEM) that verifies the served certificate: the
    /// operator's own CA, or the `ca.crt` next to certificates read from a
    /// directory; `None` when not known.
    pub fn ca_bundle(&self) -> Option<String> {
        (*self.ca_bundle.load_full()).clone()
    }

    /// The DER of the leaf certificate served now.
    pub fn leaf_der(&self) -> Option<Vec<u8>> {
        self.current.load().cert.first().map(|c| c.to_vec())
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The rustls server configuration: no client authentication, the
/// certificate from `resolver`, ALPN `http/1.1`, no session resumption (every
/// handshake asks the resolver).
pub fn server_config(resolver: Arc<Resolver>) -> Result<rustls::ServerConfig, Error> {
    install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session resumption: a resumed session would skip the resolver and
    // keep presenting the certificate of its first handshake after a
    // rotation. Clients keep connections alive, so full handshakes are rare.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(config)
}

/// Serve `router` over HTTPS on `listener` until `shutdown` is cancelled
/// (see the module rules for timeouts, the connection cap and shutdown).
pub async fn serve(
    listener: TcpListener,
    resolver: Arc<Resolver>,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(Error::LocalAddr)?;
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)?));
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tracing::debug!(%addr, "accepting HTTPS connections");
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                // The semaphore is never closed.
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off a little.
                    tracing::warn!(%addr, error = %e, "accepting an HTTPS connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let shutdown = shutdown.clone();
        let span = tracing::debug_span!("https_connection", %peer);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                connection(stream, acceptor, router, shutdown).await;
                tracing::trace!("HTTPS connection closed");
                drop(permit);
            },
            span,
        ));
    }
    tracing::info!(%addr, "HTTPS server stops accepting; draining connections");
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(%addr, "HTTPS connections still open after the shutdown grace period");
    }
    Ok(())
}

/// One connection: the handshake (bounded by [`HANDSHAKE_TIMEOUT`]), then
/// HTTP/1.1 until the client closes or shutdown.
async fn connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    router: Router,
    shutdown: CancellationToken,
) {
    let tls = tokio::select! {
        () = shutdown.cancelled() => return,
        handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => match handshake {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                return;
            }
        },
    };
    let service = TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(tls), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "HTTPS connection ended with an error");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTPS connection ended with an error");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    use axum::routing::get;

    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    use super::*;

    /// A test CA (its PEM in `ca_bundle`) and a serving certificate it
    /// signed for `localhost` and 127.0.0.1.
    struct Bundle {
        ca_bundle: String,
        cert: String,
        key: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn generate() -> Bundle {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(params, ca_key);
        let (cert, key) = renew_serving(&issuer);
        Bundle {
            ca_bundle: ca.pem(),
            cert,
            key,
            issuer,
        }
    }

    /// A new serving certificate from the same CA: (certificate, key).
    fn renew_serving(issuer: &Issuer<'static, KeyPair>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let cert = params.signed_by(&key, issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    async fn start(
        bundle: &Bundle,
    ) -> (
        SocketAddr,
        Arc<Resolver>,
        CancellationToken,
        tokio::task::JoinHandle<Result<(), Error>>,
    ) {
        let resolver =
            Arc::new(Resolver::from_pem(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/ping", get(|| async { "pong" }));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, resolver.clone(), router, shutdown.clone()));
        (addr, resolver, shutdown, task)
    }

    /// Shut the server down; it returns within 5 s, without error.
    async fn stop(shutdown: CancellationToken, task: tokio::task::JoinHandle<Result<(), Error>>) {
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    fn client(ca_pem: &str) -> reqwest::Client {
        install_crypto_provider();
        let certs = reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes()).unwrap();
        reqwest::Client::builder()
            .no_proxy()
            .tls_certs_only(certs)
            .tls_info(true)
            // one connection per request, so each sees the current certificate
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    }

    fn serial_of(der: &[u8]) -> String {
        let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
        cert.raw_serial_as_string()
    }

    async fn served_serial(http: &reqwest::Client, url: &str) -> String {
        let r = http.get(url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let der = r
            .extensions()
            .get::<reqwest::tls::TlsInfo>()
            .and_then(|i| i.peer_certificate())
            .unwrap()
            .to_vec();
        assert_eq!(r.text().await.unwrap(), "pong");
        serial_of(&der)
    }

    #[tokio::test]
    async fn serves_and_rotates_without_restart() {
        let bundle = generate();
        let (addr, resolver, shutdown, task) = start(&bundle).await;
        let http = client(&bundle.ca_bundle);
        let url = format!("https://127.0.0.1:{}/ping", addr.port());

        let first = served_serial(&http, &url).await;
        assert_eq!(first, serial_of(&resolver.leaf_der().unwrap()));
        let by_name = format!("https://localhost:{}/ping", addr.port());
        assert_eq!(served_serial(&http, &by_name).await, first);

        // Rotate the serving certificate (same CA): the next connection gets it.
        let (cert, key) = renew_serving(&bundle.issuer);
        resolver.update(cert.as_bytes(), key.as_bytes()).unwrap();
        let second = served_serial(&http, &url).await;
        assert_ne!(first, second, "the rotated certificate is served");
        assert_eq!(second, serial_of(&resolver.leaf_der().unwrap()));
        assert!(!task.is_finished(), "the server was not restarted");

        // A bad update keeps the current certificate.
        assert!(resolver.update(b"garbage", b"garbage").is_err());
        assert_eq!(served_serial(&http, &url).await, second);

        // A client that does not trust this CA fails the handshake.
        let other = generate();
        let stranger = client(&other.ca_bundle);
        assert!(stranger.get(&url).send().await.is_err());

        stop(shutdown, task).await;
    }

    #[tokio::test]
    async fn a_silent_client_does_not_block_others() {
        let bundle = generate();
        let (addr, _resolver, shutdown, task) = start(&bundle).await;
        // Connects, never says hello.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let http = client(&bundle.ca_bundle);
        let url = format!("https://127.0.0.1:{}/ping", addr.port());
        tokio::time::timeout(Duration::from_secs(5), served_serial(&http, &url))
            .await
            .unwrap();
        stop(shutdown, task).await;
    }

    #[test]
    fn mismatched_key_is_refused() {
        let (a, b) = (generate(), generate());
        assert!(matches!(
            Resolver::from_pem(a.cert.as_bytes(), b.key.as_bytes()),
            Err(Error::LoadKey(_))
        ));
        assert!(matches!(
            Resolver::from_pem(b"", a.key.as_bytes()),
            Err(Error::ParseCertificate(_))
        ));
    }
}
