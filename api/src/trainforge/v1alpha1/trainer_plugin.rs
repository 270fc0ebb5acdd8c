//! `TrainerPlugin`: a tenant's own framework plugin, namespaced. It has the
//! shape of a `ClusterTrainerPlugin` and applies only to the TrainJobs of its
//! namespace (optionally narrowed by a label selector), within the ceiling
//! the cluster administrator sets in the `TrainerPluginPolicy` named
//! `default`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster_trainer_plugin::ClusterTrainerPluginSpec;
use super::status::ClusterTrainerPluginStatus;

/// TrainerPluginSpec configures one framework plugin for the TrainJobs of
/// its namespace. Every field of a `ClusterTrainerPlugin` spec means the
/// same here; what a tenant may ask for is capped by the cluster's
/// `TrainerPluginPolicy` (a `configMap` source must be in this namespace).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "trainforge.dev",
    version = "v1alpha1",
    kind = "TrainerPlugin",
    plural = "trainerplugins",
    singular = "trainerplugin",
    shortname = "tp",
    namespaced,
    status = "ClusterTrainerPluginStatus",
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default",
    printcolumn = r#"{"name":"Ready","type":"string","description":"Whether a version of the plugin is serving.","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Policy","type":"string","description":"Whether the spec fits the cluster's TrainerPluginPolicy.","jsonPath":".status.conditions[?(@.type==\"WithinPolicy\")].status"}"#,
    printcolumn = r#"{"name":"Order","type":"integer","jsonPath":".spec.order"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","description":"sha256 of the component in service.","jsonPath":".status.servingDigest","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TrainerPluginSpec {
    /// The plugin: source, sha256, order, phases, failure policy, limits,
    /// kinds, grants and config, as on a `ClusterTrainerPlugin`.
    #[serde(flatten)]
    pub plugin: ClusterTrainerPluginSpec,

    /// Only TrainJobs of this namespace whose labels match are served by the
    /// plugin (every TrainJob of the namespace when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}
