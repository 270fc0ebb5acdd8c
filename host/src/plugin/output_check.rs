//! Checks on every object a plugin's `build` returns, before anything can be
//! applied. The rules, whatever the plugin returned:
//!
//! - at most [`MAX_OBJECTS_PER_CALL`] objects of at most
//!   [`MAX_OBJECT_BYTES`] each, each a JSON object with `apiVersion`, `kind`
//!   and a valid `metadata.name` (no `generateName`: objects are named, so a
//!   resync finds them again instead of piling up new ones);
//! - the kind is one the plugin may emit (declared, allowed by the
//!   administrator, not on the host-wide deny set: see [`super::kinds`]) and
//!   namespaced;
//! - the object lives in the namespace of the TrainJob the call is for
//!   ([`Owner`], taken from the stored TrainJob, never from plugin output);
//!   a missing namespace is set to it;
//! - the only owner is that TrainJob: any owner reference the plugin wrote
//!   must point at it, and the host writes the one controller reference
//!   every object carries itself (so every object is garbage-collected with
//!   its TrainJob);
//! - the name is derived from the TrainJob's, so that no TrainJob's plugins
//!   can take a name the host or another TrainJob will need
//!   ([`name_refusal`]): a JobSet is named exactly as its TrainJob (the
//!   JobSet of TrainJob `b` can only come from `b`), every other object is
//!   named as the TrainJob or `<trainjob>-…`, and no object's name ends in
//!   [`SNAPSHOT_SUFFIX`] (the host's runtime snapshots, of this TrainJob or
//!   another);
//! - no finalizers, no service-account token Secrets; server-managed
//!   metadata (uid, resourceVersion, ...) is dropped.
//!
//! What naming cannot rule out (TrainJob `a` emitting `a-b-hostfile`
//! before TrainJob `a-b` does) the operator stops when applying: it never
//! takes over an object another TrainJob controls, and never reads one as
//! this TrainJob's (see [`Owner::foreign_controller`]).

use super::Error;
use super::bounded::{self, MAX_OBJECT_BYTES, MAX_OBJECTS_PER_CALL};
use super::kinds::{self, KindRule};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use trainforge_api::plugin::{KindRef, ObjectName};
use trainforge_api::trainer::v1alpha1::constants::{API_VERSION, GROUP, TRAINJOB_KIND};

/// Suffix of the runtime snapshot ConfigMap the host writes per TrainJob.
pub const SNAPSHOT_SUFFIX: &str = "-runtime-snapshot";

/// Metadata the API server manages; dropped from emitted objects.
const SERVER_MANAGED: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The TrainJob a call is for, read from the stored object before any
/// plugin runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// TrainJob namespace.
    pub namespace: String,
    /// TrainJob name.
    pub name: String,
    /// TrainJob UID (absent in dry runs of a TrainJob read from a file).
    pub uid: Option<String>,
}

