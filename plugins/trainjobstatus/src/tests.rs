//! Unit tests of TrainJobStatus, by rule (see the crate docs); the classes
//! of upstream's `trainjobstatus_test.go` (env, volume and mount on the
//! trainer pods only, the CA ConfigMap, the feature off) are each covered.

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, Outcome, RuntimeFixture};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// A runtime with an initializer job and a trainer job `node` whose pods
/// have the containers `node` and `sidecar` (`node` with `env`).
fn info(env: Value) -> Info {
    let runtime = json!({"spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
        {"name": "dataset-initializer", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "dataset-initializer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init:1"}]}}}}},
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "trainer:1", "env": env},
                {"name": "sidecar", "image": "side:1"}]}}}}}
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("valid runtime")
}

fn trainjob() -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "team-a", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": "torch"}, "trainer": {}}})
}

fn config(url: &str) -> Value {
    json!({"other": true, CONFIG_KEY: {"url": url, "caCert": CA}})
}

fn run_with(config: Value, info: Info) -> Result<Outcome, PluginError> {
    Harness::<TrainJobStatus>::new(trainjob(), info)
        .with_config(config)
        .run()
}

fn run(config: Value) -> Outcome {
    run_with(config, info(json!([]))).expect("runs")
}

fn pod_set<'a>(out: &'a Outcome, name: &str) -> &'a PodSet {
    out.info
        .template_spec
        .pod_sets
        .iter()
        .find(|p| p.name == name)
        .expect("pod set")
}

const ENDPOINT: &str = "https://trainforge-webhook-service.trainforge-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status";

#[test]
fn without_the_server_nothing_changes() {
    for cfg in [json!({}), json!({CONFIG_KEY: null}), json!({"other": 1})] {
        let before = info(json!([]));
        let out = run_with(cfg.clone(), before.clone()).expect("runs");
        assert_eq!(out.info, before, "{cfg}");
        assert!(out.objects.is_empty(), "{cfg}");
    }
}

#[test]
fn every_trainer_container_gets_the_endpoint_token_and_ca() {
    let out = run(config(
        "https://trainforge-webhook-service.trainforge-system.svc:10443",
    ));
    let node = pod_set(&out, "node");
    for c in &node.containers {
        let vars: Vec<(&str, &str)> = c
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or_default()))
            .collect();
        assert_eq!(
            vars,
            [
                (ENV_URL, ENDPOINT),
                (ENV_CA_CERT, "/var/run/secrets/kubeflow/trainer/ca.crt"),
                (ENV_TOKEN, "/var/run/secrets/kubeflow/trainer/token"),
            ],
            "{}",
            c.name
        );
        assert_eq!(c.volume_mounts, [mount()], "{}", c.name);
    }
    assert_eq!(
        serde_json::to_value(&node.volumes).expect("json"),
        json!([{"name": "kubeflow-trainer-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status",
                "expirationSeconds": 3600, "path": "token"}},
            {"configMap": {"name": "llm-tls-config", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        ]}}])
    );
    // The initializer is not a trainer: untouched.
    let init = pod_set(&out, "dataset-initializer");
    assert!(init.volumes.is_empty());
    assert!(
        init.containers
            .iter()
            .all(|c| c.env.is_empty() && c.volume_mounts.is_empty())
    );
}

#[test]
fn the_ca_config_map_is_emitted_and_owned_by_the_trainjob() {
    let out = run(config("https://status.example:10443"));
    assert_eq!(out.objects.len(), 1, "{:?}", out.objects);
    let cm = &out.objects[0];
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "llm-tls-config");
    assert_eq!(cm["metadata"]["namespace"], "team-a");
    assert_eq!(cm["data"]["ca.crt"], CA);
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
}

#[test]
fn a_variable_of_the_same_name_is_replaced_not_repeated_and_a_second_run_changes_nothing() {
    let stale = json!([{"name": ENV_URL, "value": "https://old"}, {"name": "KEEP", "value": "1"}]);
    let out = run_with(config("https://s:1/"), info(stale)).expect("runs");
    let node = pod_set(&out, "node").containers[0].clone();
    let names: Vec<&str> = node.env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, [ENV_URL, "KEEP", ENV_CA_CERT, ENV_TOKEN]);
    assert_eq!(
        node.env[0].value.as_deref(),
        Some(
            "https://s:1/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm/status"
        ),
        "a trailing / of the URL is dropped"
    );
    let again = run_with(config("https://s:1/"), out.info.clone()).expect("runs");
    assert_eq!(again.info, out.info);
}

