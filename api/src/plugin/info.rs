//! The runtime info (`runtime.Info` in Kubeflow Trainer) as plugins see it.

use k8s_openapi::api::core::v1::{ContainerPort, EnvVar, Volume, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Label on replicated jobs naming their TrainJob step (`trainer`,
/// `dataset-initializer`, `model-initializer`).
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// Errors of [`Info`]'s JSON form.
#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    /// JSON (de)serialisation failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The runtime info threaded through every plugin phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    /// Labels of the JobSet object.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the JobSet object.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The runtime's policies (plugins may rewrite them).
    #[serde(default)]
    pub runtime_policy: RuntimePolicy,
    /// Labels/annotations stamped on every Pod template.
    #[serde(default)]
    pub scheduler: Scheduler,
    /// The JobSet template and its pod sets.
    #[serde(default)]
    pub template_spec: TemplateSpec,
}

/// `mlPolicy` and `podGroupPolicy` of the runtime, as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePolicy {
    /// The runtime's `spec.mlPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<Value>,
    /// The runtime's `spec.podGroupPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<Value>,
    /// The runtime's `spec.runPolicy` (its failure policy is read by the
    /// JobSet plugin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<Value>,
}

impl RuntimePolicy {
    /// A policy by key: `mlPolicy.torch`, `podGroupPolicy.coscheduling`,
    /// `runPolicy.failurePolicy`, or just `mlPolicy`. `None` when absent or JSON `null`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let (root, rest) = match key.split_once('.') {
            Some((r, rest)) => (r, Some(rest)),
            None => (key, None),
        };
        let mut v = match root {
            "mlPolicy" => self.ml_policy.as_ref()?,
            "podGroupPolicy" => self.pod_group_policy.as_ref()?,
            "runPolicy" => self.run_policy.as_ref()?,
            _ => return None,
        };
        if let Some(rest) = rest {
            for part in rest.split('.') {
                v = v.get(part)?;
            }
        }
        (!v.is_null()).then_some(v)
    }
}

/// Scheduling metadata for every Pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scheduler {
    /// Pod labels.
    #[serde(default)]
    pub pod_labels: BTreeMap<String, String>,
    /// Pod annotations.
    #[serde(default)]
    pub pod_annotations: BTreeMap<String, String>,
}

/// The concrete template plus its pod sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSpec {
    /// The JobSet spec (JSON) the builder starts from.
    #[serde(default)]
    pub obj: Value,
    /// One pod set per replicated job, same order as `obj.replicatedJobs`.
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
}

/// One replicated job's pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// Replicated job name.
    pub name: String,
    /// TrainJob step (`trainer`, `dataset-initializer`, `model-initializer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ancestor: Option<String>,
    /// Pods per replica (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
    /// Init containers.
    #[serde(default)]
    pub init_containers: Vec<Container>,
    /// Containers.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Pod volumes.
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// Pod DNS names (filled by pre-build).
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Resource requests of one Pod.
    #[serde(default)]
    pub single_pod_requests: BTreeMap<String, Quantity>,
}

/// The editable parts of a container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name.
    pub name: String,
    /// Image (`None` keeps the template's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Command (empty keeps the template's).
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Ports.
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    /// Volume mounts.
    #[serde(default)]
    pub volume_mounts: Vec<VolumeMount>,
}

impl Info {
    /// Parse an info from JSON.
    pub fn from_json(json: &str) -> Result<Info, InfoError> {
        Ok(serde_json::from_str(json)?)
    }

    /// Serialise to JSON.
    pub fn to_json(&self) -> Result<String, InfoError> {
        Ok(serde_json::to_string(self)?)
    }

    /// Read a policy by key: `mlPolicy.torch`, `podGroupPolicy.coscheduling`,
    /// or just `mlPolicy`. `None` when absent or JSON `null`.
    pub fn policy(&self, key: &str) -> Option<&Value> {
        self.runtime_policy.get(key)
    }

    /// The pod set with this name.
    pub fn pod_set(&self, name: &str) -> Option<&PodSet> {
        self.template_spec.pod_sets.iter().find(|p| p.name == name)
    }

    /// The pod set with this name, mutably.
    pub fn pod_set_mut(&mut self, name: &str) -> Option<&mut PodSet> {
        self.template_spec
            .pod_sets
            .iter_mut()
            .find(|p| p.name == name)
    }

    /// The first pod set with this ancestor (e.g. `trainer`).
    pub fn pod_set_by_ancestor(&self, ancestor: &str) -> Option<&PodSet> {
        self.template_spec
            .pod_sets
            .iter()
            .find(|p| p.ancestor.as_deref() == Some(ancestor))
    }

