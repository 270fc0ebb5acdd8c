//! `https://` plugin sources against a real TLS server on loopback (the
//! operator's own HTTPS listener, serving a test CA's certificate): what a
//! `ClusterTrainerPlugin` or a tenant's `TrainerPlugin` can make the
//! operator fetch.
//!
//! - a good certificate from a CA given with `--plugin-fetch-ca-file`
//!   fetches; the same server without that CA is refused;
//! - loopback, link-local (the cloud metadata address), private and other
//!   special addresses are refused before any connection — as a literal,
//!   through a name that resolves to one, or as a redirect target — unless
//!   `--plugin-fetch-allow-cidr` allows them;
//! - redirect loops, more than five redirects and redirects away from
//!   https are refused;
//! - a body over the component limit is refused whether or not it
//!   announces its length, and a 404 is `NotFound`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{Response, StatusCode, header};
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use trainforge::admission::certs;
use trainforge::controller::catalog::fetch::{FetchError, FetchOptions, Fetcher};
use trainforge::ops::tls;
use trainforge_api::trainforge::v1alpha1::PluginSourceSpec;

const LIMIT: usize = 64 << 10;
const COMPONENT: &[u8] = b"\0asm component bytes for the test";

fn redirect(to: String) -> Response<Body> {
    Response::builder()
        .status(StatusCode::FOUND)
        .header(header::LOCATION, to)
        .body(Body::empty())
        .unwrap()
}

/// The test server on 127.0.0.1: its address and its CA (PEM).
async fn server() -> (SocketAddr, String, CancellationToken) {
    let now = time::OffsetDateTime::now_utc();
    let bundle = certs::generate(
        &["localhost".to_owned()],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        now,
        time::Duration::hours(1),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new()
        .route("/ok.wasm", get(|| async { COMPONENT.to_vec() }))
        .route("/ok.wasm.sig", get(|| async { "c2lnbmF0dXJl\n" }))
        .route("/loop", get(|| async { redirect("/loop".into()) }))
        .route(
            "/hop/{n}",
            get(|Path(n): Path<u32>| async move { redirect(format!("/hop/{}", n + 1)) }),
        )
        .route("/two-hops", get(|| async { redirect("/hop-end".into()) }))
        .route("/hop-end", get(|| async { redirect("/ok.wasm".into()) }))
        .route(
            "/to-metadata",
            get(|| async { redirect("https://169.254.169.254/latest/meta-data/".into()) }),
        )
        .route(
            "/to-localhost",
            get(move || {
                let port = addr.port();
                async move { redirect(format!("https://localhost:{port}/ok.wasm")) }
            }),
        )
        .route(
            "/to-http",
            get(move || {
                let port = addr.port();
                async move { redirect(format!("http://127.0.0.1:{port}/ok.wasm")) }
            }),
        )
        .route("/big", get(|| async { vec![0u8; LIMIT + 1] }))
        .route(
            "/big-unannounced",
            get(|| async {
                let chunks = (0..(LIMIT / 1024 + 2))
                    .map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![0u8; 1024])));
                Body::from_stream(futures::stream::iter(chunks))
            }),
        );
    let resolver =
        Arc::new(tls::Resolver::from_pem(bundle.cert.as_bytes(), bundle.key.as_bytes()).unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(tls::serve(listener, resolver, router, stop.clone()));
    (addr, bundle.ca_bundle, stop)
}

fn fetcher(allow: &[&str], ca: Option<&str>) -> Fetcher {
    let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let opts = FetchOptions {
        allowed_networks: allow.iter().map(|c| c.parse().unwrap()).collect(),
        extra_roots_pem: ca.map(|c| c.as_bytes().to_vec()),
        ..FetchOptions::default()
    };
    Fetcher::with_options(client, LIMIT, &opts).unwrap()
}

async fn fetch(f: &Fetcher, url: &str) -> Result<Vec<u8>, FetchError> {
    f.fetch(
        &PluginSourceSpec {
            url: Some(url.to_owned()),
            ..Default::default()
        },
        false,
    )
    .await
    .map(|x| x.bytes.to_vec())
}

fn refused(r: Result<Vec<u8>, FetchError>, words: &[&str]) -> String {
    let e = r.expect_err("must be refused");
    let text = e.to_string();
    for w in words {
        assert!(
            text.contains(w),
            "{w:?} missing in {text:?} ({})",
            e.reason()
        );
    }
    text
}

