//! From a `ClusterTrainerPlugin` spec to what the plugin runtime takes:
//! limits, grants, configuration JSON, failure policy, phase and emitted-kind
//! narrowing. [`plugin_source`] is the one place a spec becomes a
//! [`PluginSource`].

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_quantity::ParsedQuantity;
use trainforge_api::plugin::{KindRef, Phase};
use trainforge_api::trainforge::v1alpha1::{ClusterTrainerPluginSpec, FailurePolicy};

use crate::plugin::{Grants, Limits, ObjectSource, PluginSource, PodGrants};

/// Shortest and longest call deadline accepted (the CRD enforces the same).
pub const TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(30));

/// Largest memory cap accepted (the CRD enforces the same).
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

/// A spec value the API server's rules let through but the operator cannot use.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `limits.timeout` is not a duration in range.
    #[error(
        "limits.timeout {0:?}: expected milliseconds (10 to 30000) or a duration such as 500ms or 2s (10ms to 30s)"
    )]
    Timeout(String),
    /// `limits.concurrency` is not in range.
    #[error("limits.concurrency {0}: expected 1 to 64 calls at once")]
    Concurrency(i32),
    /// `limits.memory` is not a size in range.
    #[error(
        "limits.memory {0:?}: expected MiB (1 to 1024) or a quantity such as 128Mi (at most 1Gi)"
    )]
    Memory(String),
    /// `config` could not be serialised.
    #[error("config: {0}")]
    Config(#[from] serde_json::Error),
}

/// What the spec says about how to run the plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginOptions {
    /// Position in the pipeline (ties broken by CR name).
    pub order: i32,
    /// Configuration JSON passed to every call.
    pub config: String,
    /// Capabilities granted.
    pub grants: Grants,
    /// Limits, when the spec overrides the runtime's defaults.
    pub limits: Option<Limits>,
    /// What a reconcile does when the plugin cannot answer.
    pub failure_policy: FailurePolicy,
    /// Phases the operator calls (all implemented when `None`).
    pub phases: Option<Vec<Phase>>,
    /// Kinds the plugin may emit (what it declares when `None`).
    pub allowed_emits: Option<Vec<KindRef>>,
    /// Kinds the plugin may read (what it declares when `None`).
    pub allowed_reads: Option<Vec<KindRef>>,
}

/// Parse `limits.timeout`: an integer is milliseconds, a string a duration
/// (`500ms`, `2s`, `1m`).
pub fn parse_timeout(v: &IntOrString) -> Result<Duration, SpecError> {
    let d = match v {
        IntOrString::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
        IntOrString::String(s) => s
            .parse::<k8s_openapi::jiff::SignedDuration>()
            .ok()
            .and_then(|d| Duration::try_from(d).ok()),
    };
    let text = || match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    match d {
        Some(d) if d >= TIMEOUT_RANGE.0 && d <= TIMEOUT_RANGE.1 => Ok(d),
        _ => Err(SpecError::Timeout(text())),
    }
}

/// Parse `limits.memory`: an integer is MiB, a string a quantity (`128Mi`).
pub fn parse_memory(v: &IntOrString) -> Result<usize, SpecError> {
    let bytes = match v {
        IntOrString::Int(mib) => usize::try_from(*mib)
            .ok()
            .and_then(|m| m.checked_mul(1 << 20)),
        IntOrString::String(s) => ParsedQuantity::try_from(s.as_str())
            .ok()
            .and_then(|q| q.to_bytes_usize()),
    };
    let text = || match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    match bytes {
        Some(b) if b > 0 && b <= MAX_MEMORY_BYTES => Ok(b),
        _ => Err(SpecError::Memory(text())),
    }
}

/// The largest `limits.concurrency`.
pub const MAX_CONCURRENCY: u16 = 64;

