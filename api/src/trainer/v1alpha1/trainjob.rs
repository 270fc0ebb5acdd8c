//! `TrainJob`: one training run on a (Cluster)TrainingRuntime blueprint.
//!
//! The spec serves the current API (`runtimePatches`, immutable
//! `trainer`/`initializer`, `activeDeadlineSeconds`) and, deprecated, the
//! earlier fields `podTemplateOverrides`, `spec.labels`/`annotations` and
//! string `numProcPerNode` values.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;
use super::failure_policy::TrainJobFailurePolicy;
use super::overrides::PodTemplateOverride;
use super::runtime_patch::RuntimePatch;
use super::status::TrainJobStatus;

/// TrainJobSpec is the desired state of a TrainJob.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainJob",
    plural = "trainjobs",
    singular = "trainjob",
    namespaced,
    status = "TrainJobStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"State","type":"string","description":"The type of the first condition whose status is True (e.g. Complete, Failed, Suspended).","jsonPath":".status.conditions[?(@.status==\"True\")].type"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Runtime","type":"string","priority":1,"description":"Name of the referenced runtime.","jsonPath":".spec.runtimeRef.name"}"#,
    printcolumn = r#"{"name":"Runtime Kind","type":"string","priority":1,"description":"Kind of the referenced runtime.","jsonPath":".spec.runtimeRef.kind"}"#,
    printcolumn = r#"{"name":"Nodes","type":"integer","priority":1,"description":"Number of training nodes requested by the TrainJob (empty: the runtime's).","jsonPath":".spec.trainer.numNodes"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","priority":1,"description":"Whether the TrainJob is suspended.","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Managed By","type":"string","priority":1,"description":"The controller that reconciles the TrainJob.","jsonPath":".spec.managedBy"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    /// Reference to the training runtime (immutable).
    #[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub runtime_ref: RuntimeRef,

    /// Configuration of the dataset and model initializers (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub initializer: Option<Initializer>,

    /// Configuration of the trainer (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub trainer: Option<Trainer>,

    /// Deprecated: use `runtimePatches[].trainingRuntimeSpec.template.metadata.labels`.
    /// Labels merged over the runtime template's labels and applied to the
    /// JobSet; the TrainJob's values win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,

    /// Deprecated: use `runtimePatches[].trainingRuntimeSpec.template.metadata.annotations`.
    /// Annotations merged over the runtime template's annotations and applied
    /// to the JobSet; the TrainJob's values win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,

    /// Deprecated: use `runtimePatches`. Overrides of the pod templates of
    /// the runtime's replicated jobs named in `targetJobs`, applied in list
    /// order (later entries override earlier field values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub pod_template_overrides: Option<Vec<PodTemplateOverride>>,

    /// Patches to the runtime's JobSet template, one per manager (the user or
    /// tool that owns the patch, e.g. `kueue.x-k8s.io/manager`), applied in
    /// list order (later patches win). At most 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["manager"])
    )]
    pub runtime_patches: Option<Vec<RuntimePatch>>,

    /// Whether the TrainJob is suspended (default false); propagated to the
    /// JobSet, whose pods are deleted while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub suspend: Option<bool>,

    /// Duration in seconds, relative to the start (reset on resume), after
    /// which the TrainJob is failed (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub active_deadline_seconds: Option<i64>,

    /// Seconds after the TrainJob finished (`Complete` or `Failed`) after
    /// which the operator deletes it, and its objects with it; `0` deletes
    /// it as soon as it finishes. Mutable. Unset: the runtime's
    /// `runPolicy.ttlSecondsAfterFinished`, else kept (a Trainforge
    /// addition, as proposed upstream in KEP-2899).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// How often this TrainJob is restarted when it fails (immutable; wins
    /// over the runtime's `runPolicy.failurePolicy.maxRestarts`, whose rules
    /// still apply). Upstream's KEP-4162.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]
    pub failure_policy: Option<TrainJobFailurePolicy>,

    /// The controller that reconciles this TrainJob:
    /// `trainer.kubeflow.org/trainjob-controller` (the default, this operator)
    /// or `kueue.x-k8s.io/multikueue`, which this operator leaves alone
    /// (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        extend(
            "default" = "trainer.kubeflow.org/trainjob-controller",
            "x-kubernetes-validations" = [cel::MANAGED_BY_VALUES, cel::IMMUTABLE]
        )
    )]
    pub managed_by: Option<String>,
}

/// RuntimeRef names the TrainingRuntime or ClusterTrainingRuntime to use.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    /// Name of the runtime; a TrainingRuntime must be in the TrainJob's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// API group of the runtime (default `trainer.kubeflow.org`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "trainer.kubeflow.org"))]
    pub api_group: Option<String>,

    /// Kind of the runtime: `TrainingRuntime` or `ClusterTrainingRuntime`
    /// (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "ClusterTrainingRuntime"))]
    pub kind: Option<String>,
}

/// Initializer configures the dataset and model initializer jobs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initializer {
    /// Overrides the job labelled `trainjob-ancestor-step: dataset-initializer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetInitializer>,

    /// Overrides the job labelled `trainjob-ancestor-step: model-initializer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelInitializer>,
}

/// DatasetInitializer configures the dataset initializer container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatasetInitializer {
    /// Where the dataset comes from; injected as env `STORAGE_URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), extend("x-kubernetes-validations" = [cel::STORAGE_URI]))]
    pub storage_uri: Option<String>,

    /// Environment variables upserted into the initializer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Option<Vec<EnvVar>>,

    /// Secret added as `envFrom.secretRef` of the initializer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// ModelInitializer configures the model initializer container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelInitializer {
    /// Where the model comes from; injected as env `STORAGE_URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048), extend("x-kubernetes-validations" = [cel::STORAGE_URI]))]
    pub storage_uri: Option<String>,

    /// Environment variables upserted into the initializer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Option<Vec<EnvVar>>,

    /// Secret added as `envFrom.secretRef` of the initializer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// Trainer overrides the runtime job labelled `trainjob-ancestor-step: trainer`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    /// Image of the `node` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub image: Option<String>,

    /// Command of the `node` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend(
            "x-kubernetes-list-type" = "atomic",
            "items" = {"type": "string", "maxLength": 1_048_576}
        )
    )]
    pub command: Option<Vec<String>>,

    /// Arguments of the `node` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend(
            "x-kubernetes-list-type" = "atomic",
            "items" = {"type": "string", "maxLength": 1_048_576}
        )
    )]
    pub args: Option<Vec<String>>,

    /// Environment variables upserted into the `node` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 128),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub env: Option<Vec<EnvVar>>,

    /// Number of training nodes (pods of the trainer job), overriding the
    /// runtime's `mlPolicy.numNodes`; at least 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub num_nodes: Option<i32>,

    /// Resources of the `node` container on each node (merged into the runtime's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,

    /// Processes per node, overriding the runtime's value: MPI slots, Flux
    /// tasks, PyTorch processes (`torchrun --nproc-per-node`). An integer;
    /// PyTorch also accepts the deprecated strings `auto`, `cpu` and `gpu`.
    /// Integers below 1 are accepted, as Kubeflow Trainer v2.3 accepts them
    /// (its field has no minimum), and admission warns about them: no
    /// framework starts fewer than one process per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::NUM_PROC_PER_NODE_STRING]))]
    pub num_proc_per_node: Option<IntOrString>,
}
