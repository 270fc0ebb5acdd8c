//! Tests of [`super::merge`]: precedence of labels, both override generations,
//! strategic-merge details and `resourcesPerNode`.

use crate::trainer::v1alpha1::{TrainJob, TrainingRuntimeSpec};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::merge::{MergeError, merge};

fn runtime(extra: Value) -> TrainingRuntimeSpec {
    let mut base = json!({
        "template": {
            "metadata": {"labels": {"rt": "1", "shared": "runtime"}, "annotations": {"a": "runtime"}},
            "spec": {"replicatedJobs": [
                {"name": "dataset-initializer", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}}}},
                {"name": "node", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "nodeSelector": {"pool": "a"},
                        "tolerations": [{"key": "t1", "operator": "Exists"}],
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "initContainers": [{"name": "warmup", "image": "busybox"}],
                        "containers": [{"name": "node", "image": "torch",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}}}}
            ]}
        }
    });
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    serde_json::from_value(base).unwrap()
}

fn trainjob(spec: Value) -> TrainJob {
    let mut spec = spec;
    spec["runtimeRef"] = json!({"name": "rt"});
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "job", "namespace": "ns"}, "spec": spec
    }))
    .unwrap()
}

fn pod_spec(m: &super::merge::MergedTemplate, job: usize) -> Value {
    let spec = serde_json::to_value(&m.spec).unwrap();
    spec["replicatedJobs"][job]["template"]["spec"]["template"]["spec"].clone()
}

fn env_names(pod: &Value) -> Vec<String> {
    pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn labels_runtime_then_older_api_then_patches_in_order() {
    let job = trainjob(json!({
        "labels": {"shared": "spec", "old": "1"},
        "annotations": {"a": "spec"},
        "runtimePatches": [
            {"manager": "x.io/one", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"shared": "one", "p1": "1"}}}}},
            {"manager": "x.io/two", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"shared": "two"}, "annotations": {"a": "two"}}}}}
        ]
    }));
    let m = merge(&job, &runtime(json!({}))).unwrap();
    assert_eq!(m.labels.get("shared").map(String::as_str), Some("two"));
    assert_eq!(m.labels.get("rt").map(String::as_str), Some("1"));
    assert_eq!(m.labels.get("old").map(String::as_str), Some("1"));
    assert_eq!(m.labels.get("p1").map(String::as_str), Some("1"));
    assert_eq!(m.annotations.get("a").map(String::as_str), Some("two"));
}

#[test]
fn runtime_patches_merge_strategically_and_keep_job_order() {
    let job = trainjob(
        json!({"runtimePatches": [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"metadata": {"labels": {"jl": "1"}}, "spec": {"template": {
                "metadata": {"annotations": {"pa": "1"}},
                "spec": {
                    "nodeSelector": {"zone": "z1"},
                    "tolerations": [{"key": "t2", "operator": "Exists"}],
                    "containers": [{"name": "node", "env": [{"name": "C", "value": "3"}, {"name": "D", "value": "4"}]}]
                }}}}},
            {"name": "dataset-initializer", "template": {"metadata": {"labels": {"di": "1"}}}}
        ]}}}}]}),
    );
    let m = merge(&job, &runtime(json!({}))).unwrap();
    let names: Vec<_> = m
        .spec
        .replicated_jobs
        .as_ref()
        .unwrap()
        .iter()
        .map(|j| j.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["dataset-initializer", "node"],
        "runtime order restored"
    );
    let pod = pod_spec(&m, 1);
    assert_eq!(
        env_names(&pod),
        ["C", "D", "A", "B"],
        "new-only patch entries first, as apimachinery does"
    );
    assert_eq!(pod["nodeSelector"], json!({"pool": "a", "zone": "z1"}));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "t2", "operator": "Exists"}])
    );
    assert_eq!(
        pod["containers"][0]["image"], "torch",
        "untouched fields kept"
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "scratch", "emptyDir": {}}]),
        "empty objects in the runtime survive"
    );
    let spec = serde_json::to_value(&m.spec).unwrap();
    assert_eq!(
        spec["replicatedJobs"][1]["template"]["metadata"]["labels"]["jl"],
        "1"
    );
    assert_eq!(
        spec["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"]["annotations"]["pa"],
        "1"
    );
    assert_eq!(
        spec["replicatedJobs"][0]["template"]["metadata"]["labels"]["di"],
        "1"
    );
}