impl Owner {
    /// Read namespace/name/uid from the stored TrainJob. Both namespace and
    /// name are required.
    pub fn from_stored(trainjob: &Value) -> Result<Owner, String> {
        let s = |p: &str| {
            trainjob
                .pointer(p)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Ok(Owner {
            namespace: s("/metadata/namespace").ok_or("the TrainJob has no metadata.namespace")?,
            name: s("/metadata/name").ok_or("the TrainJob has no metadata.name")?,
            uid: s("/metadata/uid"),
        })
    }

    /// The controller owner reference every emitted object carries.
    pub fn reference(&self) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": TRAINJOB_KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }

    /// Name of the host's runtime snapshot ConfigMap of this TrainJob.
    pub fn snapshot_name(&self) -> String {
        format!("{}{SNAPSHOT_SUFFIX}", self.name)
    }

    /// The TrainJob other than this one that controls `object` (its
    /// controller owner reference), as `namespace/name`; `None` when the
    /// object has no TrainJob controller or is this TrainJob's. Compared by
    /// uid when both are known, by name otherwise (dry runs of a TrainJob
    /// read from a file have no uid).
    pub fn foreign_controller(&self, object: &Value) -> Option<String> {
        self.foreign_among(object.pointer("/metadata/ownerReferences")?)
    }

    /// [`Self::foreign_controller`] of an object whose
    /// `metadata.ownerReferences` is `refs`.
    pub fn foreign_among(&self, refs: &Value) -> Option<String> {
        let controller = refs
            .as_array()?
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
        let s = |k: &str| controller.get(k).and_then(Value::as_str);
        if s("kind") != Some(TRAINJOB_KIND)
            || s("apiVersion").and_then(|v| v.split('/').next()) != Some(GROUP)
        {
            return None;
        }
        let name = s("name").unwrap_or_default();
        let same = match (&self.uid, s("uid")) {
            (Some(want), Some(got)) => want == got,
            _ => name == self.name,
        };
        (!same).then(|| bounded::sanitize(&format!("{}/{name}", self.namespace), 320))
    }

    /// Which identity field `trainjob` changed compared with this owner, if
    /// any (`apiVersion`/`kind` included: the TrainJob stays a TrainJob).
    pub fn changed_field(&self, trainjob: &Value) -> Option<&'static str> {
        let s = |p: &str| trainjob.pointer(p).and_then(Value::as_str);
        if s("/kind") != Some(TRAINJOB_KIND) {
            return Some("kind");
        }
        if s("/apiVersion").and_then(|v| v.split('/').next()) != Some(GROUP) {
            return Some("apiVersion");
        }
        if s("/metadata/namespace") != Some(self.namespace.as_str()) {
            return Some("metadata.namespace");
        }
        if s("/metadata/name") != Some(self.name.as_str()) {
            return Some("metadata.name");
        }
        if s("/metadata/uid") != self.uid.as_deref() {
            return Some("metadata.uid");
        }
        None
    }
}

/// `apiVersion/kind namespace/name` of an object, bounded.
pub fn describe(o: &Value) -> String {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .map_or_else(|| "?".to_owned(), |v| bounded::sanitize(v, 253))
    };
    let ns = o
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map_or_else(|| "-".to_owned(), |v| bounded::sanitize(v, 63));
    format!(
        "{}/{} {ns}/{}",
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/name")
    )
}

/// Parse and check `build` output (see the module rules). Returns the
/// objects as they may be applied.
pub fn check_objects(
    plugin: &str,
    emits: &BTreeSet<KindRef>,
    owner: &Owner,
    raw: Vec<String>,
) -> Result<Vec<Value>, Error> {
    let invalid = |m: String| Error::InvalidOutput {
        plugin: plugin.to_owned(),
        phase: "build".into(),
        message: m,
    };
    if raw.len() > MAX_OBJECTS_PER_CALL {
        return Err(invalid(format!(
            "{} objects; at most {MAX_OBJECTS_PER_CALL} per call",
            raw.len()
        )));
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        if s.len() > MAX_OBJECT_BYTES {
            return Err(invalid(format!(
                "object {i} is {} bytes; at most {MAX_OBJECT_BYTES}",
                s.len()
            )));
        }
        let mut o: Value = serde_json::from_str(&s)
            .map_err(|e| invalid(format!("object {i} is not valid JSON: {e}")))?;
        check_object(plugin, emits, owner, &mut o, i)?;
        out.push(o);
    }
    Ok(out)
}

