//! Server-side apply of the desired objects (field manager `trainer`,
//! force), skipping objects the API server already has as desired so that a
//! resync that finds nothing changed writes nothing.
//!
//! An object is never taken over: it is created, or updated only when its
//! controller is the TrainJob being reconciled.
//! - Absent from the watch cache: applied with `metadata.resourceVersion`
//!   set to `1`, a version no stored object can have (etcd's first write is
//!   revision 2), so the API server creates it or, if it exists after all,
//!   refuses with a conflict; the object is then read once and handled as
//!   below.
//! - Present: its controller owner reference must be this TrainJob (by
//!   uid), otherwise the apply is refused as a [`ApplyError::Collision`] and
//!   nothing is written; the apply carries the live object's `metadata.uid`,
//!   so it can only ever change that very object.
//!
//! An object is skipped when either
//! - the live object (from the watch cache) has the resourceVersion our last
//!   apply of the very same desired object returned, or
//! - the fields the desired object sets are exactly the fields our manager
//!   owns in the live object (its `managedFields` entry for `trainer`,
//!   operation `Apply`) and every value it sets equals the live value
//!   ([`up_to_date`]): after a restart, or for objects someone else touched
//!   only in fields we do not own. A desired object that no longer sets a
//!   field we own (a label or nodeSelector dropped from a runtime patch) is
//!   applied, so the API server removes the field.
//!
//! A hand edit of a field we own breaks both, so the next reconcile applies
//! (with force) and restores it; fields we do not own are left alone.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use super::write_budget::{Exhausted, WriteBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Map, Value};
use tracing::debug;
use trainforge_api::plugin::{KindRef, ObjectKey, object_key};

/// The SSA field manager upstream uses for every object of a TrainJob.
pub const FIELD_MANAGER: &str = "trainer";

/// A `resourceVersion` no stored object can have: an apply carrying it
/// creates the object or fails with a conflict, never updates.
const CREATE_ONLY: &str = "1";

/// Why an object could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The object has no name or kind.
    #[error("object without {0}")]
    Malformed(&'static str),
    /// An object of that kind and name exists and is not controlled by this
    /// TrainJob: nothing was written.
    #[error(
        "{kind} {namespace}/{name} already exists and is not controlled by this TrainJob ({holder}); refusing to take it over"
    )]
    Collision {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Who controls it (`TrainJob team/other`, or `no controller`).
        holder: String,
    },
    /// Creating it conflicted with an object that was gone when read back
    /// (deleted meanwhile); retried.
    #[error("{kind} {namespace}/{name} was deleted while being created; retrying")]
    Vanished {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The namespace's write budget is spent: nothing was written
    /// ([`super::write_budget`]).
    #[error("{kind} {namespace}/{name} not written: {source}")]
    Throttled {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The empty bucket.
        source: Exhausted,
    },
    /// The API server refused it.
    #[error("applying {kind} {namespace}/{name}: {source}")]
    Api {
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
}

/// What [`apply`] remembers and charges: the last state applied per
/// object, and the bytes each namespace writes.
#[derive(Debug, Clone, Copy)]
pub struct Ledger<'a> {
    /// The last desired state applied per object.
    pub memo: &'a AppliedMemo,
    /// Bytes a minute per namespace.
    pub writes: &'a WriteBudget,
}

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Already as desired: nothing written.
    Unchanged,
    /// Written; it did not exist before.
    Created,
    /// Written over an existing object.
    Updated,
}

/// Remembers, per object, the hash of the last desired state applied and the
/// resourceVersion the API server returned for it.
#[derive(Debug, Default)]
pub struct AppliedMemo {
    seen: Mutex<HashMap<ObjectKey, (u64, String)>>,
}

fn digest(object: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    object.to_string().hash(&mut h);
    h.finish()
}

impl AppliedMemo {
    fn matches(&self, object: &Value, live_rv: Option<&str>) -> bool {
        let Some(rv) = live_rv else { return false };
        let Ok(seen) = self.seen.lock() else {
            return false;
        };
        seen.get(&object_key(object))
            .is_some_and(|(h, r)| *h == digest(object) && r == rv)
    }

