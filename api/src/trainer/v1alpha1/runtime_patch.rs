//! `spec.runtimePatches` (HEAD API): per-manager patches to the runtime's
//! JobSet template, shaped like the JobSet itself.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSchedulingGate, PodSecurityContext, SecurityContext,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;

/// RuntimePatch is one manager's patch to the runtime template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePatch {
    /// Who owns this patch: a domain-prefixed path such as
    /// `kueue.x-k8s.io/manager` (the list key; immutable).
    #[schemars(
        length(min = 1, max = 253),
        extend("x-kubernetes-validations" = [cel::IMMUTABLE])
    )]
    pub manager: String,

    /// When the patch was last changed; informational, it does not affect
    /// how patches are applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,

    /// The patch of the runtime spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_runtime_spec: Option<TrainingRuntimeSpecPatch>,
}

/// TrainingRuntimeSpecPatch patches a TrainingRuntimeSpec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpecPatch {
    /// The patch of the JobSet template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobSetTemplatePatch>,
}

/// JobSetTemplatePatch patches the runtime's JobSet template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplatePatch {
    /// Labels and annotations merged into the JobSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// The patch of the JobSet spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSetSpecPatch>,
}

/// JobSetSpecPatch patches the JobSet spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpecPatch {
    /// Patches of replicated jobs, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub replicated_jobs: Option<Vec<ReplicatedJobPatch>>,
}

/// ReplicatedJobPatch patches one replicated job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobPatch {
    /// Name of an existing replicated job of the runtime.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// The patch of the Job template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobTemplatePatch>,
}

/// JobTemplatePatch patches a Job template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplatePatch {
    /// Labels and annotations merged into the Job template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// The patch of the Job spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpecPatch>,
}

/// JobSpecPatch patches a Job spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSpecPatch {
    /// The patch of the pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplatePatch>,
}

/// PodTemplatePatch patches a pod template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplatePatch {
    /// Labels and annotations merged into the pod template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// The patch of the pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpecPatch>,
}

/// PodSpecPatch holds the pod spec fields a patch may set. The scheduling
/// fields (`nodeSelector`, `affinity`, `tolerations`, `schedulingGates`) may
/// change after creation; the others are immutable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecPatch {
    /// Service account of the pods (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub service_account_name: Option<String>,

    /// Volumes added to the pods (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [cel::IMMUTABLE]
        )
    )]
    pub volumes: Option<Vec<Volume>>,

    /// Patches of init containers, by name (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [cel::IMMUTABLE]
        )
    )]
    pub init_containers: Option<Vec<ContainerPatch>>,

    /// Patches of containers, by name (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [cel::IMMUTABLE]
        )
    )]
    pub containers: Option<Vec<ContainerPatch>>,

    /// Image pull secrets added to the pods (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 64),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [cel::IMMUTABLE]
        )
    )]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,

    /// Pod security context (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub security_context: Option<PodSecurityContext>,

    /// Node selector merged into the pods'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Tolerations added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "atomic"))]
    pub tolerations: Option<Vec<Toleration>>,

    /// Scheduling gates added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,

    /// Grace period of the pods (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub termination_grace_period_seconds: Option<i64>,
}

/// ContainerPatch patches one (init) container, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPatch {
    /// Name of an existing container of the runtime job.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Environment variables upserted into the container. Not allowed for the
    /// containers `node`, `dataset-initializer` and `model-initializer`, whose
    /// environment is set with `trainer.env` and `initializer.*.env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Option<Vec<EnvVar>>,

    /// Volume mounts added to the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub volume_mounts: Option<Vec<VolumeMount>>,

    /// Security context of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
}
