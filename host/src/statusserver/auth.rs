//! Who may write a TrainJob's progress: the bearer of a service-account
//! token whose audience is that TrainJob's status endpoint, from a service
//! account of its namespace, as the API server's `TokenReview` judges it.
//!
//! Rules:
//! - The review asks for exactly the TrainJob's audience
//!   ([`crate::plugin::facts::status_audience`]); the answer must be
//!   authenticated, name that audience, and a user
//!   `system:serviceaccount:<the TrainJob's namespace>:…`. So a token is good
//!   for one TrainJob only: another TrainJob's, one for another audience
//!   (the API server's own, `vault`, …) or from another namespace is `403`.
//! - A positive answer is remembered for [`REMEMBER`] (at most
//!   [`MAX_REMEMBERED`] answers, keyed by the token's SHA-256 and the
//!   TrainJob), so a pod reporting every few seconds costs one review a
//!   minute; a negative answer is never remembered.
//! - At most [`MAX_CONCURRENT_REVIEWS`] reviews are in flight; more wait.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::request::Target;
use crate::plugin::facts::status_audience;

/// How long a positive review is trusted.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// Most positive reviews remembered.
pub const MAX_REMEMBERED: usize = 10_000;
/// Most reviews in flight at once.
pub const MAX_CONCURRENT_REVIEWS: usize = 16;

/// Why a request was not authorised.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token does not grant this TrainJob (`403`).
    #[error("{0}")]
    Denied(String),
    /// The review could not be made (`500`).
    #[error("TokenReview failed: {0}")]
    Review(#[source] kube::Error),
}

/// Whether a review's answer grants writing `t`'s progress (see the module
/// rules).
pub fn judge(status: Option<&TokenReviewStatus>, t: &Target) -> Result<(), String> {
    let Some(s) = status else {
        return Err("no review status".into());
    };
    if s.authenticated != Some(true) {
        return Err(s
            .error
            .clone()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "token not authenticated".into()));
    }
    let audience = status_audience(&t.namespace, &t.name);
    if !s.audiences.iter().flatten().any(|a| *a == audience) {
        return Err(format!("token audience is not {audience}"));
    }
    let user = s
        .user
        .as_ref()
        .and_then(|u| u.username.as_deref())
        .unwrap_or_default();
    let prefix = format!("system:serviceaccount:{}:", t.namespace);
    if user.strip_prefix(&prefix).is_none_or(str::is_empty) {
        return Err(format!(
            "token user {user:?} is not a service account of namespace {}",
            t.namespace
        ));
    }
    Ok(())
}

/// Reviews tokens through the API server, remembering positive answers.
pub struct Authenticator {
    client: kube::Client,
    permits: Semaphore,
    remembered: Mutex<HashMap<([u8; 32], Target), Instant>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("remembered", &self.remembered().len())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator reviewing through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            permits: Semaphore::new(MAX_CONCURRENT_REVIEWS),
            remembered: Mutex::new(HashMap::new()),
        }
    }

    /// `Ok` when `token` may write `t`'s progress.
    pub async fn authorize(&self, token: &str, t: &Target) -> Result<(), AuthError> {
        let key = (Sha256::digest(token.as_bytes()).into(), t.clone());
        let now = Instant::now();
        if self
            .remembered()
            .get(&key)
            .is_some_and(|until| *until > now)
        {
            return Ok(());
        }
        let _permit = self.permits.acquire().await;
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![status_audience(&t.namespace, &t.name)]),
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::Review)?;
        judge(answer.status.as_ref(), t).map_err(AuthError::Denied)?;
        let mut remembered = self.remembered();
        if remembered.len() >= MAX_REMEMBERED {
            remembered.retain(|_, until| *until > now);
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(key, now + REMEMBER);
        Ok(())
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, HashMap<([u8; 32], Target), Instant>> {
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::api::authentication::v1::UserInfo;

    use super::*;

    fn target() -> Target {
        Target {
            namespace: "team-a".into(),
            name: "job-1".into(),
        }
    }

    fn answer(ok: bool, audience: &str, user: &str) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(ok),
            audiences: Some(vec![audience.into()]),
            user: Some(UserInfo {
                username: Some(user.into()),
                ..UserInfo::default()
            }),
            error: None,
        }
    }

    #[test]
    fn only_a_service_account_token_for_this_trainjob_is_granted() {
        let aud = "trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job-1/status";
        let sa = "system:serviceaccount:team-a:default";
        assert_eq!(judge(Some(&answer(true, aud, sa)), &target()), Ok(()));
        let refused = [
            (answer(false, aud, sa), "token not authenticated"),
            (
                answer(
                    true,
                    "trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job-2/status",
                    sa,
                ),
                "token audience is not",
            ),
            (answer(true, "vault", sa), "token audience is not"),
            (
                answer(true, aud, "system:serviceaccount:team-b:default"),
                "not a service account of namespace team-a",
            ),
            (
                answer(true, aud, "system:serviceaccount:team-a:"),
                "not a service account",
            ),
            (answer(true, aud, "alice"), "not a service account"),
        ];
        for (status, why) in refused {
            let e = judge(Some(&status), &target()).unwrap_err();
            assert!(e.contains(why), "{e} ∌ {why}");
        }
        assert!(judge(None, &target()).is_err());
    }
}