#[test]
fn pod_template_overrides_target_only_the_named_jobs() {
    let job = trainjob(json!({"podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}],
         "metadata": {"labels": {"team": "a"}},
         "spec": {"serviceAccountName": "sa",
                  "volumes": [{"name": "data", "emptyDir": {}}],
                  "containers": [{"name": "node", "env": [{"name": "B", "value": "over"}],
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
        {"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "later"}}
    ]}));
    let m = merge(&job, &runtime(json!({}))).unwrap();
    let pod = pod_spec(&m, 1);
    assert_eq!(pod["serviceAccountName"], "later", "later overrides win");
    // A new-only entry goes before runtime-only ones (apimachinery's order).
    assert_eq!(
        pod["volumes"],
        json!([{"name": "data", "emptyDir": {}}, {"name": "scratch", "emptyDir": {}}])
    );
    assert_eq!(
        pod["containers"][0]["env"][1],
        json!({"name": "B", "value": "over"})
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{"name": "data", "mountPath": "/data"}])
    );
    let spec = serde_json::to_value(&m.spec).unwrap();
    assert_eq!(
        spec["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"]["labels"]["team"],
        "a"
    );
    assert_eq!(
        pod_spec(&m, 0)["serviceAccountName"],
        Value::Null,
        "other jobs untouched"
    );
}

#[test]
fn unknown_job_and_container_are_errors_naming_the_field() {
    let job = trainjob(json!({"podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}], "spec": {"initContainers": [{"name": "setup"}]}}
    ]}));
    assert_eq!(
        merge(&job, &runtime(json!({}))),
        Err(MergeError::UnknownContainer {
            field: "spec.podTemplateOverrides[0].spec.initContainers[0].name".into(),
            job: "node".into(),
            kind: "init container",
            name: "setup".into(),
        })
    );
    let job = trainjob(
        json!({"runtimePatches": [{"manager": "x.io/m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "ghost"}]}}}}]}),
    );
    let err = merge(&job, &runtime(json!({}))).unwrap_err();
    assert_eq!(
        err,
        MergeError::UnknownJob {
            field:
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name"
                    .into(),
            name: "ghost".into()
        }
    );
    assert!(err.to_string().contains("ghost"));
}

#[test]
fn resources_per_node_merges_into_trainer_node_only_with_an_ml_policy() {
    let job = trainjob(
        json!({"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "4", "cpu": "2"}}}}),
    );
    let with_policy = merge(
        &job,
        &runtime(json!({"mlPolicy": {"numNodes": 2, "torch": {}}})),
    )
    .unwrap();
    assert_eq!(
        pod_spec(&with_policy, 1)["containers"][0]["resources"],
        json!({"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "4"}})
    );
    assert_eq!(
        pod_spec(&with_policy, 0)["containers"][0].get("resources"),
        None
    );
    let without = merge(&job, &runtime(json!({}))).unwrap();
    assert_eq!(
        pod_spec(&without, 1)["containers"][0]["resources"],
        json!({"limits": {"cpu": "1", "memory": "1Gi"}})
    );
}

#[test]
fn missing_template_spec_is_an_error() {
    let rt: TrainingRuntimeSpec =
        serde_json::from_value(json!({"template": {"metadata": {"labels": {"x": "y"}}}})).unwrap();
    assert_eq!(
        merge(&trainjob(json!({})), &rt),
        Err(MergeError::MissingTemplateSpec)
    );
}
