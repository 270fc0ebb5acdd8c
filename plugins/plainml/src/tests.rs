//! Unit tests of PlainML, one per rule (see the crate docs).

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, RuntimeFixture};

fn runtime(ml_policy: Value) -> RuntimeFixture {
    RuntimeFixture::new(
        json!({"spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": [
            {"name": "init", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "dataset-initializer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "init", "image": "i"}]}}}}},
            {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "node", "image": "img", "env": [{"name": "A", "value": "runtime"}, {"name": "B", "value": "b"}]},
                    {"name": "sidecar", "image": "s"}
                ]}}}}}
        ]}}}}),
    )
}

/// The info the operator builds for a TrainJob that overrides nothing.
fn info(ml_policy: Value) -> Info {
    runtime(ml_policy).info().expect("valid runtime")
}

fn trainjob(trainer: Value) -> Value {
    json!({"metadata": {"name": "job", "namespace": "ns"}, "spec": {"runtimeRef": {"name": "rt"}, "trainer": trainer}})
}

fn run(ml_policy: Value, trainer: Value) -> Info {
    Harness::<PlainMl>::for_runtime(trainjob(trainer), &runtime(ml_policy))
        .expect("valid fixture")
        .run()
        .expect("runs")
        .info
}

fn node_env(info: &Info) -> Vec<(String, String)> {
    let c = info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node container");
    c.env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn sets_trainer_count_from_num_nodes() {
    let out = run(json!({"numNodes": 1}), json!({"numNodes": 3}));
    assert_eq!(out.pod_set("node").and_then(|p| p.count), Some(3));
    assert_eq!(
        out.pod_set("init").and_then(|p| p.count),
        Some(1),
        "only the trainer pod set"
    );
}

#[test]
fn upserts_trainer_env_into_node_container_in_place() {
    let out = run(
        json!({}),
        json!({"env": [{"name": "B", "value": "job"}, {"name": "C", "value": "c"}]}),
    );
    let want: Vec<(String, String)> = [("A", "runtime"), ("B", "job"), ("C", "c")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(node_env(&out), want);
    let sidecar = out
        .pod_set("node")
        .and_then(|p| p.container("sidecar"))
        .expect("sidecar");
    assert!(
        sidecar.env.is_empty(),
        "only the node container gets trainer.env"
    );
}

#[test]
fn runs_without_any_ml_policy_and_for_xgboost_and_flux() {
    for policy in [Value::Null, json!({"xgboost": {}}), json!({"flux": {}})] {
        let out = run(
            policy.clone(),
            json!({"numNodes": 2, "env": [{"name": "X", "value": "1"}]}),
        );
        assert_eq!(
            out.pod_set("node").and_then(|p| p.count),
            Some(2),
            "{policy}"
        );
        assert!(node_env(&out).iter().any(|(n, _)| n == "X"), "{policy}");
    }
}

#[test]
fn skips_torch_mpi_and_jax() {
    for policy in [json!({"torch": {}}), json!({"mpi": {}}), json!({"jax": {}})] {
        let before = info(policy.clone());
        let out = run(
            policy.clone(),
            json!({"numNodes": 5, "env": [{"name": "X", "value": "1"}]}),
        );
        assert_eq!(out, before, "{policy}");
    }
}

#[test]
fn without_spec_trainer_nothing_changes() {
    let before = info(json!({}));
    let tj = json!({"metadata": {"name": "job", "namespace": "ns"}, "spec": {"runtimeRef": {"name": "rt"}}});
    let out = Harness::<PlainMl>::new(tj, before.clone())
        .run()
        .expect("runs");
    assert_eq!(out.info, before);
}

#[test]
fn without_trainer_pod_set_nothing_changes() {
    let runtime = RuntimeFixture::new(json!({"spec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}}}
    ]}}}}));
    let before = runtime.info().expect("valid runtime");
    let out = Harness::<PlainMl>::new(
        trainjob(json!({"numNodes": 4, "env": [{"name": "X", "value": "1"}]})),
        before.clone(),
    )
    .run()
    .expect("runs");
    assert_eq!(out.info, before);
}

#[test]
fn malformed_trainer_is_an_input_error_naming_the_field() {
    let err = Harness::<PlainMl>::new(trainjob(json!({"numNodes": "many"})), info(json!({})))
        .run()
        .expect_err("rejected");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer")),
        "{err}"
    );
}

#[test]
fn describes_itself() {
    let d = PlainMl.describe();
    assert_eq!(d.name, "plainml");
    assert_eq!(d.known_phases(), vec![Phase::EnforceMlPolicy]);
    assert!(d.emits.is_empty());
}