/// Parse `limits.concurrency`: 1 to [`MAX_CONCURRENCY`].
pub fn parse_concurrency(n: i32) -> Result<std::num::NonZeroU16, SpecError> {
    u16::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_CONCURRENCY)
        .and_then(std::num::NonZeroU16::new)
        .ok_or(SpecError::Concurrency(n))
}

/// Read the run options from a spec; `defaults` are the runtime's limits
/// (fields the spec leaves out keep them).
pub fn options(
    spec: &ClusterTrainerPluginSpec,
    defaults: &Limits,
) -> Result<PluginOptions, SpecError> {
    let limits = match &spec.limits {
        None => None,
        Some(l) => {
            let mut out = *defaults;
            if let Some(t) = &l.timeout {
                out.timeout = parse_timeout(t)?;
            }
            if let Some(m) = &l.memory {
                out.memory_bytes = parse_memory(m)?;
            }
            if let Some(c) = l.concurrency {
                out.concurrency = Some(parse_concurrency(c)?);
            }
            Some(out)
        }
    };
    let grants = spec
        .grants
        .as_ref()
        .map_or_else(Grants::default, |g| Grants {
            random: g.random.unwrap_or(false),
            clock: g.clock.unwrap_or(false),
            status_server: g.train_job_status_server.unwrap_or(false),
            pod: g
                .pod
                .as_ref()
                .map_or_else(PodGrants::default, |p| PodGrants {
                    privileged: p.privileged.unwrap_or(false),
                    host_namespaces: p.host_namespaces.unwrap_or(false),
                    host_ports: p.host_ports.unwrap_or(false),
                    host_paths: p.host_paths.clone().unwrap_or_default(),
                    capabilities: p.capabilities.clone().unwrap_or_default(),
                    service_accounts: p.service_account_names.clone().unwrap_or_default(),
                    images: p.images.clone().unwrap_or_default(),
                    scheduler_names: p.scheduler_names.clone().unwrap_or_default(),
                    priority_classes: p.priority_class_names.clone().unwrap_or_default(),
                    node_placement: p.node_placement.clone().unwrap_or_default(),
                    secret_names: p.secret_names.clone().unwrap_or_default(),
                    config_map_names: p.config_map_names.clone().unwrap_or_default(),
                    service_account_tokens: p.service_account_tokens.unwrap_or(false),
                    dns: p.dns.unwrap_or(false),
                    resources: p.resources.unwrap_or(false),
                    containers: p.containers.clone().unwrap_or_default(),
                    restricted: false,
                }),
        });
    let config = match &spec.config {
        None => "{}".to_owned(),
        Some(c) => serde_json::to_string(c)?,
    };
    Ok(PluginOptions {
        order: spec.order.unwrap_or(0),
        config,
        grants,
        limits,
        failure_policy: spec.failure_policy.unwrap_or_default(),
        phases: spec.phases.clone(),
        allowed_emits: spec.allowed_kinds.clone(),
        allowed_reads: spec.allowed_reads.clone(),
    })
}

