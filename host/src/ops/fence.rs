//! Fencing: a replica that cannot be sure it still holds the Lease writes
//! nothing.
//!
//! Rule: the controllers' client ([`Fence::client`]) sends a request that
//! changes anything (any method but `GET`/`HEAD`/`OPTIONS`, apart from the
//! authorization and authentication reviews, which only ask) only while the
//! fence is open, and the fence is open only until a time the election
//! derives from the Lease it last read: at most the Lease's own expiry
//! (`renewTime + leaseDurationSeconds`) less a margin, on the monotonic
//! clock. A replica paused (SIGSTOP, a stalled VM) past that time finds the
//! fence closed the moment it runs again, before its election task has
//! noticed that another replica took the Lease; one that loses or releases
//! the Lease closes it at once. A refused write fails with [`Fenced`]
//! naming why, as a failed request would, and the reconcile is retried (by
//! the next leader).
//!
//! Checked when the request is sent, and again before each resend of a
//! request the API server answered 429/503/504 (kube's retry policy, run
//! here around the check: the client given must not resend by itself,
//! [`crate::ops::client::Clients::unretried`]); a resend after a pause is
//! refused like a first attempt. A request that passed the fence just
//! before the process was paused may still reach the API server after it
//! runs again (Kubernetes has no write precondition on a Lease to close
//! that gap): such a write, answered as done after the fence's time, is
//! logged as a warning naming its method and path, so that the gap, when it
//! is hit, is seen rather than silent.
//!
//! [`Fence::open`] is always open (no election: this replica leads alone).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Request};
use kube::client::Body;

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
#[error("write refused: {0}")]
pub struct Fenced(String);

#[derive(Debug)]
enum State {
    /// No election: always open.
    Always,
    /// Open until this instant (`None`: closed), and why it is closed.
    Until(Option<Instant>, &'static str),
}

/// Whether this replica may write now (see the module rule). Clones share
/// one state.
#[derive(Debug, Clone)]
pub struct Fence(Arc<Mutex<State>>);

impl Fence {
    /// Always open: this replica leads alone.
    pub fn open() -> Self {
        Fence(Arc::new(Mutex::new(State::Always)))
    }

    /// Closed until [`Fence::open_until`] (a replica that has not acquired
    /// the Lease yet).
    pub fn closed() -> Self {
        Fence(Arc::new(Mutex::new(State::Until(
            None,
            "this replica has not acquired the Lease",
        ))))
    }

    /// Open until `until` (the Lease read as held by this replica).
    pub fn open_until(&self, until: Instant) {
        if let Ok(mut s) = self.0.lock()
            && let State::Until(u, _) = &mut *s
        {
            *u = Some(until);
        }
    }

    /// Closed from now on, because of `why` (until opened again).
    pub fn close(&self, why: &'static str) {
        if let Ok(mut s) = self.0.lock()
            && let State::Until(..) = *s
        {
            *s = State::Until(None, why);
        }
    }

    /// `Ok` while open, with the instant it closes (`None`: never); else
    /// why not.
    pub fn check(&self) -> Result<Option<Instant>, Fenced> {
        let s = self
            .0
            .lock()
            .map_err(|_| Fenced("the fence's state is poisoned".into()))?;
        match &*s {
            State::Always => Ok(None),
            State::Until(Some(until), _) if Instant::now() < *until => Ok(Some(*until)),
            State::Until(Some(until), _) => Err(Fenced(format!(
                "this replica's hold on the Lease ran out {:.1}s ago (not renewed in time, or the process was paused)",
                until.elapsed().as_secs_f64()
            ))),
            State::Until(None, why) => Err(Fenced((*why).to_owned())),
        }
    }

