//! TrainJobStatus: the TrainJob status from its JobSet.
//!
//! - JobSet `Completed=True` → TrainJob `Complete`, `Failed=True` → `Failed`
//!   (status, reason, message and lastTransitionTime copied; set with
//!   `meta.SetStatusCondition` semantics);
//! - `jobsStatus` := one entry per JobSet `replicatedJobsStatus`;
//! - `restarts`, `restartsCountTowardsMax` := the JobSet's, once above 0
//!   (they never decrease; a restarted JobSet's `Failed` reason is
//!   `ReachedMaxRestarts` or `FailJobSetFailurePolicyAction`, copied);
//! - the JobSet missing while the TrainJob already finished (e.g. deleted by
//!   its TTL) leaves the status alone.

use serde_json::{Map, Value, json};
use trainforge_sdk::api::jobset::v1alpha2 as jobset;
use trainforge_sdk::api::trainer::v1alpha1::constants::{CONDITION_COMPLETE, CONDITION_FAILED};

/// What to do when the JobSet is missing.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// The TrainJob already finished: leave its status untouched.
    KeepStatus,
    /// The JobSet should exist (stale cache right after creation, or deleted
    /// by hand): fail so the reconcile retries.
    Retry,
}

/// The NotFound rule: untouched if the TrainJob has `Complete` or `Failed`
/// with status `True`, else retry.
pub fn when_missing(trainjob: &Value) -> Missing {
    let finished = conditions(trainjob.pointer("/status/conditions"))
        .iter()
        .any(|c| {
            let t = c.get("type").and_then(Value::as_str);
            (t == Some(CONDITION_COMPLETE) || t == Some(CONDITION_FAILED))
                && c.get("status") == Some(&json!("True"))
        });
    if finished {
        Missing::KeepStatus
    } else {
        Missing::Retry
    }
}

fn conditions(v: Option<&Value>) -> Vec<Value> {
    v.and_then(Value::as_array).cloned().unwrap_or_default()
}

/// The new TrainJob status from the current one and the JobSet.
pub fn trainjob_status(current: Option<&Value>, jobset_obj: &Value) -> Value {
    let mut status = match current {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    };
    let js_conditions = conditions(jobset_obj.pointer("/status/conditions"));
    let mut tj_conditions = conditions(status.get("conditions"));
    for (from, to) in [
        (jobset::CONDITION_COMPLETED, CONDITION_COMPLETE),
        (jobset::CONDITION_FAILED, CONDITION_FAILED),
    ] {
        let found = js_conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(from)
                && c.get("status") == Some(&json!("True"))
        });
        if let Some(c) = found {
            let mut c = c.clone();
            if let Value::Object(m) = &mut c {
                m.insert("type".into(), json!(to));
            }
            set_status_condition(&mut tj_conditions, c);
        }
    }
    let jobs: Vec<Value> = jobset_obj
        .pointer("/status/replicatedJobsStatus")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let n = |k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
            json!({
                "name": r.get("name").cloned().unwrap_or(json!("")),
                "ready": n("ready"),
                "succeeded": n("succeeded"),
                "failed": n("failed"),
                "active": n("active"),
                "suspended": n("suspended"),
            })
        })
        .collect();
    if let Value::Object(m) = &mut status {
        if tj_conditions.is_empty() {
            m.remove("conditions");
        } else {
            m.insert("conditions".into(), Value::Array(tj_conditions));
        }
        if jobs.is_empty() {
            m.remove("jobsStatus");
        } else {
            m.insert("jobsStatus".into(), Value::Array(jobs));
        }
        for key in ["restarts", "restartsCountTowardsMax"] {
            let n = jobset_obj
                .pointer(&format!("/status/{key}"))
                .and_then(Value::as_i64)
                .filter(|n| *n > 0);
            if let Some(n) = n {
                m.insert(key.into(), json!(n));
            }
        }
    }
    status
}

