//! The info a plugin's phases start from in tests, built by the operator's
//! own builder ([`trainforge_api::blueprint`]): CRD defaults applied to the
//! runtime and the TrainJob as the API server would, the TrainJob's
//! overrides (`runtimePatches`, `podTemplateOverrides`, `resourcesPerNode`,
//! `labels`/`annotations`) merged into the runtime's blueprint, then one pod
//! set per replicated job (counts, containers, volumes, per-pod requests).
//!
//! ```
//! use trainforge_sdk::prelude::*;
//! use trainforge_sdk::testing::RuntimeFixture;
//!
//! let runtime = RuntimeFixture::new(json!({"spec": {
//!     "mlPolicy": {"numNodes": 2, "torch": {}},
//!     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
//!         "metadata": {"labels": {trainforge_sdk::ANCESTOR_LABEL: "trainer"}},
//!         "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch",
//!             "resources": {"requests": {"cpu": "4"}}}]}}}}}]}}}}));
//! let info = runtime.info().unwrap();
//! let node = info.pod_set("node").unwrap();
//! assert_eq!(node.count, Some(2), "the trainer count is mlPolicy.numNodes");
//! assert_eq!(node.single_pod_requests["cpu"].0, "4");
//! // CRD defaults, as on a cluster.
//! assert_eq!(info.template_spec.obj["replicatedJobs"][0]["replicas"], 1);
//!
//! // With a TrainJob, its overrides are merged as the operator merges them.
//! let job = json!({"spec": {"trainer": {"resourcesPerNode": {"requests": {"cpu": "8"}}}}});
//! let info = runtime.info_for(&job).unwrap();
//! assert_eq!(info.pod_set("node").unwrap().single_pod_requests["cpu"].0, "8");
//! ```

use std::sync::OnceLock;

use serde_json::{Map, Value, json};
use trainforge_api::blueprint::defaults::Defaulter;
use trainforge_api::blueprint::{BlueprintError, admission_info_for, runtime_info_for};
use trainforge_api::plugin::Info;
use trainforge_api::trainer::v1alpha1::constants::{
    API_VERSION, CLUSTER_TRAINING_RUNTIME_KIND, TRAINJOB_KIND,
};
use trainforge_api::trainer::v1alpha1::{TrainJob, TrainingRuntimeSpec};

/// Name given to a fixture runtime that has none.
pub const RUNTIME_NAME: &str = "rt";

/// Name given to a fixture TrainJob that has none.
pub const TRAINJOB_NAME: &str = "job";

/// Why a fixture's info could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// The CRD schemas (for defaults) could not be generated.
    #[error("preparing CRD defaults: {0}")]
    Defaults(String),
    /// The runtime is not a valid (Cluster)TrainingRuntime.
    #[error("the runtime is not a valid TrainingRuntime: {0}")]
    Runtime(serde_json::Error),
    /// The TrainJob is not a valid TrainJob.
    #[error("the TrainJob is not a valid TrainJob: {0}")]
    TrainJob(serde_json::Error),
    /// The operator's builder refused the pair.
    #[error(transparent)]
    Build(#[from] BlueprintError),
}

/// A (Cluster)TrainingRuntime for plugin tests and the info the operator
/// builds from it (like upstream's testing wrappers, but the info is the
/// operator's, not written by hand).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeFixture {
    object: Value,
}

impl RuntimeFixture {
    /// A runtime as written in a test: a whole `ClusterTrainingRuntime` or
    /// `TrainingRuntime` object, or only what matters (e.g. `{"spec": ...}`),
    /// completed as a `ClusterTrainingRuntime` named [`RUNTIME_NAME`].
    pub fn new(runtime: Value) -> Self {
        let mut object = match runtime {
            Value::Object(m) => m,
            other => Map::from_iter([("spec".to_owned(), other)]),
        };
        object
            .entry("apiVersion")
            .or_insert_with(|| json!(API_VERSION));
        object
            .entry("kind")
            .or_insert_with(|| json!(CLUSTER_TRAINING_RUNTIME_KIND));
        let meta = object.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.entry("name").or_insert_with(|| json!(RUNTIME_NAME));
        }
        RuntimeFixture {
            object: Value::Object(object),
        }
    }

    /// The runtime object, completed (without CRD defaults: as a user would
    /// apply it).
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// The info the operator builds for a TrainJob that overrides nothing in
    /// this runtime.
    pub fn info(&self) -> Result<Info, FixtureError> {
        self.info_for(&json!({}))
    }

    /// The info the operator builds for `trainjob` on this runtime. The
    /// TrainJob may be partial (e.g. `{"spec": {"trainer": ...}}`): it is
    /// completed with a name and a `runtimeRef` to this runtime.
    pub fn info_for(&self, trainjob: &Value) -> Result<Info, FixtureError> {
        let spec = self.spec()?;
        let job = trainjob_object(trainjob, self.name())?;
        Ok(runtime_info_for(&job, &spec)?)
    }

    /// The info admission (`validate`) sees for `trainjob` on this runtime:
    /// like [`RuntimeFixture::info_for`], but overrides naming a job or
    /// container the runtime does not have are skipped (the operator reports
    /// them beside the plugins' findings).
    pub fn admission_info_for(&self, trainjob: &Value) -> Result<Info, FixtureError> {
        let spec = self.spec()?;
        let job = trainjob_object(trainjob, self.name())?;
        Ok(admission_info_for(&job, &spec)?.0)
    }

    fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or(RUNTIME_NAME)
    }

    /// The runtime's spec with its CRD defaults.
    fn spec(&self) -> Result<TrainingRuntimeSpec, FixtureError> {
        let mut object = self.object.clone();
        defaulter()?.apply(&mut object);
        let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
        serde_json::from_value(spec).map_err(FixtureError::Runtime)
    }
}

