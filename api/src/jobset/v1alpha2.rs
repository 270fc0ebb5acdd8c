//! `jobset.x-k8s.io/v1alpha2` JobSet (fields of JobSet v0.12), the object
//! Trainforge emits per TrainJob and the shape of a runtime's `template.spec`.
//!
//! The schema attributes mirror JobSet's own CRD (defaults, enums, CEL with
//! JobSet's messages), because upstream Trainer embeds that schema in its
//! runtime CRDs. The JobSet CRD itself is installed from JobSet's release.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cel::CelRule;

/// API group of JobSet.
pub const GROUP: &str = "jobset.x-k8s.io";
/// API version of JobSet.
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of JobSet.
pub const API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";
/// Kind of JobSet.
pub const KIND: &str = "JobSet";

/// Label (on Jobs and Pods) with the JobSet name.
pub const LABEL_JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Label with the replicated job name.
pub const LABEL_REPLICATED_JOB_NAME: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Label with the number of replicas of the replicated job.
pub const LABEL_REPLICATED_JOB_REPLICAS: &str = "jobset.sigs.k8s.io/replicatedjob-replicas";
/// Label with the index of the Job within its replicated job.
pub const LABEL_JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
/// Label with the global index of the Job within the JobSet.
pub const LABEL_JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
/// Label with a unique key per Job.
pub const LABEL_JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
/// Label with the restart attempt of the JobSet.
pub const LABEL_RESTARTS: &str = "jobset.sigs.k8s.io/restart-attempt";
/// Label or annotation with the group name of the replicated job.
pub const LABEL_GROUP_NAME: &str = "jobset.sigs.k8s.io/group-name";
/// Annotation for exclusive placement per topology domain.
pub const ANNOTATION_EXCLUSIVE_TOPOLOGY: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";

/// Condition type: all jobs completed.
pub const CONDITION_COMPLETED: &str = "Completed";
/// Condition type: the JobSet failed.
pub const CONDITION_FAILED: &str = "Failed";
/// Condition type: the JobSet is suspended.
pub const CONDITION_SUSPENDED: &str = "Suspended";
/// Condition type: the startup policy finished.
pub const CONDITION_STARTUP_POLICY_COMPLETED: &str = "StartupPolicyCompleted";
/// Condition type: the in-place restart is in progress.
pub const CONDITION_IN_PLACE_RESTART: &str = "InPlaceRestartInProgress";

/// `terminalState` when completed.
pub const TERMINAL_STATE_COMPLETED: &str = "Completed";
/// `terminalState` when failed.
pub const TERMINAL_STATE_FAILED: &str = "Failed";

/// `dependsOn.status`: wait until the dependency is ready.
pub const DEPENDS_ON_READY: &str = "Ready";
/// `dependsOn.status`: wait until the dependency completed.
pub const DEPENDS_ON_COMPLETE: &str = "Complete";
/// `successPolicy.operator`: all target jobs must succeed.
pub const OPERATOR_ALL: &str = "All";
/// `successPolicy.operator`: any target job succeeding is enough.
pub const OPERATOR_ANY: &str = "Any";
/// Default replicated job group name.
pub const DEFAULT_GROUP_NAME: &str = "default";

/// JobSet: `startupPolicy: InOrder` and `dependsOn` exclude each other.
pub const CEL_STARTUP_POLICY_DEPENDS_ON: CelRule = CelRule {
    rule: "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))",
    message: "StartupPolicy and DependsOn APIs are mutually exclusive",
};
/// JobSet's immutability rule (its own message).
pub const CEL_IMMUTABLE: CelRule = CelRule {
    rule: "self == oldSelf",
    message: "Value is immutable",
};
/// JobSet: volume claim templates take the JobSet's namespace.
pub const CEL_VOLUME_CLAIM_NAMESPACE: CelRule = CelRule {
    rule: "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
    message: "namespace cannot be set for VolumeClaimPolicies templates",
};

/// JobSetSpec is the desired state of a JobSet.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    plural = "jobsets",
    namespaced,
    status = "JobSetStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [CEL_STARTUP_POLICY_DEPENDS_ON]))]
pub struct JobSetSpec {
    /// The groups of identical Jobs, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs: Option<Vec<ReplicatedJob>>,

    /// Networking (headless Service, DNS hostnames; immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [CEL_IMMUTABLE]))]
    pub network: Option<Network>,

    /// When the JobSet succeeds (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [CEL_IMMUTABLE]))]
    pub success_policy: Option<SuccessPolicy>,

    /// How Job failures are handled (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [CEL_IMMUTABLE]))]
    pub failure_policy: Option<FailurePolicy>,

    /// Order in which replicated jobs start (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [CEL_IMMUTABLE]))]
    pub startup_policy: Option<StartupPolicy>,

    /// Whether the JobSet is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// A pod whose address is published as the coordinator endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<Coordinator>,

    /// The controller that manages this JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,

    /// Seconds after finishing before the JobSet is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// PersistentVolumeClaims created per JobSet (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 50),
        extend("x-kubernetes-list-type" = "atomic", "x-kubernetes-validations" = [CEL_IMMUTABLE])
    )]
    pub volume_claim_policies: Option<Vec<VolumeClaimPolicy>>,
}