    /// `client` (one that never resends by itself), with every request that
    /// changes something passed through this fence, and resent on
    /// 429/503/504 only through it again (see the module rule).
    pub fn client(&self, client: kube::Client) -> kube::Client {
        let fence = self.clone();
        let namespace = client.default_namespace().to_owned();
        let checked = tower::service_fn(move |req: Request<Body>| {
            let (fence, client) = (fence.clone(), client.clone());
            async move {
                if !changes_something(&req) {
                    return client
                        .send(req)
                        .await
                        .map_err(|e| Box::new(e) as tower::BoxError);
                }
                let until = fence.check().map_err(|e| Box::new(e) as tower::BoxError)?;
                let (method, path) = (req.method().clone(), req.uri().path().to_owned());
                let res = client
                    .send(req)
                    .await
                    .map_err(|e| Box::new(e) as tower::BoxError)?;
                if let Some(late) = answered_late(until, res.status()) {
                    tracing::warn!(
                        %method,
                        %path,
                        late_ms = late.as_millis() as u64,
                        "a write that passed the fence before this replica's hold on the Lease ran out was done after it (the process was paused while sending it)"
                    );
                }
                Ok(res)
            }
        });
        let service = tower::ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(
                kube::client::retry::RetryPolicy::server_retry(),
            ))
            .service(checked);
        kube::Client::new(service, namespace)
    }
}

/// How long after the fence's time `until` a write answered `status` was
/// done, if it was done (not refused) after it.
fn answered_late(until: Option<Instant>, status: http::StatusCode) -> Option<Duration> {
    let late = Instant::now().checked_duration_since(until?)?;
    (!late.is_zero() && !status.is_client_error() && !status.is_server_error()).then_some(late)
}

/// Whether a request may change something: not a read, nor a review that
/// only asks the API server (`SelfSubjectAccessReview`, `TokenReview`, …).
fn changes_something<B>(req: &Request<B>) -> bool {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return false;
    }
    let path = req.uri().path();
    !(path.starts_with("/apis/authorization.k8s.io/")
        || path.starts_with("/apis/authentication.k8s.io/"))
}

