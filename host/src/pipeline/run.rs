//! The whole pure pipeline, used by `trainforge render` and the controller:
//!
//! TrainJob + its runtime (both as stored by the API server, i.e. with CRD
//! defaults applied; `render` applies them with [`super::defaults`])
//! → every runtime policy served by a plugin ([`unserved_policies`])
//! → the runtime info, built once per build ([`admission_info_for`]:
//! [`merge`](super::merge), then [`runtime_info`](super::info::runtime_info))
//! → plugin `validate` (admission rules) → plugin phases, both given that
//! one info
//! → the objects to apply, in apply order, plus warnings.
//!
//! Plugins are called through [`PluginSet`]; nothing here does I/O except
//! what the plugins ask of the host's read-only object source.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use tracing::info_span;
use trainforge_api::plugin::{FieldError, Info};
use trainforge_api::trainer::v1alpha1::constants::{
    API_VERSION, CLUSTER_TRAINING_RUNTIME_KIND, DEFAULT_RUNTIME_API_GROUP, DEFAULT_RUNTIME_KIND,
    GROUP, LABEL_SUPPORT, MANAGED_BY_TRAINJOB_CONTROLLER, SUPPORT_DEPRECATED,
    TRAINING_RUNTIME_KIND, TRAINJOB_KIND,
};
use trainforge_api::trainer::v1alpha1::{
    ClusterTrainingRuntime, TrainJob, TrainingRuntime, TrainingRuntimeSpec,
};

use super::features::Features;
use crate::plugin::{self, PluginSet, ValidateInput};
use trainforge_api::blueprint::merge::MergeError;
use trainforge_api::blueprint::{BlueprintError, admission_info_for, legacy};

/// The runtime a TrainJob references, namespaced or cluster-scoped.
#[derive(Clone, Debug)]
pub enum RuntimeObject {
    /// A `TrainingRuntime` in the TrainJob's namespace.
    Namespaced(TrainingRuntime),
    /// A `ClusterTrainingRuntime`.
    Cluster(ClusterTrainingRuntime),
}

impl RuntimeObject {
    /// `TrainingRuntime` or `ClusterTrainingRuntime`.
    pub fn kind(&self) -> &'static str {
        match self {
            RuntimeObject::Namespaced(_) => TRAINING_RUNTIME_KIND,
            RuntimeObject::Cluster(_) => CLUSTER_TRAINING_RUNTIME_KIND,
        }
    }

    /// The runtime's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            RuntimeObject::Namespaced(r) => &r.metadata,
            RuntimeObject::Cluster(r) => &r.metadata,
        }
    }

    /// The runtime's name.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// The blueprint.
    pub fn spec(&self) -> &TrainingRuntimeSpec {
        match self {
            RuntimeObject::Namespaced(r) => &r.spec,
            RuntimeObject::Cluster(r) => &r.spec,
        }
    }

    /// The runtime as the plugins see it under `features` (borrowed
    /// unchanged when they hide nothing of it).
    pub fn visible(&self, features: Features) -> Cow<'_, RuntimeObject> {
        if !features.hides(self.spec()) {
            return Cow::Borrowed(self);
        }
        let mut copy = self.clone();
        match &mut copy {
            RuntimeObject::Namespaced(r) => features.strip(&mut r.spec),
            RuntimeObject::Cluster(r) => features.strip(&mut r.spec),
        }
        Cow::Owned(copy)
    }

    /// The object as JSON, with `apiVersion` and `kind`.
    pub fn to_json(&self) -> Result<Value, serde_json::Error> {
        match self {
            RuntimeObject::Namespaced(r) => serde_json::to_value(r),
            RuntimeObject::Cluster(r) => serde_json::to_value(r),
        }
    }
}

/// What the pipeline produced for one TrainJob.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The objects to apply, in apply order (see [`apply_rank`]).
    pub objects: Vec<Value>,
    /// Warnings for the user (deprecations, ignored settings).
    pub warnings: Vec<String>,
    /// The in-memory TrainJob after every plugin phase (never persisted).
    pub trainjob: Value,
    /// The runtime info after every phase.
    pub info: Info,
}