/// Whether `name` is a DNS subdomain (what every object name must be).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
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
    if !o.get("metadata").is_some_and(Value::is_object) {
        return Err(invalid("missing metadata".into()));
    }
    if o.pointer("/metadata/generateName").is_some() {
        return Err(invalid(
            "metadata.generateName is not allowed: emitted objects are named".into(),
        ));
    }
    let name = str_at("/metadata/name").unwrap_or_default();
    if !valid_name(&name) {
        return Err(invalid(format!(
            "metadata.name {:?} is not a valid object name",
            bounded::sanitize(&name, 64)
        )));
    }
    let kref = KindRef::new(api_version, kind);
    if let KindRule::Never(what) = kinds::emit_rule(&kref) {
        return Err(forbidden(o, format!("plugins may never emit {what}")));
    }
    if kinds::known_cluster_scoped(&kref) {
        return Err(forbidden(
            o,
            format!("{kref} is cluster-scoped; plugins emit namespaced objects only"),
        ));
    }
    if !emits.contains(&kref) {
        return Err(forbidden(
            o,
            format!("{kref} is not among the kinds this plugin may emit"),
        ));
    }
    match o.pointer("/metadata/namespace") {
        None | Some(Value::Null) => {}
        Some(Value::String(ns)) if *ns == owner.namespace => {}
        Some(other) => {
            let shown = bounded::sanitize(&other.to_string(), 80);
            return Err(forbidden(
                o,
                format!(
                    "namespace {shown} is not the TrainJob's namespace {:?}",
                    owner.namespace
                ),
            ));
        }
    }
    if let Some(why) = name_refusal(&kref, &name, owner) {
        return Err(forbidden(o, why));
    }
    if kref.group().is_empty()
        && kref.kind == "Secret"
        && o.get("type").and_then(Value::as_str) == Some("kubernetes.io/service-account-token")
    {
        return Err(forbidden(
            o,
            "service-account token Secrets would mint credentials".into(),
        ));
    }
    if o.pointer("/metadata/finalizers")
        .is_some_and(|f| !f.is_null() && f.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(forbidden(
            o,
            "finalizers would keep the object (and its namespace) from being deleted".into(),
        ));
    }
    if let Some(refs) = o
        .pointer("/metadata/ownerReferences")
        .filter(|r| !r.is_null())
    {
        let refs = refs
            .as_array()
            .ok_or_else(|| invalid("ownerReferences is not a list".into()))?;
        for r in refs {
            let s = |k: &str| r.get(k).and_then(Value::as_str);
            let is_owner = s("kind") == Some(TRAINJOB_KIND)
                && s("apiVersion").and_then(|v| v.split('/').next()) == Some(GROUP)
                && s("name") == Some(owner.name.as_str())
                && match (&owner.uid, s("uid")) {
                    (Some(want), Some(got)) => want == got,
                    _ => true,
                };
            if !is_owner {
                let shown = bounded::sanitize(&r.to_string(), 200);
                return Err(forbidden(
                    o,
                    format!(
                        "owner reference {shown} is not the TrainJob {:?}",
                        owner.name
                    ),
                ));
            }
        }
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        normalize_metadata(meta, owner);
    }
    Ok(())
}

/// Why an object of kind `kind` named `name` may not be emitted for
/// `owner`, if it may not: names are derived from the TrainJob's so that
/// they cannot be another TrainJob's (see the module doc).
pub fn name_refusal(kind: &KindRef, name: &str, owner: &Owner) -> Option<String> {
    let shown = bounded::sanitize(name, 64);
    if name.ends_with(SNAPSHOT_SUFFIX) {
        let of = if name == owner.snapshot_name() {
            "this TrainJob".to_owned()
        } else {
            format!(
                "TrainJob {:?}",
                bounded::sanitize(name.trim_end_matches(SNAPSHOT_SUFFIX), 64)
            )
        };
        return Some(format!(
            "the name {shown:?} is the host's runtime snapshot of {of}"
        ));
    }
    if kind.group() == "jobset.x-k8s.io" && kind.kind == "JobSet" {
        return (name != owner.name).then(|| {
            format!(
                "a JobSet is named as its TrainJob ({:?}), not {shown:?}: that name is the JobSet of another TrainJob",
                owner.name
            )
        });
    }
    let derived = name == owner.name
        || name
            .strip_prefix(owner.name.as_str())
            .is_some_and(|rest| rest.starts_with('-'));
    (!derived).then(|| {
        format!(
            "the name {shown:?} is not derived from the TrainJob's: it must be {:?} or start with \"{}-\"",
            owner.name, owner.name
        )
    })
}

