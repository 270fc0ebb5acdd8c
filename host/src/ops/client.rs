//! The operator's Kubernetes API client: configuration inferred as kubectl
//! does (`$KUBECONFIG`, `~/.kube/config`, else in-cluster), and a
//! `User-Agent` naming us on every request.
//!
//! The `User-Agent` is `<component>/<version> (<os>/<arch>)`, e.g.
//! `trainforge/0.1.0 (linux/amd64)`, with Go's names for the OS and CPU as
//! client-go writes them. The API server names the field manager of a write
//! that gives none after the part before the first `/` (`trainforge`), and
//! audit logs show the whole string.
//!
//! Two clients share one configuration ([`Clients`]): kube's, which resends
//! a request the API server answered 429/503/504 after a backoff, and one
//! that never resends, for the fence ([`crate::ops::fence`]), which resends
//! itself and checks the fence before every attempt: a resend from inside
//! kube's client would pass no fence.

use kube::Config;
use reqwest::header::{HeaderValue, InvalidHeaderValue, USER_AGENT};

/// The component name of the operator's requests.
pub const OPERATOR_COMPONENT: &str = "trainforge";

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No kubeconfig and not in a cluster (or either is unreadable).
    #[error("finding the API server configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The `User-Agent` is not a valid header value.
    #[error("User-Agent {user_agent:?}: {source}")]
    UserAgent {
        /// The rejected value.
        user_agent: String,
        /// The cause.
        #[source]
        source: InvalidHeaderValue,
    },
    /// The client could not be built from the configuration.
    #[error("building the API client: {0}")]
    Build(#[source] kube::Error),
}

/// Go's name of this CPU architecture (`amd64`, `arm64`, ...).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// `<component>/<version> (<os>/<arch>)` for this build.
pub fn user_agent(component: &str) -> String {
    format!(
        "{component}/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        go_arch()
    )
}

/// `config` with `user_agent` as the `User-Agent` of every request
/// (replacing any set before).
pub fn with_user_agent(mut config: Config, user_agent: &str) -> Result<Config, Error> {
    let value = HeaderValue::from_str(user_agent).map_err(|source| Error::UserAgent {
        user_agent: user_agent.to_owned(),
        source,
    })?;
    config.headers.retain(|(name, _)| name != USER_AGENT);
    config.headers.push((USER_AGENT, value));
    Ok(config)
}

/// A client for `config` sending `user_agent`.
pub fn client_for(config: Config, user_agent: &str) -> Result<kube::Client, Error> {
    kube::Client::try_from(with_user_agent(config, user_agent)?).map_err(Error::Build)
}

/// The operator's clients (module rule).
#[derive(Clone)]
pub struct Clients {
    /// Resends a request answered 429/503/504 (kube's default).
    pub client: kube::Client,
    /// Never resends: the only client to give [`crate::ops::fence::Fence::client`].
    pub unretried: kube::Client,
}

/// Both clients for `config`, sending `user_agent`.
pub fn clients_for(config: Config, user_agent: &str) -> Result<Clients, Error> {
    let config = with_user_agent(config, user_agent)?;
    let mut once = config.clone();
    once.default_retry = false;
    Ok(Clients {
        client: kube::Client::try_from(config).map_err(Error::Build)?,
        unretried: kube::Client::try_from(once).map_err(Error::Build)?,
    })
}

/// The operator's clients: inferred configuration, [`OPERATOR_COMPONENT`]'s
/// [`user_agent`].
#[tracing::instrument(name = "api_client")]
pub async fn operator_clients() -> Result<Clients, Error> {
    let config = Config::infer().await?;
    clients_for(config, &user_agent(OPERATOR_COMPONENT))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn user_agent_names_component_version_and_platform() {
        let ua = user_agent("trainforge");
        let (name_version, platform) = ua.split_once(' ').unwrap();
        assert_eq!(
            name_version,
            format!("trainforge/{}", env!("CARGO_PKG_VERSION"))
        );
        assert!(
            platform.starts_with(&format!("({}/", std::env::consts::OS)) && platform.ends_with(')'),
            "{platform}"
        );
        if cfg!(target_arch = "x86_64") {
            assert!(ua.ends_with("/amd64)"), "{ua}");
        }
    }

    #[test]
    fn config_carries_exactly_one_user_agent() {
        let mut config = Config::new("https://127.0.0.1:6443".parse().unwrap());
        config
            .headers
            .push((USER_AGENT, HeaderValue::from_static("old")));
        let config = with_user_agent(config, "trainforge/1 (linux/amd64)").unwrap();
        let agents: Vec<&HeaderValue> = config
            .headers
            .iter()
            .filter(|(n, _)| n == USER_AGENT)
            .map(|(_, v)| v)
            .collect();
        assert_eq!(
            agents,
            [&HeaderValue::from_static("trainforge/1 (linux/amd64)")]
        );
        assert!(matches!(
            with_user_agent(Config::new("https://x".parse().unwrap()), "bad\nagent"),
            Err(Error::UserAgent { .. })
        ));
    }
}