/// The [`PluginSource`] to load: bytes, pinned digest, whether they are a
/// builtin's, and every option. The runtime enforces the failure policy, the
/// phase narrowing and the kind and pod-privilege rules on every call.
pub fn plugin_source(
    label: String,
    bytes: bytes::Bytes,
    sha256: Option<String>,
    builtin: bool,
    opts: &PluginOptions,
    objects: Arc<dyn ObjectSource>,
) -> PluginSource {
    let mut src = PluginSource::new(label, bytes);
    src.sha256 = sha256;
    src.builtin = builtin;
    src.config = opts.config.clone();
    src.grants = opts.grants.clone();
    src.limits = opts.limits;
    src.objects = objects;
    src.failure_policy = opts.failure_policy;
    src.phases = opts.phases.clone();
    src.allowed_emits = opts.allowed_emits.clone();
    src.allowed_reads = opts.allowed_reads.clone();
    src
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainforge_api::trainforge::v1alpha1::{PluginGrants, PluginLimits};

    #[test]
    fn timeouts() {
        let ms = |s: &str| {
            parse_timeout(&IntOrString::String(s.into()))
                .map(|d| d.as_millis())
                .ok()
        };
        assert_eq!(
            parse_timeout(&IntOrString::Int(250)).unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("2s"), Some(2000));
        assert_eq!(ms("1.5s"), Some(1500));
        assert_eq!(ms("5ms"), None, "below 10ms");
        assert_eq!(ms("1m"), None, "above 30s");
        assert_eq!(ms("soon"), None);
        assert!(parse_timeout(&IntOrString::Int(-1)).is_err());
        assert!(parse_timeout(&IntOrString::Int(30_001)).is_err());
    }

    #[test]
    fn memory() {
        assert_eq!(parse_memory(&IntOrString::Int(128)).unwrap(), 128 << 20);
        assert_eq!(
            parse_memory(&IntOrString::String("256Mi".into())).unwrap(),
            256 << 20
        );
        assert_eq!(
            parse_memory(&IntOrString::String("1Gi".into())).unwrap(),
            1 << 30
        );
        assert!(parse_memory(&IntOrString::String("2Gi".into())).is_err());
        assert!(parse_memory(&IntOrString::Int(0)).is_err());
        assert!(parse_memory(&IntOrString::String("lots".into())).is_err());
    }

    #[test]
    fn options_from_spec() {
        let spec: ClusterTrainerPluginSpec = serde_json::from_value(serde_json::json!({
            "source": {"builtin": "mpi"},
            "order": 40,
            "phases": ["build", "enforce-ml-policy"],
            "failurePolicy": "Ignore",
            "limits": {"timeout": "2s", "memory": "128Mi", "concurrency": 3},
            "allowedKinds": [{"apiVersion": "v1", "kind": "Secret"}],
            "grants": {"random": true},
            "config": {"greeting": "servus", "n": 2},
        }))
        .unwrap();
        let defaults = Limits::default();
        let o = options(&spec, &defaults).unwrap();
        assert_eq!(o.order, 40);
        assert_eq!(o.failure_policy, FailurePolicy::Ignore);
        assert_eq!(o.phases, Some(vec![Phase::Build, Phase::EnforceMlPolicy]));
        assert_eq!(o.allowed_emits, Some(vec![KindRef::new("v1", "Secret")]));
        assert_eq!(
            o.grants,
            Grants {
                random: true,
                ..Grants::default()
            }
        );
        let limits = o.limits.unwrap();
        assert_eq!(limits.timeout, Duration::from_secs(2));
        assert_eq!(limits.memory_bytes, 128 << 20);
        assert_eq!(limits.concurrency.map(std::num::NonZeroU16::get), Some(3));
        assert_eq!(limits.max_output_bytes, defaults.max_output_bytes);
        // Out of range (the CRD's schema refuses it first).
        for n in [0, -1, 65] {
            assert!(
                matches!(parse_concurrency(n), Err(SpecError::Concurrency(m)) if m == n),
                "{n}"
            );
        }
        assert_eq!(parse_concurrency(64).unwrap().get(), 64);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&o.config).unwrap()["greeting"],
            "servus"
        );

        let bare = ClusterTrainerPluginSpec {
            grants: Some(PluginGrants::default()),
            ..Default::default()
        };
        let o = options(&bare, &defaults).unwrap();
        assert_eq!(
            (o.order, o.config.as_str(), o.limits, o.failure_policy),
            (0, "{}", None, FailurePolicy::Fail)
        );

        let bad = ClusterTrainerPluginSpec {
            limits: Some(PluginLimits {
                timeout: Some(IntOrString::String("forever".into())),
                memory: None,
                concurrency: None,
            }),
            ..Default::default()
        };
        assert!(matches!(
            options(&bad, &defaults),
            Err(SpecError::Timeout(_))
        ));
    }
}
