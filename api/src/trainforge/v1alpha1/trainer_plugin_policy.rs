//! `TrainerPluginPolicy`: the ceiling the cluster administrator sets on
//! tenant plugins (`TrainerPlugin`). Only the object named `default` counts;
//! without it no namespace may serve tenant plugins.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;
use super::cluster_trainer_plugin::{PluginGrants, VerificationKey};
use crate::plugin::{KindRef, Phase};

/// The name of the one `TrainerPluginPolicy` the operator reads.
pub const POLICY_NAME: &str = "default";

/// TrainerPluginPolicySpec is the most any `TrainerPlugin` may ask for. A
/// `TrainerPlugin` asking for more is refused (`WithinPolicy=False`, naming
/// what was refused); tightening the policy takes plugins that no longer
/// fit out of service.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "trainforge.dev",
    version = "v1alpha1",
    kind = "TrainerPluginPolicy",
    plural = "trainerpluginpolicies",
    singular = "trainerpluginpolicy",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TrainerPluginPolicySpec {
    /// Namespaces whose `TrainerPlugin`s are served. No namespace when
    /// unset; `{}` selects every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Where tenant components may come from: `ConfigMap` (in the
    /// plugin's own namespace), `Builtin`, `Https`, `Oci`. Default `[ConfigMap]`.
    /// `file://` is never allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4), extend("x-kubernetes-list-type" = "set"))]
    pub sources: Option<Vec<TenantSourceKind>>,

    /// Phases tenant plugins may be called for. Default: every phase but
    /// `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "set"))]
    pub phases: Option<Vec<Phase>>,

    /// Kinds tenant plugins may emit. Default: `v1` ConfigMap and Secret.
    /// Cluster-scoped kinds, RBAC and the other kinds no plugin may emit
    /// stay refused whatever this lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "atomic"))]
    pub allowed_kinds: Option<Vec<KindRef>>,

    /// Kinds tenant plugins may read (in their TrainJob's namespace only).
    /// Default: `v1` ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "atomic"))]
    pub allowed_reads: Option<Vec<KindRef>>,

    /// The largest limits a tenant plugin may have. Default: the operator's
    /// default limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_limits: Option<PolicyLimits>,

    /// The most a tenant plugin may be granted (nothing when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<PluginGrants>,

    /// How many `TrainerPlugin`s one namespace may have in service (the
    /// first created, by name within a second; default 8): each costs
    /// compile time and memory. A newcomer over it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub max_plugins_per_namespace: Option<i32>,

    /// The Pod Security Standards level what a tenant plugin changes in
    /// pods must keep: `Restricted` (default) or `Baseline`. Grants within
    /// `grants` are allowed on top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<PodSecurityLevel>,

    /// The signing keys tenants may trust. When set, every key in a
    /// `TrainerPlugin`'s `spec.verification` must be one of these (compared
    /// by key, not by name). Under the operator's
    /// `--require-plugin-signatures`, a tenant plugin that is not builtin
    /// must be signed by one of them: unset, tenants may then serve
    /// builtins only (a key a tenant generated itself proves nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub trusted_keys: Option<Vec<VerificationKey>>,
}

/// Where a tenant component may come from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TenantSourceKind {
    /// `source.configMap`, in the `TrainerPlugin`'s namespace.
    ConfigMap,
    /// `source.builtin`.
    Builtin,
    /// `source.url` with `https://`.
    Https,
    /// `source.url` with `oci://` (never with a `pullSecret`: the
    /// operator's registry credentials are not lent to tenants).
    Oci,
}

impl TenantSourceKind {
    /// The name as written in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantSourceKind::ConfigMap => "ConfigMap",
            TenantSourceKind::Builtin => "Builtin",
            TenantSourceKind::Https => "Https",
            TenantSourceKind::Oci => "Oci",
        }
    }
}

impl JsonSchema for TenantSourceKind {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TenantSourceKind".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "enum": ["ConfigMap", "Builtin", "Https", "Oci"],
        })
    }
}

/// A Pod Security Standards level.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PodSecurityLevel {
    /// Baseline: no known privilege escalation.
    Baseline,
    /// Restricted: baseline plus pod hardening (non-root, no privilege
    /// escalation, only `NET_BIND_SERVICE` added, restricted volume types).
    #[default]
    Restricted,
}

impl JsonSchema for PodSecurityLevel {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PodSecurityLevel".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "enum": ["Baseline", "Restricted"],
            "default": "Restricted",
        })
    }
}

/// The largest limits of one tenant plugin call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyLimits {
    /// Longest call deadline (as `limits.timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 32, "x-kubernetes-validations" = [cel::TIMEOUT_RANGE]))]
    pub timeout: Option<IntOrString>,

    /// Largest linear memory (as `limits.memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 32, "x-kubernetes-validations" = [cel::MEMORY_RANGE]))]
    pub memory: Option<IntOrString>,

    /// Largest output of one call (objects, mutations), in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 67108864))]
    pub output_bytes: Option<i64>,
}
