//! Well-known names of the Trainer API: group, kinds, label and annotation
//! keys, condition types and reasons, default values.

/// API group of the Trainer kinds.
pub const GROUP: &str = "trainer.kubeflow.org";
/// API version of the Trainer kinds.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the Trainer kinds.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// Kind `TrainJob`.
pub const TRAINJOB_KIND: &str = "TrainJob";
/// Kind `TrainingRuntime` (namespaced).
pub const TRAINING_RUNTIME_KIND: &str = "TrainingRuntime";
/// Kind `ClusterTrainingRuntime` (cluster-scoped).
pub const CLUSTER_TRAINING_RUNTIME_KIND: &str = "ClusterTrainingRuntime";

/// Label on a runtime's replicated job template naming the TrainJob part it
/// plays (values [`ANCESTOR_TRAINER`], [`ANCESTOR_DATASET_INITIALIZER`],
/// [`ANCESTOR_MODEL_INITIALIZER`]).
pub const LABEL_TRAINJOB_ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// Ancestor value of the trainer job (overridden by `spec.trainer`).
pub const ANCESTOR_TRAINER: &str = "trainer";
/// Ancestor value of the dataset initializer job (`spec.initializer.dataset`).
pub const ANCESTOR_DATASET_INITIALIZER: &str = "dataset-initializer";
/// Ancestor value of the model initializer job (`spec.initializer.model`).
pub const ANCESTOR_MODEL_INITIALIZER: &str = "model-initializer";

/// Runtime label naming the ML framework (informational).
pub const LABEL_FRAMEWORK: &str = "trainer.kubeflow.org/framework";
/// Runtime label marking support status; [`SUPPORT_DEPRECATED`] triggers warnings.
pub const LABEL_SUPPORT: &str = "trainer.kubeflow.org/support";
/// Value of [`LABEL_SUPPORT`] for deprecated runtimes.
pub const SUPPORT_DEPRECATED: &str = "deprecated";
/// Runtime label that lets a runtime bypass the validating webhook.
pub const LABEL_WEBHOOK_VALIDATION: &str = "trainer.kubeflow.org/webhook-validation";
/// Value of [`LABEL_WEBHOOK_VALIDATION`] that disables the webhook.
pub const WEBHOOK_VALIDATION_DISABLED: &str = "disabled";
/// Finalizer older releases put on runtimes in use (only ever removed now).
pub const FINALIZER_RESOURCE_IN_USE: &str = "trainer.kubeflow.org/resource-in-use";

/// Container name of the trainer node in the trainer job.
pub const CONTAINER_NODE: &str = "node";
/// Container name of the dataset initializer.
pub const CONTAINER_DATASET_INITIALIZER: &str = "dataset-initializer";
/// Container name of the model initializer.
pub const CONTAINER_MODEL_INITIALIZER: &str = "model-initializer";
/// Replicated job / container name of the MPI launcher.
pub const LAUNCHER: &str = "launcher";
/// Replicated job name of the trainer nodes.
pub const NODE: &str = "node";

/// `spec.managedBy` of TrainJobs reconciled by the built-in controller (default).
pub const MANAGED_BY_TRAINJOB_CONTROLLER: &str = "trainer.kubeflow.org/trainjob-controller";
/// `spec.managedBy` of TrainJobs dispatched by Kueue MultiKueue.
pub const MANAGED_BY_MULTIKUEUE: &str = "kueue.x-k8s.io/multikueue";

/// Default `spec.runtimeRef.apiGroup`.
pub const DEFAULT_RUNTIME_API_GROUP: &str = GROUP;
/// Default `spec.runtimeRef.kind`.
pub const DEFAULT_RUNTIME_KIND: &str = CLUSTER_TRAINING_RUNTIME_KIND;

/// Condition type: the TrainJob is (or was) suspended.
pub const CONDITION_SUSPENDED: &str = "Suspended";
/// Condition type: the TrainJob completed successfully.
pub const CONDITION_COMPLETE: &str = "Complete";
/// Condition type: the TrainJob failed.
pub const CONDITION_FAILED: &str = "Failed";

/// Reason of `Suspended=True`.
pub const REASON_SUSPENDED: &str = "Suspended";
/// Message of `Suspended=True`.
pub const MESSAGE_SUSPENDED: &str = "TrainJob is suspended";
/// Reason of `Suspended=False` after a resume.
pub const REASON_RESUMED: &str = "Resumed";
/// Message of `Suspended=False` after a resume.
pub const MESSAGE_RESUMED: &str = "TrainJob is resumed";
/// Reason of `Failed=True` when the runtime kind is not supported.
pub const REASON_TRAINING_RUNTIME_NOT_SUPPORTED: &str = "TrainingRuntimeNotSupported";
/// Reason of `Failed=True` when `activeDeadlineSeconds` passed.
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Message of `Failed=True` when `activeDeadlineSeconds` passed.
pub const MESSAGE_DEADLINE_EXCEEDED: &str = "TrainJob exceeded its active deadline";

/// Torch `numProcPerNode` string values.
pub const NUM_PROC_AUTO: &str = "auto";
/// One process per CPU.
pub const NUM_PROC_CPU: &str = "cpu";
/// One process per GPU.
pub const NUM_PROC_GPU: &str = "gpu";

/// MPI implementation accepted by the CRD (and the only one implemented).
pub const MPI_IMPLEMENTATION_OPENMPI: &str = "OpenMPI";
/// Default MPI `sshAuthMountPath`.
pub const DEFAULT_SSH_AUTH_MOUNT_PATH: &str = "/root/.ssh";
/// Default coscheduling `scheduleTimeoutSeconds`.
pub const DEFAULT_SCHEDULE_TIMEOUT_SECONDS: i32 = 60;

/// Volcano network topology mode `hard`.
pub const VOLCANO_MODE_HARD: &str = "hard";
/// Volcano network topology mode `soft`.
pub const VOLCANO_MODE_SOFT: &str = "soft";
/// Portable `networkPolicy` value that maps to Volcano `soft`.
pub const NETWORK_POLICY_BEST_EFFORT: &str = "Best-effort";
/// Portable `networkPolicy` value that maps to Volcano `hard`.
pub const NETWORK_POLICY_STRICT: &str = "Strict";

/// The runtime patch manager that carries a TrainJob's v2.1 override fields
/// (`spec.labels`, `spec.annotations`, `spec.podTemplateOverrides`) once the
/// operator has moved them into `spec.runtimePatches`. v2.1 allowed `env` on
/// every container, so this patch may set `env` on the containers other
/// patches may not.
pub const MANAGER_LEGACY_FIELDS: &str = "trainer.kubeflow.org/v2.1-fields";
