//! `ClusterTrainerPlugin`: one framework plugin the operator serves, where
//! its component comes from (builtin, ConfigMap or URL, pinned by sha256),
//! where it sits in the pipeline, how it may fail, its limits, grants and
//! configuration.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::cel;
use super::status::ClusterTrainerPluginStatus;
use crate::plugin::{KindRef, Phase};

/// ClusterTrainerPluginSpec configures one framework plugin (a Wasm
/// component targeting `trainforge:plugin`) served by the operator.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "trainforge.dev",
    version = "v1alpha1",
    kind = "ClusterTrainerPlugin",
    plural = "clustertrainerplugins",
    singular = "clustertrainerplugin",
    shortname = "ctp",
    status = "ClusterTrainerPluginStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Ready","type":"string","description":"Whether a version of the plugin is serving.","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Degraded","type":"string","description":"Whether the latest spec could not be served.","jsonPath":".status.conditions[?(@.type==\"Degraded\")].status"}"#,
    printcolumn = r#"{"name":"Order","type":"integer","jsonPath":".spec.order"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","description":"sha256 of the component in service.","jsonPath":".status.servingDigest","priority":1}"#,
    printcolumn = r#"{"name":"Remaining","type":"integer","description":"TrainJobs still to be rendered again with the serving version.","jsonPath":".status.rollout.remaining","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [cel::SHA256_UNLESS_BUILTIN]))]
pub struct ClusterTrainerPluginSpec {
    /// Where the component comes from: exactly one of `builtin`,
    /// `configMap` or `url`.
    pub source: PluginSourceSpec,

    /// sha256 of the component (64 lowercase hex characters). Required
    /// unless the source is builtin; a component with another digest is
    /// refused (`DigestMismatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::SHA256_HEX]))]
    pub sha256: Option<String>,

    /// Signatures the component must carry before it is compiled: a
    /// cosign-compatible signature (ECDSA P-256, key-based) made by one of
    /// these keys. For `oci://` sources the signature is the artifact's
    /// `sha256-<digest>.sig` tag; for others a cosign `sign-blob`
    /// signature (base64) next to the component (`<url>.sig`, or the
    /// ConfigMap key `<key>.sig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<PluginVerification>,

    /// Position in the pipeline: within each phase, plugins run by
    /// ascending `order`, ties broken by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub order: Option<i32>,

    /// Phases the operator calls, narrowing what the plugin implements
    /// (all of them when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "set"))]
    pub phases: Option<Vec<Phase>>,

    /// What happens to a reconcile when the plugin cannot answer (load
    /// failure, timeout, trap, memory limit): `Fail` stops it, `Ignore`
    /// skips the plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Fail"))]
    pub failure_policy: Option<FailurePolicy>,

    /// Limits of every call (the operator's defaults when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PluginLimits>,

    /// Kinds the plugin may emit, narrowing what it declares in `describe`
    /// (what it declares when unset). Kinds that run pods or change
    /// identities or network exposure (Pods, ServiceAccounts, Services,
    /// workload controllers, ...) are allowed only when listed here; RBAC,
    /// admission, CRDs, leases, Trainer and Trainforge kinds and anything
    /// cluster-scoped never are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "atomic"))]
    pub allowed_kinds: Option<Vec<KindRef>>,

    /// Kinds the plugin may read through the host, narrowing what it
    /// declares (what it declares when unset). Secrets and cluster-scoped
    /// kinds are readable only when listed here; namespaced objects only in
    /// the namespace of the TrainJob a call is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "atomic"))]
    pub allowed_reads: Option<Vec<KindRef>>,

    /// Host capabilities and pod privileges granted to the plugin (only
    /// capabilities it also declares are given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<PluginGrants>,

    /// Free-form configuration passed to every call of the plugin as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub config: Option<Map<String, Value>>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let schema = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    schemars::Schema::try_from(schema).unwrap_or_default()
}

/// Where a plugin component comes from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [cel::ONE_SOURCE, cel::PULL_SECRET_WITH_OCI]))]
pub struct PluginSourceSpec {
    /// A plugin embedded in the operator binary, by name (`torch`, or its
    /// crate name `plugin-torch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub builtin: Option<String>,

    /// A ConfigMap holding the `.wasm` bytes under a `binaryData` key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,

    /// An `https://` URL; an OCI artifact `oci://registry/repository:tag`
    /// or `oci://registry/repository@sha256:<digest>` (the Wasm artifact
    /// layout: one `application/wasm` layer); or a `file://` path on the
    /// operator's file system. A tag is resolved once per generation and
    /// the digest that serves is recorded in `status.servingSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), extend("x-kubernetes-validations" = [cel::URL_SCHEME]))]
    pub url: Option<String>,

    /// Name of a `kubernetes.io/dockerconfigjson` Secret in the operator's
    /// namespace holding credentials for the `oci://` registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub pull_secret: Option<String>,
}

/// Public keys a plugin's signature must verify with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginVerification {
    /// Trusted keys; a signature by any one of them verifies the component.
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub keys: Vec<VerificationKey>,
}

