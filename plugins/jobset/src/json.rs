//! Small JSON helpers for editing the JobSet blueprint in place.
//!
//! The blueprint (`info.templateSpec.obj`) is kept as JSON so that every
//! field of the runtime template survives the build untouched; only the
//! fields the builder owns are edited, with Kubernetes "upsert" semantics
//! (replace the entry with the same key in place, else append).

use serde::Serialize;
use serde_json::{Map, Value};
use trainforge_sdk::PluginError;

/// The object at `key` of `parent`, created (as `{}`) when absent or not an
/// object (`parent` itself becomes an object if it is not one).
pub fn obj_mut<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    if !parent.is_object() {
        *parent = Value::Object(Map::new());
    }
    // `parent` is an object here, so indexing inserts instead of panicking.
    let entry = &mut parent[key];
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry
}

/// Run `f` on the array at `key` of `parent`, created (as `[]`) when absent
/// or not an array.
pub fn with_arr<R>(parent: &mut Value, key: &str, f: impl FnOnce(&mut Vec<Value>) -> R) -> R {
    if !parent.is_object() {
        *parent = Value::Object(Map::new());
    }
    let entry = &mut parent[key];
    if !entry.is_array() {
        *entry = Value::Array(Vec::new());
    }
    match entry {
        Value::Array(a) => f(a),
        // Not reachable: `entry` was made an array just above.
        _ => f(&mut Vec::new()),
    }
}

/// Follow `path` creating objects as needed: `path_mut(v, &["a","b"])` is
/// `v.a.b` (an object).
pub fn path_mut<'a>(root: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut cur = root;
    for p in path {
        cur = obj_mut(cur, p);
    }
    cur
}

/// Serialise a typed value (e.g. a k8s-openapi `EnvVar`) to JSON.
pub fn to_json<T: Serialize>(v: &T, what: &str) -> Result<Value, PluginError> {
    serde_json::to_value(v).map_err(|e| PluginError::Internal(format!("serialising {what}: {e}")))
}

/// Upsert `item` into `list`, matching on the string field `key`.
pub fn upsert_by_key(list: &mut Vec<Value>, item: Value, key: &str) {
    let k = item.get(key).cloned();
    match list
        .iter_mut()
        .find(|e| k.is_some() && e.get(key) == k.as_ref())
    {
        Some(slot) => *slot = item,
        None => list.push(item),
    }
}

/// Upsert a container port: same `containerPort`, or same non-empty `name`.
pub fn upsert_port(list: &mut Vec<Value>, item: Value) {
    let port = item.get("containerPort").cloned();
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    let same = |e: &Value| {
        (port.is_some() && e.get("containerPort") == port.as_ref())
            || (name.is_some() && e.get("name").and_then(Value::as_str) == name.as_deref())
    };
    match list.iter_mut().find(|e| same(e)) {
        Some(slot) => *slot = item,
        None => list.push(item),
    }
}

/// Merge string map `extra` into the object at `parent[key]` (created when
/// absent; nothing is created when `extra` is empty).
pub fn merge_string_map<'a>(
    parent: &mut Value,
    key: &str,
    extra: impl IntoIterator<Item = (&'a String, &'a String)>,
) {
    let mut extra = extra.into_iter().peekable();
    if extra.peek().is_none() {
        return;
    }
    let map = obj_mut(parent, key);
    if let Value::Object(m) = map {
        for (k, v) in extra {
            m.insert(k.clone(), Value::String(v.clone()));
        }
    }
}

/// `v` as a bool at `pointer`, `false` when absent.
pub fn bool_at(v: &Value, pointer: &str) -> bool {
    v.pointer(pointer).and_then(Value::as_bool).unwrap_or(false)
}

/// A string at `pointer`, if present.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn creates_paths_and_upserts() {
        let mut v = json!({"a": null});
        path_mut(&mut v, &["a", "b"])
            .as_object_mut()
            .map(|m| m.insert("c".into(), json!(1)));
        assert_eq!(v, json!({"a": {"b": {"c": 1}}}));
        let mut l = vec![json!({"name": "X", "value": "1"}), json!({"name": "Y"})];
        upsert_by_key(&mut l, json!({"name": "X", "value": "2"}), "name");
        upsert_by_key(&mut l, json!({"name": "Z"}), "name");
        assert_eq!(
            l,
            vec![
                json!({"name": "X", "value": "2"}),
                json!({"name": "Y"}),
                json!({"name": "Z"})
            ]
        );
        let mut p = vec![json!({"containerPort": 1, "name": "a"})];
        upsert_port(&mut p, json!({"containerPort": 2, "name": "a"}));
        upsert_port(&mut p, json!({"containerPort": 3}));
        assert_eq!(
            p,
            vec![
                json!({"containerPort": 2, "name": "a"}),
                json!({"containerPort": 3})
            ]
        );
        let mut arr_parent = json!({});
        with_arr(&mut arr_parent, "xs", |a| a.push(json!(1)));
        assert_eq!(arr_parent, json!({"xs": [1]}));
    }
}
