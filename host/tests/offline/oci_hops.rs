//! The OCI client's every hop through the address guard, and manifests read
//! with their bound before they are buffered (issue 30, item 5).
//!
//! A registry front on 127.0.0.1 (allowed) sends the client elsewhere the
//! ways a registry can: a blob redirect and a token realm, both at
//! 127.0.0.2 (a loopback address the guard refuses unless allowed), over
//! HTTPS (the client tunnels through the guarded proxy with CONNECT) and
//! plain HTTP (absolute-form requests forwarded by the proxy). Unguarded,
//! the same pulls succeed and reach 127.0.0.2 — so the refusals are the
//! guard's. A manifest of 512 MiB is refused whether or not it announces its
//! length, with little of it ever sent, and the process pulling it (the
//! `trainforge plugin pull` CLI) peaks at the memory it peaks at pulling a
//! normal artifact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Response, StatusCode, Uri, header};
use oci_client::secrets::RegistryAuth;
use tokio_util::sync::CancellationToken;
use trainforge::admission::certs;
use trainforge::oci::artifact::{self, Artifact};
use trainforge::oci::registry::{Registry, RegistryError, RegistryOptions};
use trainforge::ops::netguard::NetGuard;
use trainforge::ops::tls;

const COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0 a component for the hop test";
const HUGE: usize = 512 << 20;
const LIMIT: usize = 1 << 20;

/// What the front at 127.0.0.1 does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Serves everything itself.
    Direct,
    /// Redirects blob reads to 127.0.0.2.
    BlobRedirect,
    /// Asks for a bearer token from a realm at 127.0.0.2.
    TokenRealm,
    /// A 512 MiB manifest with its length announced.
    HugeAnnounced,
    /// A 512 MiB manifest streamed without a length.
    HugeStreamed,
}

#[derive(Clone)]
struct Front {
    mode: Mode,
    /// `scheme://127.0.0.2:PORT` of the elsewhere server.
    elsewhere: String,
    artifact: Arc<Artifact>,
    /// Bytes of a huge manifest produced so far.
    produced: Arc<AtomicUsize>,
}

/// The elsewhere server at 127.0.0.2: counts the requests it gets.
#[derive(Clone)]
struct Elsewhere {
    hits: Arc<AtomicUsize>,
}

fn status(code: StatusCode) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::empty())
        .unwrap()
}

async fn front(State(f): State<Front>, uri: Uri) -> Response<Body> {
    let path = uri.path();
    if path == "/v2/" {
        if f.mode == Mode::TokenRealm {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(
                    header::WWW_AUTHENTICATE,
                    format!(r#"Bearer realm="{}/token",service="front""#, f.elsewhere),
                )
                .body(Body::empty())
                .unwrap();
        }
        return status(StatusCode::OK);
    }
    if path.contains("/manifests/") {
        let len = Arc::clone(&f.produced);
        return match f.mode {
            Mode::HugeAnnounced | Mode::HugeStreamed => {
                let chunks = futures::stream::iter((0..HUGE / (64 << 10)).map(move |_| {
                    len.fetch_add(64 << 10, Ordering::Relaxed);
                    Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 64 << 10]))
                }));
                let mut resp = Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, artifact::OCI_MANIFEST_MEDIA_TYPE);
                if f.mode == Mode::HugeAnnounced {
                    resp = resp.header(header::CONTENT_LENGTH, HUGE);
                }
                resp.body(Body::from_stream(chunks)).unwrap()
            }
            _ => Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, artifact::OCI_MANIFEST_MEDIA_TYPE)
                .body(Body::from(f.artifact.manifest.clone()))
                .unwrap(),
        };
    }
    if path.contains("/blobs/") {
        if f.mode == Mode::BlobRedirect {
            return Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header(header::LOCATION, format!("{}/blob", f.elsewhere))
                .body(Body::empty())
                .unwrap();
        }
        return Response::new(Body::from(COMPONENT.to_vec()));
    }
    status(StatusCode::NOT_FOUND)
}

