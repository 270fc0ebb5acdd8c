//! TrainJob conditions: `Suspended`, `Complete`, `Failed`, and the active
//! deadline — pure functions over the status as JSON, so every rule is unit
//! tested without a cluster.
//!
//! Semantics follow `meta.SetStatusCondition`: `lastTransitionTime` moves
//! only when `status` changes; reason, message and observedGeneration are
//! always updated.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};
use trainforge_api::trainer::v1alpha1::constants::{
    CONDITION_COMPLETE, CONDITION_FAILED, CONDITION_SUSPENDED, MESSAGE_DEADLINE_EXCEEDED,
    MESSAGE_RESUMED, MESSAGE_SUSPENDED, REASON_DEADLINE_EXCEEDED, REASON_RESUMED, REASON_SUSPENDED,
};

/// An RFC 3339 timestamp at second precision (what the API server stores).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The conditions of a status object (empty when absent).
pub fn conditions(status: &Value) -> &[Value] {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The condition of this type, if present.
pub fn find<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions(status)
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// Whether the condition is present with status `True`.
pub fn is_true(status: &Value, kind: &str) -> bool {
    find(status, kind).is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// `Complete=True` or `Failed=True`: the job is finished and its objects
/// are never applied again.
pub fn is_finished(status: &Value) -> bool {
    is_true(status, CONDITION_COMPLETE) || is_true(status, CONDITION_FAILED)
}

/// Set a condition on `status` (an object; created if `null`).
pub fn set(
    status: &mut Value,
    kind: &str,
    state: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let new = json!({
        "type": kind,
        "status": if state { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    });
    let Some(map) = status.as_object_mut() else {
        return;
    };
    let list = map
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let Some(list) = list.as_array_mut() else {
        return;
    };
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        None => list.push(new),
        Some(existing) => {
            let keep_time = existing.get("status") == new.get("status");
            let time = existing.get("lastTransitionTime").cloned();
            *existing = new;
            if let (true, Some(t), Some(m)) = (keep_time, time, existing.as_object_mut()) {
                m.insert("lastTransitionTime".into(), t);
            }
        }
    }
}

/// Step 5 of upstream's reconcile: `spec.suspend=true` ⇒ `Suspended=True`;
/// otherwise a currently suspended job becomes `Suspended=False/Resumed`;
/// a job never suspended gets no condition.
pub fn apply_suspend(status: &mut Value, suspend: bool, now: Timestamp) {
    if suspend {
        set(
            status,
            CONDITION_SUSPENDED,
            true,
            REASON_SUSPENDED,
            MESSAGE_SUSPENDED,
            now,
        );
    } else if is_true(status, CONDITION_SUSPENDED) {
        set(
            status,
            CONDITION_SUSPENDED,
            false,
            REASON_RESUMED,
            MESSAGE_RESUMED,
            now,
        );
    }
}

/// The `Failed/DeadlineExceeded` condition, if the status has it (it is
/// re-applied over whatever the status plugin computes).
pub fn deadline_exceeded(status: &Value) -> Option<Value> {
    find(status, CONDITION_FAILED)
        .filter(|c| c.get("reason").and_then(Value::as_str) == Some(REASON_DEADLINE_EXCEEDED))
        .cloned()
}

/// Put a remembered condition back (replacing the one of the same type).
pub fn restore(status: &mut Value, condition: Value) {
    let Some(kind) = condition
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    let Some(map) = status.as_object_mut() else {
        return;
    };
    let list = map
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = list.as_array_mut() {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some(kind.as_str()));
        list.push(condition);
    }
}

/// What the active deadline asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadline {
    /// No deadline, or it does not run (finished or suspended).
    None,
    /// Not yet: reconcile again after this long (at least 1 s).
    Remaining(Duration),
    /// Exceeded: fail the job and delete its JobSet.
    Exceeded,
}

/// Step 7 of upstream's reconcile: the clock starts at creation, or at the
/// last resume (`Suspended=False` transition), and does not run while the
/// job is suspended or finished.
pub fn deadline(
    active_deadline_seconds: Option<i64>,
    suspended: bool,
    created: Option<Timestamp>,
    status: &Value,
    now: Timestamp,
) -> Deadline {
    let Some(ads) = active_deadline_seconds.filter(|s| *s > 0) else {
        return Deadline::None;
    };
    if suspended || is_finished(status) {
        return Deadline::None;
    }
    let resumed = find(status, CONDITION_SUSPENDED)
        .filter(|c| c.get("status").and_then(Value::as_str) == Some("False"))
        .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str))
        .and_then(|t| t.parse::<Timestamp>().ok());
    let Some(start) = resumed.or(created) else {
        return Deadline::None;
    };
    let Ok(end) = start.checked_add(SignedDuration::from_secs(ads)) else {
        return Deadline::None;
    };
    if now > end {
        return Deadline::Exceeded;
    }
    let left = now.duration_until(end).unsigned_abs();
    Deadline::Remaining(left.max(Duration::from_secs(1)))
}

/// Mark the job failed by its deadline.
pub fn fail_deadline(status: &mut Value, now: Timestamp) {
    set(
        status,
        CONDITION_FAILED,
        true,
        REASON_DEADLINE_EXCEEDED,
        MESSAGE_DEADLINE_EXCEEDED,
        now,
    );
}

