//! Unit tests of XGBoost, one per rule (see the crate docs).

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, RuntimeFixture};

fn info(ml_policy: Value, resources: Value) -> Info {
    let runtime = json!({"spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "ghcr.io/kubeflow/trainer/xgboost-runtime", "resources": resources}
            ]}}}}}
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("valid runtime")
}

fn trainjob(trainer: Option<Value>) -> Value {
    let mut tj = json!({"metadata": {"name": "xg", "namespace": "ns"}, "spec": {"runtimeRef": {"name": "xgboost-distributed"}}});
    if let Some(t) = trainer {
        tj["spec"]["trainer"] = t;
    }
    tj
}

fn run(trainer: Option<Value>, info: Info) -> Info {
    Harness::<XgBoost>::new(trainjob(trainer), info)
        .run()
        .expect("runs")
        .info
}

fn node(info: &Info) -> Container {
    info.pod_set("node")
        .and_then(|p| p.container("node"))
        .cloned()
        .expect("node")
}

fn workers(info: &Info) -> Option<String> {
    node(info)
        .env
        .iter()
        .find(|e| e.name == DMLC_NUM_WORKER)
        .and_then(|e| e.value.clone())
}

#[test]
fn cpu_only_env_port_and_count() {
    let out = run(
        Some(json!({"numNodes": 3})),
        info(json!({"xgboost": {}}), json!({"limits": {"cpu": "4"}})),
    );
    assert_eq!(out.pod_set("node").and_then(|p| p.count), Some(3));
    let c = node(&out);
    assert_eq!(
        trainforge_sdk::serde_json::to_value(&c.env).expect("json"),
        json!([
            {"name": "DMLC_TRACKER_URI", "value": "xg-node-0-0.xg"},
            {"name": "DMLC_TRACKER_PORT", "value": "29500"},
            {"name": "DMLC_TASK_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "DMLC_NUM_WORKER", "value": "3"},
        ])
    );
    assert_eq!(c.ports.len(), 1);
    assert_eq!(c.ports[0].container_port, 29500);
}

#[test]
fn workers_per_node_is_the_gpu_count() {
    let out = run(
        Some(json!({"numNodes": 2})),
        info(
            json!({"xgboost": {}}),
            json!({"limits": {"nvidia.com/gpu": "4"}}),
        ),
    );
    assert_eq!(workers(&out).as_deref(), Some("8"));
}

#[test]
fn trainjob_resources_win_over_the_runtime() {
    let out = run(
        Some(json!({"numNodes": 2, "resourcesPerNode": {"requests": {"nvidia.com/gpu": 2}}})),
        info(
            json!({"xgboost": {}}),
            json!({"limits": {"nvidia.com/gpu": "8"}}),
        ),
    );
    assert_eq!(workers(&out).as_deref(), Some("4"));
    let out = run(
        Some(json!({"resourcesPerNode": {"requests": {"cpu": "2"}}})),
        info(
            json!({"xgboost": {}}),
            json!({"limits": {"nvidia.com/gpu": "8"}}),
        ),
    );
    assert_eq!(
        workers(&out).as_deref(),
        Some("1"),
        "TrainJob resources are taken alone"
    );
}

#[test]
fn without_spec_trainer_only_nothing_is_injected() {
    let before = info(json!({"xgboost": {}}), json!({}));
    assert_eq!(run(None, before.clone()), before);
}

#[test]
fn other_policies_are_left_alone() {
    for policy in [json!({"torch": {}}), json!({}), Value::Null] {
        let before = info(policy.clone(), json!({}));
        assert_eq!(
            run(Some(json!({"numNodes": 4})), before.clone()),
            before,
            "{policy}"
        );
    }
}

#[test]
fn bad_gpu_quantity_names_the_field() {
    let err = Harness::<XgBoost>::new(
        trainjob(Some(
            json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "x"}}}),
        )),
        info(json!({"xgboost": {}}), json!({})),
    )
    .run()
    .expect_err("rejected");
    assert_eq!(err, PluginError::InvalidInput(
        "spec.trainer.resourcesPerNode: resources.limits[nvidia.com/gpu]: invalid quantity \"x\"".into()
    ));
}

#[test]
fn reserved_env_is_forbidden_per_entry() {
    let tj = trainjob(Some(json!({"env": [
        {"name": "OK", "value": "1"},
        {"name": "DMLC_TRACKER_URI", "value": "x"},
        {"name": "DMLC_NUM_WORKER", "value": "9"}
    ]})));
    let v = Harness::<XgBoost>::new(tj.clone(), info(json!({"xgboost": {}}), json!({})))
        .validate(None)
        .expect("validates");
    assert_eq!(
        v.errors,
        vec![
            FieldError::forbidden(
                "spec.trainer.env[1]",
                "DMLC_TRACKER_URI is reserved for the XGBoost runtime"
            ),
            FieldError::forbidden(
                "spec.trainer.env[2]",
                "DMLC_NUM_WORKER is reserved for the XGBoost runtime"
            ),
        ]
    );
    let v = Harness::<XgBoost>::new(tj, info(json!({"torch": {}}), json!({})))
        .validate(None)
        .expect("validates");
    assert!(v.errors.is_empty(), "only for XGBoost runtimes");
}

#[test]
fn describes_itself() {
    let d = XgBoost.describe();
    assert_eq!(d.name, "xgboost");
    assert_eq!(
        d.known_phases(),
        vec![Phase::EnforceMlPolicy, Phase::Validate]
    );
}
