//! scheduler-plugins coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the coscheduling PodGroup.
pub const GROUP: &str = "scheduling.x-k8s.io";
/// API version of the coscheduling PodGroup.
pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// Pod label linking a pod to its PodGroup (value: the PodGroup name).
pub const LABEL_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Scheduler name of scheduler-plugins installed as a second scheduler.
pub const SECOND_SCHEDULER_NAME: &str = "scheduler-plugins-scheduler";

/// Phase: fewer than `minMember` pods exist.
pub const PHASE_PENDING: &str = "Pending";
/// Phase: the gang is being scheduled.
pub const PHASE_SCHEDULING: &str = "Scheduling";
/// Phase: at least `minMember` pods run or succeeded.
pub const PHASE_RUNNING: &str = "Running";
/// Phase: at least `minMember` pods succeeded.
pub const PHASE_FINISHED: &str = "Finished";
/// Phase: a pod failed.
pub const PHASE_FAILED: &str = "Failed";

/// PodGroupSpec is the gang: all `minMember` pods are scheduled together.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    namespaced,
    status = "PodGroupStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Quorum of pods before any is bound (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,

    /// Aggregate resources checked against free cluster capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,

    /// How long pods wait in Permit for their gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// PodGroupStatus is written by the scheduler-plugins controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Scheduling`, `Running`, `Finished`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The owner that occupies the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Succeeded pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Failed pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// When scheduling of the group started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}
