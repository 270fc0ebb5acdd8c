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
//! - every field of the desired object is already present in the live
//!   object with the same value ([`contains`]): after a restart, or for
//!   objects someone else touched only in fields we do not own.
//!
//! A hand edit of a field we own breaks both, so the next reconcile applies
//! (with force) and restores it; fields we do not own are left alone.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::Value;
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

/// Whether every field of `desired` is in `live` with the same value. Lists
/// must have the same length and match item by item (the API server keeps
/// list order); scalars must be equal.
pub fn contains(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => contains(lv, dv),
            None => {
                dv.is_null()
                    || dv.as_object().is_some_and(|o| o.is_empty())
                    || dv.as_array().is_some_and(|a| a.is_empty())
            }
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains(lv, dv))
        }
        (Value::Number(l), Value::Number(d)) => l.as_f64() == d.as_f64(),
        (l, d) => l == d,
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
    memo: &AppliedMemo,
) -> Result<Outcome, ApplyError> {
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
            return Ok(Outcome::Unchanged);
        }
        let live_json = serde_json::to_value(live).unwrap_or(Value::Null);
        if contains(&live_json, object) {
            memo.record(object, live.metadata.resource_version.clone());
            return Ok(Outcome::Unchanged);
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
    memo.record(object, applied.metadata.resource_version.clone());
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn contains_ignores_server_added_fields_but_not_changed_ones() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "y": "2"}},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2}}}],
                     "suspend": false}});
        let desired = json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]}});
        assert!(contains(&live, &desired));
        let changed = json!({"metadata": {"name": "a", "labels": {"x": "2"}}});
        assert!(!contains(&live, &changed));
        let more_items =
            json!({"spec": {"replicatedJobs": [{"name": "node"}, {"name": "launcher"}]}});
        assert!(!contains(&live, &more_items));
        let new_field = json!({"spec": {"suspend": true}});
        assert!(!contains(&live, &new_field));
        assert!(contains(&json!({"a": 1.0}), &json!({"a": 1})));
        assert!(
            contains(&json!({}), &json!({"labels": {}, "x": null})),
            "empty maps are absent on the server"
        );
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
