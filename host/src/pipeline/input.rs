//! TrainJobs and runtimes read from YAML or JSON documents, as the API server
//! would store them (CRD defaults, a namespace, a placeholder uid), and the
//! runtime info the operator builds for each: the input of `trainforge
//! render`, `trainforge plugin run|bench` and admission's plugin try-outs.
//! Pure: the caller reads the files.

use serde_json::Value;
use trainforge_api::blueprint::{BlueprintError, runtime_info_for};
use trainforge_api::plugin::Info;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, DEFAULT_RUNTIME_KIND, TRAINING_RUNTIME_KIND, TRAINJOB_KIND,
};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

use super::defaults::{Defaulter, DefaultsError};
use super::run::RuntimeObject;

/// Why documents could not be read as TrainJobs and runtimes.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A document is not valid YAML or not a valid object of its kind.
    #[error("{origin}: {reason}")]
    Parse {
        /// File and document index.
        origin: String,
        /// Why.
        reason: String,
    },
    /// No TrainJob in the input.
    #[error("no TrainJob in the given files")]
    NoTrainJob,
    /// A TrainJob's runtime is not in the input.
    #[error("TrainJob {trainjob:?}: spec.runtimeRef: {kind} {name:?} is not in the given files")]
    RuntimeNotFound {
        /// TrainJob name.
        trainjob: String,
        /// Runtime kind.
        kind: String,
        /// Runtime name.
        name: String,
    },
    /// The runtime info of a TrainJob could not be built.
    #[error("TrainJob {trainjob:?}: building the runtime info: {source}")]
    Info {
        /// TrainJob name.
        trainjob: String,
        /// Which step failed; boxed, it is large.
        source: Box<BlueprintError>,
    },
    /// CRD defaults could not be prepared.
    #[error(transparent)]
    Defaults(#[from] DefaultsError),
    /// A TrainJob could not be serialised as JSON.
    #[error("serialising TrainJob {trainjob:?}: {reason}")]
    Serialize {
        /// TrainJob name.
        trainjob: String,
        /// Why.
        reason: String,
    },
}

/// The parsed input: TrainJobs and runtimes, in file order, with CRD
/// defaults applied as the API server would.
#[derive(Debug)]
pub struct Input {
    /// TrainJobs.
    pub trainjobs: Vec<TrainJob>,
    /// Runtimes of either kind.
    pub runtimes: Vec<RuntimeObject>,
    /// The feature gates to render with (all off unless set).
    pub features: super::features::Features,
    defaulter: Defaulter,
}

impl Input {
    /// An empty input.
    pub fn new() -> Result<Self, InputError> {
        Ok(Input {
            trainjobs: Vec::new(),
            runtimes: Vec::new(),
            features: super::features::Features::default(),
            defaulter: Defaulter::new()?,
        })
    }

