//! Kubernetes Events on TrainJobs (reporter `trainer-trainjob-controller`):
//! upstream's `TrainJobResourcesCreationFailed`, plus one Event per
//! important transition (JobSet created, suspended, resumed, complete,
//! failed, deadline exceeded, unsupported or missing runtime, no plugin set
//! that can serve) and a Warning per restart by the failure policy.
//!
//! How Events are written (core `v1`, aggregated repeats, bounded notes) is
//! [`crate::ops::events`].

use kube::Resource;
use tracing::warn;
use trainforge_api::trainer::v1alpha1::{TrainJob, TrainJobStatus};

pub use crate::ops::events::EventType;
use crate::ops::events::{Occurrence, bounded};

use super::Context;
use super::conditions::{CONDITION_PLUGINS_READY, ConditionStatus, Transition};

/// Upstream's reason for any failure to build or apply a TrainJob's objects.
pub const REASON_CREATION_FAILED: &str = "TrainJobResourcesCreationFailed";
/// Upstream's action for it.
pub const ACTION_RECONCILING: &str = "Reconciling";
/// Upstream's note: `TrainJob resources reconciliation failed: <err>` with
/// the error cut at 950 characters (and ` ...` appended).
pub fn creation_failed_note(error: &str) -> String {
    format!(
        "TrainJob resources reconciliation failed: {}",
        bounded(error)
    )
}

