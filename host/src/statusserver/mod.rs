//! The TrainJob status server: training pods post their progress here and
//! it lands in `status.trainerStatus` (Kubeflow Trainer's `TrainJobStatus`
//! feature, upstream's path and answers).
//!
//! Off by default, as upstream's feature gate; `--status-server-bind-address
//! :10443` turns it on. It then serves HTTPS with the webhooks' certificate
//! on every replica (no leadership needed: it writes one field it alone
//! owns), and the `trainjobstatus` plugin gives the trainer pods its URL,
//! its CA and a token for their TrainJob ([`crate::plugin::facts`]).
//!
//! One request, in order:
//! 1. `POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status`;
//!    anything else is `404 Not found` ([`request::route`]);
//! 2. `Authorization: Bearer <token>` ([`request::bearer`]), else `403`;
//! 3. a body of at most [`request::MAX_BODY_BYTES`], else `413 Payload too
//!    large` (sent once the client is done sending, up to 256 KiB past the
//!    limit); an `UpdateTrainJobStatusRequest`, else `422 Invalid payload`;
//! 4. the token reviewed for this TrainJob only ([`auth`]), else `403
//!    Forbidden`;
//! 5. no `trainerStatus`: `200` with the request, nothing written;
//! 6. at most [`rate::BURST`] writes at once and [`rate::PER_SECOND`] a
//!    second per TrainJob ([`rate`]), else `429` with `Retry-After`;
//! 7. server-side apply of `status.trainerStatus` as the field manager
//!    [`FIELD_MANAGER`], forced: the new status replaces the old one whole
//!    (a field left out is removed). The API server's schema refusal is
//!    `422` with its message; a TrainJob that does not exist is `404 Train
//!    job not found`; any other failure `500 Internal error`. Success is
//!    `200` with the request.
//!
//! Every answer but `200` is a `metav1.Status`. A request has
//! [`REQUEST_TIMEOUT`] in all. Answers to routed requests are counted by
//! code (`trainforge_status_server_requests_total`).

pub mod auth;
pub mod rate;
pub mod request;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};
use trainforge_api::trainer::v1alpha1::TrainJob;

use crate::ops::metrics::Metrics;
use crate::ops::tls::Resolver;
use crate::plugin::{HostFacts, StatusServer};
use request::{Target, Update};

/// The field manager that owns `status.trainerStatus` (upstream's).
pub const FIELD_MANAGER: &str = "trainer-status";

/// Time one request may take in all (upstream's read/write timeouts).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a too-large body is read and dropped before the `413` goes
/// out ([`read_body`]).
const DRAIN_BYTES: usize = 256 << 10;

/// How often the CA given to plugins is compared with the served one.
const CA_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Flags of the status server.
#[derive(Debug, Clone, Args)]
pub struct StatusServerArgs {
    /// Where the TrainJob status server listens (HTTPS). `0`, the default,
    /// turns it off, as upstream's `TrainJobStatus` gate is; upstream's
    /// port is `:10443`. Training pods post their progress to it.
    #[arg(long, default_value = "0")]
    pub status_server_bind_address: String,
    /// The base URL pods reach the status server at (default
    /// `https://<webhook service>.<operator namespace>.svc:<port>`).
    #[arg(long)]
    pub status_server_url: Option<String>,
}

impl StatusServerArgs {
    /// Where to listen, `None` when off.
    pub fn address(&self) -> Result<Option<SocketAddr>, Error> {
        crate::admission::serve::bind_address(&self.status_server_bind_address)
            .map_err(|_| Error::BindAddress(self.status_server_bind_address.clone()))
    }

    /// The base URL pods are given for a server on `addr`.
    pub fn url(&self, addr: SocketAddr, service: &str) -> String {
        self.status_server_url
            .clone()
            .map(|u| u.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| {
                format!(
                    "https://{service}.{}.svc:{}",
                    crate::admission::serve::own_namespace(),
                    addr.port()
                )
            })
    }
}

