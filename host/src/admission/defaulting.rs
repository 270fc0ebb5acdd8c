//! The TrainJob mutating webhook: on CREATE it moves the v2.1 override
//! fields into their runtime patch, and it sets
//! `spec.runtimePatches[*].time`; nothing else (the API server applies the
//! CRD defaults itself).
//!
//! Moving the v2.1 fields (`spec.labels`, `spec.annotations`,
//! `spec.podTemplateOverrides`; [`trainforge_api::blueprint::legacy`]) on
//! CREATE means no client ever sees them stored: Kueue computes its
//! Workload from the TrainJob as stored with its own (newer) types, so a
//! move after creation would change the Workload's pod sets and make Kueue
//! recreate it. Rules: a TrainJob delegated to another controller
//! (`spec.managedBy`) or whose fields cannot be moved (too many runtime
//! patches, a value that is no runtime patch) is left as sent (the operator
//! reports it); the moved patch goes first in `spec.runtimePatches` (or
//! replaces one of its manager in place) and every other patch is kept as
//! sent, byte for byte; the answer carries a warning naming the fields.
//! Updates are not converted here: the operator moves fields an update sets
//! again, as it moves those of TrainJobs stored while admission was bypassed.
//!
//! Time rules, on the object as JSON (so fields this version does not know
//! survive untouched):
//! - CREATE: every patch without `time` gets the current time; a time the
//!   user gave is kept.
//! - UPDATE: each patch is matched to the old object's patch with the same
//!   `manager`.
//!   - Unchanged (equal when `time` is ignored): the old `time` is kept and a
//!     new value is discarded; an old patch without `time` stays without one,
//!     as upstream's webhook leaves it. Such a patch exists when another
//!     webhook added it after ours (Kueue's adds an empty patch of manager
//!     `kueue.x-k8s.io/manager` to every TrainJob). Were a time added to it on
//!     an unrelated update, the update would change `spec.runtimePatches`
//!     and be refused on a running TrainJob (e.g. the operator's move of the
//!     v2.1 fields into a runtime patch).
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
use trainforge_api::blueprint::legacy;
use trainforge_api::trainer::v1alpha1::TrainJobSpec;
use trainforge_api::trainer::v1alpha1::constants::MANAGED_BY_TRAINJOB_CONTROLLER;

