//! Who may read `/metrics` on the secure metrics server: the API server
//! judges it, as controller-runtime's `WithAuthenticationAndAuthorization`
//! filter does for Kubebuilder operators, so a Prometheus Operator
//! `ServiceMonitor` scraping with its service-account token works unchanged.
//!
//! Rules:
//! - A request needs `Authorization: Bearer <token>`. The token is reviewed
//!   with a `TokenReview` for the API server's own audiences; no token, or
//!   one the review does not authenticate, is `401 Unauthorized`.
//! - The reviewed user (name, uid, groups, extra) must be allowed verb `get`
//!   on the non-resource URL of the request's path (`/metrics`) by a
//!   `SubjectAccessReview`; a denial is `403 Forbidden`. Granting it is
//!   RBAC: `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the shipped
//!   ClusterRole `trainforge-metrics-reader`).
//! - A review that cannot be made (API server unreachable, the operator
//!   lacking `create` on `tokenreviews` or `subjectaccessreviews`) is
//!   `500` and never serves the metrics.
//! - Answers are remembered as controller-runtime remembers them: an
//!   authenticated token for [`AUTHENTICATED_FOR`], an allowed user and path
//!   for [`ALLOWED_FOR`], a denied one for [`DENIED_FOR`]. A token the review
//!   refuses is never remembered, so a stream of bad tokens cannot fill
//!   memory; each memory holds at most [`MAX_REMEMBERED`] answers (expired
//!   ones are dropped first, then all). Tokens are kept only as SHA-256.
//! - At most [`MAX_CONCURRENT_REVIEWS`] reviews are in flight; more wait.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

/// How long an authenticated token is trusted without a new review.
pub const AUTHENTICATED_FOR: Duration = Duration::from_secs(60);
/// How long an allowed (user, path) is trusted without a new review.
pub const ALLOWED_FOR: Duration = Duration::from_secs(300);
/// How long a denied (user, path) is remembered.
pub const DENIED_FOR: Duration = Duration::from_secs(30);
/// Most answers each memory (tokens, decisions) holds.
pub const MAX_REMEMBERED: usize = 4096;
/// Most reviews in flight at once.
pub const MAX_CONCURRENT_REVIEWS: usize = 16;
/// The verb asked for on the non-resource URL.
pub const VERB: &str = "get";

/// Why a request is not served.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// No bearer token, or one the API server does not authenticate (`401`).
    #[error("unauthorized: {0}")]
    Unauthenticated(String),
    /// The user may not `get` the path (`403`).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A review could not be made (`500`).
    #[error("{step} failed: {source}")]
    Review {
        /// `TokenReview` or `SubjectAccessReview`.
        step: &'static str,
        /// The API error.
        source: kube::Error,
    },
}

impl Refusal {
    /// The HTTP status this refusal answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Review { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The user a token authenticates as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// `system:serviceaccount:monitoring:prometheus`, ….
    pub name: String,
    /// The user's UID, when the authenticator gives one.
    pub uid: Option<String>,
    /// Groups, as the review gave them.
    pub groups: Vec<String>,
    /// Extra attributes (sorted by key).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    fn from_review(info: &UserInfo) -> Option<Self> {
        let name = info.username.clone().filter(|n| !n.is_empty())?;
        Some(Self {
            name,
            uid: info.uid.clone(),
            groups: info.groups.clone().unwrap_or_default(),
            extra: info.extra.clone().unwrap_or_default().into_iter().collect(),
        })
    }
}

/// The two reviews, as the API server answers them. [`ApiReviews`] asks the
/// API server; tests answer themselves.
pub trait Reviews: Send + Sync + 'static {
    /// Review `token`: the user it authenticates as, or why not (`Ok(Err)`).
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Result<User, String>, kube::Error>> + Send;
    /// Whether `user` may `verb` the non-resource URL `path`: `Ok(Err)`
    /// carries the denial's reason.
    fn authorize(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> impl Future<Output = Result<Result<(), String>, kube::Error>> + Send;
}

/// [`Reviews`] by the API server: `TokenReview` and `SubjectAccessReview`.
#[derive(Clone)]
pub struct ApiReviews {
    client: kube::Client,
}

impl std::fmt::Debug for ApiReviews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiReviews").finish_non_exhaustive()
    }
}

impl ApiReviews {
    /// Reviews made through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl Reviews for ApiReviews {
    async fn authenticate(&self, token: &str) -> Result<Result<User, String>, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let Some(status) = answer.status else {
            return Ok(Err("the review has no status".into()));
        };
        if status.authenticated != Some(true) {
            return Ok(Err(status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "token not authenticated".into())));
        }
        Ok(status
            .user
            .as_ref()
            .and_then(User::from_review)
            .ok_or_else(|| "the review names no user".to_owned()))
    }

    async fn authorize(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> Result<Result<(), String>, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        if status.allowed && status.denied != Some(true) {
            return Ok(Ok(()));
        }
        let reason = status
            .reason
            .filter(|r| !r.is_empty())
            .or(status.evaluation_error.filter(|e| !e.is_empty()))
            .unwrap_or_else(|| "no RBAC rule allows it".into());
        Ok(Err(reason))
    }
}