/// One admission problem: the plugin (or `trainforge` for the host's own
/// checks), the field and the reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// Who found it.
    pub source: String,
    /// The field error.
    pub error: FieldError,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.source, self.error.field, self.error.detail
        )
    }
}

/// Why the pipeline could not produce objects.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The TrainJob references a runtime kind Trainforge does not serve, or
    /// a runtime other than the one given.
    #[error("spec.runtimeRef: {0}")]
    Runtime(String),
    /// The runtime cannot be used at all, or the runtime info cannot be
    /// built from it.
    #[error(transparent)]
    Blueprint(#[from] BlueprintError),
    /// Admission rules failed; every problem is listed.
    #[error("the TrainJob is invalid:\n{}", problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        /// Every problem found.
        problems: Vec<Problem>,
        /// Warnings found on the way.
        warnings: Vec<String>,
    },
    /// The runtime selects policies (`mlPolicy.<key>`,
    /// `podGroupPolicy.<key>`) that no plugin in the set declares in its
    /// `policy-keys`: building without them would silently drop what they
    /// add, so nothing is built.
    #[error(
        "{} {} served by no plugin in service (plugins in service: {}); nothing was built",
        if keys.len() == 1 { "runtime policy" } else { "runtime policies" },
        keys.join(", "),
        if serving.is_empty() { "none".to_owned() } else { serving.join(", ") }
    )]
    PolicyNotServed {
        /// The policy keys no plugin declares, sorted.
        keys: Vec<String>,
        /// The names of the plugins in the set.
        serving: Vec<String>,
    },
    /// A plugin failed (with its name and reason).
    #[error(transparent)]
    Plugin(#[from] plugin::Error),
    /// The TrainJob or runtime could not be serialised (should not happen).
    #[error("serialising {what}: {reason}")]
    Serialize {
        /// What.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

impl PipelineError {
    /// Whether the TrainJob or its runtime is at fault, so that only an
    /// edit by the user can change the outcome (a runtime reference that
    /// does not match, a runtime the blueprint cannot use, admission
    /// problems). Missing plugins, plugin failures and serialisation are
    /// not the user's: they can go away on their own.
    pub fn is_user_error(&self) -> bool {
        match self {
            PipelineError::Runtime(_)
            | PipelineError::Blueprint(_)
            | PipelineError::Invalid { .. } => true,
            PipelineError::PolicyNotServed { .. }
            | PipelineError::Plugin(_)
            | PipelineError::Serialize { .. } => false,
        }
    }
}

/// The runtime policies a runtime selects, as policy keys, sorted:
/// `mlPolicy.<key>` for every key of `mlPolicy` except `numNodes` (which
/// every runtime may set and the host itself applies), and
/// `podGroupPolicy.<key>` for every key of `podGroupPolicy`. A key whose
/// value is `null` selects nothing.
pub fn required_policies(spec: &TrainingRuntimeSpec) -> Result<Vec<String>, PipelineError> {
    let as_json = |v: Option<Value>| match v {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let serialise = |e: serde_json::Error| PipelineError::Serialize {
        what: "runtime policies",
        reason: e.to_string(),
    };
    let ml = as_json(
        spec.ml_policy
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(serialise)?,
    );
    let pg = as_json(
        spec.pod_group_policy
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(serialise)?,
    );
    let mut keys: Vec<String> = ml
        .iter()
        .filter(|(k, v)| k.as_str() != "numNodes" && !v.is_null())
        .map(|(k, _)| format!("mlPolicy.{k}"))
        .chain(
            pg.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| format!("podGroupPolicy.{k}")),
        )
        .collect();
    keys.sort();
    Ok(keys)
}

/// The policies of [`required_policies`] that no plugin of `plugins`
/// declares in its `policy-keys`, sorted. A plugin serves exactly the keys
/// it declares: declaring `mlPolicy` (PlainML, which runs when no
/// framework policy is set) does not serve `mlPolicy.torch`.
pub fn unserved_policies(
    spec: &TrainingRuntimeSpec,
    plugins: &PluginSet,
) -> Result<Vec<String>, PipelineError> {
    Ok(required_policies(spec)?
        .into_iter()
        .filter(|key| {
            !plugins
                .plugins()
                .iter()
                .any(|p| p.descriptor().policy_keys.iter().any(|k| k == key))
        })
        .collect())
}

/// Refuse a runtime whose policies are not all served by `plugins`
/// ([`PipelineError::PolicyNotServed`]).
pub fn check_policies_served(
    runtime: &RuntimeObject,
    plugins: &PluginSet,
) -> Result<(), PipelineError> {
    let keys = unserved_policies(runtime.spec(), plugins)?;
    if keys.is_empty() {
        return Ok(());
    }
    Err(PipelineError::PolicyNotServed {
        keys,
        serving: plugins
            .plugins()
            .iter()
            .map(|p| p.name().to_owned())
            .collect(),
    })
}

/// A short, stable digest of a TrainJob's effective `spec.runtimePatches`
/// (absent and empty are the same): 16 hex characters of their JSON's
/// sha256. The effective patches are those after the v2.1 override fields
/// are moved into their runtime patch ([`legacy::convert`]), so the
/// operator's own move of those fields is not an edit. The controller
/// records the digest on the objects it builds, so that a later edit of the
/// patches is told apart from the patches those objects came from.
///
/// Rule: a patch's `time` is not part of it (it says when its manager last
/// set it): a webhook stamping the time of the operator's own move (ours,
/// when it is already registered at the move, or not) is no edit.
pub fn runtime_patches_hash(job: &TrainJob) -> String {
    let converted = legacy::convert(&job.spec).ok().flatten();
    let patches = match &converted {
        Some(c) => c.runtime_patches.as_slice(),
        None => job.spec.runtime_patches.as_deref().unwrap_or_default(),
    };
    let mut value = serde_json::to_value(patches).unwrap_or_default();
    for p in value.as_array_mut().into_iter().flatten() {
        if let Some(o) = p.as_object_mut() {
            o.remove("time");
        }
    }
    let text = value.to_string();
    let mut hex = plugin::sha256_hex(text.as_bytes());
    hex.truncate(16);
    hex
}

/// Admission: the warnings of a TrainJob, or every problem with it (merge
/// references and each plugin's `validate`), as the webhook would answer.
pub fn validate(
    job: &TrainJob,
    old: Option<&TrainJob>,
    runtime: &RuntimeObject,
    plugins: &PluginSet,
) -> Result<Vec<String>, PipelineError> {
    validate_within(job, old, runtime, plugins, None)
}

/// [`validate`] with the plugin calls within a request budget (admission,
/// see [`PluginSet::validate_input_within`]).
pub fn validate_within(
    job: &TrainJob,
    old: Option<&TrainJob>,
    runtime: &RuntimeObject,
    plugins: &PluginSet,
    budget: Option<&crate::plugin::ValidateBudget>,
) -> Result<Vec<String>, PipelineError> {
    check_runtime_ref(job, runtime)?;
    let info = JobInfo::build(job, runtime)?;
    validate_with(job, old, runtime, plugins, budget, &info)
}

/// The runtime info of a TrainJob on its runtime, built once
/// ([`admission_info_for`]) for both admission and the plugin phases:
/// the info, and the overrides that name a job or container the runtime
/// does not have (skipped in the info).
struct JobInfo {
    info: Info,
    problems: Vec<MergeError>,
}

impl JobInfo {
    /// Merge `job`'s overrides into `runtime`, then build the info.
    fn build(job: &TrainJob, runtime: &RuntimeObject) -> Result<Self, PipelineError> {
        let (info, problems) = admission_info_for(job, runtime.spec())?;
        Ok(JobInfo { info, problems })
    }

    /// The info the first plugin phase is given. As with
    /// [`runtime_info_for`](trainforge_api::blueprint::runtime_info_for),
    /// an override naming what the runtime does not have is an error: the
    /// first one.
    fn for_phases(self) -> Result<Info, PipelineError> {
        match self.problems.into_iter().next() {
            Some(first) => Err(BlueprintError::Merge(first).into()),
            None => Ok(self.info),
        }
    }
}

/// Admission of `job` (its runtime reference already checked) with its
/// runtime info `info`: the merge problems the host reports, then each
/// plugin's `validate`.
fn validate_with(
    job: &TrainJob,
    old: Option<&TrainJob>,
    runtime: &RuntimeObject,
    plugins: &PluginSet,
    budget: Option<&crate::plugin::ValidateBudget>,
    info: &JobInfo,
) -> Result<Vec<String>, PipelineError> {
    let mut warnings: Vec<String> = deprecation_warning(runtime)
        .into_iter()
        .chain(num_proc_warning(job))
        .collect();
    // Unknown jobs/containers in `runtimePatches` are reported by the JobSet
    // plugin with upstream's messages; the host reports the older
    // `podTemplateOverrides`, which no plugin checks.
    let mut problems: Vec<Problem> = info
        .problems
        .iter()
        .filter(|e| !e.field().starts_with("spec.runtimePatches"))
        .map(|e| Problem {
            source: "trainforge".into(),
            error: FieldError {
                error_type: trainforge_api::plugin::FieldErrorType::Invalid,
                field: e.field().to_string(),
                bad_value: None,
                detail: e.reason(),
            },
        })
        .collect();
    // What the API server would refuse in the pods (a field error each),
    // before any plugin runs: a node count no plugin can lay out within its
    // memory is refused here, naming the field.
    let spec = serde_json::to_value(&job.spec).map_err(|e| PipelineError::Serialize {
        what: "TrainJob spec",
        reason: e.to_string(),
    })?;
    let runtime_nodes = runtime
        .spec()
        .ml_policy
        .as_ref()
        .and_then(|m| m.num_nodes)
        .map(i64::from);
    let pod_problems = super::pod_checks::problems(&spec, runtime_nodes);
    if !pod_problems.is_empty() {
        problems.extend(pod_problems.into_iter().map(|error| Problem {
            source: "trainforge".into(),
            error,
        }));
        return Err(PipelineError::Invalid { problems, warnings });
    }
    let old = old.map(|o| as_moved(o, job));
    let input = ValidateInput {
        trainjob: to_json_string(job, "TrainJob")?,
        old_trainjob: old
            .as_ref()
            .map(|o| to_json_string(o, "old TrainJob"))
            .transpose()?,
        info: to_json_string(&info.info, "runtime info")?,
    };
    // Through the set: it honours each plugin's phases and failure policy
    // (an ignored failure becomes a warning).
    let v = plugins.validate_input_within(&input, budget)?;
    warnings.extend(v.warnings);
    warnings.extend(v.ignored);
    problems.extend(v.errors.into_iter().map(|e| Problem {
        source: e.plugin,
        error: e.error,
    }));
    if problems.is_empty() {
        Ok(warnings)
    } else {
        Err(PipelineError::Invalid { problems, warnings })
    }
}

/// `old` as plugins compare it with `new` on an update: when `new` no
/// longer has the v2.1 override fields `old` had (the operator moved them
/// into their runtime patch, see [`legacy`]), `old` in that converted form,
/// with the converted patch stamped with `new`'s time for it. The move keeps
/// what the job runs with, so it is not an edit of the overrides; anything
/// else changed in the same update still is.
fn as_moved(old: &TrainJob, new: &TrainJob) -> TrainJob {
    if !legacy::has_legacy_fields(&old.spec) || legacy::has_legacy_fields(&new.spec) {
        return old.clone();
    }
    let Ok(Some(conversion)) = legacy::convert(&old.spec) else {
        return old.clone();
    };
    let mut moved = old.clone();
    moved.spec.labels = None;
    moved.spec.annotations = None;
    moved.spec.pod_template_overrides = None;
    let mut patches = conversion.runtime_patches;
    let new_time = |manager: &str| {
        new.spec
            .runtime_patches
            .iter()
            .flatten()
            .find(|p| p.manager == manager)
            .and_then(|p| p.time.clone())
    };
    for p in patches
        .iter_mut()
        .filter(|p| p.manager == legacy::LEGACY_FIELDS_MANAGER)
    {
        p.time = new_time(&p.manager);
    }
    moved.spec.runtime_patches = Some(patches);
    moved
}

/// Run the pipeline: check that a plugin serves every policy of the
/// runtime ([`check_policies_served`]), build the runtime info once, validate
/// with it, then every plugin phase from it, then put the objects (plus the
/// runtime snapshot ConfigMap) in apply order. The plugins see the TrainJob
/// and runtime as `features` leave them ([`Features::visible_job`],
/// [`RuntimeObject::visible`]); the
/// snapshot is of the runtime as stored.
pub fn run(
    job: &TrainJob,
    runtime: &RuntimeObject,
    plugins: &PluginSet,
    features: Features,
) -> Result<Rendered, PipelineError> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let span = info_span!("pipeline", trainjob = %name, runtime = %runtime.name());
    let _guard = span.enter();
    check_runtime_ref(job, runtime)?;
    let (seen_job, seen_runtime) = (features.visible_job(job), runtime.visible(features));
    check_policies_served(&seen_runtime, plugins)?;
    let info = JobInfo::build(&seen_job, &seen_runtime)?;
    let warnings = validate_with(&seen_job, None, &seen_runtime, plugins, None, &info)?;
    let info = info.for_phases()?;
    let trainjob = serde_json::to_value(&*seen_job).map_err(|e| PipelineError::Serialize {
        what: "TrainJob",
        reason: e.to_string(),
    })?;
    let out = plugins.reconcile(&trainjob, &info)?;
    let mut warnings = warnings;
    warnings.extend(out.warnings);
    let mut objects = vec![snapshot_config_map(job, runtime)?];
    objects.extend(out.objects);
    objects.sort_by_key(apply_rank);
    // The warnings are returned, not logged: each caller reports them once
    // (`render` on stderr, the controller in its log).
    Ok(Rendered {
        objects,
        warnings,
        trainjob: out.trainjob,
        info: out.info,
    })
}

/// Apply order: what pods mount or are scheduled with comes before the
/// JobSet that creates pods (ConfigMaps and Secrets, then PodGroups, then the
/// JobSet, then everything else such as autoscalers). Stable within a rank.
pub fn apply_rank(object: &Value) -> u8 {
    match object.get("kind").and_then(Value::as_str) {
        Some("ConfigMap" | "Secret") => 0,
        Some("PodGroup") => 1,
        Some("JobSet") => 2,
        _ => 3,
    }
}

/// The controller owner reference every object of a TrainJob carries.
pub fn owner_reference(job: &TrainJob) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_string(),
        kind: TRAINJOB_KIND.to_string(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `<job>-runtime-snapshot`: the runtime as it was when the TrainJob was first
/// reconciled (YAML under key `runtime`), so later edits or deletion of the
/// runtime do not change a running job.
pub fn snapshot_config_map(
    job: &TrainJob,
    runtime: &RuntimeObject,
) -> Result<Value, PipelineError> {
    let runtime_json = runtime.to_json().map_err(|e| PipelineError::Serialize {
        what: "runtime",
        reason: e.to_string(),
    })?;
    let yaml = serde_saphyr::to_string(&runtime_json).map_err(|e| PipelineError::Serialize {
        what: "runtime",
        reason: e.to_string(),
    })?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-runtime-snapshot")),
            namespace: job.metadata.namespace.clone(),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        data: Some([("runtime".to_string(), yaml)].into_iter().collect()),
        ..ConfigMap::default()
    };
    serde_json::to_value(&cm).map_err(|e| PipelineError::Serialize {
        what: "snapshot ConfigMap",
        reason: e.to_string(),
    })
}

/// The TrainJob must reference exactly this runtime, by a kind we serve.
fn check_runtime_ref(job: &TrainJob, runtime: &RuntimeObject) -> Result<(), PipelineError> {
    let r = &job.spec.runtime_ref;
    let kind = r.kind.as_deref().unwrap_or(DEFAULT_RUNTIME_KIND);
    let group = r.api_group.as_deref().unwrap_or(DEFAULT_RUNTIME_API_GROUP);
    if group != GROUP || (kind != TRAINING_RUNTIME_KIND && kind != CLUSTER_TRAINING_RUNTIME_KIND) {
        return Err(PipelineError::Runtime(format!(
            "unsupported runtime: {kind}.{group}"
        )));
    }
    if kind != runtime.kind() || r.name != runtime.name() {
        return Err(PipelineError::Runtime(format!(
            "the TrainJob references {kind} {:?}, but the runtime given is {} {:?}",
            r.name,
            runtime.kind(),
            runtime.name()
        )));
    }
    Ok(())
}

/// Upstream's warning for a ClusterTrainingRuntime labelled deprecated.
pub fn deprecation_warning(runtime: &RuntimeObject) -> Option<String> {
    let deprecated = runtime
        .metadata()
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SUPPORT))
        .is_some_and(|v| v == SUPPORT_DEPRECATED);
    (deprecated && matches!(runtime, RuntimeObject::Cluster(_))).then(|| {
        format!(
            "Referenced ClusterTrainingRuntime {:?} is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy",
            runtime.name()
        )
    })
}

