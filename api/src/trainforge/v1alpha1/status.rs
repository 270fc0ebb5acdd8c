//! `ClusterTrainerPlugin` status: one condition per stage of loading
//! (`Fetched`, `Verified`, `Compiled`, `Ready`, `Degraded`), the digest in
//! service, the last error and what the serving plugin described.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster_trainer_plugin::ClusterTrainerPluginSpec;
use crate::plugin::KindRef;

/// ClusterTrainerPluginStatus is the observed state of a plugin.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTrainerPluginStatus {
    /// Conditions, keyed by type: `Fetched`, `Verified`, `Compiled` (the
    /// stages of the latest attempt), `Ready` (a version is serving) and
    /// `Degraded` (the latest spec could not be served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<Condition>>,

    /// sha256 of the component in service (may be an older version than the
    /// spec asks for while `Degraded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_digest: Option<String>,

    /// The `metadata.generation` whose spec is serving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_generation: Option<i64>,

    /// The spec that is serving, kept so that a restarted operator can bring
    /// the last good version back while the current spec fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_spec: Option<ClusterTrainerPluginSpec>,

    /// The `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The error of the latest failed attempt (cleared when the spec serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,

    /// What the serving plugin described about itself (`describe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<DescribedPlugin>,

    /// How far the serving version has reached the TrainJobs: when it went
    /// into service, every unfinished TrainJob was queued to be rendered
    /// again with it. `ClusterTrainerPlugin` only; written by its own field
    /// manager (`trainforge-rollout`), at most every few seconds while TrainJobs
    /// remain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<PluginRollout>,
}

/// The re-render of the unfinished TrainJobs that followed a plugin's
/// version going into service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginRollout {
    /// The `metadata.generation` whose version the rollout brings (its
    /// `servingGeneration` when it started).
    pub serving_generation: i64,
    /// Unfinished TrainJobs of the cluster when the plugin set changed: all
    /// are rendered again.
    #[schemars(range(min = 0))]
    pub train_jobs: i64,
    /// Of those, the TrainJobs built with the new set since.
    #[schemars(range(min = 0))]
    pub re_rendered: i64,
    /// Of those, the TrainJobs the new set could not build (each one's
    /// conditions say why; a later success moves it to `reRendered`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub failed: i64,
    /// Of those, the TrainJobs that needed no re-render: deleted,
    /// finished, managed by another controller, or running with an ignored
    /// `runtimePatches` edit.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub skipped: i64,
    /// Of those, the TrainJobs not yet reconciled with the new set.
    #[schemars(range(min = 0))]
    pub remaining: i64,
    /// When the plugin set changed.
    pub started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// When `remaining` reached zero (failed TrainJobs are not waited
    /// for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// A plugin's own description, as served.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescribedPlugin {
    /// The plugin's name (unique in the set).
    pub name: String,
    /// The plugin's own version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The WIT version it was built against.
    pub wit_version: String,
    /// Phases it is called for (after `spec.phases` narrowing).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub phases: Vec<String>,
    /// Kinds it may emit (after `spec.allowedKinds` narrowing).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub emits: Vec<KindRef>,
    /// Kinds it reads through `host.get-object`.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub reads: Vec<KindRef>,
}

/// Condition types.
pub mod condition {
    /// The component bytes were obtained.
    pub const FETCHED: &str = "Fetched";
    /// The bytes match the pinned sha256.
    pub const VERIFIED: &str = "Verified";
    /// The component compiled (or came from the cache), links against the
    /// host's interface and described itself.
    pub const COMPILED: &str = "Compiled";
    /// A version of the plugin is in the set in service.
    pub const READY: &str = "Ready";
    /// The latest spec could not be served (an older version may be).
    pub const DEGRADED: &str = "Degraded";
    /// `TrainerPlugin` only: the spec (and what the plugin declares) fits
    /// the cluster's `TrainerPluginPolicy`.
    pub const WITHIN_POLICY: &str = "WithinPolicy";
}