    fn record(&self, object: &Value, rv: Option<String>) {
        if let (Ok(mut seen), Some(rv)) = (self.seen.lock(), rv) {
            seen.insert(object_key(object), (digest(object), rv));
        }
    }

    /// Whether this process applied the object `key` (and has not forgotten
    /// it since).
    pub fn knows(&self, key: &ObjectKey) -> bool {
        self.seen.lock().is_ok_and(|s| s.contains_key(key))
    }

    /// Forget objects for which `exists(kind, namespace, name)` is false (deleted, or of a kind no longer watched: the memo is only
    /// consulted with a live object). Returns how many were dropped.
    pub fn retain_existing(&self, exists: impl Fn(&KindRef, &str, &str) -> bool) -> usize {
        let Ok(mut seen) = self.seen.lock() else {
            return 0;
        };
        let before = seen.len();
        seen.retain(|(kind, ns, name), _| exists(kind, ns, name));
        before - seen.len()
    }

    /// Objects remembered.
    pub fn len(&self) -> usize {
        self.seen.lock().map_or(0, |s| s.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Top-level fields the API server never records in `managedFields`.
const UNTRACKED_TOP: &[&str] = &["apiVersion", "kind"];
/// Metadata fields the API server never records in `managedFields`.
const UNTRACKED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

/// Whether a `managedFields` entry is the one our applies write: manager
/// [`FIELD_MANAGER`], operation `Apply`, on the object itself (not a
/// subresource).
pub fn is_ours(entry: &ManagedFieldsEntry) -> bool {
    entry.manager.as_deref() == Some(FIELD_MANAGER)
        && entry.operation.as_deref() == Some("Apply")
        && entry.subresource.as_deref().unwrap_or_default().is_empty()
}

/// The field set (`fieldsV1`) our manager owns in `live`, if it owns one
/// recorded in `api_version` (field sets are per version).
pub fn owned_fields<'a>(live: &'a DynamicObject, api_version: &str) -> Option<&'a Value> {
    live.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| is_ours(e) && e.api_version.as_deref() == Some(api_version))
        .filter(|e| e.fields_type.as_deref().is_none_or(|t| t == "FieldsV1"))
        .find_map(|e| e.fields_v1.as_ref().map(|f| &f.0))
}

/// Whether applying `desired` would change nothing: the fields it sets are
/// exactly the fields `owned` (our manager's `fieldsV1` set in `live`) holds
/// — none added, none removed — and every value it sets equals the live
/// one. Fields other managers own are ignored.
///
/// The field set says how each list is merged: entries `k:{...}` are a map
/// list whose items are matched by those key fields (a key field the
/// desired item omits counts as matched: the API server defaults keys such
/// as a port's `protocol`), `v:...` entries a set, and an empty set an
/// atomic value compared as a whole. `null` in `desired` is no field; a
/// `status` the API server did not record (a status subresource resets it)
/// is not compared.
pub fn up_to_date(owned: &Value, live: &Value, desired: &Value) -> bool {
    let (Some(owned), Some(desired)) = (owned.as_object(), desired.as_object()) else {
        return false;
    };
    let mut owned = owned.clone();
    let mut desired = desired.clone();
    for k in UNTRACKED_TOP {
        owned.remove(&format!("f:{k}"));
        desired.remove(*k);
    }
    if !owned.contains_key("f:status") {
        desired.remove("status");
    }
    if let Some(Value::Object(meta)) = owned.get_mut("f:metadata") {
        for k in UNTRACKED_METADATA {
            meta.remove(&format!("f:{k}"));
        }
        if meta.keys().all(|k| k == ".") {
            owned.remove("f:metadata");
        }
    }
    if let Some(Value::Object(meta)) = desired.get_mut("metadata") {
        for k in UNTRACKED_METADATA {
            meta.remove(*k);
        }
        if meta.values().all(Value::is_null) {
            desired.remove("metadata");
        }
    }
    if !has_members(&owned) {
        // Nothing owned beyond the name: up to date if nothing more is wanted.
        return desired.values().all(Value::is_null);
    }
    same_fields(
        &Value::Object(owned),
        Some(live),
        &Value::Object(desired),
        &[],
    )
}

