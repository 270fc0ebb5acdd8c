//! Every fixture (examples from the product (`tests/fixtures/brief`), upstream's shipped runtimes
//! re-typed, and our own extra cases) parses into the typed API and serializes
//! back without losing or changing a field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every `*.yaml` under `tests/fixtures/<group>/`, sorted.
fn fixtures(group: &str) -> Vec<PathBuf> {
    let dir = fixtures_dir().join(group);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// Parse the YAML into the type of its `kind` and serialize it back.
fn round_trip(text: &str, kind: &str) -> Value {
    match kind {
        "TrainJob" => {
            serde_json::to_value(serde_saphyr::from_str::<TrainJob>(text).unwrap()).unwrap()
        }
        "TrainingRuntime" => {
            serde_json::to_value(serde_saphyr::from_str::<TrainingRuntime>(text).unwrap()).unwrap()
        }
        "ClusterTrainingRuntime" => {
            serde_json::to_value(serde_saphyr::from_str::<ClusterTrainingRuntime>(text).unwrap())
                .unwrap()
        }
        other => panic!("unexpected kind {other}"),
    }
}

/// Keys whose values are `Quantity` maps: an integer there legitimately
/// comes back as the equivalent string (`8` → `"8"`), as from the API server.
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "minResources", "capacity"];

/// Compare `source` (YAML as written) with `out` (typed round trip) exactly,
/// except integer quantities. Returns the differences as `path: reason`.
fn diff(source: &Value, out: &Value, path: &mut Vec<String>, errors: &mut Vec<String>) {
    match (source, out) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                path.push(k.clone());
                match b.get(k) {
                    Some(vb) => diff(va, vb, path, errors),
                    None => errors.push(format!("{}: lost", path.join("."))),
                }
                path.pop();
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                errors.push(format!("{}.{k}: added", path.join(".")));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                errors.push(format!(
                    "{}: {} items became {}",
                    path.join("."),
                    a.len(),
                    b.len()
                ));
                return;
            }
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                path.push(i.to_string());
                diff(va, vb, path, errors);
                path.pop();
            }
        }
        (Value::Number(n), Value::String(s))
            if path.len() >= 2
                && QUANTITY_MAPS.contains(&path[path.len() - 2].as_str())
                && n.to_string() == *s => {}
        (a, b) if a == b => {}
        (a, b) => errors.push(format!("{}: {a} became {b}", path.join("."))),
    }
}

fn check_group(group: &str) {
    let mut failures = Vec::new();
    for file in fixtures(group) {
        let text = std::fs::read_to_string(&file).unwrap();
        let source: Value = serde_saphyr::from_str(&text).unwrap();
        let kind = source["kind"].as_str().unwrap().to_string();
        let out = round_trip(&text, &kind);
        let mut errors = Vec::new();
        diff(&source, &out, &mut Vec::new(), &mut errors);
        if !errors.is_empty() {
            failures.push(format!("{}:\n  {}", file.display(), errors.join("\n  ")));
        }
        // Serializing twice is stable (the typed value is a fixed point).
        let again = round_trip(&serde_json::to_string(&out).unwrap(), &kind);
        assert_eq!(out, again, "{}: second round trip differs", file.display());
    }
    assert!(
        failures.is_empty(),
        "round trip changed fixtures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn product_examples_round_trip() {
    check_group("brief");
}

#[test]
fn upstream_shipped_runtimes_round_trip() {
    check_group("upstream");
}

#[test]
fn extra_fixtures_round_trip() {
    check_group("extra");
}

#[test]
fn unknown_policies_are_typed_as_extras() {
    let text = std::fs::read_to_string(
        fixtures_dir().join("extra/clustertrainingruntime-unknown-policies.yaml"),
    )
    .unwrap();
    let ctr: ClusterTrainingRuntime = serde_saphyr::from_str(&text).unwrap();
    let ml = ctr.spec.ml_policy.unwrap();
    assert_eq!(ml.num_nodes, Some(2));
    assert!(ml.torch.is_none());
    assert_eq!(ml.other["myframework"]["workers"], 3);
    let pg = ctr.spec.pod_group_policy.unwrap();
    assert!(pg.coscheduling.is_none() && pg.volcano.is_none());
    assert_eq!(pg.other["kai"]["queue"], "team-a");
}

#[test]
fn num_proc_per_node_keeps_int_or_string() {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let text = std::fs::read_to_string(fixtures_dir().join("brief/trainjob-minimal.yaml")).unwrap();
    let job: TrainJob = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        job.spec.trainer.unwrap().num_proc_per_node,
        Some(IntOrString::String("auto".into()))
    );
    let text =
        std::fs::read_to_string(fixtures_dir().join("extra/trainjob-head-features.yaml")).unwrap();
    let job: TrainJob = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        job.spec.trainer.unwrap().num_proc_per_node,
        Some(IntOrString::Int(8))
    );
    let text = std::fs::read_to_string(
        fixtures_dir().join("brief/clustertrainingruntime-pet-command.yaml"),
    )
    .unwrap();
    let ctr: ClusterTrainingRuntime = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        ctr.spec.ml_policy.unwrap().torch.unwrap().num_proc_per_node,
        Some(IntOrString::Int(4))
    );
}