/// Condition reasons written by the controller (besides the plugin
/// runtime's own: `LoadFailed`, `DigestMismatch`, `IncompatibleInterface`,
/// `InvalidDescriptor`, `ForbiddenKind`, `CompileLimit`, `Timeout`, `Trap`,
/// `MemoryLimit`).
pub mod reason {
    /// `Fetched=True`.
    pub const FETCHED: &str = "Fetched";
    /// `Fetched=False`: no builtin plugin has that name.
    pub const UNKNOWN_BUILTIN: &str = "UnknownBuiltin";
    /// `Fetched=False`: the ConfigMap, key or file does not exist.
    pub const NOT_FOUND: &str = "NotFound";
    /// `Fetched=False`: the component exceeds the size limit.
    pub const TOO_LARGE: &str = "TooLarge";
    /// `Fetched=False`: the API server, file system or network failed.
    pub const FETCH_ERROR: &str = "FetchError";
    /// `Fetched=False`: an https source (or a redirect) leads to an address
    /// plugin sources may not reach (loopback, link-local, private, ...),
    /// loops, or leaves https.
    pub const ADDRESS_NOT_ALLOWED: &str = "AddressNotAllowed";
    /// `Verified=True`: the bytes match `spec.sha256`.
    pub const DIGEST_MATCHED: &str = "DigestMatched";
    /// `Verified=True`: a builtin with no pinned digest (trusted).
    pub const BUILTIN: &str = "Builtin";
    /// `Verified=False`: the bytes do not match `spec.sha256` (or an OCI
    /// layer or manifest does not match its digest).
    pub const DIGEST_MISMATCH: &str = "DigestMismatch";
    /// `Verified=True`: a signature by a key of `spec.verification` (named
    /// in the message) covers the component.
    pub const SIGNATURE_VERIFIED: &str = "SignatureVerified";
    /// `Verified=False`: no signature was found next to the component.
    pub const SIGNATURE_MISSING: &str = "SignatureMissing";
    /// `Verified=False`: a signature is malformed or signs another artifact.
    pub const SIGNATURE_INVALID: &str = "SignatureInvalid";
    /// `Verified=False`: signatures were found, but none verifies with a key
    /// of `spec.verification`.
    pub const UNTRUSTED_SIGNATURE: &str = "UntrustedSignature";
    /// `Verified=False`: the operator requires signatures for every plugin
    /// that is not builtin, and the spec has no `verification`.
    pub const SIGNATURE_REQUIRED: &str = "SignatureRequired";
    /// `Verified=False`: a key of `spec.verification` cannot be used.
    pub const INVALID_KEY: &str = "InvalidKey";
    /// `Fetched=False`: the OCI registry could not be reached or answered
    /// with an error (retried).
    pub const REGISTRY_ERROR: &str = "RegistryError";
    /// `Fetched=False`: the OCI artifact is not a Wasm component (another
    /// layout, layer media type or content).
    pub const NOT_WASM: &str = "NotWasm";
    /// `Fetched=False`: the pull secret is missing or unusable.
    pub const PULL_SECRET_ERROR: &str = "PullSecretError";
    /// `Compiled=True`.
    pub const COMPILED: &str = "Compiled";
    /// `Compiled=Unknown` (and `Ready=False` when nothing serves yet): a
    /// tenant's component waits for, or is in, the tenants' compile slot;
    /// the message gives its place in the queue.
    pub const COMPILING: &str = "Compiling";
    /// `Compiled=False`: the spec cannot be turned into a plugin source
    /// (e.g. a limit the API server's rules did not catch).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// `Compiled=False`: another plugin in service has the same name.
    pub const DUPLICATE_NAME: &str = "DuplicateName";
    /// `Compiled=False`: another plugin in service implements `status`.
    pub const STATUS_CONFLICT: &str = "StatusConflict";
    /// `Compiled=False`: the plugin may emit, read or watch a kind it may
    /// not (cluster-scoped, denied, or not allowed by the administrator).
    pub const FORBIDDEN_KIND: &str = "ForbiddenKind";
    /// `Compiled=False`: the operator may not list, watch (or, for what the
    /// plugin emits, create and patch) a kind the plugin declares.
    pub const KIND_NOT_WATCHABLE: &str = "KindNotWatchable";
    /// `Compiled=False`: discovering or checking access to a declared kind
    /// failed (retried).
    pub const DISCOVERY_FAILED: &str = "DiscoveryFailed";
    /// `Compiled=False`: a plugin with precedence (a builtin, or an earlier
    /// name) took this plugin's place (same name or the status phase).
    pub const DISPLACED: &str = "Displaced";
    /// A stage not reached because an earlier one failed.
    pub const NOT_REACHED: &str = "NotReached";
    /// `Ready=True`: the spec's version is serving.
    pub const SERVING: &str = "Serving";
    /// `Ready=True` while `Degraded`: an older version is still serving.
    pub const SERVING_LAST_KNOWN_GOOD: &str = "ServingLastKnownGood";
    /// `Degraded=False`.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// `WithinPolicy=True`.
    pub const WITHIN_POLICY: &str = "WithinPolicy";
    /// `WithinPolicy=False`: the spec or the plugin asks for more than the
    /// `TrainerPluginPolicy` allows (the message names what).
    pub const EXCEEDS_POLICY: &str = "ExceedsPolicy";
    /// `WithinPolicy=False`: no `TrainerPluginPolicy` lets this namespace
    /// serve tenant plugins.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// `WithinPolicy=False`: the `configMap` source is in another namespace.
    pub const FOREIGN_SOURCE: &str = "ForeignSource";
}
