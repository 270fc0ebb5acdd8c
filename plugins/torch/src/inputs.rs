//! What the Torch plugin reads from the TrainJob and the runtime info.

use crate::num_proc::{self, NumProc};
use crate::quantity;
use serde::Deserialize;
use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, NODE};
use trainforge_sdk::api::trainer::v1alpha1::{MLPolicy, TorchMLPolicySource};
use trainforge_sdk::k8s_openapi::api::core::v1::EnvVar;
use trainforge_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use trainforge_sdk::serde_json::{self, Value};
use trainforge_sdk::{Info, PluginError};

/// The `spec.trainer` fields the plugin uses. Resources stay JSON so that
/// quantities written as YAML numbers (`nvidia.com/gpu: 8`) are accepted.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainerView {
    /// `command`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// `args`.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// `env`.
    #[serde(default)]
    pub env: Option<Vec<EnvVar>>,
    /// `numNodes`.
    #[serde(default)]
    pub num_nodes: Option<i32>,
    /// `resourcesPerNode` (ResourceRequirements JSON).
    #[serde(default)]
    pub resources_per_node: Option<Value>,
    /// `numProcPerNode`.
    #[serde(default)]
    pub num_proc_per_node: Option<IntOrString>,
}

/// An invalid input: the field and the reason (also an admission error).
pub type FieldIssue = (&'static str, String);

/// `FieldIssue` → the phase error.
pub fn to_plugin_error((field, reason): FieldIssue) -> PluginError {
    PluginError::InvalidInput(format!("{field}: {reason}"))
}

/// `spec.trainer`, or `None` when absent.
pub fn trainer(trainjob: &Value) -> Result<Option<TrainerView>, FieldIssue> {
    match trainjob.pointer("/spec/trainer") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| ("spec.trainer", e.to_string())),
    }
}

/// `spec.runtimeRef.name` (empty when absent).
pub fn runtime_name(trainjob: &Value) -> &str {
    trainjob
        .pointer("/spec/runtimeRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The runtime's `mlPolicy` and its `torch` entry, when `torch` is set.
pub fn torch_policy(info: &Info) -> Result<Option<(MLPolicy, TorchMLPolicySource)>, FieldIssue> {
    if info.policy("mlPolicy.torch").is_none() {
        return Ok(None);
    }
    let Some(raw) = info.policy("mlPolicy") else {
        return Ok(None);
    };
    let ml: MLPolicy = serde_json::from_value(raw.clone())
        .map_err(|e| ("spec.runtimeRef", format!("runtime mlPolicy: {e}")))?;
    Ok(ml.torch.clone().map(|t| (ml, t)))
}

/// Resources of the runtime's trainer `node` container
/// (`ExtractResourcePerNodeFromRuntime`): the first such container's.
pub fn runtime_node_resources(info: &Info) -> Option<&Value> {
    info.runtime_node_containers()
        .next()
        .and_then(|c| c.get("resources"))
}

/// Node sizing: GPUs, CPUs and the resolved `numProcPerNode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// GPUs per node.
    pub gpu: i64,
    /// CPUs per node (rounded up).
    pub cpu: i64,
    /// `PET_NPROC_PER_NODE`.
    pub nproc: NumProc,
}

/// Resolve the sizing: resources are `trainer.resourcesPerNode` alone when
/// set, else the runtime's `node` container resources.
pub fn sizing(
    trainer: Option<&TrainerView>,
    torch: &TorchMLPolicySource,
    info: &Info,
) -> Result<Sizing, FieldIssue> {
    let request = num_proc::request(
        trainer.and_then(|t| t.num_proc_per_node.as_ref()),
        torch.num_proc_per_node.as_ref(),
    )
    .map_err(|(f, m)| {
        let field = if f == "spec.trainer.numProcPerNode" {
            f
        } else {
            "spec.runtimeRef"
        };
        (
            field,
            if field == f {
                m.to_owned()
            } else {
                format!("{f}: {m}")
            },
        )
    })?;
    let (resources, field) = match trainer.and_then(|t| t.resources_per_node.as_ref()) {
        Some(r) => (Some(r), "spec.trainer.resourcesPerNode"),
        None => (runtime_node_resources(info), "spec.runtimeRef"),
    };
    let issue = |e: String| (field, e);
    let gpu = quantity::gpu_per_node(resources, "resources").map_err(issue)?;
    let cpu = quantity::cpu_per_node(resources, "resources").map_err(issue)?;
    Ok(Sizing {
        gpu,
        cpu,
        nproc: num_proc::resolve(request, cpu, gpu),
    })
}

/// DNS name of the first trainer pod:
/// `<job>-<trainer job>-0-0.<subdomain>`, subdomain = the JobSet's
/// `network.subdomain` or the TrainJob name (as JobSet names its pods).
pub fn node0_hostname(info: &Info, job: &str) -> String {
    let rjob = info
        .pod_set_by_ancestor(ANCESTOR_TRAINER)
        .map_or(NODE, |p| p.name.as_str());
    let subdomain = info
        .template_spec
        .obj
        .pointer("/network/subdomain")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(job);
    format!("{job}-{rjob}-0-0.{subdomain}")
}