/// Why an object of kind `kind` named `name` may not be emitted for
/// `owner` under the naming rules the loaded plugins declared (`rules`:
/// each with the plugin that declared it), if it may not: a name that one
/// rule makes another TrainJob's is refused, whichever plugin emits it, so
/// that no TrainJob's plugins can create that TrainJob's object first.
/// A name two rules read differently is refused too (the safe reading).
pub fn rule_refusal(
    kind: &KindRef,
    name: &str,
    owner: &Owner,
    rules: &[(ObjectName, String)],
) -> Option<String> {
    rules.iter().find_map(|(rule, by)| {
        let of = rule
            .trainjob_of(name)
            .filter(|_| rule.kind.same_kind(kind))?;
        (of != owner.name).then(|| {
            format!(
                "the name {:?} is the {} of TrainJob {:?} by plugin {by}'s naming rule (<trainjob>{}), not this TrainJob's",
                bounded::sanitize(name, 64),
                kind.kind,
                bounded::sanitize(of, 64),
                rule.suffix
            )
        })
    })
}

/// Namespace and owner reference as the host decides them; server-managed
/// fields removed.
fn normalize_metadata(meta: &mut Map<String, Value>, owner: &Owner) {
    for k in SERVER_MANAGED {
        meta.remove(*k);
    }
    meta.remove("finalizers");
    meta.insert("namespace".into(), Value::String(owner.namespace.clone()));
    meta.insert("ownerReferences".into(), json!([owner.reference()]));
}

