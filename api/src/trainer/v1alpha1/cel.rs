//! CEL validation rules (`x-kubernetes-validations`) of the Trainer CRDs, with
//! upstream's messages, so that the API server itself rejects invalid objects
//! (HTTP 422) exactly as it does for Kubeflow Trainer.
//!
//! Types attach them with
//! `#[schemars(extend("x-kubernetes-validations" = [cel::IMMUTABLE]))]`.

pub use crate::cel::CelRule;

/// TrainJob `metadata.name` must be an RFC 1035 DNS label (it names Services).
pub const TRAINJOB_NAME_RFC1035: CelRule = CelRule {
    rule: "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    message: "metadata.name must match RFC 1035 DNS label format",
};

/// TrainJob `metadata.name` is at most 63 characters.
pub const TRAINJOB_NAME_LENGTH: CelRule = CelRule {
    rule: "size(self.metadata.name) <= 63",
    message: "metadata.name must be no more than 63 characters",
};

/// A field that cannot change after creation (a transition rule: only checked
/// when the field is present in both the old and the new object).
pub const IMMUTABLE: CelRule = CelRule {
    rule: "self == oldSelf",
    message: "field is immutable",
};

/// `spec.managedBy` is one of the two supported controllers.
pub const MANAGED_BY_VALUES: CelRule = CelRule {
    rule: "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']",
    message: "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
};

/// Initializer `storageUri`: empty or `scheme://...`.
pub const STORAGE_URI: CelRule = CelRule {
    rule: "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
    message: "storageUri may be empty, or it must be a valid URI (scheme://...)",
};

/// `numProcPerNode` (int-or-string) of the v2.1 runtime policy
/// `mlPolicy.torch`: an integer must be at least 1 (the TrainJob's
/// `trainer.numProcPerNode` has no minimum, as in Kubeflow Trainer v2.3).
pub const NUM_PROC_PER_NODE_MIN: CelRule = CelRule {
    rule: "type(self) == int ? self >= 1 : true",
    message: "numProcPerNode must be greater than or equal to 1",
};

/// `numProcPerNode` (int-or-string): a string must be `auto`, `cpu` or `gpu`
/// (upstream v2.1's message).
pub const NUM_PROC_PER_NODE_STRING: CelRule = CelRule {
    rule: "type(self) == string ? self in ['auto', 'cpu', 'gpu'] : true",
    message: "NumProcPerNode must be equal to auto, cpu, gpu, or int value",
};

/// At most one framework policy in `mlPolicy`.
pub const ONE_ML_POLICY: CelRule = CelRule {
    rule: "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), has(self.flux)].filter(x, x).size() <= 1",
    message: "Only one of the policy can be configured",
};

/// `mlPolicy.numNodes` and `torch.elasticPolicy` exclude each other (v2.1).
pub const NUM_NODES_WITH_ELASTIC: CelRule = CelRule {
    rule: "!(has(self.numNodes) && (has(self.torch) && has(self.torch.elasticPolicy)))",
    message: "numNodes should not be set if torch.elasticPolicy is configured",
};

/// Torch `envInjection` targets must not list the `node` container.
pub const ENV_INJECTION_NOT_NODE: CelRule = CelRule {
    rule: "!self.exists(c, c == 'node')",
    message: "containerNames must not include the main node container because PET_* envs are always injected into it",
};

/// MPI `numProcPerNode` is not negative (0 is accepted, as Kubeflow Trainer
/// v2.3 does, and becomes `slots=0`).
pub const MPI_NUM_PROC_PER_NODE: CelRule = CelRule {
    rule: "self >= 0",
    message: "NumProcPerNode in mpiPolicy must be >= 0",
};

/// Flux `numProcPerNode` is at least 1.
pub const FLUX_NUM_PROC_PER_NODE: CelRule = CelRule {
    rule: "self >= 1",
    message: "NumProcPerNode in fluxPolicy must be >= 1",
};

/// Coscheduling and Volcano exclude each other. Upstream documents this but has
/// no rule; Trainforge enforces it in the CRD.
pub const ONE_POD_GROUP_POLICY: CelRule = CelRule {
    rule: "!(has(self.coscheduling) && has(self.volcano))",
    message: "Only one of the podGroupPolicy can be configured",
};

/// `status.trainerStatus` needs `lastUpdatedTime`.
pub const TRAINER_STATUS_LAST_UPDATED: CelRule = CelRule {
    rule: "has(self.lastUpdatedTime)",
    message: "lastUpdatedTime is required when trainerStatus is present",
};

/// A failure-policy rule has exactly one requirement.
pub const ONE_FAILURE_REQUIREMENT: CelRule = CelRule {
    rule: "has(self.onExitCodes) != has(self.onPodConditions)",
    message: "exactly one of onExitCodes and onPodConditions must be set",
};

/// Exit code 0 (success) cannot be a failure to match with `In` (batch/v1's
/// rule for a Job's `podFailurePolicy`).
pub const EXIT_CODE_ZERO_NOT_IN: CelRule = CelRule {
    rule: "self.operator != 'In' || !self.values.exists(v, v == 0)",
    message: "value 0 cannot be used with the In operator",
};

/// Every rule of this module, for documentation and tests.
pub const ALL: &[CelRule] = &[
    TRAINJOB_NAME_RFC1035,
    TRAINJOB_NAME_LENGTH,
    IMMUTABLE,
    MANAGED_BY_VALUES,
    STORAGE_URI,
    NUM_PROC_PER_NODE_MIN,
    NUM_PROC_PER_NODE_STRING,
    ONE_ML_POLICY,
    NUM_NODES_WITH_ELASTIC,
    ENV_INJECTION_NOT_NODE,
    MPI_NUM_PROC_PER_NODE,
    FLUX_NUM_PROC_PER_NODE,
    ONE_POD_GROUP_POLICY,
    TRAINER_STATUS_LAST_UPDATED,
    ONE_FAILURE_REQUIREMENT,
    EXIT_CODE_ZERO_NOT_IN,
];
