//! The runtime a TrainJob runs with: its snapshot ConfigMap
//! (`<job>-runtime-snapshot`, key `runtime`), or — only when there is no
//! snapshot yet — the live (Cluster)TrainingRuntime, as upstream v2.3 does.
//! Later edits or deletion of the runtime therefore never change a job that
//! has been reconciled once; deleting the snapshot re-creates it from the
//! live runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DynamicObject;
use serde_json::Value;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, DEFAULT_RUNTIME_API_GROUP, DEFAULT_RUNTIME_KIND, GROUP,
    TRAINING_RUNTIME_KIND,
};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

use super::objects::body_text;
use crate::pipeline::run::RuntimeObject;

/// Why the runtime could not be resolved. Messages follow upstream's.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// `runtimeRef` names a kind or group Trainforge does not serve.
    #[error("unsupported runtime: {0}")]
    Unsupported(String),
    /// No snapshot and no live runtime.
    #[error("{0}")]
    NotFound(String),
    /// The snapshot exists but cannot be used.
    #[error("invalid runtime snapshot: {0}")]
    Invalid(String),
    /// The API server could not answer.
    #[error("reading {what}: {source}")]
    Api {
        /// What was read.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

/// The snapshot ConfigMap's name.
pub fn snapshot_name(job: &str) -> String {
    format!("{job}-runtime-snapshot")
}

/// Whether `runtimeRef` is a kind this operator serves; the error is
/// upstream's `TrainingRuntimeNotSupported` message.
pub fn check_supported(job: &TrainJob) -> Result<(), SnapshotError> {
    let r = &job.spec.runtime_ref;
    let kind = r.kind.as_deref().unwrap_or(DEFAULT_RUNTIME_KIND);
    let group = r.api_group.as_deref().unwrap_or(DEFAULT_RUNTIME_API_GROUP);
    if group != GROUP || (kind != TRAINING_RUNTIME_KIND && kind != CLUSTER_TRAINING_RUNTIME_KIND) {
        return Err(SnapshotError::Unsupported(format!("{kind}.{group}")));
    }
    Ok(())
}

/// Parse and check a snapshot ConfigMap against the TrainJob.
pub fn from_snapshot(job: &TrainJob, cm: &ConfigMap) -> Result<RuntimeObject, SnapshotError> {
    check_owner(job, &cm.metadata)?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("runtime"))
        .ok_or_else(no_runtime_key)?;
    let (group, runtime) = parse_runtime(text)?;
    check_ref(job, &group, &runtime)?;
    Ok(runtime)
}

fn no_runtime_key() -> SnapshotError {
    SnapshotError::Invalid("the snapshot configmap has no \"runtime\" key".into())
}

/// A snapshot is used only by the TrainJob that controls it.
fn check_owner(job: &TrainJob, meta: &ObjectMeta) -> Result<(), SnapshotError> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match controller {
        Some(c) if c.uid == uid => Ok(()),
        other => Err(SnapshotError::Invalid(format!(
            "the ConfigMap {}/{} exists and is not this TrainJob's snapshot: it is controlled by {}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            other.map_or_else(
                || "nothing".to_owned(),
                |c| format!("{} {} (uid {})", c.kind, c.name, c.uid)
            )
        ))),
    }
}