/// Why the status server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--status-server-bind-address` is not an address.
    #[error("--status-server-bind-address {0:?}: expected host:port, :port or 0")]
    BindAddress(String),
    /// The port could not be bound.
    #[error("binding the status server to {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

/// What every request shares.
struct Shared {
    client: kube::Client,
    metrics: Arc<Metrics>,
    auth: auth::Authenticator,
    limiter: rate::Limiter,
}

/// Serve on `addr` with `resolver`'s certificate until `shutdown`, and keep
/// `facts` (what plugins are told) at `url` and the served CA. Returns the
/// address it listens on.
pub async fn start(
    addr: SocketAddr,
    url: String,
    client: kube::Client,
    metrics: Arc<Metrics>,
    resolver: Arc<Resolver>,
    facts: Arc<HostFacts>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let local = listener.local_addr().unwrap_or(addr);
    let shared = Arc::new(Shared {
        auth: auth::Authenticator::new(client.clone()),
        client,
        metrics,
        limiter: rate::Limiter::default(),
    });
    let router = Router::new().fallback(handle).with_state(shared);
    info!(addr = %local, %url, "serving the TrainJob status server (HTTPS)");
    tokio::spawn(keep_facts(url, resolver.clone(), facts, shutdown.clone()));
    tokio::spawn(crate::ops::tls::serve(listener, resolver, router, shutdown));
    Ok(local)
}

/// Tell plugins the URL and the CA the served certificate chains to, and
/// again whenever that CA changes, until `shutdown`. Without a known CA
/// (a certificate directory with no `ca.crt`) they are told the server is
/// starting, so TrainJobs wait rather than get pods that cannot verify it.
async fn keep_facts(
    url: String,
    resolver: Arc<Resolver>,
    facts: Arc<HostFacts>,
    shutdown: CancellationToken,
) {
    let mut told: Option<String> = None;
    loop {
        let ca = resolver.ca_bundle();
        if ca != told {
            match &ca {
                Some(pem) => facts.set_status_server(StatusServer::Ready {
                    url: url.clone(),
                    ca_cert: pem.clone(),
                }),
                None => {
                    warn!(
                        "the status server's CA is not known (no ca.crt next to the certificate): \
                         TrainJobs wait until it is"
                    );
                    facts.set_status_server(StatusServer::Starting { url: url.clone() });
                }
            }
            told = ca;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(CA_CHECK_INTERVAL) => {}
        }
    }
}

/// Every request (see the module rules).
async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let Some(target) = request::route(req.method(), req.uri().path()) else {
        return failure(StatusCode::NOT_FOUND, "Not found");
    };
    let span = tracing::info_span!(
        "trainjob_status",
        namespace = %target.namespace,
        name = %target.name
    );
    let work = serve(&shared, target, req).instrument(span);
    let answer = match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => failure(StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
    };
    shared
        .metrics
        .status_server_answered(answer.status().as_u16());
    answer
}

