//! `TrainingRuntime` (namespaced) and `ClusterTrainingRuntime` (cluster
//! scoped): reusable blueprints of a TrainJob, sharing [`TrainingRuntimeSpec`].

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use kube::core::{ClusterResourceScope, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::constants::{API_VERSION, CLUSTER_TRAINING_RUNTIME_KIND, GROUP, VERSION};
use super::failure_policy::RuntimeFailurePolicy;
use super::ml_policy::MLPolicy;
use super::pod_group_policy::PodGroupPolicy;
use crate::jobset::v1alpha2::JobSetSpec;

/// TrainingRuntimeSpec is the blueprint shared by both runtime kinds.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainingRuntime",
    plural = "trainingruntimes",
    singular = "trainingruntime",
    namespaced,
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainingRuntimeSpec {
    /// The ML framework policy: at most one of `torch`, `mpi`, `jax`,
    /// `xgboost`, `flux` (or the policy of an installed out-of-tree plugin);
    /// it decides how the trainer job is launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MLPolicy>,

    /// Gang scheduling: at most one of `coscheduling` (scheduler-plugins) and
    /// `volcano` (or the policy of an installed out-of-tree plugin). Unset:
    /// no PodGroup is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<PodGroupPolicy>,

    /// Defaults of the run of every TrainJob of this runtime (a Trainforge
    /// addition, as proposed upstream in KEP-2899): a TrainJob's own value
    /// wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,

    /// The JobSet blueprint.
    pub template: JobSetTemplateSpec,
}

/// RunPolicy holds a runtime's defaults for its TrainJobs' runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// `activeDeadlineSeconds` of a TrainJob that sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,

    /// `ttlSecondsAfterFinished` of a TrainJob that sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// Restarts of failed TrainJobs and the failures that end them at once
    /// (upstream's KEP-4162). Not with a template JobSet `failurePolicy` or
    /// a Job `podFailurePolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<RuntimeFailurePolicy>,
}

/// JobSetTemplateSpec is the JobSet blueprint of a runtime.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct JobSetTemplateSpec {
    /// Labels and annotations propagated to the JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,

    /// The JobSet spec (`jobset.x-k8s.io/v1alpha2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSetSpec>,
}

/// ClusterTrainingRuntime is the cluster-scoped [`TrainingRuntime`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterTrainingRuntime {
    /// Object metadata (no namespace).
    pub metadata: ObjectMeta,
    /// The runtime blueprint.
    pub spec: TrainingRuntimeSpec,
}

impl ClusterTrainingRuntime {
    /// A ClusterTrainingRuntime named `name`.
    pub fn new(name: &str, spec: TrainingRuntimeSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }
}

impl Resource for ClusterTrainingRuntime {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        CLUSTER_TRAINING_RUNTIME_KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "clustertrainingruntimes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Wire form of [`ClusterTrainingRuntime`] (with `apiVersion` and `kind`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterTrainingRuntimeRef<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a ObjectMeta,
    spec: &'a TrainingRuntimeSpec,
}

/// Wire form of [`ClusterTrainingRuntime`] when reading; `apiVersion` and
/// `kind` are accepted and ignored, as the derived kinds do.
#[derive(Deserialize)]
struct ClusterTrainingRuntimeOwned {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: TrainingRuntimeSpec,
}

impl Serialize for ClusterTrainingRuntime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ClusterTrainingRuntimeRef {
            api_version: API_VERSION,
            kind: CLUSTER_TRAINING_RUNTIME_KIND,
            metadata: &self.metadata,
            spec: &self.spec,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ClusterTrainingRuntime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let owned = ClusterTrainingRuntimeOwned::deserialize(deserializer)?;
        Ok(Self {
            metadata: owned.metadata,
            spec: owned.spec,
        })
    }
}