/// The API group of a snapshot's runtime and the runtime, from its
/// `runtime` text (YAML).
fn parse_runtime(text: &str) -> Result<(String, RuntimeObject), SnapshotError> {
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| SnapshotError::Invalid(format!("runtime YAML: {e}")))?;
    let field = |p: &str| {
        value
            .get(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (kind, api_version) = (field("kind"), field("apiVersion"));
    let group = api_version.split('/').next().unwrap_or_default().to_owned();
    let bad = |e: serde_json::Error| SnapshotError::Invalid(format!("{kind} in the snapshot: {e}"));
    let runtime = match kind.as_str() {
        TRAINING_RUNTIME_KIND => {
            RuntimeObject::Namespaced(serde_json::from_value(value).map_err(bad)?)
        }
        CLUSTER_TRAINING_RUNTIME_KIND => {
            RuntimeObject::Cluster(serde_json::from_value(value).map_err(bad)?)
        }
        other => return Err(SnapshotError::Invalid(format!("unexpected kind {other:?}"))),
    };
    Ok((group, runtime))
}

/// The snapshot must hold the runtime `runtimeRef` names (kind, group and
/// name).
fn check_ref(job: &TrainJob, group: &str, runtime: &RuntimeObject) -> Result<(), SnapshotError> {
    let (kind, name) = (runtime.kind(), runtime.name());
    let r = &job.spec.runtime_ref;
    if r.kind.as_deref().is_some_and(|k| k != kind)
        || r.api_group.as_deref().is_some_and(|g| g != group)
        || r.name != name
    {
        return Err(SnapshotError::Invalid(format!(
            "the snapshot holds {kind}.{group} {name:?}, but runtimeRef is {}.{} {:?}",
            r.kind.as_deref().unwrap_or(DEFAULT_RUNTIME_KIND),
            r.api_group.as_deref().unwrap_or(DEFAULT_RUNTIME_API_GROUP),
            r.name
        )));
    }
    Ok(())
}

/// How many distinct snapshot texts [`ParsedSnapshots`] keeps.
pub const PARSED_SNAPSHOTS: usize = 256;

/// The largest snapshot text [`ParsedSnapshots`] keeps (a runtime's is a
/// few KiB; a larger one is parsed on every use, as before the memo).
pub const PARSED_SNAPSHOT_BYTES: usize = 64 * 1024;

/// How many bytes of snapshot text [`ParsedSnapshots`] keeps in all.
pub const PARSED_SNAPSHOTS_BUDGET: usize = 4 * 1024 * 1024;

/// Runtimes parsed from snapshot ConfigMaps, by the ConfigMap's body text.
///
/// Rules:
/// - a snapshot is written once and never changes, and the TrainJobs of one
///   runtime version share the same text, so each distinct text is parsed
///   once, not on every reconcile;
/// - the key is the whole body text, compared in full (no hash stands in for
///   it: one tenant's runtime can never be served for another's text);
/// - the owner and `runtimeRef` checks run on every call, against the
///   TrainJob at hand;
/// - only texts that parse are kept, each at most [`PARSED_SNAPSHOT_BYTES`],
///   at most [`PARSED_SNAPSHOTS`] of them and [`PARSED_SNAPSHOTS_BUDGET`]
///   bytes in all (all are dropped when full: the next reconciles parse
///   again). Whoever can write a snapshot ConfigMap can make it large; the
///   memo never keeps more than its budget because of that.
#[derive(Debug, Default)]
pub struct ParsedSnapshots {
    parsed: Mutex<Parsed>,
}

/// The texts kept and their total size.
#[derive(Debug, Default)]
struct Parsed {
    by_text: HashMap<String, (String, Arc<RuntimeObject>)>,
    bytes: usize,
}

impl ParsedSnapshots {
    /// The runtime in the snapshot ConfigMap `cm` (as cached: its body may be
    /// text, see [`body_text`]), checked against `job`.
    pub fn runtime(
        &self,
        job: &TrainJob,
        cm: &DynamicObject,
    ) -> Result<Arc<RuntimeObject>, SnapshotError> {
        check_owner(job, &cm.metadata)?;
        let body = body_text(cm)
            .map_err(|e| SnapshotError::Invalid(format!("the snapshot configmap: {e}")))?;
        let known = self
            .parsed
            .lock()
            .ok()
            .and_then(|p| p.by_text.get(body.as_ref()).cloned());
        let (group, runtime) = match known {
            Some(r) => r,
            None => {
                let data: Value = serde_json::from_str(&body)
                    .map_err(|e| SnapshotError::Invalid(format!("the snapshot configmap: {e}")))?;
                let text = data
                    .pointer("/data/runtime")
                    .and_then(Value::as_str)
                    .ok_or_else(no_runtime_key)?;
                let (group, runtime) = parse_runtime(text)?;
                let parsed = (group, Arc::new(runtime));
                if body.len() <= PARSED_SNAPSHOT_BYTES
                    && let Ok(mut p) = self.parsed.lock()
                {
                    if p.by_text.len() >= PARSED_SNAPSHOTS
                        || p.bytes + body.len() > PARSED_SNAPSHOTS_BUDGET
                    {
                        *p = Parsed::default();
                    }
                    p.bytes += body.len();
                    p.by_text.insert(body.into_owned(), parsed.clone());
                }
                parsed
            }
        };
        check_ref(job, &group, &runtime)?;
        Ok(runtime)
    }

    /// How many texts are kept.
    pub fn len(&self) -> usize {
        self.parsed.lock().map_or(0, |p| p.by_text.len())
    }

    /// How many bytes of text are kept.
    pub fn bytes(&self) -> usize {
        self.parsed.lock().map_or(0, |p| p.bytes)
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The kind and namespace (empty for a ClusterTrainingRuntime) of the
/// runtime a TrainJob references; call [`check_supported`] first.
pub fn runtime_ref(job: &TrainJob) -> (&'static str, &str) {
    if job.spec.runtime_ref.kind.as_deref() == Some(TRAINING_RUNTIME_KIND) {
        (
            TRAINING_RUNTIME_KIND,
            job.metadata.namespace.as_deref().unwrap_or_default(),
        )
    } else {
        (CLUSTER_TRAINING_RUNTIME_KIND, "")
    }
}

/// The runtime as the watch cache holds it (kind from [`runtime_ref`]);
/// managed fields are dropped from what will be snapshotted.
pub fn runtime_from_cache(kind: &str, object: &Value) -> Result<RuntimeObject, SnapshotError> {
    let bad = |e: serde_json::Error| SnapshotError::Invalid(format!("cached {kind}: {e}"));
    let mut object = object.clone();
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    if kind == TRAINING_RUNTIME_KIND {
        Ok(RuntimeObject::Namespaced(
            serde_json::from_value(object).map_err(bad)?,
        ))
    } else {
        Ok(RuntimeObject::Cluster(
            serde_json::from_value(object).map_err(bad)?,
        ))
    }
}

/// The live runtime from the API server (when the watch cache does not
/// have it); managed fields are dropped from what will be snapshotted.
pub async fn live_runtime(
    client: &kube::Client,
    job: &TrainJob,
) -> Result<RuntimeObject, SnapshotError> {
    check_supported(job)?;
    let r = &job.spec.runtime_ref;
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let api_err = |what: String| move |source| SnapshotError::Api { what, source };
    if r.kind.as_deref() == Some(TRAINING_RUNTIME_KIND) {
        let api: Api<TrainingRuntime> = Api::namespaced(client.clone(), ns);
        let mut rt = api
            .get_opt(&r.name)
            .await
            .map_err(api_err(format!("TrainingRuntime {ns}/{}", r.name)))?
            .ok_or_else(|| {
                SnapshotError::NotFound(format!(
                    "TrainingRuntime specified in TrainJob is not found: {ns}/{}",
                    r.name
                ))
            })?;
        rt.metadata.managed_fields = None;
        Ok(RuntimeObject::Namespaced(rt))
    } else {
        let api: Api<ClusterTrainingRuntime> = Api::all(client.clone());
        let mut rt = api
            .get_opt(&r.name)
            .await
            .map_err(api_err(format!("ClusterTrainingRuntime {}", r.name)))?
            .ok_or_else(|| {
                SnapshotError::NotFound(format!(
                    "not found ClusterTrainingRuntime specified in TrainJob: {}",
                    r.name
                ))
            })?;
        rt.metadata.managed_fields = None;
        Ok(RuntimeObject::Cluster(rt))
    }
}

/// Read the snapshot straight from the API server (used when the watch
/// cache does not have a snapshot this process applied, so a cache that is
/// behind never re-snapshots a changed runtime).
pub async fn get_snapshot(
    client: &kube::Client,
    job: &TrainJob,
) -> Result<Option<ConfigMap>, SnapshotError> {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = snapshot_name(job.metadata.name.as_deref().unwrap_or_default());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    api.get_opt(&name)
        .await
        .map_err(|source| SnapshotError::Api {
            what: format!("ConfigMap {ns}/{name}"),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use serde_json::json;

    fn job(kind: Option<&str>) -> TrainJob {
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "a", "namespace": "n", "uid": "u1"},
            "spec": {"runtimeRef": {"name": "rt", "kind": kind, "apiGroup": "trainer.kubeflow.org"}}
        }))
        .unwrap()
    }

    fn cm(owner: &str, runtime: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("a-runtime-snapshot".into()),
                namespace: Some("n".into()),
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    kind: "TrainJob".into(),
                    name: if owner == "u1" { "a" } else { "attacker" }.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            data: Some([("runtime".to_string(), runtime.to_string())].into()),
            ..Default::default()
        }
    }

    const RT: &str = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata:\n  name: rt\n  namespace: team\nspec:\n  template:\n    spec:\n      replicatedJobs: []\n";

    #[test]
    fn snapshot_is_used_and_checked() {
        let rt = from_snapshot(&job(Some("TrainingRuntime")), &cm("u1", RT)).unwrap();
        assert_eq!(rt.kind(), "TrainingRuntime");
        assert_eq!(rt.name(), "rt");
        let e = from_snapshot(&job(Some("TrainingRuntime")), &cm("other", RT)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid runtime snapshot: the ConfigMap n/a-runtime-snapshot exists and is not this TrainJob's snapshot: it is controlled by TrainJob attacker (uid other)"
        );
        let mut orphan = cm("u1", RT);
        orphan.metadata.owner_references = None;
        let e = from_snapshot(&job(Some("TrainingRuntime")), &orphan).unwrap_err();
        assert!(e.to_string().ends_with("controlled by nothing"), "{e}");
        let e = from_snapshot(&job(Some("ClusterTrainingRuntime")), &cm("u1", RT)).unwrap_err();
        assert!(
            e.to_string()
                .contains("runtimeRef is ClusterTrainingRuntime"),
            "{e}"
        );
        let e = from_snapshot(&job(Some("TrainingRuntime")), &cm("u1", "{not yaml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid runtime snapshot: runtime YAML"),
            "{e}"
        );
    }

    /// `cm` as the watch cache holds it: metadata parsed, body as text.
    fn cached(cm: &ConfigMap) -> DynamicObject {
        let mut o: DynamicObject =
            serde_json::from_value(serde_json::to_value(cm).unwrap()).unwrap();
        o.data = Value::String(serde_json::to_string(&o.data).unwrap());
        o
    }

    fn job_with(uid: &str, runtime: &str) -> TrainJob {
        let mut j = job(Some("TrainingRuntime"));
        j.metadata.uid = Some(uid.into());
        j.spec.runtime_ref.name = runtime.into();
        j
    }

    #[test]
    fn a_snapshot_text_is_parsed_once_and_checked_on_every_use() {
        let parsed = ParsedSnapshots::default();
        let (a, b) = (job_with("u1", "rt"), job_with("u2", "rt"));
        let first = parsed.runtime(&a, &cached(&cm("u1", RT))).unwrap();
        let second = parsed.runtime(&b, &cached(&cm("u2", RT))).unwrap();
        assert!(Arc::ptr_eq(&first, &second), "the same text: parsed once");
        assert_eq!(parsed.len(), 1);
        assert_eq!(first.name(), "rt");
        // An expanded body (the operator's own write) is the same text.
        let mut written: DynamicObject =
            serde_json::from_value(serde_json::to_value(cm("u1", RT)).unwrap()).unwrap();
        written.data = serde_json::from_str(&body_text(&cached(&cm("u1", RT))).unwrap()).unwrap();
        assert!(Arc::ptr_eq(&parsed.runtime(&a, &written).unwrap(), &first));

        // A known text is still checked against the TrainJob at hand.
        let e = parsed.runtime(&b, &cached(&cm("u1", RT))).unwrap_err();
        assert!(
            e.to_string().contains("is not this TrainJob's snapshot"),
            "{e}"
        );
        let e = parsed
            .runtime(&job_with("u3", "other"), &cached(&cm("u3", RT)))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("holds TrainingRuntime.trainer.kubeflow.org \"rt\""),
            "{e}"
        );
        let mut cluster = job_with("u4", "rt");
        cluster.spec.runtime_ref.kind = Some("ClusterTrainingRuntime".into());
        let e = parsed
            .runtime(&cluster, &cached(&cm("u4", RT)))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("runtimeRef is ClusterTrainingRuntime"),
            "{e}"
        );
        let foreign_group = RT.replace("trainer.kubeflow.org/v1alpha1", "evil.example/v1");
        let e = parsed
            .runtime(&a, &cached(&cm("u1", &foreign_group)))
            .unwrap_err();
        assert!(
            e.to_string().contains("TrainingRuntime.evil.example"),
            "{e}"
        );

        // What does not parse is refused and not kept.
        let before = parsed.len();
        for bad in ["{not yaml", "kind: Pod\n"] {
            let e = parsed.runtime(&a, &cached(&cm("u1", bad))).unwrap_err();
            assert!(e.to_string().starts_with("invalid runtime snapshot"), "{e}");
        }
        let mut no_key = cached(&cm("u1", RT));
        no_key.data = Value::String("{\"data\":{}}".into());
        let e = parsed.runtime(&a, &no_key).unwrap_err();
        assert!(e.to_string().contains("no \"runtime\" key"), "{e}");
        assert_eq!(parsed.len(), before);
    }

    #[test]
    fn parsed_snapshots_stay_bounded() {
        let parsed = ParsedSnapshots::default();
        let a = job_with("u1", "rt");
        for i in 0..=PARSED_SNAPSHOTS + 3 {
            let text = format!("{RT}  # version {i}\n");
            parsed.runtime(&a, &cached(&cm("u1", &text))).unwrap();
            assert!(parsed.len() <= PARSED_SNAPSHOTS, "{} kept", parsed.len());
        }
        assert!(!parsed.is_empty());

        // Large texts: one above the per-text limit is used but not kept;
        // the total stays within the budget.
        let parsed = ParsedSnapshots::default();
        let padded = |i: usize, size: usize| format!("{RT}  # {i} {}\n", "x".repeat(size));
        parsed
            .runtime(&a, &cached(&cm("u1", &padded(0, PARSED_SNAPSHOT_BYTES))))
            .unwrap();
        assert!(parsed.is_empty(), "a text over the limit is not kept");
        for i in 0..2 * PARSED_SNAPSHOTS_BUDGET / PARSED_SNAPSHOT_BYTES {
            let rt = parsed
                .runtime(
                    &a,
                    &cached(&cm("u1", &padded(i, PARSED_SNAPSHOT_BYTES / 2))),
                )
                .unwrap();
            assert_eq!(rt.name(), "rt");
            assert!(
                parsed.bytes() <= PARSED_SNAPSHOTS_BUDGET,
                "{} bytes kept",
                parsed.bytes()
            );
        }
        assert!(!parsed.is_empty());
    }

    #[test]
    fn unsupported_kinds_are_named() {
        let e = check_supported(&job(Some("Pod"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported runtime: Pod.trainer.kubeflow.org"
        );
        assert!(
            check_supported(&job(None)).is_ok(),
            "defaults to ClusterTrainingRuntime"
        );
    }
}