/// Publish an Event; failures are logged, never fatal. Returns whether it
/// was written.
pub async fn publish(
    ctx: &Context,
    job: &TrainJob,
    event_type: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> bool {
    let regarding = job.object_ref(&());
    let occurrence = Occurrence {
        event_type,
        reason,
        action,
        note,
        regarding: &regarding,
    };
    match ctx.recorder.record(occurrence).await {
        Ok(()) => {
            ctx.metrics.api_write("create", "Event");
            true
        }
        Err(e) => {
            warn!(error = %e, %reason, "publishing Event failed");
            false
        }
    }
}

/// The name of the Event for transition `t` of `job`:
/// `<trainjob>.<digest>`, the digest of the TrainJob's uid and the
/// transition (condition type, new status and reason, and the condition it
/// replaces). A reconcile that computes the same transition again — the
/// status write failed, or the process died before it — names the same
/// Event, so each transition is announced once.
pub fn transition_event_name(job: &TrainJob, t: &Transition) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [
        job.metadata.uid.as_deref().unwrap_or_default(),
        &t.kind,
        t.status.as_str(),
        &t.reason,
        &t.from,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    format!(
        "{}.{}",
        job.metadata.name.as_deref().unwrap_or_default(),
        hex::encode(&digest[..8])
    )
}

/// Publish the Event of transition `t` exactly once (see
/// [`transition_event_name`]); failures are logged, never fatal. Returns
/// whether this call wrote it.
pub async fn publish_transition(
    ctx: &Context,
    job: &TrainJob,
    t: &Transition,
    (event_type, reason, note): (EventType, String, String),
) -> bool {
    let regarding = job.object_ref(&());
    let occurrence = Occurrence {
        event_type,
        reason: &reason,
        action: ACTION_RECONCILING,
        note,
        regarding: &regarding,
    };
    let name = transition_event_name(job, t);
    match ctx.recorder.record_once(occurrence, &name).await {
        Ok(written) => {
            if written {
                ctx.metrics.api_write("create", "Event");
            }
            written
        }
        Err(e) => {
            warn!(error = %e, %reason, "publishing Event failed");
            false
        }
    }
}

/// Reason of the Warning published on each restart of a TrainJob by its
/// failure policy.
pub const REASON_RESTARTED: &str = "TrainJobRestarted";

/// The restart from `old` to `new` status (its `restarts` grew), as a
/// transition named by the new count (so each restart is announced once),
/// with its Warning: upstream's KEP-4162 emits one per restart.
pub fn for_restart(
    old: &TrainJobStatus,
    new: &TrainJobStatus,
) -> Option<(Transition, (EventType, String, String))> {
    let (before, now) = (old.restarts.unwrap_or(0), new.restarts?);
    if now <= before {
        return None;
    }
    let counted = new.restarts_count_towards_max.unwrap_or(0);
    let t = Transition {
        kind: REASON_RESTARTED.into(),
        status: ConditionStatus::True,
        reason: REASON_RESTARTED.into(),
        message: String::new(),
        from: format!("restarts={now}"),
    };
    let note = format!(
        "TrainJob restarted after a failure: restart {now}, {counted} counted towards maxRestarts"
    );
    Some((t, (EventType::Warning, REASON_RESTARTED.into(), note)))
}

/// The Event for a condition transition, if it is one users care about:
/// `(type, reason, note)`.
pub fn for_transition(t: &Transition) -> Option<(EventType, String, String)> {
    let note = |fallback: &str| {
        if t.message.is_empty() {
            fallback.to_owned()
        } else {
            bounded(&t.message)
        }
    };
    match (t.kind.as_str(), t.status) {
        ("Suspended", ConditionStatus::True) => Some((
            EventType::Normal,
            "Suspended".into(),
            note("TrainJob is suspended"),
        )),
        ("Suspended", ConditionStatus::False) => Some((
            EventType::Normal,
            "Resumed".into(),
            note("TrainJob is resumed"),
        )),
        ("Complete", ConditionStatus::True) => Some((
            EventType::Normal,
            "Completed".into(),
            note("TrainJob completed"),
        )),
        ("Failed", ConditionStatus::True) => Some((
            EventType::Warning,
            t.reason.clone(),
            note("TrainJob failed"),
        )),
        ("Blocked", ConditionStatus::True)
            if t.reason == super::pod_failures::REASON_POD_CREATION_FAILED =>
        {
            Some((
                EventType::Warning,
                t.reason.clone(),
                note("the TrainJob's pods cannot be created"),
            ))
        }
        (CONDITION_PLUGINS_READY, ConditionStatus::False) => Some((
            EventType::Warning,
            t.reason.clone(),
            note("no plugin set can serve TrainJobs"),
        )),
        _ => None,
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn note_is_truncated_like_upstream() {
        assert_eq!(
            creation_failed_note("boom"),
            "TrainJob resources reconciliation failed: boom"
        );
        let long = "x".repeat(2000);
        let note = creation_failed_note(&long);
        assert!(note.ends_with("x ..."));
        assert_eq!(
            note.len(),
            "TrainJob resources reconciliation failed: ".len() + 950 + 4
        );
    }

    #[test]
    fn notes_are_cut_on_characters() {
        let wide = "é".repeat(951);
        let note = creation_failed_note(&wide);
        assert!(note.ends_with("é ..."), "{note}");
        assert_eq!(
            creation_failed_note(&"é".repeat(950)),
            format!(
                "TrainJob resources reconciliation failed: {}",
                "é".repeat(950)
            ),
            "exactly at the limit: not cut"
        );
    }

    #[test]
    fn each_restart_is_one_warning_named_by_its_count() {
        let s = |r: Option<i32>, c: Option<i32>| TrainJobStatus {
            restarts: r,
            restarts_count_towards_max: c,
            ..TrainJobStatus::default()
        };
        assert!(for_restart(&s(None, None), &s(None, None)).is_none());
        assert!(for_restart(&s(Some(2), None), &s(Some(2), None)).is_none());
        let (first, (kind, reason, note)) =
            for_restart(&s(None, None), &s(Some(1), Some(1))).unwrap();
        assert_eq!(
            (kind, reason.as_str()),
            (EventType::Warning, REASON_RESTARTED)
        );
        assert!(note.contains("restart 1, 1 counted"), "{note}");
        let (second, _) = for_restart(&s(Some(1), Some(1)), &s(Some(2), Some(1))).unwrap();
        assert_ne!(first.from, second.from, "a new restart is a new Event");
        let (again, _) = for_restart(&s(None, None), &s(Some(2), Some(1))).unwrap();
        assert_eq!(
            again.from, second.from,
            "the same restart computed again names the same Event"
        );
    }

    #[test]
    fn transitions_worth_an_event() {
        let t = |kind: &str, status: ConditionStatus, reason: &str| Transition {
            kind: kind.into(),
            status,
            reason: reason.into(),
            message: String::new(),
            from: String::new(),
        };
        assert_eq!(
            for_transition(&t("Failed", ConditionStatus::True, "DeadlineExceeded"))
                .unwrap()
                .1,
            "DeadlineExceeded"
        );
        assert!(
            for_transition(&t("Failed", ConditionStatus::True, "x"))
                .unwrap()
                .0
                == EventType::Warning,
            "failures are warnings"
        );
        assert_eq!(
            for_transition(&t("Suspended", ConditionStatus::False, "Resumed"))
                .unwrap()
                .1,
            "Resumed"
        );
        assert!(for_transition(&t("Complete", ConditionStatus::False, "x")).is_none());
        assert!(for_transition(&t("Complete", ConditionStatus::Unknown, "x")).is_none());
    }

    #[test]
    fn a_transition_names_its_event_the_same_until_its_status_is_stored() {
        use super::super::conditions::transitions;
        use trainforge_api::trainer::v1alpha1::TrainJobStatus;
        let job: TrainJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "job", "namespace": "team", "uid": "u-1"},
            "spec": {"runtimeRef": {"name": "torch"}}}))
        .unwrap();
        let status = |conds: serde_json::Value| -> TrainJobStatus {
            serde_json::from_value(serde_json::json!({ "conditions": conds })).unwrap()
        };
        let cond = |t: &str, s: &str, r: &str, at: &str| {
            serde_json::json!({"type": t, "status": s, "reason": r, "message": "",
                "lastTransitionTime": at})
        };
        let running = status(serde_json::json!([cond(
            "Suspended",
            "False",
            "Resumed",
            "2026-01-01T00:00:00Z"
        )]));
        let suspended = status(serde_json::json!([cond(
            "Suspended",
            "True",
            "Suspended",
            "2026-01-01T00:05:00Z"
        )]));
        // The same transition, computed again (a retry, another replica, a
        // restart before the status was stored): the same name.
        let first = transitions(&running, &suspended);
        let again = transitions(&running, &suspended);
        assert_eq!(first.len(), 1);
        let name = transition_event_name(&job, &first[0]);
        assert_eq!(name, transition_event_name(&job, &again[0]));
        assert!(
            name.starts_with("job.") && name.len() == "job.".len() + 16,
            "{name}"
        );
        // Suspended again later, from another resumed state: another Event.
        let resumed_later = status(serde_json::json!([cond(
            "Suspended",
            "False",
            "Resumed",
            "2026-01-01T00:09:00Z"
        )]));
        let later = transitions(&resumed_later, &suspended);
        assert_ne!(name, transition_event_name(&job, &later[0]));
        // Another TrainJob of that name (another uid): another Event.
        let mut other = job.clone();
        other.metadata.uid = Some("u-2".into());
        assert_ne!(name, transition_event_name(&other, &first[0]));
        // A first condition of a type replaces nothing.
        let fresh = transitions(&TrainJobStatus::default(), &suspended);
        assert_eq!(fresh[0].from, "");
        assert_ne!(name, transition_event_name(&job, &fresh[0]));
    }

    #[test]
    fn no_serving_plugins_is_a_warning_naming_them() {
        let mut tr = Transition {
            kind: CONDITION_PLUGINS_READY.into(),
            status: ConditionStatus::False,
            reason: "NoServingPlugins".into(),
            message: "no plugin in service builds JobSets; ClusterTrainerPlugins not serving: jobset (DigestMismatch: x)".into(),
            from: String::new(),
        };
        let (event_type, reason, note) = for_transition(&tr).unwrap();
        assert_eq!(event_type, EventType::Warning);
        assert_eq!(reason, "NoServingPlugins");
        assert!(note.contains("jobset (DigestMismatch: x)"), "{note}");
        tr.message = "z".repeat(5000);
        assert_eq!(
            for_transition(&tr).unwrap().2.chars().count(),
            crate::ops::events::NOTE_LIMIT + 4
        );
        tr.status = ConditionStatus::True;
        assert!(
            for_transition(&tr).is_none(),
            "only the problem is an Event"
        );
    }
}
