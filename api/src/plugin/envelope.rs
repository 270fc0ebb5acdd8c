//! Native mirrors of the typed records of `wit/plugin.wit`.
//!
//! The SDK's `Plugin` trait and the host both speak these types; the WIT
//! bindings are converted to and from them at the boundary. [`Phase`] and
//! [`KindRef`] are also the types of `ClusterTrainerPlugin`'s `spec.phases`,
//! `spec.allowedKinds` and `spec.allowedReads` (hence their JSON schemas).

use super::info::RuntimePolicy;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The WIT package version this crate mirrors (`trainforge:plugin@0.1.0`).
pub const WIT_VERSION: &str = "0.1.0";

/// A reconcile or admission phase, in execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Apply `mlPolicy` (EnforceMLPolicy).
    EnforceMlPolicy,
    /// Apply `podGroupPolicy` (EnforcePodGroupPolicy).
    EnforcePodGroupPolicy,
    /// Policy-independent pod-set edits (EnforcePodSpec).
    EnforcePodSpec,
    /// Consolidate the info with the template (PreComponentBuilder).
    PreBuild,
    /// Emit objects (ComponentBuilder).
    Build,
    /// Admission checks (CustomValidation).
    Validate,
    /// TrainJob status (TrainJobStatus).
    Status,
}

impl Phase {
    /// All phases, in execution order (reconcile phases first).
    pub const ALL: [Phase; 7] = [
        Phase::EnforceMlPolicy,
        Phase::EnforcePodGroupPolicy,
        Phase::EnforcePodSpec,
        Phase::PreBuild,
        Phase::Build,
        Phase::Validate,
        Phase::Status,
    ];

    /// The WIT function name of the phase (also its name in `descriptor.phases`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::EnforceMlPolicy => "enforce-ml-policy",
            Phase::EnforcePodGroupPolicy => "enforce-pod-group-policy",
            Phase::EnforcePodSpec => "enforce-pod-spec",
            Phase::PreBuild => "pre-build",
            Phase::Build => "build",
            Phase::Validate => "validate",
            Phase::Status => "status",
        }
    }

    /// Parse a phase name; `None` for names this version does not know
    /// (forward compatibility: newer plugins may list newer phases).
    pub fn parse(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// A plain `enum` schema: schemars would turn documented variants into a
// `oneOf`, which the API server does not accept as structural.
impl JsonSchema for Phase {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PluginPhase".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let values: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        schemars::json_schema!({
            "type": "string",
            "description": "A plugin phase (the WIT function name).",
            "enum": values,
        })
    }
}

/// The API version and kind of an object type.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version`, or `v1` for the core group.
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// Kind, e.g. `ConfigMap`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
}

impl KindRef {
    /// Build a kind reference.
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        KindRef {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        match self.api_version.rsplit_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    /// Whether `other` is the same kind, whatever the version: the same
    /// API group and kind.
    pub fn same_kind(&self, other: &KindRef) -> bool {
        self.group() == other.group() && self.kind == other.kind
    }
}

/// Where an object lives: its kind, namespace (empty when cluster-scoped
/// or absent) and name.
pub type ObjectKey = (KindRef, String, String);

/// The [`ObjectKey`] of an object given as JSON (`apiVersion`, `kind`,
/// `metadata.namespace`, `metadata.name`; a missing field is empty).
pub fn object_key(object: &serde_json::Value) -> ObjectKey {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        KindRef::new(s("/apiVersion"), s("/kind")),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

/// What a plugin is and what it needs (WIT `descriptor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Unique plugin name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The WIT version the plugin was built against.
    pub wit_version: String,
    /// Policy keys served, e.g. `mlPolicy.torch`.
    pub policy_keys: Vec<String>,
    /// Phase names implemented (see [`Phase::as_str`]).
    pub phases: Vec<String>,
    /// Kinds `build` may emit.
    pub emits: Vec<KindRef>,
    /// Kinds readable through `host.get-object`.
    pub reads: Vec<KindRef>,
    /// Kinds whose changes re-trigger the owning TrainJob.
    pub watches: Vec<KindRef>,
    /// Host capabilities requested (e.g. `random`).
    pub capabilities: Vec<String>,
    /// How the plugin names the objects it emits (WIT `naming`, read only
    /// when [`OBJECT_NAMES`] is among the phases). Empty: no rule beyond
    /// the host's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_names: Vec<ObjectName>,
}

/// The phase name a plugin lists in [`Descriptor::phases`] to announce
/// that it exports WIT `naming` (its [`Descriptor::object_names`]).
pub const OBJECT_NAMES: &str = "object-names";

/// One naming rule of a plugin (WIT `naming.object-name`): every object
/// of `kind` (by API group and kind) it emits for TrainJob `t` is named
/// `t` + `suffix`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectName {
    /// The kind named so.
    pub kind: KindRef,
    /// Empty (named exactly as the TrainJob) or `-…`.
    pub suffix: String,
}

impl ObjectName {
    /// The rule for objects of `kind` named `<trainjob><suffix>`.
    pub fn new(kind: KindRef, suffix: impl Into<String>) -> Self {
        ObjectName {
            kind,
            suffix: suffix.into(),
        }
    }

    /// The TrainJob whose object `name` (of this rule's kind) would be,
    /// if the name follows this rule: `name` without the suffix, when
    /// that leaves a non-empty name.
    pub fn trainjob_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_suffix(self.suffix.as_str())
            .filter(|rest| !rest.is_empty())
    }
}