/// Why the defaulting webhook could not compute a patch.
#[derive(Debug, thiserror::Error)]
pub enum DefaultingError {
    /// The operations built do not form a JSON patch (should not happen).
    #[error("building the JSON patch: {0}")]
    Patch(#[from] serde_json::Error),
    /// The time patch did not apply to the object with its v2.1 fields moved
    /// (should not happen).
    #[error("setting the runtime patches' times: {0}")]
    Apply(#[from] json_patch::PatchError),
}

/// The mutating webhook's answer for a TrainJob.
#[derive(Debug, Default)]
pub struct Mutation {
    /// The JSON patch, if anything changes.
    pub patch: Option<json_patch::Patch>,
    /// Warnings for the client (the v2.1 fields moved).
    pub warnings: Vec<String>,
}

/// The whole mutation of `object` (`old` on UPDATE; `now` the current
/// time): the v2.1 fields moved on CREATE ([`move_legacy_fields`]), then the
/// runtime patches' times ([`default_trainjob`]), as one JSON patch against
/// the object as sent. `movable` says whether the fields of a TrainJob may
/// move (the router: its runtime exists and has every job and container
/// they name; otherwise they stay, so that validation refuses them naming
/// the field the user wrote).
pub fn mutate_trainjob(
    object: &Value,
    old: Option<&Value>,
    now: &str,
    movable: &dyn Fn(&Value) -> bool,
) -> Result<Mutation, DefaultingError> {
    let moved = match old {
        None if movable(object) => move_legacy_fields(object),
        _ => None,
    };
    let Some((mut moved, note)) = moved else {
        return Ok(Mutation {
            patch: default_trainjob(object, old, now)?,
            warnings: Vec::new(),
        });
    };
    if let Some(times) = default_trainjob(&moved, old, now)? {
        json_patch::patch(&mut moved, &times)?;
    }
    Ok(Mutation {
        patch: Some(json_patch::diff(object, &moved)),
        warnings: vec![note],
    })
}

/// `object` with its v2.1 override fields moved into the runtime patch of
/// [`legacy::LEGACY_FIELDS_MANAGER`], and the note that says so; `None` when
/// it has none, is delegated to another controller, or cannot be converted
/// (see the module rules).
pub fn move_legacy_fields(object: &Value) -> Option<(Value, String)> {
    let spec = object.get("spec")?;
    let delegated = spec
        .get("managedBy")
        .and_then(Value::as_str)
        .is_some_and(|m| m != MANAGED_BY_TRAINJOB_CONTROLLER);
    if delegated {
        return None;
    }
    let typed: TrainJobSpec = serde_json::from_value(spec.clone()).ok()?;
    let conversion = legacy::convert(&typed).ok()??;
    let moved_patch = conversion
        .runtime_patches
        .iter()
        .find(|p| p.manager == legacy::LEGACY_FIELDS_MANAGER)
        .map(serde_json::to_value)
        .transpose()
        .ok()?;
    let mut out = object.clone();
    let spec = out.get_mut("spec")?.as_object_mut()?;
    for field in ["labels", "annotations", "podTemplateOverrides"] {
        spec.remove(field);
    }
    if let Some(moved_patch) = moved_patch {
        let list = spec
            .entry("runtimePatches")
            .or_insert_with(|| Value::Array(Vec::new()));
        if list.is_null() {
            *list = Value::Array(Vec::new());
        }
        let list = list.as_array_mut()?;
        match list.iter().position(|p| {
            p.get("manager").and_then(Value::as_str) == Some(legacy::LEGACY_FIELDS_MANAGER)
        }) {
            Some(i) => list[i] = moved_patch,
            None => list.insert(0, moved_patch),
        }
    }
    Some((out, legacy::moved_note(&conversion.converted)))
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
        let desired: Option<Value> = match previous {
            Some(prev) if without_time(prev) == without_time(patch) => {
                prev.get("time").filter(|t| !t.is_null()).cloned()
            }
            Some(_) => Some(json!(now)),
            None => Some(current.cloned().unwrap_or_else(|| json!(now))),
        };
        if current == desired.as_ref() {
            continue;
        }
        let path = format!("/spec/runtimePatches/{i}/time");
        ops.push(match desired {
            Some(value) if patch.contains_key("time") => {
                json!({"op": "replace", "path": path, "value": value})
            }
            Some(value) => json!({"op": "add", "path": path, "value": value}),
            // `current` is set (it differs from `None`): remove it.
            None => json!({"op": "remove", "path": path}),
        });
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

    /// [`mutate_trainjob`] applied: the resulting object and warnings.
    fn mutated(object: &Value, old: Option<&Value>) -> (Value, Vec<String>) {
        let m = mutate_trainjob(object, old, NOW, &|_| true).unwrap();
        let mut out = object.clone();
        if let Some(p) = &m.patch {
            json_patch::patch(&mut out, p).unwrap();
        }
        (out, m.warnings)
    }

    fn legacy_job(spec_extra: Value) -> Value {
        let mut j = job(json!([patch("kueue.x-k8s.io/manager", "k", None)]));
        if let (Some(s), Value::Object(extra)) = (j["spec"].as_object_mut(), spec_extra) {
            s.extend(extra);
        }
        j
    }

    #[test]
    fn create_moves_the_v21_fields_first_and_keeps_other_patches_as_sent() {
        let sent = legacy_job(json!({
            "labels": {"team": "a"},
            "podTemplateOverrides": [{"targetJobs": [{"name": "node"}],
                "spec": {"nodeSelector": {"zone": "z1"}}}]
        }));
        let (out, warnings) = mutated(&sent, None);
        let spec = &out["spec"];
        for gone in ["labels", "annotations", "podTemplateOverrides"] {
            assert!(spec.get(gone).is_none(), "{gone}: {spec}");
        }
        let patches = spec["runtimePatches"].as_array().unwrap();
        assert_eq!(patches[0]["manager"], legacy::LEGACY_FIELDS_MANAGER);
        assert_eq!(patches[0]["time"], NOW);
        assert_eq!(
            patches[0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"]["team"],
            "a"
        );
        assert_eq!(
            patches[0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
                ["spec"]["template"]["spec"]["nodeSelector"]["zone"],
            "z1"
        );
        // The other patch as sent, plus its time.
        let mut kueue = sent["spec"]["runtimePatches"][0].clone();
        kueue["time"] = json!(NOW);
        assert_eq!(patches[1], kueue);
        assert_eq!(spec["x-unknown"], 1, "unknown fields survive");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with(
                "spec.labels, spec.podTemplateOverrides moved into spec.runtimePatches"
            ),
            "{warnings:?}"
        );
    }

    #[test]
    fn fields_that_cannot_move_and_delegated_or_updated_jobs_are_left_as_sent() {
        let labels = json!({"labels": {"team": "a"}});
        // Sixteen patches already: no room for another.
        let mut full = legacy_job(labels.clone());
        full["spec"]["runtimePatches"] = Value::Array(
            (0..16)
                .map(|i| patch(&format!("m{i}.example.com/x"), "1", Some(T1)))
                .collect(),
        );
        let mut delegated = legacy_job(labels.clone());
        delegated["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
        for (what, sent) in [("full", full), ("delegated", delegated)] {
            let (out, warnings) = mutated(&sent, None);
            assert_eq!(out["spec"]["labels"], sent["spec"]["labels"], "{what}");
            assert!(warnings.is_empty(), "{what}: {warnings:?}");
        }
        // An update: left to the operator (only times are set).
        let sent = legacy_job(labels);
        let (out, warnings) = mutated(&sent, Some(&sent));
        assert_eq!(out["spec"]["labels"]["team"], "a");
        assert!(warnings.is_empty());
        // Not movable (the router found a name the runtime lacks).
        let sent = legacy_job(json!({"labels": {"team": "a"}}));
        let m = mutate_trainjob(&sent, None, NOW, &|_| false).unwrap();
        assert!(m.warnings.is_empty());
        let mut out = sent.clone();
        json_patch::patch(&mut out, &m.patch.unwrap()).unwrap();
        assert_eq!(out["spec"]["labels"]["team"], "a");
        // Nothing to move: only times.
        let (out, warnings) = mutated(&job(json!([])), None);
        assert_eq!(out, job(json!([])));
        assert!(warnings.is_empty());
    }

    #[test]
    fn update_unchanged_patch_without_a_time_stays_without_one() {
        // Kueue's webhook adds its patch after ours: stored without time.
        let kueue = json!({"manager": "kueue.x-k8s.io/manager",
            "trainingRuntimeSpec": {"template": {"spec": {}}}});
        let old = job(json!([kueue.clone()]));
        // An unrelated update (the v2.1 fields moved into a patch of ours,
        // first in the list) leaves Kueue's patch as it was.
        let new = job(json!([
            patch("trainer.kubeflow.org/v2.1-fields", "1", None),
            kueue
        ]));
        let (t, n) = times(new, Some(old.clone()));
        assert_eq!(t, [some(NOW), None]);
        assert_eq!(n, 1);
        // A time a client adds to it is discarded, as upstream does.
        let mut with_time = old.clone();
        with_time["spec"]["runtimePatches"][0]["time"] = json!(T2);
        let (t, n) = times(with_time, Some(old.clone()));
        assert_eq!((t, n), (vec![None], 1));
        // Nothing to do when it stays as it was.
        assert!(default_trainjob(&old, Some(&old), NOW).unwrap().is_none());
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