#[tokio::test]
async fn https_sources_are_bounded_and_guarded() {
    let (addr, ca, stop) = server().await;
    let port = addr.port();
    let url = |path: &str| format!("https://127.0.0.1:{port}{path}");
    let allowed = fetcher(&["127.0.0.1/32"], Some(&ca));

    // A good certificate from the configured CA.
    assert_eq!(fetch(&allowed, &url("/ok.wasm")).await.unwrap(), COMPONENT);
    assert_eq!(fetch(&allowed, &url("/two-hops")).await.unwrap(), COMPONENT);
    // A blob signature next to it (`<url>.sig`), read only when asked for;
    // none next to another URL.
    let with_sigs = |u: String| {
        let allowed = allowed.clone();
        async move {
            allowed
                .fetch(
                    &PluginSourceSpec {
                        url: Some(u),
                        ..Default::default()
                    },
                    true,
                )
                .await
                .unwrap()
                .signatures
                .unwrap()
                .into_iter()
                .map(|s| s.signature)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(with_sigs(url("/ok.wasm")).await, ["c2lnbmF0dXJl"]);
    assert!(with_sigs(url("/two-hops")).await.is_empty());
    assert!(fetch(&allowed, &url("/ok.wasm")).await.is_ok());
    // The same server without that CA: the certificate is refused.
    let no_ca = fetcher(&["127.0.0.1/32"], None);
    let e = fetch(&no_ca, &url("/ok.wasm")).await.unwrap_err();
    assert_eq!(e.reason(), "FetchError");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    // Special addresses, however they are reached, unless allowed.
    let guarded = fetcher(&[], Some(&ca));
    for (u, words) in [
        (url("/ok.wasm"), vec!["127.0.0.1", "loopback"]),
        (
            format!("https://localhost:{port}/ok.wasm"),
            vec!["localhost resolves to", "loopback"],
        ),
        (
            "https://169.254.169.254/latest/meta-data/iam".to_owned(),
            vec!["169.254.169.254", "link-local"],
        ),
        (
            "https://10.0.0.1/p.wasm".to_owned(),
            vec!["10.0.0.1", "private"],
        ),
        (
            "https://[::ffff:169.254.169.254]/p.wasm".to_owned(),
            vec!["link-local"],
        ),
        ("https://[fd00::1]/p.wasm".to_owned(), vec!["unique local"]),
    ] {
        let start = Instant::now();
        let e = fetch(&guarded, &u).await.unwrap_err();
        assert_eq!(e.reason(), "AddressNotAllowed", "{u}: {e}");
        for w in words {
            assert!(e.to_string().contains(w), "{u}: {w:?} missing in {e}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{u}: refused without waiting on a connection"
        );
    }

    // Redirects: loops, too many, to a special address, off https.
    for (path, words) in [
        ("/loop", vec!["redirect loop"]),
        ("/hop/0", vec!["more than 5 redirects"]),
        ("/to-metadata", vec!["169.254.169.254", "link-local"]),
        ("/to-http", vec!["https only"]),
    ] {
        let e = fetch(&allowed, &url(path)).await.unwrap_err();
        assert_eq!(e.reason(), "AddressNotAllowed", "{path}: {e}");
        refused(Err(e), &words);
    }
    // Allowed 127.0.0.1 does not allow localhost's other addresses (::1).
    let only_v4 = fetcher(&["127.0.0.1/32"], Some(&ca));
    match fetch(&only_v4, &url("/to-localhost")).await {
        Ok(b) => assert_eq!(b, COMPONENT, "localhost resolved to 127.0.0.1"),
        Err(e) => assert_eq!(e.reason(), "AddressNotAllowed", "{e}"),
    }

    // Size: announced or not, the limit holds; a 404 is NotFound.
    for path in ["/big", "/big-unannounced"] {
        let e = fetch(&allowed, &url(path)).await.unwrap_err();
        assert_eq!(e.reason(), "TooLarge", "{path}: {e}");
    }
    let e = fetch(&allowed, &url("/missing")).await.unwrap_err();
    assert_eq!(e.reason(), "NotFound", "{e}");
    stop.cancel();
}