/// ReplicatedJob is a group of identical Jobs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    /// Name of the replicated job (unique within the JobSet).
    pub name: String,

    /// Group of replicated jobs this one belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub group_name: Option<String>,

    /// The Job template.
    pub template: JobTemplateSpec,

    /// Number of Jobs created from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,

    /// Replicated jobs that must reach a status before this one starts (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 5),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["name"],
            "x-kubernetes-validations" = [CEL_IMMUTABLE]
        )
    )]
    pub depends_on: Option<Vec<DependsOn>>,
}

/// DependsOn names a replicated job and the status it must reach.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    /// Name of the replicated job.
    pub name: String,
    /// `Ready` or `Complete`.
    #[schemars(extend("enum" = ["Ready", "Complete"]))]
    pub status: String,
}

/// Network configures the JobSet's headless Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Give pods DNS hostnames (`<job>-<index>.<subdomain>`).
    #[serde(
        default,
        rename = "enableDNSHostnames",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_dns_hostnames: Option<bool>,
    /// Subdomain (Service name); defaults to the JobSet name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Publish addresses of pods that are not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

/// SuccessPolicy says when the JobSet succeeds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    /// `All` or `Any` of the target jobs must succeed.
    #[schemars(extend("enum" = ["All", "Any"]))]
    pub operator: String,
    /// The replicated jobs considered (all when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Option<Vec<String>>,
}

/// FailurePolicy says how Job failures are handled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// How many times the JobSet may be restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// `Recreate`, `BlockingRecreate` or `InPlaceRestart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "default" = "Recreate",
        "enum" = ["Recreate", "BlockingRecreate", "InPlaceRestart"]
    ))]
    pub restart_strategy: Option<String>,
    /// Rules matched against failed Jobs, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<FailurePolicyRule>>,
}

/// FailurePolicyRule maps a kind of Job failure to an action.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyRule {
    /// Name of the rule.
    pub name: String,
    /// What to do when the rule matches.
    #[schemars(extend(
        "enum" = ["FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob", "RestartJobAndIgnoreMaxRestarts"]
    ))]
    pub action: String,
    /// Job failure reasons that match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_job_failure_reasons: Option<Vec<String>>,
    /// Regular expressions on the Job failure message that match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_job_failure_message_patterns: Option<Vec<String>>,
    /// Replicated jobs the rule applies to (all when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Option<Vec<String>>,
}

/// StartupPolicy orders the start of replicated jobs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    /// `AnyOrder` or `InOrder`.
    #[schemars(extend("enum" = ["AnyOrder", "InOrder"]))]
    pub startup_policy_order: String,
}

/// Coordinator names the pod whose address is published to all pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Coordinator {
    /// Replicated job of the coordinator.
    pub replicated_job: String,
    /// Job index within the replicated job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_index: Option<i32>,
    /// Pod index within the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_index: Option<i32>,
}

/// VolumeClaimPolicy creates PersistentVolumeClaims for the JobSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [CEL_VOLUME_CLAIM_NAMESPACE]))]
pub struct VolumeClaimPolicy {
    /// Claim templates; each is mounted where a pod volume has the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    pub templates: Option<Vec<PersistentVolumeClaimTemplate>>,
    /// What happens to the claims when the JobSet is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<VolumeRetentionPolicy>,
}

/// PersistentVolumeClaimTemplate is a claim template (a PersistentVolumeClaim
/// without status; `apiVersion`/`kind` are optional and kept only if given).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimTemplate {
    /// `v1` if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `PersistentVolumeClaim` if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (matched against pod volume names) and labels of the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The claim spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
}

/// VolumeRetentionPolicy says what happens to claims on deletion.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRetentionPolicy {
    /// `Delete` or `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Delete", "enum" = ["Delete", "Retain"]))]
    pub when_deleted: Option<String>,
}

/// JobSetStatus is the observed state of a JobSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    /// Conditions (`Completed`, `Failed`, `Suspended`, `StartupPolicyCompleted`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Restarts of the JobSet so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i32>,
    /// Restarts that count towards `failurePolicy.maxRestarts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts_count_towards_max: Option<i32>,
    /// `Completed` or `Failed` once the JobSet finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
    /// Counters per replicated job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicated_jobs_status: Option<Vec<ReplicatedJobStatus>>,
    /// Current in-place restart attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_in_place_restart_attempt: Option<i32>,
    /// Previous in-place restart attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_in_place_restart_attempt: Option<i32>,
}

/// ReplicatedJobStatus counts the Jobs of one replicated job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobStatus {
    /// Name of the replicated job.
    pub name: String,
    /// Jobs with at least `parallelism` ready pods.
    pub ready: i32,
    /// Jobs that succeeded.
    pub succeeded: i32,
    /// Jobs that failed.
    pub failed: i32,
    /// Jobs with active pods.
    pub active: i32,
    /// Jobs that are suspended.
    pub suspended: i32,
    /// Restarts per Job index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_restarts: Option<Vec<i32>>,
    /// Restarts per Job index that count towards the maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_restarts_count_towards_max: Option<Vec<i32>>,
}