#[cfg(test)]
mod tests {
    use super::*;

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
            KindRef::new("v1", "Secret"),
            KindRef::new("rbac.authorization.k8s.io/v1", "Role"),
            KindRef::new("coordination.k8s.io/v1", "Lease"),
            KindRef::new("example.com/v1", "ClusterQueue"),
        ]
        .into_iter()
        .collect()
    }

    fn check(o: Value) -> Result<Vec<Value>, Error> {
        check_objects("p", &emits(), &owner(), vec![o.to_string()])
    }

    fn cm(meta: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    }

    #[test]
    fn defaults_namespace_and_writes_the_one_owner_reference() {
        let out = check(cm(
            json!({"name": "job-x", "uid": "forged", "resourceVersion": "9"}),
        ))
        .unwrap();
        let meta = &out[0]["metadata"];
        assert_eq!(meta["namespace"], "team-a");
        assert_eq!(meta["ownerReferences"], json!([owner().reference()]));
        assert_eq!(meta["ownerReferences"][0]["uid"], "u1");
        assert!(meta.get("uid").is_none() && meta.get("resourceVersion").is_none());
        // A reference to the same TrainJob (any apiVersion of the group) is fine.
        let out = check(cm(json!({"name": "job-x", "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1", "kind": "TrainJob", "name": "job", "uid": "u1", "controller": false}]})))
        .unwrap();
        assert_eq!(out[0]["metadata"]["ownerReferences"][0]["controller"], true);
    }

    #[test]
    fn refuses_never_kinds_even_if_declared() {
        for (api, kind) in [
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("coordination.k8s.io/v1", "Lease"),
            ("example.com/v1", "ClusterQueue"),
        ] {
            let e = check(json!({"apiVersion": api, "kind": kind, "metadata": {"name": "job-x"}}))
                .unwrap_err();
            assert_eq!(e.reason(), "ForbiddenObject", "{kind}: {e}");
        }
    }

    #[test]
    fn refuses_undeclared_foreign_namespace_and_foreign_owners() {
        let e = check(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-x"}}))
            .unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject");
        let e = check(cm(json!({"name": "job-x", "namespace": "kube-system"}))).unwrap_err();
        assert!(e.to_string().contains("kube-system"), "{e}");
        for r in [
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "other"}),
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "job", "uid": "u2"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "job"}),
            json!({"apiVersion": "evil.io/v1", "kind": "TrainJob", "name": "job"}),
        ] {
            let e = check(cm(json!({"name": "job-x", "ownerReferences": [r]}))).unwrap_err();
            assert_eq!(e.reason(), "ForbiddenObject", "{e}");
        }
    }

    #[test]
    fn refuses_host_names_tokens_finalizers_and_unnamed_objects() {
        let e = check(cm(json!({"name": "job-runtime-snapshot"}))).unwrap_err();
        assert!(e.to_string().contains("snapshot"), "{e}");
        let e = check(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": "job-t", "annotations": {"kubernetes.io/service-account.name": "default"}}}))
        .unwrap_err();
        assert_eq!(e.reason(), "ForbiddenObject");
        let e = check(cm(
            json!({"name": "job-x", "finalizers": ["keep.me/forever"]}),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("finalizers"), "{e}");
        for meta in [
            json!({"generateName": "x-"}),
            json!({"name": ""}),
            json!({"name": "Upper"}),
            json!({"name": "a".repeat(300)}),
        ] {
            assert_eq!(check(cm(meta)).unwrap_err().reason(), "InvalidOutput");
        }
    }

    #[test]
    fn bounds_count_size_and_shape() {
        let one = cm(json!({"name": "job-x"})).to_string();
        let e = check_objects("p", &emits(), &owner(), vec![one; MAX_OBJECTS_PER_CALL + 1])
            .unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput");
        let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-x"},
            "data": {"k": "x".repeat(MAX_OBJECT_BYTES)}});
        assert_eq!(check(big).unwrap_err().reason(), "InvalidOutput");
        let e = check_objects("p", &emits(), &owner(), vec!["{".into()]).unwrap_err();
        assert_eq!(e.reason(), "InvalidOutput");
        assert_eq!(
            check(json!({"kind": "ConfigMap", "metadata": {"name": "job-x"}}))
                .unwrap_err()
                .reason(),
            "InvalidOutput"
        );
        assert_eq!(check(json!([1])).unwrap_err().reason(), "InvalidOutput");
    }

    #[test]
    fn identity_comes_from_the_stored_trainjob() {
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "job", "namespace": "team-a", "uid": "u1"}});
        let o = Owner::from_stored(&tj).unwrap();
        assert_eq!(o, owner());
        assert_eq!(o.changed_field(&tj), None);
        let mut moved = tj.clone();
        moved["metadata"]["namespace"] = json!("kube-system");
        assert_eq!(o.changed_field(&moved), Some("metadata.namespace"));
        let mut renamed = tj.clone();
        renamed["metadata"]["uid"] = json!("u2");
        assert_eq!(o.changed_field(&renamed), Some("metadata.uid"));
        assert!(Owner::from_stored(&json!({"metadata": {"name": "job-x"}})).is_err());
    }

    #[test]
    fn names_are_derived_from_the_trainjob_so_none_is_another_trainjobs() {
        let jobset = |name: &str| json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}});
        let mut emits = emits();
        emits.insert(KindRef::new("jobset.x-k8s.io/v1alpha2", "JobSet"));
        let run = |o: Value| check_objects("p", &emits, &owner(), vec![o.to_string()]);
        // Accepted: the TrainJob's own name, and `<trainjob>-…`.
        for name in ["job", "job-hostfile", "job-mpi-ssh-auth", "job-1"] {
            run(cm(json!({"name": name}))).unwrap();
        }
        run(jobset("job")).unwrap();
        // Refused, naming why: another TrainJob's JobSet (a TrainJob that
        // does not exist yet included), names not derived from this one's,
        // and any runtime snapshot.
        for (o, says) in [
            (jobset("victim"), "JobSet of another TrainJob"),
            (jobset("job-2"), "JobSet of another TrainJob"),
            (cm(json!({"name": "victim-hostfile"})), "not derived"),
            (cm(json!({"name": "jobx"})), "not derived"),
            (cm(json!({"name": "jo"})), "not derived"),
            (cm(json!({"name": "job.x"})), "not derived"),
            (
                cm(json!({"name": "job-runtime-snapshot"})),
                "snapshot of this TrainJob",
            ),
            (
                cm(json!({"name": "job-b-runtime-snapshot"})),
                "snapshot of TrainJob \"job-b\"",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "victim-runtime-snapshot"}}),
                "snapshot",
            ),
        ] {
            let e = run(o.clone()).unwrap_err();
            assert_eq!(e.reason(), "ForbiddenObject", "{o}: {e}");
            assert!(e.to_string().contains(says), "{o}: {e}");
        }
    }

    #[test]
    fn declared_names_of_other_trainjobs_are_refused() {
        let rules = vec![
            (
                ObjectName::new(KindRef::new("v1", "Secret"), "-mpi-ssh-auth"),
                "mpi".to_owned(),
            ),
            (
                ObjectName::new(KindRef::new("scheduling.x-k8s.io/v1alpha1", "PodGroup"), ""),
                "coscheduling".to_owned(),
            ),
        ];
        let secret = KindRef::new("v1", "Secret");
        // Any version of the rule's group and kind.
        let group = KindRef::new("scheduling.x-k8s.io/v1beta9", "PodGroup");
        let refusal = |k: &KindRef, name: &str| rule_refusal(k, name, &owner(), &rules);
        // This TrainJob's names under the rules, other kinds, other names.
        for (k, name) in [
            (&secret, "job-mpi-ssh-auth"),
            (&group, "job"),
            (&KindRef::new("v1", "ConfigMap"), "job-b-mpi-ssh-auth"),
            (&KindRef::new("other.io/v1", "PodGroup"), "job-b"),
            (&secret, "job-b"),
            (&secret, "-mpi-ssh-auth"),
        ] {
            assert_eq!(refusal(k, name), None, "{k} {name}");
        }
        for (k, name, by, of) in [
            (&secret, "job-b-mpi-ssh-auth", "mpi", "job-b"),
            (
                &secret,
                "job-mpi-ssh-auth-mpi-ssh-auth",
                "mpi",
                "job-mpi-ssh-auth",
            ),
            (&group, "job-b", "coscheduling", "job-b"),
        ] {
            let m = refusal(k, name).unwrap_or_default();
            assert!(
                m.contains(&format!("plugin {by}'s")) && m.contains(&format!("TrainJob {of:?}")),
                "{k} {name}: {m}"
            );
        }
    }

    #[test]
    fn objects_of_other_trainjobs_are_foreign() {
        let with = |r: Value| json!({"metadata": {"ownerReferences": [r]}});
        let tj = |name: &str, uid: &str, controller: bool| {
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": name, "uid": uid, "controller": controller})
        };
        let o = owner();
        assert_eq!(o.foreign_controller(&with(tj("job", "u1", true))), None);
        assert_eq!(
            o.foreign_controller(&with(tj("attacker", "u9", true))),
            Some("team-a/attacker".into())
        );
        // The same name with another uid: a TrainJob of that name that was
        // deleted and created again, or a squatter.
        assert_eq!(
            o.foreign_controller(&with(tj("job", "u2", true))),
            Some("team-a/job".into())
        );
        // Not a controller, not a TrainJob, no references: not foreign.
        assert_eq!(
            o.foreign_controller(&with(tj("attacker", "u9", false))),
            None
        );
        assert_eq!(
            o.foreign_controller(&with(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "name": "d", "uid": "u3", "controller": true}))),
            None
        );
        assert_eq!(o.foreign_controller(&json!({"metadata": {}})), None);
        // Without a uid (a dry run), by name.
        let dry = Owner {
            uid: None,
            ..owner()
        };
        assert_eq!(dry.foreign_controller(&with(tj("job", "u2", true))), None);
        assert!(
            dry.foreign_controller(&with(tj("other", "u2", true)))
                .is_some()
        );
    }
}