#[test]
fn kinds_serialize_with_api_version_and_kind() {
    use trainforge_api::jobset::v1alpha2::{JobSet, JobSetSpec};
    use trainforge_api::scheduling::{coscheduling, volcano};
    use trainforge_api::trainer::v1alpha1::TrainingRuntimeSpec;

    let cases = [
        (
            serde_json::to_value(ClusterTrainingRuntime::new(
                "x",
                TrainingRuntimeSpec::default(),
            ))
            .unwrap(),
            "trainer.kubeflow.org/v1alpha1",
            "ClusterTrainingRuntime",
        ),
        (
            serde_json::to_value(TrainingRuntime::new("x", TrainingRuntimeSpec::default()))
                .unwrap(),
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntime",
        ),
        (
            serde_json::to_value(JobSet::new("x", JobSetSpec::default())).unwrap(),
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
        ),
        (
            serde_json::to_value(coscheduling::PodGroup::new(
                "x",
                coscheduling::PodGroupSpec::default(),
            ))
            .unwrap(),
            "scheduling.x-k8s.io/v1alpha1",
            "PodGroup",
        ),
        (
            serde_json::to_value(volcano::PodGroup::new(
                "x",
                volcano::PodGroupSpec::default(),
            ))
            .unwrap(),
            "scheduling.volcano.sh/v1beta1",
            "PodGroup",
        ),
    ];
    for (value, api_version, kind) in cases {
        assert_eq!(value["apiVersion"], api_version);
        assert_eq!(value["kind"], kind);
    }
}

#[test]
fn jobset_with_status_round_trips() {
    use trainforge_api::jobset::v1alpha2::JobSet;
    let source = serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "tj", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [{"name": "node", "replicas": 1, "groupName": "default",
                "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}],
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "suspend": false,
            "managedBy": "jobset.sigs.k8s.io/jobset-controller",
            "volumeClaimPolicies": [{"templates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
                "retentionPolicy": {"whenDeleted": "Retain"}}]
        },
        "status": {
            "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                "message": "jobset completed successfully", "lastTransitionTime": "2026-11-22T12:00:00Z"}],
            "restarts": 1,
            "restartsCountTowardsMax": 1,
            "terminalState": "Completed",
            "replicatedJobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0,
                "suspended": 0, "jobRestarts": [1]}],
            "currentInPlaceRestartAttempt": 0
        }
    });
    let js: JobSet = serde_json::from_value(source.clone()).unwrap();
    let out = serde_json::to_value(&js).unwrap();
    let mut errors = Vec::new();
    diff(&source, &out, &mut Vec::new(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn volcano_pod_group_round_trips() {
    use trainforge_api::scheduling::volcano::PodGroup;
    let source = serde_json::json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "tj", "namespace": "ml"},
        "spec": {
            "minMember": 5,
            "minTaskMember": {"node": 4, "launcher": 1},
            "minResources": {"cpu": "40", "nvidia.com/gpu": "8"},
            "queue": "research",
            "priorityClassName": "high",
            "networkTopology": {"mode": "soft", "highestTierAllowed": 1},
            "subGroupPolicy": [{"name": "node", "subGroupSize": 4, "minSubGroups": 1,
                "labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/replicatedjob-name": "node"}},
                "matchLabelKeys": ["jobset.sigs.k8s.io/job-index"]}]
        },
        "status": {"phase": "Inqueue", "conditions": [{"type": "Unschedulable", "status": "True",
            "transitionID": "abc", "reason": "NotEnoughResources", "message": "m",
            "lastTransitionTime": "2026-11-22T12:00:00Z"}], "running": 1}
    });
    let pg: PodGroup = serde_json::from_value(source.clone()).unwrap();
    let out = serde_json::to_value(&pg).unwrap();
    let mut errors = Vec::new();
    diff(&source, &out, &mut Vec::new(), &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
}
