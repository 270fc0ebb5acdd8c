//! The runtime a TrainJob runs with: its snapshot ConfigMap
//! (`<job>-runtime-snapshot`, key `runtime`), or — only when there is no
//! snapshot yet — the live (Cluster)TrainingRuntime, as upstream v2.3 does.
//! Later edits or deletion of the runtime therefore never change a job that
//! has been reconciled once; deleting the snapshot re-creates it from the
//! live runtime.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::Value;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, DEFAULT_RUNTIME_API_GROUP, DEFAULT_RUNTIME_KIND, GROUP,
    TRAINING_RUNTIME_KIND,
};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

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
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let owned = cm
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|o| o.controller == Some(true) && o.uid == uid));
    if !owned {
        return Err(SnapshotError::Invalid(
            "a snapshot configmap exists but is owned by another object".into(),
        ));
    }
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("runtime"))
        .ok_or_else(|| {
            SnapshotError::Invalid("the snapshot configmap has no \"runtime\" key".into())
        })?;
    let value: Value = serde_saphyr::from_str(text)
        .map_err(|e| SnapshotError::Invalid(format!("runtime YAML: {e}")))?;
    let field = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (kind, name) = (field("/kind"), field("/metadata/name"));
    let api_version = field("/apiVersion");
    let group = api_version.split('/').next().unwrap_or_default();
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
    let bad = |e: serde_json::Error| SnapshotError::Invalid(format!("{kind} in the snapshot: {e}"));
    match kind.as_str() {
        TRAINING_RUNTIME_KIND => Ok(RuntimeObject::Namespaced(
            serde_json::from_value(value).map_err(bad)?,
        )),
        CLUSTER_TRAINING_RUNTIME_KIND => Ok(RuntimeObject::Cluster(
            serde_json::from_value(value).map_err(bad)?,
        )),
        other => Err(SnapshotError::Invalid(format!("unexpected kind {other:?}"))),
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
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
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
            "invalid runtime snapshot: a snapshot configmap exists but is owned by another object"
        );
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
