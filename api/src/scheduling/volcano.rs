//! Volcano PodGroup (`scheduling.volcano.sh/v1beta1`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the Volcano PodGroup.
pub const GROUP: &str = "scheduling.volcano.sh";
/// API version of the Volcano PodGroup.
pub const API_VERSION: &str = "scheduling.volcano.sh/v1beta1";
/// Pod annotation naming the PodGroup (read by the scheduler).
pub const ANNOTATION_KUBE_GROUP_NAME: &str = "scheduling.k8s.io/group-name";
/// Volcano's own pod annotation naming the PodGroup.
pub const ANNOTATION_VOLCANO_GROUP_NAME: &str = "scheduling.volcano.sh/group-name";
/// Pod annotation naming the task (keys of `minTaskMember`).
pub const ANNOTATION_TASK_SPEC: &str = "volcano.sh/task-spec";
/// Annotation naming the Volcano queue.
pub const ANNOTATION_QUEUE_NAME: &str = "scheduling.volcano.sh/queue-name";
/// Scheduler name of Volcano.
pub const SCHEDULER_NAME: &str = "volcano";
/// Default queue.
pub const DEFAULT_QUEUE: &str = "default";
/// Network topology mode: the gang must fit the tier.
pub const MODE_HARD: &str = "hard";
/// Network topology mode: best effort.
pub const MODE_SOFT: &str = "soft";

/// PodGroupSpec is a Volcano gang.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
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
    /// Quorum of pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Quorum per task (pod annotation `volcano.sh/task-spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_task_member: Option<BTreeMap<String, i32>>,
    /// Queue of the group (`default` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority class of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Resources the gang needs to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Network topology constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
    /// Sub-group gangs (Volcano 1.14+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_policy: Option<Vec<SubGroupPolicy>>,
}

/// NetworkTopologySpec constrains the gang to a network tier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// `hard` or `soft`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Highest tier the gang may span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_allowed: Option<i32>,
    /// Name of the highest tier (exclusive with `highestTierAllowed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_tier_name: Option<String>,
}

/// SubGroupPolicy declares a gang within the gang.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupPolicy {
    /// Name of the sub-group.
    pub name: String,
    /// Network topology of the sub-group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopologySpec>,
    /// Pods per sub-group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_size: Option<i32>,
    /// Minimum number of sub-groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sub_groups: Option<i32>,
    /// Pods that belong to the sub-groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Label keys whose values split pods into sub-groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_label_keys: Option<Vec<String>>,
}

/// PodGroupStatus is written by Volcano.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Inqueue`, `Running`, `Unknown` or `Completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Conditions (`Unschedulable`, `Scheduled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodGroupCondition>>,
    /// Running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Succeeded pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Failed pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
}

/// PodGroupCondition is one Volcano PodGroup condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// `Unschedulable` or `Scheduled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// `True`, `False` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Scheduling session that set the condition.
    #[serde(
        default,
        rename = "transitionID",
        skip_serializing_if = "Option::is_none"
    )]
    pub transition_id: Option<String>,
    /// When the condition last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