/// Field names of a `fieldsV1` node (`f:name` entries).
fn field_names(node: &Map<String, Value>) -> impl Iterator<Item = &str> {
    node.keys().filter_map(|k| k.strip_prefix("f:"))
}

/// Whether a `fieldsV1` node has members other than `.` (the item itself).
fn has_members(node: &Map<String, Value>) -> bool {
    node.keys().any(|k| k != ".")
}

/// [`up_to_date`] at one path: `owned` is the `fieldsV1` node of the path,
/// `live` its live value. `defaulted_keys` are key fields of a list item
/// the desired item leaves to the API server's defaults.
fn same_fields(
    owned: &Value,
    live: Option<&Value>,
    desired: &Value,
    defaulted_keys: &[String],
) -> bool {
    let Some(node) = owned.as_object() else {
        return false;
    };
    if !has_members(node) {
        // A leaf: a scalar, or an atomic map or list.
        return same_value(live, desired);
    }
    match desired {
        Value::Object(d) => {
            if node.keys().any(|k| k != "." && !k.starts_with("f:")) {
                return false;
            }
            let wanted = d.iter().filter(|(_, v)| !v.is_null()).count();
            let owned_count = field_names(node)
                .filter(|f| d.contains_key(*f) || !defaulted_keys.iter().any(|k| k == f))
                .count();
            if wanted != owned_count {
                return false;
            }
            let live = live.and_then(Value::as_object);
            d.iter().filter(|(_, v)| !v.is_null()).all(|(k, v)| {
                node.get(&format!("f:{k}"))
                    .is_some_and(|child| same_fields(child, live.and_then(|l| l.get(k)), v, &[]))
            })
        }
        Value::Array(items) => same_list(node, live.and_then(Value::as_array), items),
        _ => false,
    }
}

/// A list with members in its field set: a map list (`k:` entries) or a
/// set (`v:` entries).
fn same_list(node: &Map<String, Value>, live: Option<&Vec<Value>>, items: &[Value]) -> bool {
    let members: Vec<(&str, &Value)> = node
        .iter()
        .filter(|(k, _)| k.as_str() != ".")
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    if members.len() != items.len() {
        return false;
    }
    let live = live.map(Vec::as_slice).unwrap_or_default();
    if members.iter().all(|(k, _)| k.starts_with("v:")) {
        let owned: Vec<Value> = members
            .iter()
            .filter_map(|(k, _)| k.strip_prefix("v:"))
            .filter_map(|v| serde_json::from_str(v).ok())
            .collect();
        return owned.len() == items.len()
            && items.iter().all(|i| {
                owned.iter().any(|o| same_value(Some(o), i))
                    && live.iter().any(|l| same_value(Some(l), i))
            });
    }
    let mut keys: Vec<(Map<String, Value>, &Value)> = Vec::with_capacity(members.len());
    for (k, child) in &members {
        let Some(Ok(Value::Object(key))) = k.strip_prefix("k:").map(serde_json::from_str) else {
            return false;
        };
        keys.push((key, child));
    }
    let mut used = vec![false; keys.len()];
    items.iter().all(|item| {
        let Some(item_map) = item.as_object() else {
            return false;
        };
        // The owned entry this item is: every key field it sets matches.
        let found = keys.iter().enumerate().position(|(i, (key, _))| {
            !used[i]
                && key.iter().any(|(f, _)| item_map.contains_key(f))
                && key
                    .iter()
                    .all(|(f, v)| item_map.get(f).is_none_or(|iv| same_value(Some(v), iv)))
        });
        let Some(i) = found else { return false };
        used[i] = true;
        let (key, child) = &keys[i];
        let live_item = live.iter().find(|l| {
            key.iter()
                .all(|(f, v)| l.get(f).is_some_and(|lv| same_value(Some(v), lv)))
        });
        let defaulted: Vec<String> = key
            .keys()
            .filter(|f| !item_map.contains_key(*f))
            .cloned()
            .collect();
        live_item.is_some() && same_fields(child, live_item, item, &defaulted)
    })
}