    /// Add every document of a multi-document YAML text. Documents of other
    /// kinds are ignored.
    pub fn add_yaml(
        &mut self,
        origin: &str,
        text: &str,
        namespace: &str,
    ) -> Result<(), InputError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).map_err(|e| InputError::Parse {
                origin: origin.to_string(),
                reason: e.to_string(),
            })?;
        for (i, doc) in docs.into_iter().enumerate() {
            self.add_document(&format!("{origin} (document {})", i + 1), doc, namespace)?;
        }
        Ok(())
    }

    /// Add one document (a TrainJob or a runtime; other kinds are ignored)
    /// as the API server would store it: CRD defaults applied, `namespace`
    /// when it has none (runtimes of the cluster-scoped kind excepted) and,
    /// for a TrainJob, [`PLACEHOLDER_UID`] when it has no uid.
    pub fn add_document(
        &mut self,
        origin: &str,
        mut doc: Value,
        namespace: &str,
    ) -> Result<(), InputError> {
        self.defaulter.apply(&mut doc);
        let parse_err = |e: serde_json::Error| InputError::Parse {
            origin: origin.to_string(),
            reason: e.to_string(),
        };
        match doc.get("kind").and_then(Value::as_str) {
            Some(TRAINJOB_KIND) => {
                set_namespace(&mut doc, namespace);
                set_placeholder_uid(&mut doc);
                self.trainjobs
                    .push(serde_json::from_value(doc).map_err(parse_err)?);
            }
            Some(TRAINING_RUNTIME_KIND) => {
                set_namespace(&mut doc, namespace);
                let rt: TrainingRuntime = serde_json::from_value(doc).map_err(parse_err)?;
                self.runtimes.push(RuntimeObject::Namespaced(rt));
            }
            Some(CLUSTER_TRAINING_RUNTIME_KIND) => {
                let rt: ClusterTrainingRuntime = serde_json::from_value(doc).map_err(parse_err)?;
                self.runtimes.push(RuntimeObject::Cluster(rt));
            }
            _ => {}
        }
        Ok(())
    }

    /// The runtime info the operator hands to the first plugin phase for
    /// `job` (its runtime must be in the input): the operator's own builder,
    /// [`runtime_info_for`], on the TrainJob and runtime as the plugins see
    /// them under [`Input::features`].
    pub fn info_for(&self, job: &TrainJob) -> Result<Info, InputError> {
        let runtime = self.runtime_for(job)?.visible(self.features);
        runtime_info_for(&self.features.visible_job(job), runtime.spec()).map_err(|source| {
            InputError::Info {
                trainjob: job.metadata.name.clone().unwrap_or_default(),
                source: Box::new(source),
            }
        })
    }

    /// The runtime a TrainJob references (a TrainingRuntime must be in the
    /// TrainJob's namespace).
    pub fn runtime_for(&self, job: &TrainJob) -> Result<&RuntimeObject, InputError> {
        let r = &job.spec.runtime_ref;
        let kind = r.kind.as_deref().unwrap_or(DEFAULT_RUNTIME_KIND);
        self.runtimes
            .iter()
            .find(|rt| {
                rt.kind() == kind
                    && rt.name() == r.name
                    && (kind != TRAINING_RUNTIME_KIND
                        || rt.metadata().namespace == job.metadata.namespace)
            })
            .ok_or_else(|| InputError::RuntimeNotFound {
                trainjob: job.metadata.name.clone().unwrap_or_default(),
                kind: kind.to_string(),
                name: r.name.clone(),
            })
    }
}

fn set_namespace(doc: &mut Value, namespace: &str) {
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut)
        && !meta.contains_key("namespace")
    {
        meta.insert("namespace".into(), Value::String(namespace.to_string()));
    }
}

/// The uid the API server would assign, for TrainJobs read from files
/// without one, so owner references are well-formed in the output.
pub const PLACEHOLDER_UID: &str = "00000000-0000-0000-0000-000000000000";

fn set_placeholder_uid(doc: &mut Value) {
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut)
        && !meta.contains_key("uid")
    {
        meta.insert("uid".into(), Value::String(PLACEHOLDER_UID.to_string()));
    }
}

/// What the operator hands to the first plugin phase for a TrainJob and its
/// runtime, both given as objects as written (YAML or JSON, `origin` naming
/// where each comes from): the TrainJob as the API server stores it (CRD
/// defaults, `namespace` when it has none, a placeholder uid) as JSON, and
/// the runtime info the operator builds for it ([`Input::info_for`]).
/// `trainforge plugin run` and `bench` use it, so a plugin author's dry run
/// sees what the operator's plugins see under the same `features`.
pub fn plugin_inputs(
    trainjob: (&str, Value),
    runtime: (&str, Value),
    namespace: &str,
    features: super::features::Features,
) -> Result<(Value, Info), InputError> {
    let mut input = Input::new()?;
    input.features = features;
    input.add_document(trainjob.0, trainjob.1, namespace)?;
    input.add_document(runtime.0, runtime.1, namespace)?;
    let job = input.trainjobs.first().ok_or(InputError::NoTrainJob)?;
    let info = input.info_for(job)?;
    let json =
        serde_json::to_value(&*features.visible_job(job)).map_err(|e| InputError::Serialize {
            trainjob: job.metadata.name.clone().unwrap_or_default(),
            reason: e.to_string(),
        })?;
    Ok((json, info))
}