#[test]
fn every_trainer_pod_set_is_served() {
    let job = |name: &str| {
        json!({"name": name, "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": name, "image": "t:1"}]}}}}})
    };
    let runtime =
        json!({"spec": {"template": {"spec": {"replicatedJobs": [job("launcher"), job("node")]}}}});
    let before = RuntimeFixture::new(runtime).info().expect("valid runtime");
    let out = run_with(config("https://s:1"), before).expect("runs");
    for name in ["launcher", "node"] {
        let ps = pod_set(&out, name);
        assert_eq!(ps.volumes, [volume("team-a", "llm")], "{name}");
        assert_eq!(ps.containers[0].volume_mounts, [mount()], "{name}");
        assert_eq!(ps.containers[0].env.len(), 3, "{name}");
    }
    assert_eq!(out.objects.len(), 1, "one ConfigMap for all of them");
}

#[test]
fn a_runtime_without_a_trainer_gets_nothing() {
    let runtime = json!({"spec": {"template": {"spec": {"replicatedJobs": [
        {"name": "work", "template": {"spec": {"template": {"spec": {"containers": [{"name": "work", "image": "w:1"}]}}}}}
    ]}}}});
    let before = RuntimeFixture::new(runtime).info().expect("valid runtime");
    let out = run_with(config("https://s:1"), before.clone()).expect("runs");
    assert_eq!(out.info, before);
    assert!(out.objects.is_empty());
}

#[test]
fn a_malformed_server_is_refused_naming_the_field() {
    for (cfg, field) in [
        (
            json!({CONFIG_KEY: "https://s"}),
            "trainJobStatusServer: must be an object",
        ),
        (
            json!({CONFIG_KEY: {"caCert": CA}}),
            "trainJobStatusServer.url",
        ),
        (
            json!({CONFIG_KEY: {"url": "", "caCert": CA}}),
            "trainJobStatusServer.url",
        ),
        (
            json!({CONFIG_KEY: {"url": "http://s:1", "caCert": CA}}),
            "trainJobStatusServer.url",
        ),
        (
            json!({CONFIG_KEY: {"url": "https://", "caCert": CA}}),
            "trainJobStatusServer.url",
        ),
        (
            json!({CONFIG_KEY: {"url": 7, "caCert": CA}}),
            "trainJobStatusServer.url",
        ),
        (
            json!({CONFIG_KEY: {"url": "https://s"}}),
            "trainJobStatusServer.caCert",
        ),
        (
            json!({CONFIG_KEY: {"url": "https://s", "caCert": ""}}),
            "trainJobStatusServer.caCert",
        ),
        (
            json!({CONFIG_KEY: {"url": "https://s", "caCert": " "}}),
            "trainJobStatusServer.caCert",
        ),
    ] {
        let e = run_with(cfg.clone(), info(json!([]))).expect_err("refused");
        assert!(
            matches!(&e, PluginError::InvalidConfig(m) if m.contains(field)),
            "{cfg}: {e:?}"
        );
    }
}

#[test]
fn it_asks_for_the_facts_and_runs_for_every_trainjob() {
    let d = TrainJobStatus.describe();
    assert_eq!(d.name, "trainjobstatus");
    assert!(d.policy_keys.is_empty(), "called for every TrainJob");
    assert_eq!(d.capabilities, [CAPABILITY]);
    assert_eq!(d.phases, ["enforce-pod-spec", "build", "object-names"]);
    // Its CA ConfigMap's name is declared, so no other TrainJob takes it.
    assert_eq!(d.object_names.len(), 1);
    assert_eq!(d.object_names[0].suffix, CA_CONFIG_MAP_SUFFIX);
    assert_eq!(
        ca_config_map_name("job"),
        format!("job{CA_CONFIG_MAP_SUFFIX}")
    );
}