async fn serve(shared: &Shared, target: Target, req: Request) -> Response {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let Some(token) = request::bearer(header.as_deref()).map(str::to_owned) else {
        debug!("no bearer token");
        return failure(StatusCode::FORBIDDEN, "Forbidden");
    };
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return failure(StatusCode::PAYLOAD_TOO_LARGE, "Payload too large");
        }
        Err(BodyError::Read(why)) => {
            debug!(%why, "reading the body");
            return failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid payload");
        }
    };
    let update = match request::decode(&body) {
        Ok(u) => u,
        Err(why) => {
            debug!(%why, "undecodable body");
            return failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid payload");
        }
    };
    match shared.auth.authorize(&token, &target).await {
        Ok(()) => {}
        Err(auth::AuthError::Denied(why)) => {
            info!(%why, "progress refused");
            return failure(StatusCode::FORBIDDEN, "Forbidden");
        }
        Err(e) => {
            warn!(error = %e, "reviewing a progress token");
            return failure(StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
        }
    }
    let echo = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
    let status = match update {
        Update::Nothing => return ok(&echo),
        Update::Replace(s) => s,
    };
    if let Err(wait) = shared.limiter.take(&target, Instant::now()) {
        let mut r = failure(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "too many progress updates for TrainJob {}/{}",
                target.namespace, target.name
            ),
        );
        let secs = wait.as_secs_f64().ceil().max(1.0).to_string();
        if let Ok(v) = HeaderValue::from_str(&secs) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let body = request::apply_body(&target, status, &now);
    let api: Api<TrainJob> = Api::namespaced(shared.client.clone(), &target.namespace);
    match api
        .patch_status(
            &target.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
    {
        Ok(_) => {
            debug!("progress written");
            ok(&echo)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {
            failure(StatusCode::NOT_FOUND, "Train job not found")
        }
        Err(kube::Error::Api(s)) if s.code == 422 => {
            failure(StatusCode::UNPROCESSABLE_ENTITY, &s.message)
        }
        Err(e) => {
            warn!(error = %e, "writing progress");
            failure(StatusCode::INTERNAL_SERVER_ERROR, "Internal error")
        }
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// More than [`request::MAX_BODY_BYTES`].
    #[error("the body is larger than {} bytes", request::MAX_BODY_BYTES)]
    TooLarge,
    /// The connection failed mid-body.
    #[error("reading the body: {0}")]
    Read(String),
}

/// Read at most [`request::MAX_BODY_BYTES`]. A larger body is refused, but
/// up to [`DRAIN_BYTES`] past the limit are read and thrown away first, as
/// Go's `net/http` does: a client still sending when the answer goes out
/// would otherwise see the connection reset instead of its `413`. Nothing
/// past the limit is kept, so a large body costs time, not memory.
async fn read_body(body: Body) -> Result<bytes::Bytes, BodyError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
        seen = seen.saturating_add(chunk.len());
        if seen <= request::MAX_BODY_BYTES {
            kept.extend_from_slice(&chunk);
        } else if seen > request::MAX_BODY_BYTES + DRAIN_BYTES {
            break;
        }
    }
    if seen > request::MAX_BODY_BYTES {
        return Err(BodyError::TooLarge);
    }
    Ok(kept.freeze())
}

fn ok(echo: &Value) -> Response {
    json_response(StatusCode::OK, echo)
}

fn failure(code: StatusCode, message: &str) -> Response {
    json_response(code, &request::failure(code, message))
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(v.to_string()),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;

    use super::*;

    /// A body of `chunks` chunks of 16 KiB that counts how many were pulled.
    fn counted(chunks: usize, pulled: Arc<AtomicUsize>) -> Body {
        let stream = futures::stream::iter(0..chunks).map(move |_| {
            pulled.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 16 << 10]))
        });
        Body::from_stream(stream)
    }

    #[tokio::test]
    async fn a_body_at_the_limit_is_read_whole_and_one_byte_more_is_too_large() {
        let at = read_body(Body::from(vec![b'x'; request::MAX_BODY_BYTES]))
            .await
            .unwrap();
        assert_eq!(at.len(), request::MAX_BODY_BYTES);
        let over = read_body(Body::from(vec![b'x'; request::MAX_BODY_BYTES + 1])).await;
        assert!(matches!(over, Err(BodyError::TooLarge)), "{over:?}");
    }

    #[tokio::test]
    async fn a_too_large_body_is_drained_a_bounded_amount_then_dropped() {
        // 96 KiB, as a chatty client sends: all of it is read before the 413.
        let pulled = Arc::new(AtomicUsize::new(0));
        let r = read_body(counted(6, pulled.clone())).await;
        assert!(matches!(r, Err(BodyError::TooLarge)), "{r:?}");
        assert_eq!(pulled.load(Ordering::SeqCst), 6);
        // 16 MiB: reading stops just past the drain bound.
        let pulled = Arc::new(AtomicUsize::new(0));
        let r = read_body(counted(1024, pulled.clone())).await;
        assert!(matches!(r, Err(BodyError::TooLarge)), "{r:?}");
        let bound = (request::MAX_BODY_BYTES + DRAIN_BYTES) / (16 << 10) + 1;
        assert_eq!(pulled.load(Ordering::SeqCst), bound);
    }
}
