//! Failure policy (Kubeflow Trainer's KEP-4162, alpha upstream behind the
//! `TrainJobFailurePolicy` gate; always on here): how often a failed
//! TrainJob is restarted, and which failures end it at once.
//!
//! - The runtime's `runPolicy.failurePolicy` holds `maxRestarts` and the
//!   `rules`, matched in order against a failed pod, first match wins; a
//!   failure no rule matches restarts the TrainJob (counted).
//! - A TrainJob's `spec.failurePolicy` may only set `maxRestarts`
//!   (immutable); it wins over the runtime's. Neither set: nothing changes.
//! - The JobSet plugin turns the policy into Jobs' `podFailurePolicy` and the
//!   JobSet's `failurePolicy`; `status.restarts` and
//!   `status.restartsCountTowardsMax` come from the JobSet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;

/// `RestartTrainJob`: the action of a failure no rule matches.
pub const ACTION_RESTART: &str = "RestartTrainJob";
/// `FailTrainJob`: fail at once, no restart.
pub const ACTION_FAIL: &str = "FailTrainJob";
/// `RestartTrainJobAndIgnoreMaxRestarts`: restart without counting it.
pub const ACTION_RESTART_UNCOUNTED: &str = "RestartTrainJobAndIgnoreMaxRestarts";

/// RuntimeFailurePolicy is a runtime's `runPolicy.failurePolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeFailurePolicy {
    /// How many counted restarts a TrainJob gets before it fails
    /// (`ReachedMaxRestarts`); default 0. A TrainJob's own
    /// `spec.failurePolicy.maxRestarts` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_restarts: Option<i32>,

    /// Rules matched in order against a failed pod; the first that matches
    /// decides. A failure no rule matches is `RestartTrainJob`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), extend("x-kubernetes-list-type" = "atomic"))]
    pub rules: Option<Vec<FailurePolicyRule>>,
}

/// FailurePolicyRule maps one kind of pod failure to an action.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [cel::ONE_FAILURE_REQUIREMENT]))]
pub struct FailurePolicyRule {
    /// `FailTrainJob`, `RestartTrainJob` or
    /// `RestartTrainJobAndIgnoreMaxRestarts`.
    #[schemars(extend("enum" = [ACTION_FAIL, ACTION_RESTART, ACTION_RESTART_UNCOUNTED]))]
    pub action: String,

    /// Matches a container's exit code (batch/v1's
    /// `PodFailurePolicyOnExitCodesRequirement`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exit_codes: Option<OnExitCodes>,

    /// Matches a pod condition (batch/v1's
    /// `PodFailurePolicyOnPodConditionsPattern`); any one matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20), extend("x-kubernetes-list-type" = "atomic"))]
    pub on_pod_conditions: Option<Vec<OnPodConditionsPattern>>,
}

/// OnExitCodes matches the exit code of a terminated container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [cel::EXIT_CODE_ZERO_NOT_IN]))]
pub struct OnExitCodes {
    /// Only this container (or init container); unset: any. The rule then
    /// applies only to the replicated jobs that have it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub container_name: Option<String>,

    /// `In` (the code is one of `values`) or `NotIn`.
    #[schemars(extend("enum" = ["In", "NotIn"]))]
    pub operator: String,

    /// The exit codes.
    #[schemars(length(min = 1, max = 255), extend("x-kubernetes-list-type" = "set"))]
    pub values: Vec<i32>,
}

/// OnPodConditionsPattern matches a condition of the failed pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnPodConditionsPattern {
    /// The condition type, e.g. `DisruptionTarget`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,

    /// The condition status (default `True`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "True", "enum" = ["True", "False", "Unknown"]))]
    pub status: Option<String>,
}

/// TrainJobFailurePolicy is a TrainJob's `spec.failurePolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobFailurePolicy {
    /// How many counted restarts this TrainJob gets (wins over the
    /// runtime's).
    #[schemars(range(min = 0))]
    pub max_restarts: i32,
}
