//! Facts about the operator that the host hands to the plugins that ask for
//! them: today, where the TrainJob status server listens and which CA its
//! certificate chains to.
//!
//! Rules:
//! - Only a plugin that declares the capability
//!   [`CAPABILITY_STATUS_SERVER`] in `describe` *and* is granted it
//!   (`trainJobStatusServer`) sees them; they arrive in its configuration
//!   under [`CONFIG_KEY`] as `{"url": "https://…:10443", "caCert": "PEM"}`,
//!   replacing whatever the administrator wrote under that key. The host
//!   derives them (flags, the serving certificate); nothing a plugin says
//!   changes them.
//! - With the status server off the key is absent (the plugin does
//!   nothing). While it is starting (its certificate not loaded yet) a call
//!   of such a plugin fails as `Unavailable` without running it, so no pod
//!   is rendered without what the feature promises; the reconcile is
//!   retried.
//! - A change of the facts (a new CA) reaches a TrainJob at its next full
//!   render, at most one resync period later (renders are reused while
//!   their inputs are unchanged; the facts are not one of those inputs).

use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::Value;
pub use trainforge_api::trainer::v1alpha1::status_audience;

/// The capability a plugin declares to be given the status server's facts.
pub const CAPABILITY_STATUS_SERVER: &str = "trainjob-status-server";

/// The key of the plugin configuration the facts are written under.
pub const CONFIG_KEY: &str = "trainJobStatusServer";

/// Where the status server stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StatusServer {
    /// Not served (the default, as upstream's `TrainJobStatus` gate).
    #[default]
    Off,
    /// Served at `url` once its certificate is loaded.
    Starting {
        /// Base URL pods reach it at (`https://host:port`).
        url: String,
    },
    /// Served at `url` with a certificate `ca_cert` (PEM) verifies.
    Ready {
        /// Base URL pods reach it at (`https://host:port`).
        url: String,
        /// CA bundle (PEM).
        ca_cert: String,
    },
}

/// The facts, shared by every plugin of a runtime and updated by the
/// operator as its servers start and their certificates change.
#[derive(Debug, Default)]
pub struct HostFacts {
    status_server: ArcSwap<StatusServer>,
}

/// Why a call cannot have the facts it asked for yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the TrainJob status server at {url} has no certificate loaded yet")]
pub struct NotReady {
    /// The server's base URL.
    pub url: String,
}

impl HostFacts {
    /// Publish where the status server stands.
    pub fn set_status_server(&self, s: StatusServer) {
        self.status_server.store(Arc::new(s));
    }

    /// Where the status server stands now.
    pub fn status_server(&self) -> Arc<StatusServer> {
        self.status_server.load_full()
    }

    /// `config` (the plugin's configuration, JSON) with the facts written
    /// under [`CONFIG_KEY`] (see the module rules). A configuration that is
    /// not a JSON object is passed on unchanged: the plugin refuses it.
    pub fn config_with_facts(&self, config: &str) -> Result<String, NotReady> {
        let (url, ca) = match &**self.status_server.load() {
            StatusServer::Off => return Ok(config.to_owned()),
            StatusServer::Starting { url } => return Err(NotReady { url: url.clone() }),
            StatusServer::Ready { url, ca_cert } => (url.clone(), ca_cert.clone()),
        };
        let mut v: Value = match serde_json::from_str(config) {
            Ok(v) => v,
            Err(_) => return Ok(config.to_owned()),
        };
        let Some(m) = v.as_object_mut() else {
            return Ok(config.to_owned());
        };
        m.insert(
            CONFIG_KEY.to_owned(),
            serde_json::json!({ "url": url, "caCert": ca }),
        );
        Ok(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn facts_reach_the_configuration_only_once_ready() {
        let f = HostFacts::default();
        assert_eq!(f.config_with_facts(r#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
        f.set_status_server(StatusServer::Starting {
            url: "https://s.ns.svc:10443".into(),
        });
        assert_eq!(
            f.config_with_facts("{}").unwrap_err().to_string(),
            "the TrainJob status server at https://s.ns.svc:10443 has no certificate loaded yet"
        );
        f.set_status_server(StatusServer::Ready {
            url: "https://s.ns.svc:10443".into(),
            ca_cert: "PEM".into(),
        });
        let out: Value = serde_json::from_str(
            &f.config_with_facts(r#"{"a":1,"trainJobStatusServer":{"url":"https://evil"}}"#)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"a": 1, "trainJobStatusServer": {"url": "https://s.ns.svc:10443", "caCert": "PEM"}}),
            "the administrator's value under the key is replaced"
        );
        assert_eq!(f.config_with_facts("[1]").unwrap(), "[1]");
    }
}
