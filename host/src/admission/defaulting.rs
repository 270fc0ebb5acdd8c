//! The TrainJob mutating webhook: it sets `spec.runtimePatches[*].time`, and
//! nothing else (the API server applies the CRD defaults itself).
//!
//! Rules, on the object as JSON (so fields this version does not know
//! survive untouched):
//! - CREATE: every patch without `time` gets the current time; a time the
//!   user gave is kept.
//! - UPDATE: each patch is matched to the old object's patch with the same
//!   `manager`.
//!   - Unchanged (equal when `time` is ignored): the old `time` is kept and a
//!     new value is discarded (when the old patch had no time, as for a new
//!     manager).
//!   - Changed: `time` is the current time, whatever the user wrote.
//!   - A manager the old object did not have: the user's `time` is kept, or
//!     the current time is set.
//! - Entries that are not objects and objects without `spec.runtimePatches`
//!   are left alone.
//!
//! Times are RFC 3339 in UTC with seconds precision (`2026-01-02T03:04:05Z`),
//! as Kubernetes stores `metav1.Time`. The result is a JSON patch with only
//! the operations that change something ([`default_trainjob`] gives `None`
//! when nothing changes).

use serde_json::{Map, Value, json};

/// Why the defaulting webhook could not compute a patch.
#[derive(Debug, thiserror::Error)]
pub enum DefaultingError {
    /// The operations built do not form a JSON patch (should not happen).
    #[error("building the JSON patch: {0}")]
    Patch(#[from] serde_json::Error),
}

/// `t` as Kubernetes stores a `metav1.Time`: RFC 3339, UTC, seconds.
pub fn format_time(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn runtime_patches(object: &Value) -> Option<&Vec<Value>> {
    object
        .pointer("/spec/runtimePatches")
        .and_then(Value::as_array)
}

fn without_time(patch: &Map<String, Value>) -> Map<String, Value> {
    let mut m = patch.clone();
    m.remove("time");
    m
}

/// The JSON patch that sets the runtime patches' times of `object` (the
/// TrainJob being created or updated; `old` the stored one on update) with
/// `now` as the current time, or `None` when nothing changes.
pub fn default_trainjob(
    object: &Value,
    old: Option<&Value>,
    now: &str,
) -> Result<Option<json_patch::Patch>, DefaultingError> {
    let Some(patches) = runtime_patches(object) else {
        return Ok(None);
    };
    let old_patches: Vec<&Map<String, Value>> = old
        .and_then(runtime_patches)
        .map(|v| v.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let mut ops = Vec::new();
    for (i, patch) in patches.iter().enumerate() {
        let Some(patch) = patch.as_object() else {
            continue;
        };
        let current = patch.get("time").filter(|t| !t.is_null());
        let manager = patch.get("manager");
        let previous = match (old, manager) {
            (Some(_), Some(m)) => old_patches
                .iter()
                .find(|o| o.get("manager") == Some(m))
                .copied(),
            _ => None,
        };
        let desired: Value = match previous {
            Some(prev) if without_time(prev) == without_time(patch) => {
                match prev.get("time").filter(|t| !t.is_null()) {
                    Some(t) => t.clone(),
                    None => current.cloned().unwrap_or_else(|| json!(now)),
                }
            }
            Some(_) => json!(now),
            None => current.cloned().unwrap_or_else(|| json!(now)),
        };
        if current == Some(&desired) {
            continue;
        }
        let path = format!("/spec/runtimePatches/{i}/time");
        let op = if patch.contains_key("time") {
            "replace"
        } else {
            "add"
        };
        ops.push(json!({"op": op, "path": path, "value": desired}));
    }
    if ops.is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::from_value(Value::Array(ops))?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const NOW: &str = "2026-11-24T09:00:00Z";
    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-02-02T00:00:00Z";

    fn job(patches: Value) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "rt"}, "runtimePatches": patches, "x-unknown": 1}})
    }

    fn patch(manager: &str, label: &str, time: Option<&str>) -> Value {
        let mut p = json!({"manager": manager, "trainingRuntimeSpec": {"template": {"metadata":
            {"labels": {"l": label}}}}});
        if let Some(t) = time {
            p["time"] = json!(t);
        }
        p
    }

    /// Apply the defaulting and return the resulting patch times.
    fn times(object: Value, old: Option<Value>) -> (Vec<Option<String>>, usize) {
        let p = default_trainjob(&object, old.as_ref(), NOW).unwrap();
        let n = p.as_ref().map_or(0, |p| p.0.len());
        let mut out = object.clone();
        if let Some(p) = p {
            json_patch::patch(&mut out, &p).unwrap();
        }
        assert_eq!(out["spec"]["x-unknown"], 1, "unknown fields survive");
        let t = out["spec"]["runtimePatches"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| p.get("time").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        (t, n)
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn create_sets_missing_times_and_keeps_given_ones() {
        let (t, n) = times(
            job(json!([
                patch("a/m", "1", None),
                patch("b/m", "1", Some(T1))
            ])),
            None,
        );
        assert_eq!(t, [some(NOW), some(T1)]);
        assert_eq!(n, 1, "only the patch without time is touched");
    }

    #[test]
    fn create_with_every_time_given_needs_no_patch() {
        let (t, n) = times(job(json!([patch("a/m", "1", Some(T1))])), None);
        assert_eq!((t, n), (vec![some(T1)], 0));
    }

    #[test]
    fn update_unchanged_patch_keeps_the_old_time() {
        let old = job(json!([patch("a/m", "1", Some(T1))]));
        // No time in the new object.
        assert_eq!(
            times(job(json!([patch("a/m", "1", None)])), Some(old.clone())).0,
            [some(T1)]
        );
        // A new time is discarded.
        assert_eq!(
            times(job(json!([patch("a/m", "1", Some(T2))])), Some(old.clone())).0,
            [some(T1)]
        );
        // Same time: nothing to do.
        assert_eq!(
            times(job(json!([patch("a/m", "1", Some(T1))])), Some(old)).1,
            0
        );
    }

    #[test]
    fn update_changed_patch_gets_now_even_over_a_user_time() {
        let old = job(json!([patch("a/m", "1", Some(T1))]));
        assert_eq!(
            times(job(json!([patch("a/m", "2", None)])), Some(old.clone())).0,
            [some(NOW)]
        );
        assert_eq!(
            times(job(json!([patch("a/m", "2", Some(T2))])), Some(old)).0,
            [some(NOW)]
        );
    }

    #[test]
    fn update_new_manager_keeps_user_time_or_gets_now() {
        let old = job(json!([patch("a/m", "1", Some(T1))]));
        let new = job(json!([
            patch("a/m", "1", Some(T1)),
            patch("b/m", "1", None),
            patch("c/m", "1", Some(T2))
        ]));
        assert_eq!(times(new, Some(old)).0, [some(T1), some(NOW), some(T2)]);
    }

    #[test]
    fn update_only_the_changed_patch_gets_a_new_time() {
        let old = job(json!([
            patch("a/m", "1", Some(T1)),
            patch("b/m", "1", Some(T2))
        ]));
        let new = job(json!([
            patch("a/m", "1", Some(T1)),
            patch("b/m", "9", Some(T2))
        ]));
        assert_eq!(times(new, Some(old)).0, [some(T1), some(NOW)]);
    }

    #[test]
    fn reordered_and_removed_patches_match_by_manager() {
        let old = job(json!([
            patch("a/m", "1", Some(T1)),
            patch("b/m", "1", Some(T2)),
            patch("c/m", "1", Some(T1))
        ]));
        // Reordered, `c` removed, times dropped by the client.
        let new = job(json!([patch("b/m", "1", None), patch("a/m", "1", None)]));
        assert_eq!(times(new, Some(old)).0, [some(T2), some(T1)]);
    }

    #[test]
    fn nothing_to_do_without_runtime_patches() {
        let mut j = job(Value::Null);
        assert!(default_trainjob(&j, None, NOW).unwrap().is_none());
        j["spec"].as_object_mut().unwrap().remove("runtimePatches");
        assert!(default_trainjob(&j, None, NOW).unwrap().is_none());
        assert!(default_trainjob(&json!({}), None, NOW).unwrap().is_none());
        assert!(default_trainjob(&json!("x"), None, NOW).unwrap().is_none());
        assert!(
            default_trainjob(&job(json!([])), None, NOW)
                .unwrap()
                .is_none()
        );
        // Entries that are not objects are skipped.
        assert!(
            default_trainjob(&job(json!([1, "x"])), None, NOW)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn null_time_is_replaced() {
        let p = default_trainjob(&job(json!([{"manager": "a/m", "time": null}])), None, NOW)
            .unwrap()
            .unwrap();
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!([{"op": "replace", "path": "/spec/runtimePatches/0/time", "value": NOW}])
        );
    }

    #[test]
    fn times_have_seconds_precision_in_utc() {
        let t: k8s_openapi::jiff::Timestamp = "2026-11-24T09:00:00.123456Z".parse().unwrap();
        assert_eq!(format_time(t), "2026-11-24T09:00:00Z");
    }
}
