//! The SDK's test fixture (`trainforge_sdk::testing::RuntimeFixture`) gives
//! plugin tests exactly the info the operator hands to the first plugin
//! phase for the same TrainJob and runtime: CRD defaults, runtime patches
//! and `resourcesPerNode` included.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use trainforge::cmd::render::plugin_inputs;
use trainforge_api::plugin::ANCESTOR_LABEL;
use trainforge_sdk::testing::RuntimeFixture;

fn runtime() -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {"metadata": {"labels": {"runtime": "1"}}, "spec": {"replicatedJobs": [
                {"name": "dataset-initializer", "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: "dataset-initializer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}}}},
                {"name": "node", "dependsOn": [{"name": "dataset-initializer", "status": "Complete"}], "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch",
                        "env": [{"name": "FROM_RUNTIME", "value": "1"}],
                        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}}}]}}}}}
            ]}}
        }
    })
}

/// A TrainJob overriding the trainer's node count and resources and
/// patching the runtime (labels, a trainer container's env and a node
/// selector) as a queueing controller would.
fn trainjob() -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "job", "namespace": "team"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "labels": {"from-job": "1"},
            "trainer": {"numNodes": 3, "resourcesPerNode": {"requests": {"cpu": "6", "nvidia.com/gpu": "2"}}},
            "runtimePatches": [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
                "metadata": {"labels": {"patched": "1"}},
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "nodeSelector": {"zone": "z1"},
                    "containers": [{"name": "node", "env": [{"name": "FROM_PATCH", "value": "1"}]}]
                }}}}}]}
            }}}]
        }
    })
}

#[test]
fn fixture_info_equals_the_operators() {
    let (_, operator) = plugin_inputs(
        ("trainjob", trainjob()),
        ("runtime", runtime()),
        "default",
        Default::default(),
    )
    .unwrap();
    let fixture = RuntimeFixture::new(runtime())
        .info_for(&trainjob())
        .unwrap();
    assert_eq!(fixture, operator);
}

#[test]
fn fixture_info_has_the_patches_and_overrides() {
    let info = RuntimeFixture::new(runtime())
        .info_for(&trainjob())
        .unwrap();
    assert_eq!(info.labels.get("runtime").map(String::as_str), Some("1"));
    assert_eq!(info.labels.get("from-job").map(String::as_str), Some("1"));
    assert_eq!(info.labels.get("patched").map(String::as_str), Some("1"));

    let node = info.pod_set("node").unwrap();
    // The runtime's `mlPolicy.numNodes`: the ML plugin, not the builder,
    // applies `spec.trainer.numNodes`.
    assert_eq!(node.count, Some(1), "mlPolicy.numNodes");
    let env: Vec<&str> = node
        .container("node")
        .unwrap()
        .env
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    // A strategic merge by name: the patch's new entries come first.
    assert_eq!(
        env,
        ["FROM_PATCH", "FROM_RUNTIME"],
        "the patch's env merges by name"
    );
    // resourcesPerNode overrides the requests it names of the trainer
    // container; the runtime's others stay.
    assert_eq!(node.single_pod_requests["cpu"].0, "6");
    assert_eq!(node.single_pod_requests["nvidia.com/gpu"].0, "2");
    assert_eq!(node.single_pod_requests["memory"].0, "8Gi");
    let jobs = info.template_spec.obj["replicatedJobs"].as_array().unwrap();
    let node_job = jobs.iter().find(|j| j["name"] == "node").unwrap();
    assert_eq!(
        node_job["template"]["spec"]["template"]["spec"]["nodeSelector"],
        json!({"zone": "z1"})
    );
    // CRD defaults, as the API server stores the runtime.
    assert_eq!(node_job["replicas"], 1);

    let init = info.pod_set("dataset-initializer").unwrap();
    assert_eq!(init.count, Some(1));
    assert!(init.single_pod_requests.is_empty());
}