/// `meta.SetStatusCondition`: add the condition, or update the one of the
/// same type (lastTransitionTime only changes when the status changes).
fn set_status_condition(list: &mut Vec<Value>, new: Value) {
    let t = new.get("type").cloned();
    let Some(existing) = list.iter_mut().find(|c| c.get("type") == t.as_ref()) else {
        list.push(new);
        return;
    };
    let Value::Object(m) = existing else { return };
    if m.get("status") != new.get("status") {
        for k in ["status", "lastTransitionTime"] {
            if let Some(v) = new.get(k) {
                m.insert(k.into(), v.clone());
            }
        }
    }
    for k in ["reason", "message", "observedGeneration"] {
        if let Some(v) = new.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn js(conditions: Value, rjs: Value) -> Value {
        json!({"status": {"conditions": conditions, "replicatedJobsStatus": rjs}})
    }

    #[test]
    fn completed_maps_to_complete_with_everything_copied() {
        let j = js(
            json!([
                {"type": "StartupPolicyCompleted", "status": "True", "reason": "x", "message": "y", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully", "lastTransitionTime": "2026-01-02T00:00:00Z"}
            ]),
            json!([{"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]),
        );
        let current = json!({"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed", "lastTransitionTime": "2025-12-31T00:00:00Z"}]});
        let s = trainjob_status(Some(&current), &j);
        assert_eq!(
            s,
            json!({
                "conditions": [
                    {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed", "lastTransitionTime": "2025-12-31T00:00:00Z"},
                    {"type": "Complete", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully", "lastTransitionTime": "2026-01-02T00:00:00Z"}
                ],
                "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]
            })
        );
    }

    #[test]
    fn restarts_are_copied_once_there_are_any() {
        let mut j = js(json!([]), json!([]));
        assert_eq!(trainjob_status(None, &j).get("restarts"), None);
        j["status"]["restarts"] = json!(2);
        j["status"]["restartsCountTowardsMax"] = json!(1);
        let s = trainjob_status(Some(&json!({"restarts": 1})), &j);
        assert_eq!(
            (&s["restarts"], &s["restartsCountTowardsMax"]),
            (&json!(2), &json!(1))
        );
        // A JobSet that stopped reporting them (0 is omitted) keeps the count.
        let s = trainjob_status(Some(&s), &js(json!([]), json!([])));
        assert_eq!(s["restarts"], json!(2));
    }

    #[test]
    fn failed_maps_to_failed() {
        let j = js(
            json!([{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed due to one or more job failures", "lastTransitionTime": "2026-01-02T00:00:00Z"}]),
            json!([]),
        );
        let s = trainjob_status(None, &j);
        assert_eq!(s["conditions"][0]["type"], "Failed");
        assert_eq!(s["conditions"][0]["reason"], "FailedJobs");
        assert_eq!(
            s["conditions"][0]["lastTransitionTime"],
            "2026-01-02T00:00:00Z"
        );
        assert!(s.get("jobsStatus").is_none());
    }

    #[test]
    fn false_and_suspended_conditions_are_not_mapped_and_counters_are_copied() {
        let j = js(
            json!([{"type": "Completed", "status": "False"}, {"type": "Suspended", "status": "True"}]),
            json!([{"name": "a", "ready": 1, "active": 2}, {"name": "b", "failed": 3, "suspended": 1, "succeeded": 4}]),
        );
        let s = trainjob_status(Some(&json!({})), &j);
        assert!(s.get("conditions").is_none());
        assert_eq!(
            s["jobsStatus"],
            json!([
                {"name": "a", "ready": 1, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0},
                {"name": "b", "ready": 0, "succeeded": 4, "failed": 3, "active": 0, "suspended": 1}
            ])
        );
    }

    #[test]
    fn existing_condition_keeps_its_transition_time_when_status_is_unchanged() {
        let current = json!({"conditions": [{"type": "Complete", "status": "True", "reason": "Old", "message": "old", "lastTransitionTime": "T1"}]});
        let j = js(
            json!([{"type": "Completed", "status": "True", "reason": "New", "message": "new", "lastTransitionTime": "T2"}]),
            json!([]),
        );
        let s = trainjob_status(Some(&current), &j);
        assert_eq!(
            s["conditions"],
            json!([{"type": "Complete", "status": "True", "reason": "New", "message": "new", "lastTransitionTime": "T1"}])
        );
    }

    #[test]
    fn not_found_rule() {
        let done = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        let running = json!({"status": {"conditions": [{"type": "Complete", "status": "False"}]}});
        assert_eq!(when_missing(&done), Missing::KeepStatus);
        assert_eq!(when_missing(&failed), Missing::KeepStatus);
        assert_eq!(when_missing(&running), Missing::Retry);
        assert_eq!(when_missing(&json!({})), Missing::Retry);
    }
}
