//! Reading YAML manifests and applying arbitrary objects with server-side apply.

use std::path::{Path, PathBuf};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, discovery};
use serde_json::Value;

use crate::Error;

/// All non-empty YAML documents of a file, as JSON values.
pub fn load_yaml_docs(path: &Path) -> Result<Vec<Value>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    parse_yaml_docs(&text).map_err(|m| Error::manifest(path, m))
}

/// All non-empty YAML documents of a string, as JSON values.
pub fn parse_yaml_docs(text: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `*.yaml` / `*.yml` files of a directory, sorted; empty if it does not exist.
pub fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Server-side apply one object (any kind the API server knows; the kind is
/// resolved through discovery) with `force`, as `field_manager`.
pub async fn apply(
    client: &kube::Client,
    obj: &Value,
    field_manager: &str,
) -> Result<DynamicObject, Error> {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(Error::manifest(
            "<object>",
            "apiVersion, kind and metadata.name are required",
        ));
    }
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps): (ApiResource, _) = discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (
        caps.scope,
        obj.pointer("/metadata/namespace").and_then(Value::as_str),
    ) {
        (discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        (discovery::Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &ar),
        (discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    Ok(api
        .patch(
            name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// The shipped install manifests (`manifests/` of the repository).
pub fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// The objects of the kustomization in `dir` as `kubectl kustomize` renders
/// them, for the subset of kustomize it uses: `resources` (files, in order),
/// `namespace` (set on every object but Namespaces) and `labels[].pairs`
/// (added to every object's labels).
pub fn kustomization_objects(dir: &Path) -> Result<Vec<Value>, Error> {
    let path = dir.join("kustomization.yaml");
    let mut docs = load_yaml_docs(&path)?;
    let k = docs
        .pop()
        .ok_or_else(|| Error::manifest(&path, "empty kustomization"))?;
    let namespace = k.get("namespace").and_then(Value::as_str);
    let labels: Vec<(String, Value)> = k
        .get("labels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| l.get("pairs").and_then(Value::as_object))
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let resources = k
        .get("resources")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::manifest(&path, "no resources"))?;
    let mut objects = Vec::new();
    for r in resources {
        let file = r
            .as_str()
            .ok_or_else(|| Error::manifest(&path, "a resource is not a string"))?;
        for mut obj in load_yaml_docs(&dir.join(file))? {
            let is_namespace = obj.get("kind").and_then(Value::as_str) == Some("Namespace");
            let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
                return Err(Error::manifest(
                    dir.join(file),
                    "an object without metadata",
                ));
            };
            if let (Some(ns), false) = (namespace, is_namespace) {
                meta.insert("namespace".into(), Value::String(ns.to_owned()));
            }
            if !labels.is_empty() {
                let l = meta
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(l) = l.as_object_mut() {
                    l.extend(labels.iter().cloned());
                }
            }
            objects.push(obj);
        }
    }
    Ok(objects)
}

/// Install `manifests/public`: the namespace `kubeflow-system`, the
/// ConfigMap `kubeflow-trainer-public` the Kubeflow Python SDK reads when a
/// client is built, and the Role/RoleBinding that let every authenticated
/// user read it. Returns `Kind/name` of each object applied.
pub async fn install_public(
    client: &kube::Client,
    field_manager: &str,
) -> Result<Vec<String>, Error> {
    let mut applied = Vec::new();
    for obj in kustomization_objects(&shipped_dir().join("public"))? {
        let o = apply(client, &obj, field_manager).await?;
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        applied.push(format!("{kind}/{}", o.metadata.name.unwrap_or_default()));
    }
    Ok(applied)
}
