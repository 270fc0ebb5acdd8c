//! The guarded forward proxy every connection of the OCI client goes
//! through when plugin sources are guarded (the operator; not the CLI).
//!
//! `oci-client` builds its own HTTP client and lets us set a proxy, but
//! not a resolver, a connector or a redirect policy. Checking the
//! registry's host before a pull left every other hop unguarded: a blob
//! redirect and a token realm can name any address. So the guard sits in
//! front of the client as a proxy on loopback, one per registry operation:
//! the registry, every redirect and every token realm are connected to by
//! this proxy through [`NetGuard::connect`], which resolves a name once,
//! refuses the addresses the guard refuses and connects to one it checked.
//!
//! - HTTPS goes through as a `CONNECT` tunnel: TLS stays end to end between
//!   the client and the registry, which this proxy never sees inside.
//! - Plain HTTP (registries named with `--plugin-plain-http-registry`) comes
//!   as absolute-form requests, each forwarded on its own connection to
//!   its own checked host (a client may send requests for different hosts
//!   on one proxy connection).
//!
//! The first refusal is kept ([`GuardProxy::refused`]) so that the failed
//! operation can say which address was refused and why: the client itself
//! only sees a refused tunnel or a 403.
//!
//! Hand-written on hyper's server and client connections: no maintained
//! crate offers a forward proxy whose connect step is ours.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::ops::netguard::{ConnectError, NetGuard};

/// How long one connection to a registry (or a hop it sends us to) may
/// take to resolve and connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Client connections served at once (one operation's client keeps a few).
const MAX_CONNECTIONS: usize = 32;

type Body = Either<Full<Bytes>, Incoming>;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the OCI client's guarded proxy: {0}")]
pub struct ProxyError(#[from] std::io::Error);

/// A running proxy; it stops, and every tunnel and forwarded request
/// through it is cut, when this is dropped.
#[derive(Debug)]
pub struct GuardProxy {
    url: String,
    refused: Arc<Mutex<Option<String>>>,
    _stop: DropGuard,
}

struct Shared {
    guard: NetGuard,
    refused: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
    connections: tokio::sync::Semaphore,
}

impl GuardProxy {
    /// Listen on `127.0.0.1` (a free port) and serve until dropped.
    pub async fn start(guard: NetGuard) -> Result<Self, ProxyError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr: SocketAddr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let refused = Arc::new(Mutex::new(None));
        let shared = Arc::new(Shared {
            guard,
            refused: refused.clone(),
            stop: stop.clone(),
            connections: tokio::sync::Semaphore::new(MAX_CONNECTIONS),
        });
        tokio::spawn(accept(listener, shared).instrument(tracing::debug_span!("oci_proxy", %addr)));
        Ok(GuardProxy {
            url: format!("http://{addr}"),
            refused,
            _stop: stop.drop_guard(),
        })
    }

    /// `http://127.0.0.1:PORT`: what the client is configured with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The first hop the guard refused, and why.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            () = shared.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: the operation's
                // client sees a failed connection.
                tracing::debug!(error = %e, "accepting a client connection");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Ok(permit) = shared.connections.try_acquire() else {
            tracing::debug!("too many client connections; closing one");
            continue;
        };
        permit.forget();
        let shared = shared.clone();
        tokio::spawn(async move {
            let stop = shared.stop.clone();
            let service = {
                let shared = shared.clone();
                service_fn(move |req| handle(req, shared.clone()))
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                () = stop.cancelled() => {}
                result = conn => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "client connection");
                    }
                }
            }
            shared.connections.add_permits(1);
        });
    }
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Body>, Infallible> {
    if req.method() == Method::CONNECT {
        return Ok(tunnel(req, shared).await);
    }
    Ok(forward(req, shared).await)
}

/// `CONNECT host:port`: connect through the guard, answer 200, then copy
/// bytes both ways until either side closes or the proxy stops.
async fn tunnel(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        return text(
            StatusCode::BAD_REQUEST,
            "CONNECT needs host:port".to_owned(),
        );
    };
    let port = authority.port_u16().unwrap_or(443);
    let mut upstream = match shared
        .guard
        .connect(authority.host(), port, CONNECT_TIMEOUT)
        .await
    {
        Ok(s) => s,
        Err(e) => return shared.failed(e),
    };
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        let mut client = match hyper::upgrade::on(req).await {
            Ok(upgraded) => TokioIo::new(upgraded),
            Err(e) => {
                tracing::debug!(error = %e, "CONNECT upgrade");
                return;
            }
        };
        tokio::select! {
            () = stop.cancelled() => {}
            _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        }
    });
    Response::new(Either::Left(Full::default()))
}

/// An absolute-form `http://` request: connect to its host through the
/// guard and send it there in origin form; the answer streams back.
async fn forward(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Body> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("http") {
        return text(
            StatusCode::BAD_REQUEST,
            format!("{uri}: only CONNECT and absolute http:// requests are proxied"),
        );
    }
    let Some(authority) = uri.authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, format!("{uri}: no host"));
    };
    let upstream: TcpStream = match shared
        .guard
        .connect(
            authority.host(),
            authority.port_u16().unwrap_or(80),
            CONNECT_TIMEOUT,
        )
        .await
    {
        Ok(s) => s,
        Err(e) => return shared.failed(e),
    };
    let (mut sender, conn) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return text(StatusCode::BAD_GATEWAY, format!("{authority}: {e}")),
        };
    let stop = shared.stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            _ = conn => {}
        }
    });
    let (mut parts, body) = req.into_parts();
    parts.uri = match uri.path_and_query() {
        Some(pq) => pq
            .as_str()
            .parse()
            .unwrap_or_else(|_| hyper::Uri::from_static("/")),
        None => hyper::Uri::from_static("/"),
    };
    parts.headers.remove(hyper::header::PROXY_AUTHORIZATION);
    parts.headers.remove("proxy-connection");
    if !parts.headers.contains_key(hyper::header::HOST)
        && let Ok(host) = authority.as_str().parse()
    {
        parts.headers.insert(hyper::header::HOST, host);
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => resp.map(Either::Right),
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("{authority}: {e}")),
    }
}

impl Shared {
    /// The answer to a hop that was not connected: 403 and the first
    /// refusal kept when the guard refused it, 502 otherwise.
    fn failed(&self, e: ConnectError) -> Response<Body> {
        match e {
            ConnectError::Refused(r) => {
                tracing::info!(refused = %r, "OCI client hop refused by the address guard");
                if let Ok(mut first) = self.refused.lock() {
                    first.get_or_insert_with(|| r.0.clone());
                }
                text(StatusCode::FORBIDDEN, r.0)
            }
            e @ ConnectError::Unreachable { .. } => text(StatusCode::BAD_GATEWAY, e.to_string()),
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *resp.status_mut() = status;
    resp
}
