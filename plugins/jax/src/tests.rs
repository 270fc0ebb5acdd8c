//! Unit tests of JAX, one per rule (see the crate docs).

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, RuntimeFixture};

fn info(ml_policy: Value, with_node: bool) -> Info {
    let name = if with_node { "node" } else { "worker" };
    let runtime = json!({"spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": name, "image": "nvcr.io/nvidia/jax:25.10-py3", "env": [{"name": "A", "value": "a"}]}
            ]}}}}}
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("valid runtime")
}

fn trainjob(trainer: Option<Value>) -> Value {
    let mut tj = json!({"metadata": {"name": "jx", "namespace": "ns"}, "spec": {"runtimeRef": {"name": "jax-distributed"}}});
    if let Some(t) = trainer {
        tj["spec"]["trainer"] = t;
    }
    tj
}

fn node(info: &Info) -> Container {
    info.pod_set("node")
        .and_then(|p| p.container("node"))
        .cloned()
        .expect("node")
}

#[test]
fn sets_count_env_and_port() {
    let out = Harness::<Jax>::new(
        trainjob(Some(
            json!({"numNodes": 3, "env": [{"name": "U", "value": "u"}]}),
        )),
        info(json!({"jax": {}}), true),
    )
    .run()
    .expect("runs");
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(3));
    let c = node(&out.info);
    let env = trainforge_sdk::serde_json::to_value(&c.env).expect("json");
    assert_eq!(
        env,
        json!([
            {"name": "A", "value": "a"},
            {"name": "JAX_NUM_PROCESSES", "value": "3"},
            {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "JAX_COORDINATOR_ADDRESS", "value": "jx-node-0-0.jx:29500"},
        ]),
        "trainer.env is left to the JobSet builder"
    );
    assert_eq!(c.ports.len(), 1);
    assert_eq!(c.ports[0].container_port, 29500);
}

#[test]
fn count_defaults_to_the_runtime_count() {
    let out = Harness::<Jax>::new(trainjob(Some(json!({}))), info(json!({"jax": {}}), true))
        .run()
        .expect("runs");
    let c = node(&out.info);
    assert_eq!(c.env[1].name, "JAX_NUM_PROCESSES");
    assert_eq!(c.env[1].value.as_deref(), Some("1"));
}

#[test]
fn existing_jax_env_is_replaced_in_place() {
    let mut i = info(json!({"jax": {}}), true);
    if let Some(c) = i.pod_set_mut("node").and_then(|p| p.container_mut("node")) {
        c.set_env("JAX_COORDINATOR_ADDRESS", "old");
    }
    let out = Harness::<Jax>::new(trainjob(Some(json!({}))), i)
        .run()
        .expect("runs");
    let names: Vec<String> = node(&out.info).env.iter().map(|e| e.name.clone()).collect();
    assert_eq!(
        names,
        [
            "A",
            "JAX_COORDINATOR_ADDRESS",
            "JAX_NUM_PROCESSES",
            "JAX_PROCESS_ID"
        ]
    );
}

#[test]
fn without_spec_trainer_only_nothing_is_injected() {
    let before = info(json!({"jax": {}}), true);
    let out = Harness::<Jax>::new(trainjob(None), before.clone())
        .run()
        .expect("runs");
    assert_eq!(out.info, before);
}

#[test]
fn without_node_container_only_the_count_changes() {
    let out = Harness::<Jax>::new(
        trainjob(Some(json!({"numNodes": 2}))),
        info(json!({"jax": {}}), false),
    )
    .run()
    .expect("runs");
    let ps = out.info.pod_set("node").expect("pod set");
    assert_eq!(ps.count, Some(2));
    assert_eq!(ps.containers[0].env.len(), 1);
}

#[test]
fn other_policies_are_left_alone() {
    for policy in [json!({"torch": {}}), json!({}), Value::Null] {
        let before = info(policy.clone(), true);
        let out = Harness::<Jax>::new(trainjob(Some(json!({"numNodes": 4}))), before.clone())
            .run()
            .expect("runs");
        assert_eq!(out.info, before, "{policy}");
    }
}

#[test]
fn malformed_num_nodes_names_the_field() {
    let err = Harness::<Jax>::new(
        trainjob(Some(json!({"numNodes": "two"}))),
        info(json!({"jax": {}}), true),
    )
    .run()
    .expect_err("rejected");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer.numNodes")),
        "{err}"
    );
}

#[test]
fn describes_itself() {
    let d = Jax.describe();
    assert_eq!(d.name, "jax");
    assert_eq!(d.known_phases(), vec![Phase::EnforceMlPolicy]);
}