/// One observable change between two statuses, for Events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Condition type.
    pub kind: String,
    /// New status (`True`/`False`).
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// Conditions whose status or reason changed from `old` to `new`.
pub fn transitions(old: &Value, new: &Value) -> Vec<Transition> {
    conditions(new)
        .iter()
        .filter_map(|c| {
            let s = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let kind = s("type");
            let before = find(old, &kind);
            let same = before.is_some_and(|b| {
                b.get("status") == c.get("status") && b.get("reason") == c.get("reason")
            });
            (!same).then(|| Transition {
                kind,
                status: s("status"),
                reason: s("reason"),
                message: s("message"),
            })
        })
        .collect()
}

/// A JSON merge patch turning the status `old` into `new` at the top level
/// (`conditions` and `jobsStatus` are replaced whole; removed keys are `null`).
pub fn status_patch(old: &Value, new: &Value) -> Value {
    if new.as_object().is_none_or(|m| m.is_empty()) {
        return json!({ "status": null });
    }
    let mut patch = Map::new();
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new_map = new.as_object().unwrap_or(&empty);
    for (k, v) in new_map {
        if old.get(k) != Some(v) {
            patch.insert(k.clone(), v.clone());
        }
    }
    for k in old.keys() {
        if !new_map.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    json!({ "status": patch })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn suspend_then_resume_keeps_upstream_reasons_and_times() {
        let mut s = Value::Null;
        apply_suspend(&mut s, false, t("2026-01-01T00:00:00Z"));
        assert_eq!(s, Value::Null, "a job never suspended gets no condition");
        apply_suspend(&mut s, true, t("2026-01-01T00:00:00Z"));
        apply_suspend(&mut s, true, t("2026-01-01T00:05:00Z"));
        assert_eq!(
            s,
            json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended",
                "message": "TrainJob is suspended", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
        );
        apply_suspend(&mut s, false, t("2026-01-01T00:10:00Z"));
        assert_eq!(
            find(&s, "Suspended").unwrap(),
            &json!({"type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2026-01-01T00:10:00Z"})
        );
        apply_suspend(&mut s, false, t("2026-01-01T00:20:00Z"));
        assert_eq!(
            find(&s, "Suspended").unwrap()["lastTransitionTime"],
            "2026-01-01T00:10:00Z"
        );
    }

    #[test]
    fn deadline_runs_from_creation_or_resume_and_not_while_suspended() {
        let created = Some(t("2026-01-01T00:00:00Z"));
        let none = Value::Null;
        assert_eq!(
            deadline(None, false, created, &none, t("2030-01-01T00:00:00Z")),
            Deadline::None
        );
        assert_eq!(
            deadline(Some(0), false, created, &none, t("2030-01-01T00:00:00Z")),
            Deadline::None
        );
        assert_eq!(
            deadline(Some(60), false, created, &none, t("2026-01-01T00:00:30Z")),
            Deadline::Remaining(Duration::from_secs(30))
        );
        assert_eq!(
            deadline(
                Some(60),
                false,
                created,
                &none,
                t("2026-01-01T00:00:59.900Z")
            ),
            Deadline::Remaining(Duration::from_secs(1)),
            "at least one second"
        );
        assert_eq!(
            deadline(Some(60), false, created, &none, t("2026-01-01T00:01:01Z")),
            Deadline::Exceeded
        );
        assert_eq!(
            deadline(Some(60), true, created, &none, t("2026-01-01T00:01:01Z")),
            Deadline::None
        );
        let resumed = json!({"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed",
            "lastTransitionTime": "2026-01-01T00:01:00Z"}]});
        assert_eq!(
            deadline(
                Some(60),
                false,
                created,
                &resumed,
                t("2026-01-01T00:01:30Z")
            ),
            Deadline::Remaining(Duration::from_secs(30)),
            "resuming resets the clock"
        );
        let mut done = Value::Null;
        fail_deadline(&mut done, t("2026-01-01T00:02:00Z"));
        assert_eq!(
            deadline(Some(60), false, created, &done, t("2026-01-01T00:03:00Z")),
            Deadline::None
        );
        assert!(is_finished(&done));
        assert_eq!(
            deadline_exceeded(&done).unwrap()["reason"],
            "DeadlineExceeded"
        );
    }

    #[test]
    fn restore_replaces_the_condition_of_the_same_type() {
        let mut s = json!({"conditions": [{"type": "Failed", "status": "False", "reason": "x"}]});
        restore(
            &mut s,
            json!({"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}),
        );
        assert_eq!(conditions(&s).len(), 1);
        assert!(is_true(&s, "Failed"));
    }

    #[test]
    fn transitions_and_patch() {
        let old = json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended"}],
            "jobsStatus": [{"name": "node"}]});
        let new = json!({"conditions": [
            {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed"},
            {"type": "Complete", "status": "True", "reason": "AllJobsCompleted", "message": "done"}]});
        let tr = transitions(&old, &new);
        assert_eq!(
            tr.iter().map(|t| t.reason.as_str()).collect::<Vec<_>>(),
            ["Resumed", "AllJobsCompleted"]
        );
        assert!(transitions(&new, &new).is_empty());
        assert_eq!(
            status_patch(&old, &new),
            json!({"status": {"conditions": new["conditions"], "jobsStatus": null}})
        );
        assert_eq!(
            status_patch(&old, &json!({})),
            json!({"status": null}),
            "no empty status object"
        );
    }
}