/// Deep equality of a live and a desired value: numbers by value (`1` is
/// `1.0`), and an absent, `null`, empty map or empty list field the same
/// (the API server drops empty values).
fn same_value(live: Option<&Value>, desired: &Value) -> bool {
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    if empty(live) && empty(Some(desired)) {
        return true;
    }
    match (live, desired) {
        (Some(Value::Object(l)), Value::Object(d)) => {
            let keys: std::collections::BTreeSet<&String> = l.keys().chain(d.keys()).collect();
            keys.into_iter().all(|k| match d.get(k) {
                Some(dv) => same_value(l.get(k), dv),
                None => empty(l.get(k)),
            })
        }
        (Some(Value::Array(l)), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| same_value(Some(lv), dv))
        }
        (Some(Value::Number(l)), Value::Number(d)) => l.as_f64() == d.as_f64(),
        (Some(l), d) => l == d,
        (None, _) => false,
    }
}

/// Who controls `object`, if not the TrainJob with uid `owner_uid`.
fn foreign_controller(object: &DynamicObject, owner_uid: &str) -> Option<String> {
    let controller = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    match controller {
        Some(r) if r.uid == owner_uid && !owner_uid.is_empty() => None,
        Some(r) => Some(format!("controller: {} {}", r.kind, r.name)),
        None => Some("no controller".to_owned()),
    }
}