/// One trusted signing key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationKey {
    /// Name shown in the `Verified` condition (which key signed).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The PEM public key (`-----BEGIN PUBLIC KEY-----`, ECDSA P-256, as
    /// `cosign generate-key-pair` or `trainforge plugin keygen` writes it).
    #[schemars(length(min = 1, max = 4096))]
    pub public_key: String,
}

/// A component stored in a ConfigMap's `binaryData`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// Namespace of the ConfigMap.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in `binaryData` holding the component bytes.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// What a reconcile does when the plugin cannot answer (load failure,
/// timeout, trap, memory limit, or an error it returns), in any phase.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// The reconcile stops with the plugin's error (and is retried).
    #[default]
    Fail,
    /// The failure is logged and reported as a warning; the plugin's
    /// contribution to that phase is skipped and the reconcile goes on.
    Ignore,
}

impl std::fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

impl JsonSchema for FailurePolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FailurePolicy".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "enum": ["Fail", "Ignore"],
        })
    }
}

/// Limits of one call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginLimits {
    /// Deadline of one call: integer milliseconds, or a duration string
    /// (`500ms`, `2s`); 10ms to 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 32, "x-kubernetes-validations" = [cel::TIMEOUT_RANGE]))]
    pub timeout: Option<IntOrString>,

    /// Linear-memory cap of one instance: integer MiB, or a quantity
    /// (`128Mi`); at most 1Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 32, "x-kubernetes-validations" = [cel::MEMORY_RANGE]))]
    pub memory: Option<IntOrString>,

    /// Calls of this plugin running at once in the operator's reconcile
    /// passes, across every TrainJob (1 to 64; unset: no bound of its own,
    /// the operator's `--concurrency` bounds them). A pass that waits
    /// longer than the plugin's call deadline for one fails `Busy`, and its
    /// TrainJob backs off, leaving its turn to TrainJobs this plugin does
    /// not serve. Admission calls are bounded by the admission budget
    /// instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub concurrency: Option<i32>,
}

/// Host capabilities and pod privileges granted to a plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginGrants {
    /// Serve `host.random-bytes` (e.g. MPI's SSH keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub random: Option<bool>,
    /// Expose the real wall and monotonic clocks (frozen at zero otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub clock: Option<bool>,
    /// Give the plugin the TrainJob status server's address and CA in its
    /// configuration (key `trainJobStatusServer`), when the plugin asks for
    /// them (capability `trainjob-status-server`) and the operator serves
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub train_job_status_server: Option<bool>,
    /// What the plugin may add to the pods it shapes beyond the Pod
    /// Security Standards baseline level (nothing when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSecurityGrants>,
}

/// Pod privileges a plugin may add. Each is checked on what the plugin
/// changed, never on what the runtime or the TrainJob already had.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityGrants {
    /// Privileged containers and every other relaxation beyond baseline
    /// (any capability, unconfined seccomp/AppArmor, SELinux options,
    /// unmasked `/proc`, unsafe sysctls, Windows host processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// `hostNetwork`, `hostPID` and `hostIPC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_namespaces: Option<bool>,
    /// Container ports bound on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ports: Option<bool>,
    /// `hostPath` volumes under these path prefixes (`/` = any path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub host_paths: Option<Vec<String>>,
    /// Capabilities beyond the baseline set (e.g. `NET_ADMIN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub capabilities: Option<Vec<String>>,
    /// Service accounts the plugin may set on pods (`*` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub service_account_names: Option<Vec<String>>,
    /// Image prefixes the plugin may set on containers (`*` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub images: Option<Vec<String>>,
    /// Scheduler names the plugin may set on pods (`*` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub scheduler_names: Option<Vec<String>>,
    /// Priority classes the plugin may set on pods (`*` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub priority_class_names: Option<Vec<String>>,
    /// Node label and taint keys the plugin may place pods by
    /// (`nodeSelector`, node affinity, tolerations); `*` = any, which
    /// `nodeName` and keyless tolerations need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub node_placement: Option<Vec<String>>,
    /// Secrets the plugin may reference from pods (env, envFrom, volumes,
    /// image pull secrets) beyond the TrainJob's own (`<trainjob>-…`);
    /// `*` = any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub secret_names: Option<Vec<String>>,
    /// ConfigMaps the plugin may reference from pods (env, envFrom,
    /// volumes) beyond the TrainJob's own (`<trainjob>-…`) and those the
    /// runtime or TrainJob already references; `*` = any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub config_map_names: Option<Vec<String>>,
    /// Service-account tokens: `automountServiceAccountToken: true` and
    /// projected tokens for any audience.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_tokens: Option<bool>,
    /// `dnsPolicy`, `dnsConfig` and `hostAliases`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<bool>,
    /// Container resources above the largest quantity of each resource the
    /// runtime and TrainJob ask for, or of a resource they do not name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<bool>,
    /// Containers (init, sidecar, ephemeral or regular) the plugin may add,
    /// by name (`*` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "atomic"))]
    pub containers: Option<Vec<String>>,
}
