//! `TrainJob` status: conditions, per-job counters and the trainer's
//! self-reported progress.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cel;

/// TrainJobStatus is the observed state of a TrainJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainJobStatus {
    /// Conditions (`Suspended`, `Complete`, `Failed`), keyed by type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 8),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"])
    )]
    pub conditions: Option<Vec<Condition>>,

    /// Counters of each replicated job (copied from the JobSet status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 100),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"])
    )]
    pub jobs_status: Option<Vec<JobStatus>>,

    /// Progress reported by the trainer (alpha, feature gate `TrainJobStatus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [cel::TRAINER_STATUS_LAST_UPDATED]))]
    pub trainer_status: Option<TrainerStatus>,

    /// Times the TrainJob was restarted after a failure (copied from the
    /// JobSet; with a failure policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub restarts: Option<i32>,

    /// Those restarts that count towards `maxRestarts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub restarts_count_towards_max: Option<i32>,

    /// When the TrainJob started: when its JobSet was first seen running,
    /// reset when it runs again after a resume (as a Job's). Set by the
    /// operator (upstream's proposal, kubeflow/trainer#4052).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the TrainJob completed: the time of its `Complete` condition;
    /// never set for a failed TrainJob (as a Job's). Set by the operator
    /// (upstream's proposal, kubeflow/trainer#4052).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// JobStatus counts the jobs of one replicated job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Name of the replicated job.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Jobs with at least `parallelism` ready pods.
    #[schemars(range(min = 0))]
    pub ready: i32,
    /// Jobs that completed successfully.
    #[schemars(range(min = 0))]
    pub succeeded: i32,
    /// Jobs that failed.
    #[schemars(range(min = 0))]
    pub failed: i32,
    /// Jobs with at least one active pod.
    #[schemars(range(min = 0))]
    pub active: i32,
    /// Jobs that are suspended.
    #[schemars(range(min = 0))]
    pub suspended: i32,
}

/// TrainerStatus is what the training process reports about itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainerStatus {
    /// Progress in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress_percentage: Option<i32>,

    /// Estimated seconds until the training finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub estimated_remaining_seconds: Option<i32>,

    /// Training metrics (e.g. loss).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), extend("x-kubernetes-list-type" = "atomic"))]
    pub metrics: Option<Vec<Metric>>,

    /// When the trainer last reported (required when `trainerStatus` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_time: Option<Time>,
}

/// Metric is one named value reported by the trainer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// Name of the metric.
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// Value of the metric, as a string.
    #[schemars(length(min = 1, max = 64))]
    pub value: String,
}

/// The audience of the tokens the TrainJob status server accepts for the
/// TrainJob `namespace/name` only (upstream's shape: its endpoint's path
/// without the `/apis/` prefix).
pub fn status_audience(namespace: &str, name: &str) -> String {
    format!("trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status")
}

/// The path of the status server's endpoint for the TrainJob
/// `namespace/name`.
pub fn status_endpoint_path(namespace: &str, name: &str) -> String {
    format!("/apis/{}", status_audience(namespace, name))
}

/// UpdateTrainJobStatusRequest is the body of the status server's POST.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTrainJobStatusRequest {
    /// The new trainer status.
    pub trainer_status: TrainerStatus,
}