    /// The first pod set with this ancestor, mutably.
    pub fn pod_set_by_ancestor_mut(&mut self, ancestor: &str) -> Option<&mut PodSet> {
        self.template_spec
            .pod_sets
            .iter_mut()
            .find(|p| p.ancestor.as_deref() == Some(ancestor))
    }

    /// The `node` containers (JSON, template order) of the replicated jobs
    /// named `node` or labelled as the trainer: where upstream's
    /// `ExtractResourcePerNodeFromRuntime` looks for the runtime's per-node
    /// resources.
    pub fn runtime_node_containers(&self) -> impl Iterator<Item = &Value> {
        self.template_spec
            .obj
            .get("replicatedJobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|j| {
                j.get("name").and_then(Value::as_str) == Some("node")
                    || j.pointer("/template/metadata/labels")
                        .and_then(|l| l.get(ANCESTOR_LABEL))
                        .and_then(Value::as_str)
                        == Some("trainer")
            })
            .filter_map(|j| {
                j.pointer("/template/spec/template/spec/containers")
                    .and_then(Value::as_array)
            })
            .flatten()
            .filter(|c| c.get("name").and_then(Value::as_str) == Some("node"))
    }
}

impl PodSet {
    /// A container by name: regular containers first, then init containers.
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.containers
            .iter()
            .chain(self.init_containers.iter())
            .find(|c| c.name == name)
    }

    /// A container by name, mutably: regular containers first, then init containers.
    pub fn container_mut(&mut self, name: &str) -> Option<&mut Container> {
        if let Some(i) = self.containers.iter().position(|c| c.name == name) {
            return self.containers.get_mut(i);
        }
        self.init_containers.iter_mut().find(|c| c.name == name)
    }

    /// Upsert a volume by name.
    pub fn upsert_volume(&mut self, volume: Volume) {
        match self.volumes.iter_mut().find(|v| v.name == volume.name) {
            Some(slot) => *slot = volume,
            None => self.volumes.push(volume),
        }
    }
}

impl Container {
    /// Upsert an env var by name.
    pub fn upsert_env(&mut self, env: EnvVar) {
        match self.env.iter_mut().find(|e| e.name == env.name) {
            Some(slot) => *slot = env,
            None => self.env.push(env),
        }
    }

    /// Upsert a literal env var `name=value`.
    pub fn set_env(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.upsert_env(EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        });
    }

    /// Upsert a port by `containerPort` or (non-empty) `name`.
    pub fn upsert_port(&mut self, port: ContainerPort) {
        let same = |p: &ContainerPort| {
            p.container_port == port.container_port
                || (port.name.is_some() && p.name.is_some() && p.name == port.name)
        };
        match self.ports.iter_mut().find(|p| same(p)) {
            Some(slot) => *slot = port,
            None => self.ports.push(port),
        }
    }

    /// Upsert a volume mount by `mountPath`.
    pub fn upsert_volume_mount(&mut self, mount: VolumeMount) {
        match self
            .volume_mounts
            .iter_mut()
            .find(|m| m.mount_path == mount.mount_path)
        {
            Some(slot) => *slot = mount,
            None => self.volume_mounts.push(mount),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn runtime() -> crate::trainer::v1alpha1::TrainingRuntimeSpec {
        serde_json::from_value(json!({
            "mlPolicy": {"numNodes": 2, "torch": {}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                        "spec": {"template": {"spec": {"containers": [
                            {"name": "node", "image": "pytorch", "env": [{"name": "X", "value": "1"}]}
                        ]}}}
                    }
                }]}
            }
        }))
        .unwrap()
    }

    #[test]
    fn policies_pod_sets_and_edits() {
        let job = serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "rt"}}}))
        .unwrap();
        let mut info = crate::blueprint::runtime_info_for(&job, &runtime()).unwrap();
        assert_eq!(info.labels.get("a").map(String::as_str), Some("b"));
        assert!(info.policy("mlPolicy.torch").is_some());
        assert!(info.policy("mlPolicy.mpi").is_none());
        assert_eq!(info.policy("mlPolicy.numNodes"), Some(&json!(2)));
        assert!(info.policy("podGroupPolicy").is_none());
        assert_eq!(info.runtime_node_containers().count(), 1);
        let ps = info.pod_set_by_ancestor_mut("trainer").unwrap();
        assert_eq!(ps.count, Some(2));
        let c = ps.container_mut("node").unwrap();
        c.set_env("X", "2");
        c.set_env("Y", "3");
        assert_eq!(c.env.len(), 2);
        assert_eq!(c.env[0].value.as_deref(), Some("2"));
        let back = Info::from_json(&info.to_json().unwrap()).unwrap();
        assert_eq!(back, info);
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(matches!(
            Info::from_json("{\"templateSpec\": 3}"),
            Err(InfoError::Json(_))
        ));
    }
}