impl Descriptor {
    /// The phases this version knows that the plugin implements.
    pub fn known_phases(&self) -> Vec<Phase> {
        let mut out: Vec<Phase> = self.phases.iter().filter_map(|p| Phase::parse(p)).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Whether the plugin implements `phase`.
    pub fn implements(&self, phase: Phase) -> bool {
        self.phases.iter().any(|p| p == phase.as_str())
    }

    /// Whether the host calls this plugin for a TrainJob whose runtime has
    /// `policy` (as the host derived it, before any plugin ran). A plugin
    /// whose policy keys all name a policy field (`mlPolicy.torch`,
    /// `podGroupPolicy.volcano`) is called only when the runtime sets at
    /// least one of them; a plugin with no policy keys, or with a bare root
    /// key (`mlPolicy`), is called for every TrainJob.
    pub fn serves(&self, policy: &RuntimePolicy) -> bool {
        !self.routed_by_policy() || self.policy_keys.iter().any(|k| policy.get(k).is_some())
    }

    /// Whether [`Descriptor::serves`] depends on the runtime's policies:
    /// there are policy keys and every one names a field.
    pub fn routed_by_policy(&self) -> bool {
        !self.policy_keys.is_empty() && self.policy_keys.iter().all(|k| k.contains('.'))
    }
}

/// What an enforce/pre-build phase changed (`None` = unchanged).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mutation {
    /// New info JSON.
    pub info: Option<String>,
    /// New in-memory TrainJob JSON.
    pub trainjob: Option<String>,
}

/// Kubernetes field error types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldErrorType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueTooLong`.
    TooLong,
    /// `FieldValueTooMany`.
    TooMany,
    /// `InternalError`.
    Internal,
    /// `FieldValueTypeInvalid`.
    TypeInvalid,
}

/// One admission error attached to a field path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldError {
    /// The error type.
    pub error_type: FieldErrorType,
    /// Field path, e.g. `spec.trainer.env`.
    pub field: String,
    /// Offending value as JSON.
    pub bad_value: Option<String>,
    /// Human-readable detail.
    pub detail: String,
}

impl FieldError {
    /// An `Invalid` error.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Invalid,
            field: field.into(),
            bad_value: None,
            detail: detail.into(),
        }
    }

    /// A `Forbidden` error.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Forbidden,
            ..FieldError::invalid(field, detail)
        }
    }
}

/// The outcome of `validate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    /// Admission warnings.
    pub warnings: Vec<String>,
    /// Field errors (non-empty = rejected).
    pub errors: Vec<FieldError>,
}

/// Expected failures of a phase (WIT `plugin-error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason", content = "message")]
pub enum PluginError {
    /// The plugin configuration is invalid.
    InvalidConfig(String),
    /// The TrainJob/info cannot be handled.
    InvalidInput(String),
    /// Something needed is not available yet; retry.
    Unavailable(String),
    /// Anything else.
    Internal(String),
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginError::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            PluginError::InvalidInput(m) => write!(f, "invalid input: {m}"),
            PluginError::Unavailable(m) => write!(f, "unavailable: {m}"),
            PluginError::Internal(m) => write!(f, "internal: {m}"),
        }
    }
}

impl std::error::Error for PluginError {}

impl From<serde_json::Error> for PluginError {
    fn from(e: serde_json::Error) -> Self {
        PluginError::InvalidInput(format!("JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declaring(keys: &[&str]) -> Descriptor {
        Descriptor {
            policy_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            ..Descriptor::default()
        }
    }

    #[test]
    fn policy_keys_route_calls() {
        let torch = RuntimePolicy {
            ml_policy: Some(serde_json::json!({"numNodes": 2, "torch": {}, "mpi": null})),
            pod_group_policy: None,
            run_policy: None,
        };
        // Field keys: called only when the runtime sets one of them (JSON
        // null is unset).
        assert!(declaring(&["mlPolicy.torch"]).serves(&torch));
        assert!(declaring(&["mlPolicy.jax", "mlPolicy.torch"]).serves(&torch));
        assert!(!declaring(&["mlPolicy.mpi"]).serves(&torch));
        assert!(!declaring(&["podGroupPolicy.volcano"]).serves(&torch));
        assert!(!declaring(&["mlPolicy.torch"]).serves(&RuntimePolicy::default()));
        // No keys or a bare root: called for every TrainJob.
        for keys in [
            &[][..],
            &["mlPolicy"],
            &["mlPolicy", "mlPolicy.mpi"],
            &["podGroupPolicy"],
        ] {
            let d = declaring(keys);
            assert!(!d.routed_by_policy(), "{keys:?}");
            assert!(d.serves(&torch), "{keys:?}");
            assert!(d.serves(&RuntimePolicy::default()), "{keys:?}");
        }
    }

    #[test]
    fn phase_names_round_trip() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
        assert_eq!(Phase::parse("from-the-future"), None);
    }

    #[test]
    fn descriptor_ignores_unknown_phases() {
        let d = Descriptor {
            phases: vec![
                "build".into(),
                "teleport".into(),
                "enforce-ml-policy".into(),
            ],
            ..Descriptor::default()
        };
        assert_eq!(d.known_phases(), vec![Phase::EnforceMlPolicy, Phase::Build]);
        assert!(d.implements(Phase::Build));
        assert!(!d.implements(Phase::Status));
    }

    #[test]
    fn kind_ref_group() {
        assert_eq!(KindRef::new("v1", "Secret").group(), "");
        assert_eq!(
            KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet").group(),
            "jobset.x-k8s.io"
        );
    }
}
