//! Synthetic inputs for `trainforge plugin bench` and the criterion
//! benchmarks: a TrainJob and a JobSet-sized info (~20 KB of JSON).

use serde_json::{Value, json};
use trainforge_api::plugin::{ANCESTOR_LABEL, Info};

use crate::pipeline::input::{InputError, plugin_inputs};

/// A TrainJob in namespace `bench`.
pub fn trainjob() -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "bench", "namespace": "bench", "uid": "00000000-0000-0000-0000-000000000001"},
        "spec": {"runtimeRef": {"name": "bench"}, "trainer": {"numNodes": 4,
            "env": [{"name": "EPOCHS", "value": "10"}]}},
    })
}

/// A runtime with `jobs` replicated jobs of 2 containers with 20 env vars
/// each, and an `mlPolicy` entry for every key in `policies`.
pub fn runtime(jobs: usize, policies: &[&str]) -> Value {
    let env: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{i}-{}", "x".repeat(16))}))
        .collect();
    let container = |name: &str| {
        json!({"name": name, "image": "ghcr.io/example/trainer:1.2.3", "command": ["torchrun", "train.py"],
               "env": env, "ports": [{"containerPort": 29500}],
               "volumeMounts": [{"name": "data", "mountPath": "/data"}],
               "resources": {"requests": {"cpu": "4", "memory": "16Gi"}}})
    };
    let replicated: Vec<Value> = (0..jobs)
        .map(|j| {
            let name = if j == 0 {
                "node".to_owned()
            } else {
                format!("aux-{j}")
            };
            let ancestor = if j == 0 {
                "trainer"
            } else {
                "dataset-initializer"
            };
            json!({"name": name, "replicas": 1, "template": {
                "metadata": {"labels": {ANCESTOR_LABEL: ancestor}},
                "spec": {"parallelism": 1, "template": {"spec": {
                    "containers": [container("node"), container("sidecar")],
                    "volumes": [{"name": "data", "emptyDir": {}}]}}}}})
        })
        .collect();
    let mut ml = serde_json::Map::new();
    ml.insert("numNodes".into(), json!(1));
    for p in policies {
        ml.insert((*p).to_owned(), json!({}));
    }
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "bench"},
        "spec": {"mlPolicy": ml, "template": {"metadata": {"labels": {"app": "bench"}},
                 "spec": {"replicatedJobs": replicated}}},
    })
}

/// [`trainjob`] as the operator stores it and the ~20 KB info (4 replicated
/// jobs, with the given policies) the operator builds for it.
pub fn inputs(policies: &[&str]) -> Result<(Value, Info), InputError> {
    plugin_inputs(
        ("sample TrainJob", trainjob()),
        ("sample runtime", runtime(4, policies)),
        "bench",
        crate::pipeline::features::Features::default(),
    )
}
