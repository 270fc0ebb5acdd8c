//! Shared fixtures of the admission unit tests.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainingRuntime};

use super::router::PluginsNow;
use super::trainjob::RuntimeLookup;
use crate::plugin::{FailurePolicy, PluginRuntime, PluginSet, RuntimeConfig, builtin};

/// One plugin runtime for every test (its artifact cache keeps the
/// builtins compiled once).
pub(crate) fn runtime() -> Arc<PluginRuntime> {
    static RT: OnceLock<Arc<PluginRuntime>> = OnceLock::new();
    RT.get_or_init(|| Arc::new(PluginRuntime::new(RuntimeConfig::default()).unwrap()))
        .clone()
}

/// A set of the named builtins (crate names) with `policy`.
pub(crate) fn builtins(names: &[&str], policy: FailurePolicy) -> PluginSet {
    let rt = runtime();
    let plugins = names
        .iter()
        .map(|n| {
            let Some(b) = builtin::all().iter().find(|b| b.crate_name == *n) else {
                panic!("builtin {n} is not embedded");
            };
            let mut src = b.trusted_source();
            src.failure_policy = policy;
            rt.load(src).unwrap()
        })
        .collect();
    PluginSet::new(plugins).unwrap()
}

/// The usual builtins for TrainJob tests.
pub(crate) fn torch_set(policy: FailurePolicy) -> PluginSet {
    builtins(&["plugin-jobset", "plugin-plainml", "plugin-torch"], policy)
}

/// A fixed plugin set.
pub(crate) struct Fixed(pub(crate) Arc<PluginSet>);

impl PluginsNow for Fixed {
    fn current(&self) -> Arc<PluginSet> {
        self.0.clone()
    }
}

/// Runtimes held in memory; `fail` makes every read fail with that text.
#[derive(Default)]
pub(crate) struct Runtimes {
    pub(crate) namespaced: BTreeMap<(String, String), TrainingRuntime>,
    pub(crate) cluster: BTreeMap<String, ClusterTrainingRuntime>,
    pub(crate) fail: Option<String>,
}

impl RuntimeLookup for Runtimes {
    fn training_runtime(&self, ns: &str, name: &str) -> Result<Option<TrainingRuntime>, String> {
        match &self.fail {
            Some(f) => Err(f.clone()),
            None => Ok(self
                .namespaced
                .get(&(ns.to_owned(), name.to_owned()))
                .cloned()),
        }
    }

    fn cluster_training_runtime(
        &self,
        name: &str,
    ) -> Result<Option<ClusterTrainingRuntime>, String> {
        match &self.fail {
            Some(f) => Err(f.clone()),
            None => Ok(self.cluster.get(name).cloned()),
        }
    }
}

/// A torch runtime of `kind` named `name` (namespace `ns` when namespaced).
pub(crate) fn torch_runtime(kind: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch"}]}}}}}]}}}})
}

/// The lookup with a TrainingRuntime `torch` in `ns` and ClusterTrainingRuntimes
/// `torch` and `old-torch` (deprecated).
pub(crate) fn lookup() -> Runtimes {
    let mut r = Runtimes::default();
    r.namespaced.insert(
        ("ns".into(), "torch".into()),
        serde_json::from_value(torch_runtime("TrainingRuntime", "torch", json!({}))).unwrap(),
    );
    r.cluster.insert(
        "torch".into(),
        serde_json::from_value(torch_runtime("ClusterTrainingRuntime", "torch", json!({})))
            .unwrap(),
    );
    r.cluster.insert(
        "old-torch".into(),
        serde_json::from_value(torch_runtime(
            "ClusterTrainingRuntime",
            "old-torch",
            json!({"trainer.kubeflow.org/support": "deprecated"}),
        ))
        .unwrap(),
    );
    r
}

/// A TrainJob in `ns` on the runtime `kind`/`name`, with `trainer`.
pub(crate) fn trainjob(kind: &str, name: &str, trainer: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": name, "kind": kind, "apiGroup": "trainer.kubeflow.org"},
            "trainer": trainer}})
}
