//! `trainer.kubeflow.org/v1alpha1`: TrainJob, TrainingRuntime and
//! ClusterTrainingRuntime, as the union of the v2.1 and HEAD API generations.

pub mod cel;
pub mod constants;
pub mod failure_policy;
pub mod ml_policy;
pub mod overrides;
pub mod pod_group_policy;
pub mod runtime_patch;
pub mod status;
pub mod training_runtime;
pub mod trainjob;

pub use failure_policy::{
    FailurePolicyRule, OnExitCodes, OnPodConditionsPattern, RuntimeFailurePolicy,
    TrainJobFailurePolicy,
};
pub use ml_policy::{
    EnvInjectionTarget, FluxMLPolicySource, JAXMLPolicySource, MLPolicy, MPIMLPolicySource,
    TorchElasticPolicy, TorchEnvInjection, TorchMLPolicySource, XGBoostMLPolicySource,
};
pub use overrides::{
    ContainerOverride, PodTemplateOverride, PodTemplateOverrideTargetJob, PodTemplateSpecOverride,
};
pub use pod_group_policy::{
    CoschedulingPodGroupPolicySource, NetworkTopologySpec, PodGroupPolicy,
    VolcanoPodGroupPolicySource,
};
pub use runtime_patch::{
    ContainerPatch, JobSetSpecPatch, JobSetTemplatePatch, JobSpecPatch, JobTemplatePatch,
    PodSpecPatch, PodTemplatePatch, ReplicatedJobPatch, RuntimePatch, TrainingRuntimeSpecPatch,
};
pub use status::{
    JobStatus, Metric, TrainJobStatus, TrainerStatus, UpdateTrainJobStatusRequest, status_audience,
    status_endpoint_path,
};
pub use training_runtime::{
    ClusterTrainingRuntime, JobSetTemplateSpec, RunPolicy, TrainingRuntime, TrainingRuntimeSpec,
};
pub use trainjob::{
    DatasetInitializer, Initializer, ModelInitializer, RuntimeRef, TrainJob, TrainJobSpec, Trainer,
};