/// The controller a TrainJob is delegated to when it is not this one
/// (`spec.managedBy` other than `trainer.kubeflow.org/trainjob-controller`,
/// e.g. `kueue.x-k8s.io/multikueue`): nothing is built for such a TrainJob,
/// by the operator or by `trainforge render`.
pub fn managed_elsewhere(job: &TrainJob) -> Option<&str> {
    job.spec
        .managed_by
        .as_deref()
        .filter(|m| *m != MANAGED_BY_TRAINJOB_CONTROLLER)
}

/// The warning for a `trainer.numProcPerNode` below 1. Kubeflow Trainer
/// v2.3 accepts such values (the field has no minimum there) and passes them
/// on to the framework, so admission accepts them too, and says so.
pub fn num_proc_warning(job: &TrainJob) -> Option<String> {
    let n = match job.spec.trainer.as_ref()?.num_proc_per_node.as_ref()? {
        IntOrString::Int(n) if *n < 1 => *n,
        _ => return None,
    };
    Some(format!(
        "spec.trainer.numProcPerNode: {n} is accepted as Kubeflow Trainer v2.3 accepts it, but no framework starts fewer than one process per node (torchrun, mpirun and Flux are given {n} as it is); later Kubeflow Trainer releases refuse values below 1"
    ))
}