async fn elsewhere(State(e): State<Elsewhere>, uri: Uri) -> Response<Body> {
    e.hits.fetch_add(1, Ordering::Relaxed);
    match uri.path() {
        "/token" => Response::new(Body::from(r#"{"token":"from-elsewhere"}"#)),
        "/blob" => Response::new(Body::from(COMPONENT.to_vec())),
        _ => status(StatusCode::NOT_FOUND),
    }
}

struct Tls {
    resolver: Arc<tls::Resolver>,
    ca: String,
}

fn tls_for_both() -> Tls {
    let bundle = certs::generate(
        &["localhost".to_owned()],
        &[
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        ],
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(1),
    )
    .unwrap();
    Tls {
        resolver: Arc::new(
            tls::Resolver::from_pem(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap(),
        ),
        ca: bundle.ca_bundle,
    }
}

/// Serve `router` on `ip` (a free port), with TLS when given.
async fn serve(
    ip: Ipv4Addr,
    router: Router,
    tls: Option<&Tls>,
    stop: &CancellationToken,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    match tls {
        Some(t) => {
            tokio::spawn(tls::serve(
                listener,
                t.resolver.clone(),
                router,
                stop.clone(),
            ));
        }
        None => {
            let stop = stop.clone();
            tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move { stop.cancelled().await })
                    .await
            });
        }
    }
    addr
}

struct Setup {
    registry_addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    produced: Arc<AtomicUsize>,
    ca: Option<String>,
    _stop: tokio_util::sync::DropGuard,
}

async fn setup(mode: Mode, https: bool) -> Setup {
    let stop = CancellationToken::new();
    let tls = https.then(tls_for_both);
    let hits = Arc::new(AtomicUsize::new(0));
    let other = Router::new()
        .fallback(elsewhere)
        .with_state(Elsewhere { hits: hits.clone() });
    let other_addr = serve(Ipv4Addr::new(127, 0, 0, 2), other, tls.as_ref(), &stop).await;
    let scheme = if https { "https" } else { "http" };
    let produced = Arc::new(AtomicUsize::new(0));
    let state = Front {
        mode,
        elsewhere: format!("{scheme}://{other_addr}"),
        artifact: Arc::new(Artifact::new(COMPONENT).unwrap()),
        produced: produced.clone(),
    };
    let router = Router::new().fallback(front).with_state(state);
    let registry_addr = serve(Ipv4Addr::LOCALHOST, router, tls.as_ref(), &stop).await;
    Setup {
        registry_addr,
        hits,
        produced,
        ca: tls.map(|t| t.ca),
        _stop: stop.drop_guard(),
    }
}

fn registry(s: &Setup, https: bool, guarded: bool) -> Registry {
    Registry::new(&RegistryOptions {
        plain_http: if https {
            Vec::new()
        } else {
            vec![s.registry_addr.to_string()]
        },
        extra_roots_pem: s.ca.as_ref().map(|c| c.as_bytes().to_vec()),
        guard: guarded.then(|| NetGuard::new(vec!["127.0.0.1/32".parse().unwrap()])),
    })
    .unwrap()
}

async fn pull(s: &Setup, https: bool, guarded: bool) -> Result<Vec<u8>, RegistryError> {
    let reference = format!("{}/plugins/hops:v1", s.registry_addr);
    registry(s, https, guarded)
        .pull(&reference, &RegistryAuth::Anonymous, LIMIT)
        .await
        .map(|p| p.bytes)
}