/// Answers remembered until a deadline, at most [`MAX_REMEMBERED`].
struct Memory<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Hash + Eq, V: Clone> Memory<K, V> {
    fn new() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, (Instant, V)>> {
        // Entries are inserted whole: a panic cannot leave one half-written.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.lock()
            .get(key)
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V, now: Instant, ttl: Duration) {
        let mut entries = self.lock();
        if entries.len() >= MAX_REMEMBERED && !entries.contains_key(&key) {
            entries.retain(|_, (until, _)| *until > now);
            if entries.len() >= MAX_REMEMBERED {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The gate in front of `/metrics` (see the module rules).
pub struct MetricsAuth<R: Reviews = ApiReviews> {
    reviews: R,
    permits: Semaphore,
    tokens: Memory<[u8; 32], User>,
    decisions: Memory<(User, String), Result<(), String>>,
}

impl<R: Reviews> std::fmt::Debug for MetricsAuth<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAuth")
            .field("tokens", &self.tokens.len())
            .field("decisions", &self.decisions.len())
            .finish_non_exhaustive()
    }
}

impl<R: Reviews> MetricsAuth<R> {
    /// A gate asking `reviews`.
    pub fn new(reviews: R) -> Self {
        Self {
            reviews,
            permits: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            tokens: Memory::new(),
            decisions: Memory::new(),
        }
    }

    /// `Ok` when the request with `headers` may `get` `path`.
    pub async fn check(&self, headers: &HeaderMap, path: &str) -> Result<User, Refusal> {
        let token = bearer(headers).ok_or_else(|| {
            Refusal::Unauthenticated("no bearer token in the Authorization header".into())
        })?;
        let user = self.authenticate(token).await?;
        self.authorize(&user, path).await?;
        Ok(user)
    }

    async fn authenticate(&self, token: &str) -> Result<User, Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = self.tokens.get(&key, Instant::now()) {
            return Ok(user);
        }
        let answer = {
            let _permit = self.permits.acquire().await;
            self.reviews.authenticate(token).await
        };
        match answer {
            Err(source) => Err(Refusal::Review {
                step: "TokenReview",
                source,
            }),
            Ok(Err(why)) => Err(Refusal::Unauthenticated(why)),
            Ok(Ok(user)) => {
                self.tokens
                    .put(key, user.clone(), Instant::now(), AUTHENTICATED_FOR);
                Ok(user)
            }
        }
    }

    async fn authorize(&self, user: &User, path: &str) -> Result<(), Refusal> {
        let key = (user.clone(), path.to_owned());
        let decision = match self.decisions.get(&key, Instant::now()) {
            Some(d) => d,
            None => {
                let answer = {
                    let _permit = self.permits.acquire().await;
                    self.reviews.authorize(user, VERB, path).await
                };
                let decision = answer.map_err(|source| Refusal::Review {
                    step: "SubjectAccessReview",
                    source,
                })?;
                let ttl = if decision.is_ok() {
                    ALLOWED_FOR
                } else {
                    DENIED_FOR
                };
                self.decisions
                    .put(key, decision.clone(), Instant::now(), ttl);
                decision
            }
        };
        decision.map_err(|why| {
            Refusal::Forbidden(format!(
                "user {:?} may not {VERB} path {path:?}: {why}",
                user.name
            ))
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Axum middleware: serve the request only when [`MetricsAuth::check`]
/// passes; otherwise answer with the refusal's status and reason.
pub async fn guard<R: Reviews>(
    State(auth): State<Arc<MetricsAuth<R>>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    match auth.check(req.headers(), &path).await {
        Ok(user) => {
            tracing::trace!(user = %user.name, %path, "metrics scrape authorised");
            next.run(req).await
        }
        Err(refusal) => {
            match &refusal {
                Refusal::Review { .. } => {
                    tracing::warn!(error = %refusal, %path, "metrics request not reviewed")
                }
                _ => tracing::debug!(error = %refusal, %path, "metrics request refused"),
            }
            let mut response = (refusal.status(), format!("{refusal}\n")).into_response();
            if refusal.status() == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Tokens `good-<user>` authenticate as `<user>`; users named
    /// `reader*` may get `/metrics`; `broken` fails the review itself.
    #[derive(Default)]
    struct Fake {
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
    }

    fn api_error() -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("tokenreviews is forbidden", "Forbidden").with_code(403),
        ))
    }

    impl Reviews for Arc<Fake> {
        async fn authenticate(&self, token: &str) -> Result<Result<User, String>, kube::Error> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            if token == "broken" {
                return Err(api_error());
            }
            Ok(match token.strip_prefix("good-") {
                Some(name) => Ok(User {
                    name: name.to_owned(),
                    uid: None,
                    groups: vec!["system:authenticated".into()],
                    extra: BTreeMap::new(),
                }),
                None => Err("invalid bearer token".into()),
            })
        }

        async fn authorize(
            &self,
            user: &User,
            verb: &str,
            path: &str,
        ) -> Result<Result<(), String>, kube::Error> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            assert_eq!(verb, "get");
            Ok(if user.name.starts_with("reader") && path == "/metrics" {
                Ok(())
            } else {
                Err("no rule".into())
            })
        }
    }

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn codes_follow_the_reviews() {
        let fake = Arc::new(Fake::default());
        let auth = MetricsAuth::new(fake.clone());
        let status =
            |r: Result<User, Refusal>| r.map(|_| StatusCode::OK).unwrap_or_else(|e| e.status());

        assert_eq!(
            status(auth.check(&HeaderMap::new(), "/metrics").await),
            StatusCode::UNAUTHORIZED
        );
        for h in ["Basic abc", "Bearer", "Bearer   ", "bearer-good-reader"] {
            assert_eq!(
                status(auth.check(&headers(h), "/metrics").await),
                StatusCode::UNAUTHORIZED,
                "{h}"
            );
        }
        // No review was made for a request without a bearer token.
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 0);
        assert_eq!(
            status(auth.check(&headers("Bearer bad"), "/metrics").await),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status(
                auth.check(&headers("Bearer good-mallory"), "/metrics")
                    .await
            ),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(auth.check(&headers("Bearer good-reader"), "/debug").await),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(auth.check(&headers("bearer good-reader"), "/metrics").await),
            StatusCode::OK
        );
        assert_eq!(
            status(auth.check(&headers("Bearer broken"), "/metrics").await),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let e = auth
            .check(&headers("Bearer good-mallory"), "/metrics")
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("\"mallory\" may not get path \"/metrics\""),
            "{e}"
        );
    }

    #[tokio::test]
    async fn answers_are_remembered_but_refused_tokens_are_not() {
        let fake = Arc::new(Fake::default());
        let auth = MetricsAuth::new(fake.clone());
        for _ in 0..5 {
            auth.check(&headers("Bearer good-reader"), "/metrics")
                .await
                .unwrap();
            auth.check(&headers("Bearer good-mallory"), "/metrics")
                .await
                .unwrap_err();
            auth.check(&headers("Bearer bad"), "/metrics")
                .await
                .unwrap_err();
        }
        // reader and mallory once each; the refused token every time.
        assert_eq!(fake.token_reviews.load(Ordering::SeqCst), 2 + 5);
        assert_eq!(fake.access_reviews.load(Ordering::SeqCst), 2);
        assert_eq!(auth.tokens.len(), 2);
    }

    #[tokio::test]
    async fn the_router_serves_metrics_to_readers_only() {
        use axum::body::Body;
        use tower::ServiceExt;

        let metrics = Arc::new(crate::ops::Metrics::new());
        let router = crate::ops::health::authorized_metrics_router(
            metrics,
            Arc::new(MetricsAuth::new(Arc::new(Fake::default()))),
        );
        let get = |auth: Option<&'static str>, path: &'static str| {
            let router = router.clone();
            async move {
                let mut req = axum::http::Request::get(path);
                if let Some(a) = auth {
                    req = req.header(header::AUTHORIZATION, a);
                }
                let resp = router
                    .oneshot(req.body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                let status = resp.status();
                let challenge = resp.headers().get(header::WWW_AUTHENTICATE).cloned();
                let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (
                    status,
                    challenge,
                    String::from_utf8_lossy(&body).into_owned(),
                )
            }
        };
        let (code, challenge, body) = get(None, "/metrics").await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        assert_eq!(challenge.unwrap(), "Bearer");
        assert!(!body.contains("# EOF"), "{body}");
        let (code, _, body) = get(Some("Bearer good-mallory"), "/metrics").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert!(!body.contains("# EOF"), "{body}");
        let (code, _, body) = get(Some("Bearer good-reader"), "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(
            body.contains("trainforge_") && body.ends_with("# EOF\n"),
            "{body}"
        );
        // Every path is gated, and the secure router has no probes (they
        // stay on the plain port).
        let (code, _, _) = get(None, "/healthz").await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        let (code, _, body) = get(Some("Bearer good-reader"), "/healthz").await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    }

    #[test]
    fn memories_expire_and_stay_bounded() {
        let m: Memory<u32, ()> = Memory::new();
        let now = Instant::now();
        m.put(1, (), now, Duration::from_secs(30));
        assert!(m.get(&1, now + Duration::from_secs(29)).is_some());
        assert!(m.get(&1, now + Duration::from_secs(30)).is_none());
        for k in 0..(MAX_REMEMBERED as u32 * 3) {
            m.put(k, (), now, Duration::from_secs(30));
            assert!(m.len() <= MAX_REMEMBERED);
        }
        // Expired entries go first: a live one survives a full memory.
        let m: Memory<u32, ()> = Memory::new();
        m.put(u32::MAX, (), now, Duration::from_secs(600));
        for k in 0..(MAX_REMEMBERED as u32 - 1) {
            m.put(k, (), now, Duration::from_secs(1));
        }
        m.put(
            7_000_000,
            (),
            now + Duration::from_secs(2),
            Duration::from_secs(1),
        );
        assert!(m.get(&u32::MAX, now + Duration::from_secs(2)).is_some());
        assert_eq!(m.len(), 2);
    }
}