/// `trainjob` completed (apiVersion, kind, name, `spec.runtimeRef` naming
/// `runtime`), with its CRD defaults, typed.
fn trainjob_object(trainjob: &Value, runtime: &str) -> Result<TrainJob, FixtureError> {
    let mut object = trainjob.as_object().cloned().unwrap_or_default();
    object
        .entry("apiVersion")
        .or_insert_with(|| json!(API_VERSION));
    object.entry("kind").or_insert_with(|| json!(TRAINJOB_KIND));
    if let Some(m) = object
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        m.entry("name").or_insert_with(|| json!(TRAINJOB_NAME));
    }
    if let Some(spec) = object
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        spec.entry("runtimeRef")
            .or_insert_with(|| json!({"name": runtime}));
    }
    let mut object = Value::Object(object);
    defaulter()?.apply(&mut object);
    serde_json::from_value(object).map_err(FixtureError::TrainJob)
}

/// The CRD defaulter, built once per process (generating the schemas is the
/// slow part).
fn defaulter() -> Result<&'static Defaulter, FixtureError> {
    static DEFAULTER: OnceLock<Result<Defaulter, String>> = OnceLock::new();
    DEFAULTER
        .get_or_init(|| Defaulter::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| FixtureError::Defaults(e.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> RuntimeFixture {
        RuntimeFixture::new(json!({"spec": {
        "mlPolicy": {"numNodes": 3, "mpi": {}},
        "template": {"metadata": {"labels": {"team": "a"}}, "spec": {"replicatedJobs": [
            {"name": "launcher", "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpi"}]}}}}},
            {"name": "node", "template": {"spec": {"parallelism": 2, "template": {"spec": {
                "containers": [{"name": "node", "image": "mpi",
                    "resources": {"requests": {"cpu": "1"}}}]}}}}}
        ]}}}}))
    }

    #[test]
    fn completes_the_runtime_as_a_cluster_training_runtime() {
        let r = runtime();
        assert_eq!(r.object()["kind"], CLUSTER_TRAINING_RUNTIME_KIND);
        assert_eq!(r.object()["apiVersion"], API_VERSION);
        assert_eq!(r.object()["metadata"]["name"], RUNTIME_NAME);
        assert!(
            r.object()["spec"]["template"]["spec"]["replicatedJobs"][0]
                .get("replicas")
                .is_none(),
            "the object is as written"
        );
    }

    #[test]
    fn info_has_defaults_counts_and_requests() {
        let info = runtime().info().unwrap();
        assert_eq!(info.labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            info.policy("mlPolicy.mpi.mpiImplementation"),
            Some(&json!("OpenMPI")),
            "CRD defaults"
        );
        let launcher = info.pod_set("launcher").unwrap();
        assert_eq!(launcher.count, Some(3), "trainer: mlPolicy.numNodes");
        let node = info.pod_set("node").unwrap();
        assert_eq!(node.count, Some(2), "others: parallelism");
        assert_eq!(node.single_pod_requests["cpu"].0, "1");
    }

    #[test]
    fn trainjob_overrides_are_merged() {
        let job = json!({"spec": {
            "labels": {"from": "job"},
            "trainer": {"resourcesPerNode": {"requests": {"cpu": "4"}}}}});
        let info = runtime().info_for(&job).unwrap();
        assert_eq!(info.labels.get("from").map(String::as_str), Some("job"));
        // resourcesPerNode goes to the trainer job's `node` container.
        let launcher = info.pod_set("launcher").unwrap();
        assert_eq!(launcher.single_pod_requests["cpu"].0, "4");
        assert_eq!(
            info.pod_set("node").unwrap().single_pod_requests["cpu"].0,
            "1"
        );
    }

    #[test]
    fn invalid_inputs_say_which() {
        let bad =
            RuntimeFixture::new(json!({"spec": {"template": {"spec": {"replicatedJobs": 3}}}}));
        assert!(matches!(bad.info(), Err(FixtureError::Runtime(_))));
        assert!(matches!(
            runtime().info_for(&json!({"spec": {"trainer": {"numNodes": "many"}}})),
            Err(FixtureError::TrainJob(_))
        ));
        let unknown = json!({"spec": {"runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": "missing"}]}}}}]}});
        assert!(matches!(
            runtime().info_for(&unknown),
            Err(FixtureError::Build(BlueprintError::Merge(_)))
        ));
        // Admission skips the unknown job and sees the runtime's info.
        assert_eq!(
            runtime().admission_info_for(&unknown).unwrap(),
            runtime().info().unwrap()
        );
    }
}
