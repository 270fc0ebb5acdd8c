//! Kubernetes strategic merge patch (SMP) over JSON, for the part of the
//! JobSet tree that `runtimePatches` and `podTemplateOverrides` can touch.
//!
//! Why hand-written: there is no maintained Rust implementation of strategic
//! merge patch, and k8s-openapi's `DeepMerge` implements *server-side apply*
//! semantics, which differ from what Kubeflow Trainer does (it calls
//! apimachinery's `StrategicMergePatch` with the JobSet schema):
//! - SMP merges `nodeSelector` per key; `DeepMerge` treats it as atomic;
//! - SMP orders a merged list by interleaving patch entries with runtime-only
//!   entries (below); `DeepMerge` appends new entries at the end, which would
//!   change env order and so `$(VAR)` expansion.
//!
//! The list rule, as observed from apimachinery v0.36.3 (the cases in the tests
//! below were produced by it): let `left` be the patch's entries in patch
//! order, each merged into its runtime twin if it has one, and `right` the
//! runtime entries the patch does not name, in runtime order. While both are
//! non-empty, take `left`'s head if it is new or its runtime index is lower
//! than `right`'s head's index, else take `right`'s head; then append the rest.
//!
//! Lists without a merge key are replaced (atomic), maps are merged
//! recursively, scalars are replaced; `null` in a patch deletes the key.

use serde_json::{Map, Value};

/// The merge key of a list field, by field name, in the subtree a patch can
/// reach (JobSet spec → Job template → Pod template). `None` means replace.
///
/// Field names are unambiguous in that subtree (e.g. `env` only ever holds
/// `EnvVar`s), which is why a name table is enough and no full schema is needed.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "replicatedJobs"
        | "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims" => Some("name"),
        "volumeMounts" | "volumeDevices" => Some("mountPath"),
        "ports" => Some("containerPort"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

/// Apply `patch` to `original` in place with strategic-merge semantics.
pub fn merge(original: &mut Value, patch: &Value) {
    match (original, patch) {
        (Value::Object(orig), Value::Object(p)) => merge_object(orig, p),
        (orig, p) => *orig = p.clone(),
    }
}

fn merge_object(orig: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (field, pv) in patch {
        if pv.is_null() {
            orig.remove(field);
            continue;
        }
        match orig.get_mut(field) {
            None => {
                orig.insert(field.clone(), pv.clone());
            }
            Some(ov) => match (ov, pv) {
                (Value::Object(o), Value::Object(p)) => merge_object(o, p),
                (Value::Array(o), Value::Array(p)) => match merge_key(field) {
                    Some(key) => {
                        let merged = merge_list(std::mem::take(o), p, key);
                        *o = merged;
                    }
                    None => *o = p.clone(),
                },
                (ov, pv) => *ov = pv.clone(),
            },
        }
    }
}

/// The value of an entry's merge key, if the entry is an object that has one.
fn key_of<'a>(entry: &'a Value, key: &str) -> Option<&'a Value> {
    entry.as_object().and_then(|m| m.get(key))
}

