//! Tests of [`super`]: the converted TrainJob merges exactly like the
//! original, for every v2.1 field and their combinations with runtime
//! patches.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::{LEGACY_FIELDS_MANAGER, LegacyError, MAX_RUNTIME_PATCHES, convert, has_legacy_fields};
use crate::blueprint::merge::merge;
use crate::trainer::v1alpha1::{TrainJob, TrainingRuntimeSpec};

fn runtime() -> TrainingRuntimeSpec {
    serde_json::from_value(json!({
        "template": {
            "metadata": {"labels": {"rt": "1", "shared": "runtime"}, "annotations": {"a": "runtime"}},
            "spec": {"replicatedJobs": [
                {"name": "dataset-initializer", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}}}},
                {"name": "node", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {
                        "metadata": {"labels": {"pod": "runtime"}},
                        "spec": {
                        "nodeSelector": {"pool": "a"},
                        "tolerations": [{"key": "t1", "operator": "Exists"}],
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "initContainers": [{"name": "warmup", "image": "busybox"}],
                        "containers": [
                            {"name": "node", "image": "torch",
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                             "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
                            {"name": "sidecar", "image": "busybox"}]}}}}}
            ]}
        }
    }))
    .expect("runtime")
}

fn trainjob(spec: Value) -> TrainJob {
    let mut spec = spec;
    spec["runtimeRef"] = json!({"name": "rt"});
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "job", "namespace": "ns"}, "spec": spec
    }))
    .expect("trainjob")
}

/// `job` after the conversion: v2.1 fields removed, patches replaced.
fn converted(job: &TrainJob) -> TrainJob {
    let c = convert(&job.spec).expect("converts").expect("has fields");
    let mut out = job.clone();
    out.spec.labels = None;
    out.spec.annotations = None;
    out.spec.pod_template_overrides = None;
    out.spec.runtime_patches = Some(c.runtime_patches);
    out
}

fn assert_same_merge(spec: Value) {
    let job = trainjob(spec);
    let after = converted(&job);
    assert!(!has_legacy_fields(&after.spec));
    let rt = runtime();
    let before = merge(&job, &rt).expect("original merges");
    let now = merge(&after, &rt).expect("converted merges");
    assert_eq!(
        serde_json::to_value(&now.spec).expect("json"),
        serde_json::to_value(&before.spec).expect("json"),
        "pod templates"
    );
    assert_eq!(now.labels, before.labels, "JobSet labels");
    assert_eq!(now.annotations, before.annotations, "JobSet annotations");
}

#[test]
fn no_v21_field_no_conversion() {
    let job = trainjob(json!({"runtimePatches": [{"manager": "x.io/m"}]}));
    assert_eq!(convert(&job.spec), Ok(None));
}

#[test]
fn labels_and_annotations_merge_the_same() {
    assert_same_merge(
        json!({"labels": {"shared": "spec", "team": "a"}, "annotations": {"a": "spec"}}),
    );
}

#[test]
fn later_runtime_patches_still_win_over_the_v21_fields() {
    assert_same_merge(json!({
        "labels": {"shared": "spec", "old": "1"},
        "runtimePatches": [
            {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {
                "metadata": {"labels": {"shared": "kueue"}},
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "nodeSelector": {"pool": "kueue"}}}}}}]}}}}
        ],
        "podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"pool": "override", "zone": "z"}}}]
    }));
    let job = trainjob(
        json!({"labels": {"a": "1"}, "runtimePatches": [{"manager": "kueue.x-k8s.io/manager"}]}),
    );
    let c = convert(&job.spec).expect("converts").expect("fields");
    let managers: Vec<&str> = c
        .runtime_patches
        .iter()
        .map(|p| p.manager.as_str())
        .collect();
    assert_eq!(managers, [LEGACY_FIELDS_MANAGER, "kueue.x-k8s.io/manager"]);
    assert_eq!(c.converted, ["spec.labels"]);
}

#[test]
fn pod_template_overrides_of_every_kind_merge_the_same() {
    assert_same_merge(json!({"podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}, {"name": "dataset-initializer"}],
         "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
         "spec": {"serviceAccountName": "sa",
                  "nodeSelector": {"zone": "z1"},
                  "tolerations": [{"key": "t2", "operator": "Exists"}],
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                      "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
                  "volumes": [{"name": "data", "emptyDir": {}}],
                  "imagePullSecrets": [{"name": "pull"}],
                  "schedulingGates": [{"name": "gate"}]}},
        {"targetJobs": [{"name": "node"}],
         "spec": {"serviceAccountName": "later",
                  "initContainers": [{"name": "warmup", "env": [{"name": "W", "value": "1"}]}],
                  "containers": [
                      {"name": "node", "env": [{"name": "B", "value": "over"}, {"name": "C", "value": "new"}],
                       "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                      {"name": "sidecar", "env": [{"name": "S", "value": "1"}]}]}},
        {"targetJobs": [{"name": "node"}],
         "spec": {"containers": [{"name": "node", "env": [{"name": "C", "value": "latest"}, {"name": "D", "value": "d"}]}],
                  "tolerations": [{"key": "t3", "operator": "Exists"}]}}
    ]}));
}

#[test]
fn several_overrides_of_one_job_become_one_entry() {
    let job = trainjob(json!({"podTemplateOverrides": [
        {"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "first"}},
        {"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "second"}}
    ]}));
    let c = convert(&job.spec).expect("converts").expect("fields");
    let patch = serde_json::to_value(&c.runtime_patches[0]).expect("json");
    let jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .expect("jobs");
    assert_eq!(jobs.len(), 1, "{patch}");
    assert_eq!(
        jobs[0]["template"]["spec"]["template"]["spec"]["serviceAccountName"],
        "second"
    );
}

#[test]
fn empty_fields_are_removed_without_a_patch() {
    let job = trainjob(json!({"labels": {}, "podTemplateOverrides": []}));
    let c = convert(&job.spec).expect("converts").expect("fields");
    assert!(c.runtime_patches.is_empty());
    assert_eq!(c.converted, ["spec.labels", "spec.podTemplateOverrides"]);
}

#[test]
fn fields_set_again_update_the_earlier_conversion_in_place() {
    let first = converted(&trainjob(json!({
        "labels": {"a": "1", "b": "1"},
        "runtimePatches": [{"manager": "kueue.x-k8s.io/manager"}]
    })));
    // A GitOps tool re-applies the v2.1 field with a new value.
    let mut again = first.clone();
    again.spec.labels = Some([("b".to_string(), "2".to_string())].into());
    let c = convert(&again.spec).expect("converts").expect("fields");
    let managers: Vec<&str> = c
        .runtime_patches
        .iter()
        .map(|p| p.manager.as_str())
        .collect();
    assert_eq!(managers, [LEGACY_FIELDS_MANAGER, "kueue.x-k8s.io/manager"]);
    let labels = serde_json::to_value(&c.runtime_patches[0]).expect("json")["trainingRuntimeSpec"]
        ["template"]["metadata"]["labels"]
        .clone();
    assert_eq!(labels, json!({"a": "1", "b": "2"}));
}

#[test]
fn a_full_patch_list_is_refused_and_nothing_changes() {
    let patches: Vec<Value> = (0..MAX_RUNTIME_PATCHES)
        .map(|i| json!({"manager": format!("x.io/m{i}")}))
        .collect();
    let job = trainjob(json!({"labels": {"a": "1"}, "runtimePatches": patches}));
    assert_eq!(
        convert(&job.spec),
        Err(LegacyError::TooManyPatches(MAX_RUNTIME_PATCHES))
    );
}