/// How long a Lease read at `read_at` (its request's start) stays ours:
/// until its expiry (`renew_time + duration`, by this host's wall clock
/// `now_wall` at the read) less `margin` for the clocks of other replicas;
/// `None` if that is already past.
pub fn held_until(
    read_at: Instant,
    now_wall: k8s_openapi::jiff::Timestamp,
    renew_time: k8s_openapi::jiff::Timestamp,
    duration: Duration,
    margin: Duration,
) -> Option<Instant> {
    let expires = renew_time.checked_add(duration).ok()?;
    let left = now_wall.duration_until(expires);
    let left = Duration::try_from(left).ok()?.checked_sub(margin)?;
    // Never longer than a Lease lasts, whatever the clocks say.
    read_at.checked_add(left.min(duration))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn only_requests_that_change_something_are_fenced() {
        let p = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/x";
        assert!(!changes_something(&request(Method::GET, p)));
        assert!(!changes_something(&request(Method::HEAD, p)));
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(changes_something(&request(m, p)));
        }
        assert!(!changes_something(&request(
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        )));
        assert!(!changes_something(&request(
            Method::POST,
            "/apis/authentication.k8s.io/v1/tokenreviews"
        )));
        assert!(changes_something(&request(
            Method::POST,
            "/api/v1/namespaces/a/events"
        )));
    }

    #[test]
    fn a_fence_is_open_only_until_its_time_and_until_closed() {
        let f = Fence::closed();
        assert!(f.check().unwrap_err().to_string().contains("not acquired"));
        f.open_until(Instant::now() + Duration::from_secs(60));
        assert!(f.check().is_ok());
        let clone = f.clone();
        clone.close("the Lease was lost");
        assert!(f.check().unwrap_err().to_string().contains("lost"));
        f.open_until(Instant::now() - Duration::from_millis(1));
        assert!(f.check().unwrap_err().to_string().contains("ran out"));
        let always = Fence::open();
        always.close("ignored");
        assert!(always.check().is_ok(), "no election: always open");
    }

    #[test]
    fn only_a_write_done_after_the_fences_time_is_late() {
        let past = Instant::now() - Duration::from_millis(5);
        let future = Instant::now() + Duration::from_secs(60);
        assert!(
            answered_late(Some(past), http::StatusCode::OK).unwrap() >= Duration::from_millis(5)
        );
        assert!(answered_late(Some(past), http::StatusCode::CREATED).is_some());
        assert_eq!(
            answered_late(Some(past), http::StatusCode::CONFLICT),
            None,
            "refused: nothing done"
        );
        assert_eq!(
            answered_late(Some(past), http::StatusCode::SERVICE_UNAVAILABLE),
            None
        );
        assert_eq!(
            answered_late(Some(future), http::StatusCode::OK),
            None,
            "in time"
        );
        assert_eq!(
            answered_late(None, http::StatusCode::OK),
            None,
            "no election"
        );
    }

    #[test]
    fn a_lease_is_held_until_its_expiry_less_the_margin() {
        let now = Instant::now();
        let wall = k8s_openapi::jiff::Timestamp::now();
        let d = Duration::from_secs(15);
        let m = Duration::from_secs(2);
        let renewed = wall.checked_sub(Duration::from_secs(5)).unwrap();
        let until = held_until(now, wall, renewed, d, m).unwrap();
        assert_eq!(until - now, Duration::from_secs(8));
        // Renewed 14 s ago: only 1 s left, less than the margin.
        let old = wall.checked_sub(Duration::from_secs(14)).unwrap();
        assert_eq!(held_until(now, wall, old, d, m), None);
        // A renewal "in the future" (a skewed clock) holds one Lease at most.
        let ahead = wall.checked_add(Duration::from_secs(600)).unwrap();
        assert_eq!(held_until(now, wall, ahead, d, m).unwrap() - now, d);
    }

    /// A client whose API server answers 429 to every write, counting the
    /// attempts; `on_attempt` runs at each.
    fn throttled(on_attempt: impl Fn() + Send + Sync + 'static) -> (kube::Client, Arc<Mutex<u32>>) {
        let attempts = Arc::new(Mutex::new(0u32));
        let (count, on_attempt) = (attempts.clone(), Arc::new(on_attempt));
        let service = tower::service_fn(move |_req: Request<Body>| {
            let (count, on_attempt) = (count.clone(), on_attempt.clone());
            async move {
                *count.lock().unwrap() += 1;
                on_attempt();
                http::Response::builder()
                    .status(429)
                    .body(Body::empty())
                    .map_err(tower::BoxError::from)
            }
        });
        (kube::Client::new(service, "default"), attempts)
    }

    fn patch() -> Request<Body> {
        Request::builder()
            .method(Method::PATCH)
            .uri("/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/x/status")
            .body(Body::from(b"{}".to_vec()))
            .unwrap()
    }

    /// A write the API server throttles is resent (kube's policy), each
    /// resend through the fence: once the fence closes (here: during the
    /// first attempt, as a pause past the Lease would), nothing more is sent.
    #[tokio::test]
    async fn a_resend_passes_the_fence_again() {
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let closer = fence.clone();
        let (inner, attempts) = throttled(move || closer.close("the Lease was lost"));
        let err = fence.client(inner).send(patch()).await.unwrap_err();
        assert!(err.to_string().contains("lost"), "{err}");
        assert_eq!(*attempts.lock().unwrap(), 1, "resent past a closed fence");

        // While the fence stays open, the same write is resent (429 each
        // time, up to kube's retry budget).
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let (inner, attempts) = throttled(|| ());
        let _ = tokio::time::timeout(
            Duration::from_millis(200),
            fence.client(inner).send(patch()),
        )
        .await;
        assert!(*attempts.lock().unwrap() > 1, "a throttled write is resent");
    }

    /// A write that passed the fence in time but was done after the fence's
    /// time (the process paused while sending it) is warned about, naming
    /// its method and path; it is not refused, since it was sent.
    #[test]
    fn a_write_done_after_the_fences_time_is_warned_about() {
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let slow = tower::service_fn(|_req: Request<Body>| async {
            std::thread::sleep(Duration::from_millis(80));
            http::Response::builder()
                .status(200)
                .body(Body::empty())
                .map_err(tower::BoxError::from)
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_rt = rt.enter();
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_millis(40));
        let client = fence.client(kube::Client::new(slow, "default"));
        tracing::subscriber::with_default(subscriber, || {
            rt.block_on(client.send(patch())).unwrap();
        });
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("was done after it"), "{log}");
        assert!(log.contains("method=PATCH"), "{log}");
        assert!(
            log.contains(
                "path=/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/x/status "
            ),
            "{log}"
        );
        // The fence is closed now: the next write is refused, unsent.
        let err = rt.block_on(client.send(patch())).unwrap_err();
        assert!(err.to_string().contains("ran out"), "{err}");
    }
}