#[tokio::test]
async fn every_oci_hop_goes_through_the_guard() {
    for https in [true, false] {
        let scheme = if https { "https" } else { "http" };
        // A registry that serves everything itself: pulled through the proxy.
        let s = setup(Mode::Direct, https).await;
        assert_eq!(pull(&s, https, true).await.unwrap(), COMPONENT, "{scheme}");

        for mode in [Mode::BlobRedirect, Mode::TokenRealm] {
            // Unguarded, the hop is followed to 127.0.0.2 and the pull works.
            let s = setup(mode, https).await;
            assert_eq!(
                pull(&s, https, false).await.unwrap(),
                COMPONENT,
                "{scheme} {mode:?} unguarded"
            );
            assert!(
                s.hits.load(Ordering::Relaxed) > 0,
                "{scheme} {mode:?}: the hop is real"
            );

            // Guarded, it is refused naming the address, and never reached.
            let s = setup(mode, https).await;
            let e = pull(&s, https, true)
                .await
                .expect_err("the hop must be refused");
            let text = e.to_string();
            assert!(
                matches!(e, RegistryError::AddressNotAllowed { .. }),
                "{scheme} {mode:?}: {e:?}"
            );
            assert!(
                text.contains("127.0.0.2") && text.contains("loopback"),
                "{scheme} {mode:?}: {text}"
            );
            assert_eq!(
                s.hits.load(Ordering::Relaxed),
                0,
                "{scheme} {mode:?}: 127.0.0.2 was contacted"
            );
        }
    }
}

#[tokio::test]
async fn huge_manifests_are_refused_before_they_are_buffered() {
    for mode in [Mode::HugeAnnounced, Mode::HugeStreamed] {
        for https in [true, false] {
            let s = setup(mode, https).await;
            let e = pull(&s, https, true).await.expect_err("a 512 MiB manifest");
            let text = e.to_string();
            assert!(
                matches!(e, RegistryError::Artifact { .. })
                    && text.contains(&artifact::MAX_MANIFEST_BYTES.to_string()),
                "{mode:?} https={https}: {e:?}"
            );
            // What the front produced before the client stopped reading:
            // socket and stream buffers, far from the whole manifest (the
            // client buffered all 512 MiB before the bound was checked; the
            // process's memory is not measured here, where other tests of
            // this binary run beside this one).
            let produced = s.produced.load(Ordering::Relaxed);
            assert!(
                produced < 32 << 20,
                "{mode:?} https={https}: {produced} bytes produced"
            );
        }
    }
}

/// `trainforge plugin pull` of `reference` over plain HTTP: whether it
/// succeeded, and its peak resident memory (VmHWM, read every 2 ms while it
/// runs: a lower bound of the true peak, which a client buffering hundreds
/// of MiB, for the many milliseconds that takes, cannot stay under).
fn pull_cli(reference: &str, out: &std::path::Path) -> (bool, u64) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args(["plugin", "pull", reference, "--plain-http", "-o"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    loop {
        if let Some(hwm) = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak_kib = peak_kib.max(hwm);
        }
        if let Some(exit) = child.try_wait().unwrap() {
            return (exit.success(), peak_kib << 10);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// An oversized manifest leaves the puller's memory where a normal pull
/// leaves it: the CLI refusing a 512 MiB manifest (announced or streamed)
/// peaks within 32 MiB of the same CLI pulling a normal artifact (a client
/// buffering the manifest whole peaks above 512 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_manifest_leaves_the_pullers_memory_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for mode in [Mode::Direct, Mode::HugeAnnounced, Mode::HugeStreamed] {
        let s = setup(mode, false).await;
        let reference = format!("oci://{}/plugins/hops:v1", s.registry_addr);
        let out = dir.path().join(format!("{mode:?}.wasm"));
        let (ok, peak) = tokio::task::spawn_blocking(move || pull_cli(&reference, &out))
            .await
            .unwrap();
        assert_eq!(ok, mode == Mode::Direct, "{mode:?}: pulled = {ok}");
        peaks.push((mode, peak));
    }
    let normal = peaks[0].1;
    assert!(normal > 0, "the normal pull's memory was never read");
    for (mode, peak) in &peaks[1..] {
        eprintln!(
            "oci_hops: peak memory of `plugin pull`: {} MiB normal, {} MiB for a {mode:?} 512 MiB manifest",
            normal >> 20,
            peak >> 20
        );
        assert!(
            *peak < normal + (32 << 20),
            "{mode:?}: the puller peaked at {} MiB (a normal pull: {} MiB)",
            peak >> 20,
            normal >> 20
        );
    }
}