fn to_json_string<T: serde::Serialize>(v: &T, what: &'static str) -> Result<String, PipelineError> {
    serde_json::to_string(v).map_err(|e| PipelineError::Serialize {
        what,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::plugin::{PluginRuntime, RuntimeConfig, builtin};
    use serde_json::json;

    /// A set of the named builtin plugins (crate names).
    fn builtins(names: &[&str]) -> PluginSet {
        let runtime = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let plugins = names
            .iter()
            .map(|n| {
                let Some(b) = builtin::all().iter().find(|b| b.crate_name == *n) else {
                    panic!("builtin {n} is not embedded");
                };
                runtime.load(b.trusted_source()).unwrap()
            })
            .collect();
        PluginSet::new(plugins).unwrap()
    }

    fn runtime(spec: Value) -> RuntimeObject {
        let mut rt = json!({
            "apiVersion": API_VERSION, "kind": CLUSTER_TRAINING_RUNTIME_KIND,
            "metadata": {"name": "rt"},
            "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node",
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}}}]}}}
        });
        if let (Some(s), Value::Object(extra)) = (rt["spec"].as_object_mut(), spec) {
            s.extend(extra);
        }
        RuntimeObject::Cluster(serde_json::from_value(rt).unwrap())
    }

    fn job(patches: Value) -> TrainJob {
        serde_json::from_value(json!({
            "apiVersion": API_VERSION, "kind": TRAINJOB_KIND,
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {"runtimeRef": {"name": "rt", "kind": CLUSTER_TRAINING_RUNTIME_KIND,
                "apiGroup": GROUP}, "runtimePatches": patches, "trainer": {"numNodes": 1}}
        }))
        .unwrap()
    }

    #[test]
    fn num_proc_per_node_below_one_is_admitted_with_a_warning_naming_the_field() {
        let rt = runtime(json!({"mlPolicy": {"numNodes": 1, "torch": {}}}));
        let plugins = builtins(&["plugin-jobset", "plugin-torch"]);
        for (value, warned) in [
            (json!(0), true),
            (json!(-1), true),
            (json!(i32::MIN), true),
            (json!(1), false),
            (json!(8), false),
            (json!("auto"), false),
        ] {
            let mut j = job(Value::Null);
            let t = j.spec.trainer.get_or_insert_with(Default::default);
            t.num_proc_per_node = Some(serde_json::from_value(value.clone()).unwrap());
            let warnings = validate(&j, None, &rt, &plugins)
                .unwrap_or_else(|e| panic!("numProcPerNode {value} refused: {e}"));
            let ours: Vec<&String> = warnings
                .iter()
                .filter(|w| w.starts_with("spec.trainer.numProcPerNode"))
                .collect();
            assert_eq!(ours.len(), usize::from(warned), "{value}: {warnings:?}");
            if warned {
                assert!(
                    ours[0].contains(&format!(": {value} is accepted")),
                    "{ours:?}"
                );
            }
        }
    }

    #[test]
    fn every_policy_but_num_nodes_is_required() {
        let rt = runtime(json!({
            "mlPolicy": {"numNodes": 2, "torch": {}, "future": {"x": 1}, "gone": null},
            "podGroupPolicy": {"volcano": {}, "coscheduling": {"scheduleTimeoutSeconds": 5}}
        }));
        assert_eq!(
            required_policies(rt.spec()).unwrap(),
            [
                "mlPolicy.future",
                "mlPolicy.torch",
                "podGroupPolicy.coscheduling",
                "podGroupPolicy.volcano"
            ]
        );
        assert!(
            required_policies(runtime(json!({"mlPolicy": {"numNodes": 1}})).spec())
                .unwrap()
                .is_empty()
        );
        assert!(
            required_policies(runtime(json!({})).spec())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_policy_no_plugin_declares_stops_the_pipeline() {
        let torchless = builtins(&["plugin-jobset", "plugin-plainml"]);
        let rt = runtime(json!({"mlPolicy": {"numNodes": 1, "torch": {}}}));
        assert_eq!(
            unserved_policies(rt.spec(), &torchless).unwrap(),
            ["mlPolicy.torch"],
            "PlainML's `mlPolicy` does not serve `mlPolicy.torch`"
        );
        let err = run(&job(Value::Null), &rt, &torchless, Features::default()).unwrap_err();
        assert!(
            matches!(&err, PipelineError::PolicyNotServed { keys, .. } if keys == &["mlPolicy.torch"]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "runtime policy mlPolicy.torch served by no plugin in service \
             (plugins in service: jobset, plainml); nothing was built"
        );
        assert!(!err.is_user_error(), "a plugin can come back");

        let with_torch = builtins(&["plugin-jobset", "plugin-plainml", "plugin-torch"]);
        let rendered = run(&job(Value::Null), &rt, &with_torch, Features::default()).unwrap();
        let jobset = rendered
            .objects
            .iter()
            .find(|o| o["kind"] == "JobSet")
            .unwrap();
        let env = jobset
            .pointer("/spec/replicatedJobs/0/template/spec/template/spec/containers/0/env")
            .unwrap()
            .to_string();
        assert!(env.contains("PET_NNODES"), "{env}");

        // Nothing is required of a runtime without policies.
        let plain = runtime(json!({"mlPolicy": {"numNodes": 1}}));
        assert!(run(&job(Value::Null), &plain, &torchless, Features::default()).is_ok());
    }

    #[test]
    fn the_info_is_built_once_and_its_merge_problems_stop_the_build() {
        let rt = runtime(json!({}));
        // `podTemplateOverrides` naming a job the runtime lacks: the host
        // reports it in admission.
        let mut stray = job(Value::Null);
        stray.spec.pod_template_overrides = Some(
            serde_json::from_value(json!([{"targetJobs": [{"name": "nope"}],
                "spec": {"nodeSelector": {"pool": "a"}}}]))
            .unwrap(),
        );
        let set = builtins(&["plugin-jobset"]);
        let err = run(&stray, &rt, &set, Features::default()).unwrap_err();
        assert!(
            err.to_string().contains(
                "trainforge: spec.podTemplateOverrides[0].targetJobs[0].name: \
                 the runtime has no replicated job \"nope\""
            ),
            "{err}"
        );
        // A runtime patch naming a job the runtime lacks is left to the
        // plugins in admission; no plugin reporting it, the build still
        // refuses it, as `runtime_info_for` would.
        let patched = job(
            json!([{"manager": "u", "trainingRuntimeSpec": {"template": {"spec":
            {"replicatedJobs": [{"name": "nope"}]}}}}]),
        );
        let plain = builtins(&["plugin-plainml"]);
        assert!(validate(&patched, None, &rt, &plain).is_ok());
        let err = run(&patched, &rt, &plain, Features::default()).unwrap_err();
        assert!(
            matches!(&err, PipelineError::Blueprint(BlueprintError::Merge(e))
                if e.field() == "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            trainforge_api::blueprint::runtime_info_for(&patched, rt.spec())
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn user_errors_are_told_from_the_rest() {
        assert!(PipelineError::Runtime("x".into()).is_user_error());
        assert!(
            PipelineError::Invalid {
                problems: Vec::new(),
                warnings: Vec::new()
            }
            .is_user_error()
        );
        assert!(
            !PipelineError::Serialize {
                what: "x",
                reason: "y".into()
            }
            .is_user_error()
        );
    }

    #[test]
    fn the_patches_hash_follows_the_patches_only() {
        let none = runtime_patches_hash(&job(Value::Null));
        assert_eq!(none, runtime_patches_hash(&job(json!([]))));
        assert_eq!(none.len(), 16);
        let a = json!([{"manager": "u", "time": "2026-01-01T00:00:00Z",
            "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "1"}}}}}]);
        let b = json!([{"manager": "u", "time": "2026-01-01T00:00:00Z",
            "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "2"}}}}}]);
        let ha = runtime_patches_hash(&job(a.clone()));
        assert_ne!(ha, none);
        assert_ne!(ha, runtime_patches_hash(&job(b)));
        let mut other = job(a);
        other.spec.suspend = Some(true);
        other.metadata.name = Some("k".into());
        assert_eq!(runtime_patches_hash(&other), ha);
    }

    #[test]
    fn moving_the_v21_fields_into_a_patch_does_not_change_the_hash() {
        let mut before = job(json!([{"manager": "kueue.x-k8s.io/manager"}]));
        before.spec.labels = Some([("team".to_string(), "a".to_string())].into());
        let conversion = legacy::convert(&before.spec).unwrap().unwrap();
        let mut after = before.clone();
        after.spec.labels = None;
        after.spec.runtime_patches = Some(conversion.runtime_patches);
        assert_eq!(runtime_patches_hash(&before), runtime_patches_hash(&after));
        // The defaulting webhook stamping the moved patch (when it is
        // already registered at the move) is no edit either.
        let mut stamped = after.clone();
        if let Some(p) = stamped
            .spec
            .runtime_patches
            .as_mut()
            .and_then(|p| p.first_mut())
        {
            p.time = Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        }
        assert_eq!(runtime_patches_hash(&stamped), runtime_patches_hash(&after));
        // A v2.1 field edited later is an edit of the patches.
        let mut edited = after.clone();
        edited.spec.labels = Some([("team".to_string(), "b".to_string())].into());
        assert_ne!(runtime_patches_hash(&edited), runtime_patches_hash(&after));
    }

    #[test]
    fn the_operators_v21_move_is_not_an_edit_of_a_running_job() {
        let set = builtins(&["plugin-jobset"]);
        let rt = runtime(json!({}));
        let mut old = job(Value::Null);
        old.spec.suspend = Some(false);
        old.spec.pod_template_overrides = Some(
            serde_json::from_value(json!([{"targetJobs": [{"name": "node"}],
                "spec": {"nodeSelector": {"pool": "a"}}}]))
            .unwrap(),
        );
        let mut new = old.clone();
        new.spec.pod_template_overrides = None;
        let mut patches = legacy::convert(&old.spec).unwrap().unwrap().runtime_patches;
        // The defaulting webhook stamps the new patch.
        patches[0].time = Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        new.spec.runtime_patches = Some(patches.clone());
        let ok = validate(&new, Some(&old), &rt, &set);
        assert!(ok.is_ok(), "{ok:?}");

        // More than the move is an edit of a running job.
        let mut edited = serde_json::to_value(&patches).unwrap();
        edited[0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
            ["template"]["spec"]["nodeSelector"] = json!({"pool": "b"});
        new.spec.runtime_patches = Some(serde_json::from_value(edited).unwrap());
        let err = validate(&new, Some(&old), &rt, &set).unwrap_err();
        assert!(
            err.to_string()
                .contains("RuntimePatches can only be modified when the TrainJob is suspended"),
            "{err}"
        );
    }
}
