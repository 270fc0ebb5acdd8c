//! `spec.mlPolicy` of a runtime: node count and the framework policy that
//! selects the ML plugin (torch, mpi, jax, xgboost, flux, or one owned by an
//! out-of-tree plugin, kept verbatim in [`MLPolicy::other`]).

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cel;

/// MLPolicy is the runtime's ML framework policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    transform = crate::schema::preserve_unknown_fields,
    extend("x-kubernetes-validations" = [cel::ONE_ML_POLICY, cel::NUM_NODES_WITH_ELASTIC])
)]
pub struct MLPolicy {
    /// Initial number of training nodes (1 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,

    /// PyTorch (torchrun) policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchMLPolicySource>,

    /// MPI policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MPIMLPolicySource>,

    /// JAX policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jax: Option<JAXMLPolicySource>,

    /// XGBoost policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xgboost: Option<XGBoostMLPolicySource>,

    /// Flux policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxMLPolicySource>,

    /// Policies no builtin plugin knows (e.g. `{myframework: {...}}`), kept
    /// verbatim for out-of-tree plugins.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: BTreeMap<String, Value>,
}

/// TorchMLPolicySource configures torchrun.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchMLPolicySource {
    /// Deprecated: set `trainer.numProcPerNode` on the TrainJob. Processes
    /// per node: an integer of at least 1, or `auto`, `cpu`, `gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-validations" = [cel::NUM_PROC_PER_NODE_MIN, cel::NUM_PROC_PER_NODE_STRING]
    ))]
    pub num_proc_per_node: Option<IntOrString>,

    /// Extra containers that also receive the `PET_*` environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_injection: Option<TorchEnvInjection>,

    /// Deprecated: accepted for compatibility and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_policy: Option<TorchElasticPolicy>,
}

/// TorchEnvInjection lists containers that receive the `PET_*` environment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchEnvInjection {
    /// Targets, one per replicated job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["jobName"])
    )]
    pub targets: Option<Vec<EnvInjectionTarget>>,
}

/// EnvInjectionTarget names containers of one replicated job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvInjectionTarget {
    /// Name of the replicated job.
    #[schemars(length(min = 1, max = 253))]
    pub job_name: String,

    /// Container or init container names (not `node`, which always gets them).
    #[schemars(
        length(min = 1, max = 8),
        extend(
            "x-kubernetes-list-type" = "set",
            "items" = {"type": "string", "maxLength": 63},
            "x-kubernetes-validations" = [cel::ENV_INJECTION_NOT_NODE]
        )
    )]
    pub container_names: Vec<String>,
}

/// TorchElasticPolicy bounds elastic training. Deprecated: accepted for
/// compatibility and ignored.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TorchElasticPolicy {
    /// How many times the workers may be restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,

    /// Lower bound of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_nodes: Option<i32>,

    /// Upper bound of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<i32>,

    /// Metrics that drive a HorizontalPodAutoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub metrics: Option<Vec<MetricSpec>>,
}

/// MPIMLPolicySource configures MPI.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MPIMLPolicySource {
    /// Slots per node (`slots=` in the hostfile and
    /// `OMPI_MCA_orte_set_default_slots`); the TrainJob's
    /// `trainer.numProcPerNode` overrides it. When it is 1 and the node
    /// container has more than one GPU, the GPU count is used instead. 0 is
    /// accepted and used as is. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1, "x-kubernetes-validations" = [cel::MPI_NUM_PROC_PER_NODE]))]
    pub num_proc_per_node: Option<i32>,

    /// MPI implementation: `OpenMPI` (the default and the only one supported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "OpenMPI", "enum" = ["OpenMPI", ""]))]
    pub mpi_implementation: Option<String>,

    /// Where the SSH keys are mounted in the launcher and node containers
    /// (default `/root/.ssh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096), extend("default" = "/root/.ssh"))]
    pub ssh_auth_mount_path: Option<String>,

    /// Whether the launcher also counts as a training node (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub run_launcher_as_node: Option<bool>,
}

/// JAXMLPolicySource selects the JAX plugin (no settings).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct JAXMLPolicySource {}

/// XGBoostMLPolicySource selects the XGBoost plugin (no settings).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct XGBoostMLPolicySource {}

/// FluxMLPolicySource configures Flux.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxMLPolicySource {
    /// Flux tasks per node: at least 1 (default 1); the TrainJob's
    /// `trainer.numProcPerNode` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1, "x-kubernetes-validations" = [cel::FLUX_NUM_PROC_PER_NODE]))]
    pub num_proc_per_node: Option<i32>,
}