fn merge_list(original: Vec<Value>, patch: &[Value], key: &str) -> Vec<Value> {
    // Index of each runtime entry by its key (first wins, like apimachinery).
    let runtime_index = |k: &Value| original.iter().position(|e| key_of(e, key) == Some(k));

    // `left`: patch entries in patch order, merged into their runtime twin.
    let mut left: Vec<(Option<usize>, Value)> = Vec::with_capacity(patch.len());
    for pe in patch {
        match key_of(pe, key).and_then(runtime_index) {
            Some(i) => {
                let mut merged = original[i].clone();
                merge(&mut merged, pe);
                left.push((Some(i), merged));
            }
            None => left.push((None, pe.clone())),
        }
    }
    // `right`: runtime entries the patch does not name, in runtime order.
    let patched: Vec<usize> = left.iter().filter_map(|(i, _)| *i).collect();
    let right: Vec<(usize, Value)> = original
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !patched.contains(i))
        .collect();

    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (Some((None, _)), Some(_)) => true,
            (Some((Some(li), _)), Some((ri, _))) => li < ri,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_left {
            if let Some((_, v)) = l.next() {
                out.push(v);
            }
        } else if let Some((_, v)) = r.next() {
            out.push(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(names: &[&str], value: &str) -> Value {
        Value::Array(
            names
                .iter()
                .map(|n| json!({"name": n, "value": value}))
                .collect(),
        )
    }

    fn names(v: &Value) -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn merged_env(runtime: &[&str], patch: &[&str]) -> Vec<String> {
        let mut orig = json!({"env": env(runtime, "r")});
        merge(&mut orig, &json!({"env": env(patch, "p")}));
        names(&orig["env"])
    }

    /// Each case's expected order was produced by apimachinery v0.36.3's
    /// `StrategicMergePatch` with the JobSet v0.12 schema.
    #[test]
    fn list_order_matches_apimachinery() {
        assert_eq!(merged_env(&["A", "B"], &["B", "C"]), ["A", "B", "C"]);
        assert_eq!(merged_env(&["A", "B"], &["C", "D"]), ["C", "D", "A", "B"]);
        assert_eq!(
            merged_env(&["A", "B", "C"], &["C", "X"]),
            ["A", "B", "C", "X"]
        );
        assert_eq!(
            merged_env(&["A", "B", "C"], &["X", "A"]),
            ["X", "A", "B", "C"]
        );
        assert_eq!(merged_env(&["A", "B"], &["A", "Y"]), ["A", "Y", "B"]);
        assert_eq!(
            merged_env(&["A", "B", "C"], &["B", "X", "A"]),
            ["B", "X", "A", "C"]
        );
        assert_eq!(
            merged_env(&["A", "B", "C", "D"], &["D", "X", "B"]),
            ["A", "C", "D", "X", "B"]
        );
    }

    #[test]
    fn merged_entries_take_patch_values_and_keep_runtime_fields() {
        let mut orig = json!({"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]});
        merge(
            &mut orig,
            &json!({"containers": [{"name": "c", "env": [{"name": "A", "value": "2"}]}]}),
        );
        assert_eq!(
            orig,
            json!({"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "2"}]}]})
        );
    }

    #[test]
    fn node_selector_merges_per_key_and_tolerations_are_replaced() {
        let mut orig = json!({"nodeSelector": {"x": "1"}, "tolerations": [{"key": "t1"}]});
        merge(
            &mut orig,
            &json!({"nodeSelector": {"y": "2"}, "tolerations": [{"key": "t2"}]}),
        );
        assert_eq!(
            orig,
            json!({"nodeSelector": {"x": "1", "y": "2"}, "tolerations": [{"key": "t2"}]})
        );
    }

    #[test]
    fn volume_mounts_merge_by_mount_path() {
        let mut orig = json!({"volumeMounts": [{"name": "v1", "mountPath": "/m1"}]});
        merge(
            &mut orig,
            &json!({"volumeMounts": [{"name": "v2", "mountPath": "/m2"}, {"name": "v1b", "mountPath": "/m1"}]}),
        );
        assert_eq!(
            orig,
            json!({"volumeMounts": [{"name": "v2", "mountPath": "/m2"}, {"name": "v1b", "mountPath": "/m1"}]})
        );
    }

    #[test]
    fn resource_maps_merge_per_resource_name() {
        let mut orig = json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1"}});
        merge(
            &mut orig,
            &json!({"limits": {"nvidia.com/gpu": "4", "cpu": "2"}}),
        );
        assert_eq!(
            orig,
            json!({"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "4"}, "requests": {"cpu": "1"}})
        );
    }

    #[test]
    fn replicated_jobs_follow_patch_order_before_resort() {
        let mut orig = json!({"replicatedJobs": [{"name": "a"}, {"name": "b"}]});
        merge(
            &mut orig,
            &json!({"replicatedJobs": [{"name": "b", "x": 1}, {"name": "a", "x": 2}]}),
        );
        assert_eq!(
            orig,
            json!({"replicatedJobs": [{"name": "b", "x": 1}, {"name": "a", "x": 2}]})
        );
    }

    #[test]
    fn null_deletes_and_scalars_replace() {
        let mut orig = json!({"a": 1, "b": "x", "c": [1, 2]});
        merge(&mut orig, &json!({"a": null, "b": "y", "c": [3]}));
        assert_eq!(orig, json!({"b": "y", "c": [3]}));
    }
}
