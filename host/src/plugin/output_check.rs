//! Checks on every object a plugin's `build` returns, before anything is
//! applied: allow-listed kind, the TrainJob's namespace, no foreign owner,
//! never a forbidden or cluster-scoped kind.

use super::Error;
use serde_json::Value;
use std::collections::BTreeSet;
use trainforge_api::plugin::KindRef;

/// API groups no plugin may ever emit anything from.
const FORBIDDEN_GROUPS: &[&str] = &[
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "certificates.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
];

/// Cluster-scoped kinds (core and common groups). Objects of these kinds are
/// refused even if a plugin lists them in `emits`.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "APIService",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "ComponentStatus",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ClusterTrainingRuntime",
    "ClusterQueue",
    "ResourceFlavor",
    "Queue",
];

/// The TrainJob objects are built for.
#[derive(Debug, Clone)]
pub struct Owner {
    /// TrainJob namespace.
    pub namespace: String,
    /// TrainJob name.
    pub name: String,
    /// TrainJob UID, if known (checked against owner references when set).
    pub uid: Option<String>,
}

impl Owner {
    /// Read namespace/name/uid from a TrainJob JSON.
    pub fn from_trainjob(trainjob: &Value) -> Owner {
        let s = |p: &str| {
            trainjob
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Owner {
            namespace: s("/metadata/namespace").unwrap_or_default(),
            name: s("/metadata/name").unwrap_or_default(),
            uid: s("/metadata/uid"),
        }
    }
}

fn describe(o: &Value) -> String {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("?");
    format!(
        "{}/{} {}/{}",
        s("/apiVersion"),
        s("/kind"),
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("-"),
        s("/metadata/name")
    )
}

/// Parse and check `build` output. A missing `metadata.namespace` is set to
/// the TrainJob's namespace; everything else must already be right.
pub fn check_objects(
    plugin: &str,
    emits: &BTreeSet<KindRef>,
    owner: &Owner,
    raw: Vec<String>,
) -> Result<Vec<Value>, Error> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let mut o: Value = serde_json::from_str(&s).map_err(|e| Error::InvalidOutput {
            plugin: plugin.to_owned(),
            phase: "build".into(),
            message: format!("object {i} is not valid JSON: {e}"),
        })?;
        check_object(plugin, emits, owner, &mut o, i)?;
        out.push(o);
    }
    Ok(out)
}

fn check_object(
    plugin: &str,
    emits: &BTreeSet<KindRef>,
    owner: &Owner,
    o: &mut Value,
    index: usize,
) -> Result<(), Error> {
    let invalid = |m: String| Error::InvalidOutput {
        plugin: plugin.to_owned(),
        phase: "build".into(),
        message: format!("object {index}: {m}"),
    };
    let forbidden = |o: &Value, m: String| Error::ForbiddenObject {
        plugin: plugin.to_owned(),
        object: describe(o),
        message: m,
    };
    if !o.is_object() {
        return Err(invalid("not a JSON object".into()));
    }
    let str_at = |p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let api_version = str_at("/apiVersion").ok_or_else(|| invalid("missing apiVersion".into()))?;
    let kind = str_at("/kind").ok_or_else(|| invalid("missing kind".into()))?;
    match str_at("/metadata/name") {
        Some(n) if !n.is_empty() => {}
        _ => return Err(invalid("missing metadata.name".into())),
    }
    let kref = KindRef::new(api_version, kind);
    if FORBIDDEN_GROUPS.contains(&kref.group()) {
        return Err(forbidden(
            o,
            format!(
                "API group {:?} may never be emitted by a plugin",
                kref.group()
            ),
        ));
    }
    if CLUSTER_SCOPED_KINDS.contains(&kref.kind.as_str()) {
        return Err(forbidden(
            o,
            format!(
                "{} is cluster-scoped; plugins may only emit namespaced objects",
                kref.kind
            ),
        ));
    }
    if !emits.contains(&kref) {
        return Err(forbidden(
            o,
            format!("{kref} is not in the plugin's emits allow-list"),
        ));
    }
    match o.pointer("/metadata/namespace") {
        None | Some(Value::Null) => {
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".into(), Value::String(owner.namespace.clone()));
            }
        }
        Some(Value::String(ns)) if *ns == owner.namespace => {}
        Some(other) => {
            return Err(forbidden(
                o,
                format!(
                    "namespace {other} is not the TrainJob's namespace {:?}",
                    owner.namespace
                ),
            ));
        }
    }
    if let Some(refs) = o.pointer("/metadata/ownerReferences") {
        let refs = refs
            .as_array()
            .ok_or_else(|| invalid("ownerReferences is not a list".into()))?;
        for r in refs {
            let s = |k: &str| r.get(k).and_then(Value::as_str);
            let is_trainjob = s("kind") == Some("TrainJob")
                && s("apiVersion").is_some_and(|v| v.starts_with("trainer.kubeflow.org/"))
                && s("name") == Some(owner.name.as_str())
                && match (&owner.uid, s("uid")) {
                    (Some(want), Some(got)) => want == got,
                    (Some(_), None) => true,
                    (None, _) => true,
                };
            if !is_trainjob {
                return Err(forbidden(
                    o,
                    format!(
                        "owner {}/{} {:?} is not the TrainJob {:?}",
                        s("apiVersion").unwrap_or("?"),
                        s("kind").unwrap_or("?"),
                        s("name").unwrap_or("?"),
                        owner.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner() -> Owner {
        Owner {
            namespace: "team-a".into(),
            name: "job".into(),
            uid: Some("u1".into()),
        }
    }

    fn emits() -> BTreeSet<KindRef> {
        [
            KindRef::new("v1", "ConfigMap"),
            KindRef::new("rbac.authorization.k8s.io/v1", "Role"),
        ]
        .into_iter()
        .collect()
    }

    fn check(o: Value) -> Result<Vec<Value>, Error> {
        check_objects("p", &emits(), &owner(), vec![o.to_string()])
    }

    #[test]
    fn accepts_and_defaults_namespace() {
        let out = check(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "u1"}]}}))
        .unwrap();
        assert_eq!(out[0]["metadata"]["namespace"], "team-a");
    }

    #[test]
    fn refuses_rbac_even_if_declared() {
        let e = check(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "x"}})).unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject");
    }

    #[test]
    fn refuses_undeclared_other_namespace_and_foreign_owner() {
        let e = check(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}))
            .unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject");
        let e = check(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}})).unwrap_err();
        assert!(e.to_string().contains("kube-system"), "{e}");
        let e = check(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "other"}]}}))
        .unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject");
    }

    #[test]
    fn invalid_shapes() {
        let e = check_objects("p", &emits(), &owner(), vec!["{".into()]).unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput");
        let e = check(json!({"kind": "ConfigMap", "metadata": {"name": "x"}})).unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput");
        let e = check(json!([1])).unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput");
    }
}