/// Apply one object for the TrainJob with uid `owner_uid` unless the live
/// one already is as desired (see the module rules).
pub async fn apply(
    client: &kube::Client,
    resource: &ApiResource,
    namespaced: bool,
    object: &Value,
    live: Option<&DynamicObject>,
    owner_uid: &str,
    ledger: Ledger<'_>,
) -> Result<(Outcome, Option<DynamicObject>), ApplyError> {
    let memo = ledger.memo;
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or(ApplyError::Malformed("metadata.name"))?;
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ApplyError::Malformed("kind"))?;
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let collision = |holder: String| ApplyError::Collision {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        holder,
    };
    if let Some(live) = live {
        if let Some(holder) = foreign_controller(live, owner_uid) {
            return Err(collision(holder));
        }
        if memo.matches(object, live.metadata.resource_version.as_deref()) {
            return Ok((Outcome::Unchanged, None));
        }
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(owned) = owned_fields(live, api_version)
            && let Ok(live_json) = serde_json::to_value(live)
            && up_to_date(owned, &live_json, object)
        {
            memo.record(object, live.metadata.resource_version.clone());
            return Ok((Outcome::Unchanged, None));
        }
    }
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), namespace, resource)
    } else {
        Api::all_with(client.clone(), resource)
    };
    let api_error = |source: kube::Error| ApplyError::Api {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    };
    let ssa = |precondition: (&str, &str)| {
        let mut body = object.clone();
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                precondition.0.to_owned(),
                Value::String(precondition.1.to_owned()),
            );
        }
        let api = api.clone();
        async move {
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
        }
    };
    ledger
        .writes
        .check(namespace)
        .map_err(|source| ApplyError::Throttled {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    debug!(%kind, %namespace, %name, exists = live.is_some(), "server-side apply");
    let (applied, outcome) = match live.and_then(|l| l.metadata.uid.as_deref()) {
        Some(uid) => (
            ssa(("uid", uid)).await.map_err(api_error)?,
            Outcome::Updated,
        ),
        None => match ssa(("resourceVersion", CREATE_ONLY)).await {
            Ok(created) => (created, Outcome::Created),
            // It exists after all (the cache is behind): ours, or a collision.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let current = api.get_opt(name).await.map_err(api_error)?;
                let Some(current) = current else {
                    return Err(ApplyError::Vanished {
                        kind: kind.to_owned(),
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                    });
                };
                if let Some(holder) = foreign_controller(&current, owner_uid) {
                    return Err(collision(holder));
                }
                let uid = current.metadata.uid.clone().unwrap_or_default();
                (
                    ssa(("uid", &uid)).await.map_err(api_error)?,
                    Outcome::Updated,
                )
            }
            Err(e) => return Err(api_error(e)),
        },
    };
    ledger
        .writes
        .charge(namespace, crate::plugin::bounded::json_len(object));
    memo.record(object, applied.metadata.resource_version.clone());
    Ok((outcome, Some(applied)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    /// A field set as the API server records it for `desired`-like objects.
    fn owned() -> Value {
        json!({
            "f:metadata": {"f:labels": {"f:x": {}}, "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {".": {}, "f:uid": {}, "f:kind": {}, "f:name": {}}}},
            "f:spec": {
                "f:nodeSelector": {"f:zone": {}},
                "f:replicatedJobs": {
                    "k:{\"name\":\"node\"}": {".": {}, "f:name": {}, "f:replicas": {},
                        "f:ports": {"k:{\"containerPort\":29400,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}},
                        "f:args": {}},
                },
                "f:finalizers": {"v:\"a\"": {}},
            }
        })
    }

    fn desired() -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "a", "namespace": "n", "labels": {"x": "1"},
                "ownerReferences": [{"uid": "u1", "kind": "TrainJob", "name": "a"}]},
            "spec": {"nodeSelector": {"zone": "z1"},
                "replicatedJobs": [{"name": "node", "replicas": 2, "args": ["--a", "b"],
                    "ports": [{"containerPort": 29400}]}],
                "finalizers": ["a"]}})
    }

    fn live() -> Value {
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "a", "namespace": "n", "uid": "x", "resourceVersion": "9",
                "labels": {"x": "1", "kueue": "k"},
                "ownerReferences": [{"uid": "u1", "kind": "TrainJob", "name": "a", "apiVersion": "v"}]},
            "spec": {"nodeSelector": {"zone": "z1", "foreign": "f"}, "suspend": false,
                "replicatedJobs": [{"name": "launcher"}, {"name": "node", "replicas": 2.0, "args": ["--a", "b"],
                    "ports": [{"containerPort": 29400, "protocol": "TCP"}], "template": {}}],
                "finalizers": ["b", "a"]},
            "status": {"ready": 1}})
    }

    #[test]
    fn unchanged_desired_is_up_to_date_whatever_other_managers_own() {
        assert!(up_to_date(&owned(), &live(), &desired()));
        // Untracked metadata and a status the server does not record are
        // no fields of ours.
        let mut d = desired();
        d["status"] = json!({"ready": 5});
        d["metadata"]["resourceVersion"] = json!("1");
        assert!(up_to_date(&owned(), &live(), &d));
    }

    #[test]
    fn an_added_field_is_a_change() {
        let mut d = desired();
        d["metadata"]["labels"]["y"] = json!("2");
        assert!(!up_to_date(&owned(), &live(), &d), "new label");
        let mut d = desired();
        d["spec"]["suspend"] = json!(false);
        assert!(
            !up_to_date(&owned(), &live(), &d),
            "a field someone else set to the same value is not ours yet"
        );
    }

    #[test]
    fn a_removed_field_is_a_change() {
        let mut d = desired();
        d["spec"].as_object_mut().unwrap().remove("nodeSelector");
        assert!(!up_to_date(&owned(), &live(), &d), "nodeSelector dropped");
        let mut d = desired();
        d["metadata"]["labels"] = json!({});
        assert!(!up_to_date(&owned(), &live(), &d), "label dropped");
        let mut d = desired();
        d["metadata"]["labels"]["x"] = Value::Null;
        assert!(!up_to_date(&owned(), &live(), &d), "null is no field");
        let mut d = desired();
        d["spec"]["finalizers"] = json!([]);
        assert!(!up_to_date(&owned(), &live(), &d), "set item dropped");
    }

    #[test]
    fn a_changed_value_is_a_change() {
        let mut d = desired();
        d["spec"]["nodeSelector"]["zone"] = json!("z2");
        assert!(!up_to_date(&owned(), &live(), &d));
        let mut d = desired();
        d["spec"]["replicatedJobs"][0]["args"] = json!(["--a"]);
        assert!(
            !up_to_date(&owned(), &live(), &d),
            "atomic list compared whole"
        );
        let mut l = live();
        l["metadata"]["labels"]["x"] = json!("edited");
        assert!(
            !up_to_date(&owned(), &l, &desired()),
            "hand edit of our field"
        );
    }

    #[test]
    fn map_list_items_are_matched_by_key() {
        let mut d = desired();
        d["spec"]["replicatedJobs"][0]["replicas"] = json!(3);
        assert!(
            !up_to_date(&owned(), &live(), &d),
            "value changed in an item"
        );
        let mut d = desired();
        d["spec"]["replicatedJobs"][0]["name"] = json!("worker");
        assert!(!up_to_date(&owned(), &live(), &d), "other key: other item");
        let mut d = desired();
        d["spec"]["replicatedJobs"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "launcher"}));
        assert!(!up_to_date(&owned(), &live(), &d), "item added");
        let mut d = desired();
        d["spec"]["replicatedJobs"][0]["ports"][0]["protocol"] = json!("UDP");
        assert!(!up_to_date(&owned(), &live(), &d), "key field differs");
        let mut d = desired();
        d["spec"]["replicatedJobs"][0]["ports"][0]["protocol"] = json!("TCP");
        assert!(
            up_to_date(&owned(), &live(), &d),
            "defaulted key given explicitly"
        );
        let mut l = live();
        l["spec"]["replicatedJobs"]
            .as_array_mut()
            .unwrap()
            .remove(1);
        assert!(!up_to_date(&owned(), &l, &desired()), "live item gone");
    }

    #[test]
    fn a_foreign_managers_fields_are_ignored_and_no_own_set_is_no_match() {
        // Other managers' fields are in `live` only: a live object full of
        // them still matches.
        let mut l = live();
        l["metadata"]["annotations"] = json!({"kueue": "x"});
        l["spec"]["nodeSelector"]["kueue"] = json!("y");
        assert!(up_to_date(&owned(), &l, &desired()));
        assert!(!up_to_date(&json!({}), &live(), &desired()));
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}});
        assert!(
            up_to_date(&json!({"f:metadata": {}}), &live(), &bare),
            "only the name, nothing owned"
        );
        assert!(!up_to_date(
            &json!({}),
            &live(),
            &json!({"data": {"k": "v"}})
        ));
        assert!(!up_to_date(&Value::Null, &live(), &desired()));
    }

    #[test]
    fn only_our_apply_entry_is_ours() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
        let entry =
            |manager: &str, operation: &str, sub: Option<&str>, fields: Value| ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                subresource: sub.map(Into::into),
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(fields)),
                time: None,
            };
        let mut obj = DynamicObject::new(
            "a",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        obj.metadata.managed_fields = Some(vec![
            entry("kueue", "Apply", None, json!({"f:data": {"f:k": {}}})),
            entry(
                FIELD_MANAGER,
                "Update",
                None,
                json!({"f:data": {"f:u": {}}}),
            ),
            entry(
                FIELD_MANAGER,
                "Apply",
                Some("status"),
                json!({"f:status": {}}),
            ),
            entry(
                FIELD_MANAGER,
                "Apply",
                None,
                json!({"f:data": {"f:mine": {}}}),
            ),
        ]);
        assert_eq!(
            owned_fields(&obj, "v1"),
            Some(&json!({"f:data": {"f:mine": {}}}))
        );
        assert_eq!(owned_fields(&obj, "v2"), None, "another version's set");
    }

    #[test]
    fn memo_matches_only_same_object_and_resource_version() {
        let memo = AppliedMemo::default();
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}});
        memo.record(&obj, Some("7".into()));
        assert!(memo.matches(&obj, Some("7")));
        assert!(!memo.matches(&obj, Some("8")), "someone else wrote it");
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}, "data": {"k": "w"}});
        assert!(!memo.matches(&other, Some("7")), "desired state changed");
    }

    #[test]
    fn memo_forgets_objects_that_no_longer_exist() {
        let memo = AppliedMemo::default();
        let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n"}});
        memo.record(&cm("kept"), Some("1".into()));
        memo.record(&cm("gone"), Some("1".into()));
        assert_eq!(memo.len(), 2);
        let dropped = memo.retain_existing(|k, ns, name| {
            (k.api_version.as_str(), k.kind.as_str(), ns, name) == ("v1", "ConfigMap", "n", "kept")
        });
        assert_eq!(dropped, 1);
        assert!(memo.matches(&cm("kept"), Some("1")));
        assert!(!memo.matches(&cm("gone"), Some("1")));
    }
}
