//! `spec.podTemplateOverrides` (API v2.1): overrides of the runtime's pod
//! templates, selected by replicated job name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSchedulingGate, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// PodTemplateOverride overrides the pod template of the targeted jobs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverride {
    /// The replicated jobs whose pod template is overridden.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_jobs: Vec<PodTemplateOverrideTargetJob>,

    /// Labels and annotations merged into the pod template metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// Overrides of the pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodTemplateSpecOverride>,
}

/// PodTemplateOverrideTargetJob names one replicated job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverrideTargetJob {
    /// Name of the replicated job.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// PodTemplateSpecOverride holds the overridable pod spec fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpecOverride {
    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Node selector merged into the pods'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Tolerations added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub tolerations: Option<Vec<Toleration>>,

    /// Volumes added to (or replacing same-named volumes of) the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Option<Vec<Volume>>,

    /// Overrides of init containers, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub init_containers: Option<Vec<ContainerOverride>>,

    /// Overrides of containers, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub containers: Option<Vec<ContainerOverride>>,

    /// Scheduling gates added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,

    /// Image pull secrets added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

/// ContainerOverride overrides one (init) container of the pod template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverride {
    /// Name of the container in the runtime's pod template.
    #[schemars(length(min = 1))]
    pub name: String,

    /// Environment variables upserted into the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Option<Vec<EnvVar>>,

    /// Volume mounts added to the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volume_mounts: Option<Vec<VolumeMount>>,
}
