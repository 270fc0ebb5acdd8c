//! TrainJob conditions and status: `Suspended`, `Complete`, `Failed`, the
//! active deadline and the `PluginsReady` extension — pure functions over
//! the typed [`TrainJobStatus`], so every rule is unit tested without a
//! cluster.
//!
//! Semantics follow `meta.SetStatusCondition`: `lastTransitionTime` moves
//! only when `status` changes; reason, message and observedGeneration are
//! always updated.
//!
//! Beyond upstream's three condition types, Trainforge adds three, each
//! present only while its cause lasts, so the status of a healthy TrainJob
//! is exactly upstream's:
//!
//! - `PluginsReady=False`: the plugins the TrainJob needs are not serving —
//!   reason `NoServingPlugins` (no plugin set can serve any TrainJob) or
//!   `PolicyNotServed` (a policy of its runtime is declared by no serving
//!   plugin);
//! - `Blocked=True`: the TrainJob's objects cannot be built or applied for
//!   a cause that can go away without an edit of the TrainJob (a runtime
//!   not found, plugins not serving, a plugin failing, an object the API
//!   server refuses); it shows in `kubectl get trainjobs` as the state, and
//!   keeps the job non-terminal for the Kubeflow SDK;
//! - `RuntimePatchesIgnored=True`: `spec.runtimePatches` changed while the
//!   job was running (not suspended), so the change is not applied.
//!
//! A TrainJob that cannot be built because it (or its runtime) is invalid
//! — the plugins' admission rules refuse it, or its overrides do not fit
//! the runtime — and that was never built gets upstream's terminal
//! `Failed=True`, reason `InvalidTrainJob`: the SDK then reports it
//! `Failed` at once, as upstream's admission would have refused it.

use std::fmt;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};
use trainforge_api::trainer::v1alpha1::TrainJobStatus;
use trainforge_api::trainer::v1alpha1::constants::{
    CONDITION_COMPLETE, CONDITION_FAILED, CONDITION_SUSPENDED, MESSAGE_DEADLINE_EXCEEDED,
    MESSAGE_RESUMED, MESSAGE_SUSPENDED, REASON_DEADLINE_EXCEEDED, REASON_RESUMED, REASON_SUSPENDED,
};

/// Condition type of the extension: `False` while no plugin set can serve
/// the TrainJob, absent otherwise.
pub const CONDITION_PLUGINS_READY: &str = "PluginsReady";
/// Reason of `PluginsReady=False` (and `Blocked=True`) while no plugin set
/// can serve TrainJobs.
pub const REASON_NO_SERVING_PLUGINS: &str = "NoServingPlugins";
/// Reason of `PluginsReady=False` (and `Blocked=True`) while a policy of the
/// TrainJob's runtime is declared by no serving plugin.
pub const REASON_POLICY_NOT_SERVED: &str = "PolicyNotServed";
/// Reason of `PluginsReady=False` while the TrainJob's namespace's tenant
/// plugins are still loading after the operator started (nothing is built
/// until they are).
pub const REASON_TENANT_PLUGINS_LOADING: &str = "TenantPluginsLoading";
/// Condition type of the extension: `True` while the TrainJob's objects
/// cannot be built or applied for a cause that can go away, absent
/// otherwise.
pub const CONDITION_BLOCKED: &str = "Blocked";
/// `Blocked` reason: the referenced runtime does not exist (yet).
pub const REASON_RUNTIME_NOT_FOUND: &str = "TrainingRuntimeNotFound";
/// `Blocked` reason: the runtime snapshot exists but cannot be used.
pub const REASON_INVALID_SNAPSHOT: &str = "InvalidRuntimeSnapshot";
/// `Blocked` reason: a plugin failed while building.
pub const REASON_PLUGIN_FAILED: &str = "PluginFailed";
/// `Blocked` reason: a TrainJob built before is now refused by the
/// pipeline (its running objects are left as they are).
pub const REASON_BUILD_REFUSED: &str = "BuildRefused";
/// `Blocked` reason: the API server refused an object.
pub const REASON_APPLY_FAILED: &str = "ApplyFailed";
/// `Blocked` reason: the namespace wrote its bytes of the minute
/// ([`super::write_budget`]); retried when its budget allows.
pub const REASON_WRITE_RATE_LIMITED: &str = "WriteRateLimited";
/// `Failed` reason: the TrainJob (or its runtime) is invalid and was never
/// built.
pub const REASON_INVALID_TRAINJOB: &str = "InvalidTrainJob";
/// Condition type of the extension: `True` while `spec.runtimePatches`
/// differs from the patches the running objects were built from.
pub const CONDITION_RUNTIME_PATCHES_IGNORED: &str = "RuntimePatchesIgnored";
/// Reason of `RuntimePatchesIgnored=True` (and of its Warning Event).
pub const REASON_RUNTIME_PATCHES_CHANGED: &str = "RuntimePatchesChangedWhileRunning";
/// The longest `PluginsReady` message kept, in characters.
const MESSAGE_LIMIT: usize = 4096;

/// The status of a condition. The API stores it as the string `True`,
/// `False` or `Unknown`; nothing else is a condition status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl ConditionStatus {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// The status of an API string (`None` for anything else).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }

    /// The status of `condition` (`None` when its string is not one).
    pub fn of(condition: &Condition) -> Option<Self> {
        Self::parse(&condition.status)
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a status is refused or cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The JSON is not a TrainJob status.
    #[error("not a TrainJob status: {0}")]
    Parse(#[source] serde_json::Error),
    /// A condition's status is not `True`, `False` or `Unknown`.
    #[error("condition {kind:?} has status {status:?} (expected True, False or Unknown)")]
    ConditionStatus {
        /// The condition type.
        kind: String,
        /// The status found.
        status: String,
    },
    /// The status could not be serialised for the patch.
    #[error("serialising the status: {0}")]
    Serialize(#[source] serde_json::Error),
}

/// Parse a status given as JSON (what the status plugin returns): it must
/// be a TrainJob status whose conditions all have a valid status.
pub fn parse_status(value: Value) -> Result<TrainJobStatus, StatusError> {
    let status: TrainJobStatus = serde_json::from_value(value).map_err(StatusError::Parse)?;
    if let Some(bad) = conditions(&status)
        .iter()
        .find(|c| ConditionStatus::of(c).is_none())
    {
        return Err(StatusError::ConditionStatus {
            kind: bad.type_.clone(),
            status: bad.status.clone(),
        });
    }
    Ok(status)
}

/// Now, at second precision (what the API server stores), so that a status
/// read back compares equal to the one written.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// The conditions of a status (empty when absent).
pub fn conditions(status: &TrainJobStatus) -> &[Condition] {
    status.conditions.as_deref().unwrap_or_default()
}

/// The condition of this type, if present.
pub fn find<'a>(status: &'a TrainJobStatus, kind: &str) -> Option<&'a Condition> {
    conditions(status).iter().find(|c| c.type_ == kind)
}

/// Whether the condition is present with this status.
pub fn has(status: &TrainJobStatus, kind: &str, state: ConditionStatus) -> bool {
    find(status, kind).is_some_and(|c| ConditionStatus::of(c) == Some(state))
}

/// Whether the condition is present with status `True`.
pub fn is_true(status: &TrainJobStatus, kind: &str) -> bool {
    has(status, kind, ConditionStatus::True)
}

/// `Complete=True` or `Failed=True`: the job is finished and its objects
/// are never applied again.
pub fn is_finished(status: &TrainJobStatus) -> bool {
    is_true(status, CONDITION_COMPLETE) || is_true(status, CONDITION_FAILED)
}

/// Whether the status has nothing in it (the CRD requires at least one
/// property, so an empty status is written as no status).
pub fn is_empty(status: &TrainJobStatus) -> bool {
    *status == TrainJobStatus::default()
}

/// Set a condition: add it, or update the one of the same type
/// (`lastTransitionTime` kept when the status does not change).
pub fn set(
    status: &mut TrainJobStatus,
    kind: &str,
    state: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let new = Condition {
        type_: kind.to_owned(),
        status: state.as_str().to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now.clone(),
        observed_generation: None,
    };
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|c| c.type_ == kind) {
        None => list.push(new),
        Some(existing) => {
            let time = if existing.status == new.status {
                existing.last_transition_time.clone()
            } else {
                new.last_transition_time.clone()
            };
            *existing = Condition {
                last_transition_time: time,
                ..new
            };
        }
    }
}

/// Remove the condition of this type; an emptied list goes too. Returns
/// whether one was removed.
pub fn remove(status: &mut TrainJobStatus, kind: &str) -> bool {
    let Some(list) = status.conditions.as_mut() else {
        return false;
    };
    let before = list.len();
    list.retain(|c| c.type_ != kind);
    let removed = list.len() != before;
    if list.is_empty() {
        status.conditions = None;
    }
    removed
}

/// Suspension: `spec.suspend=true` ⇒ `Suspended=True`;
/// otherwise a currently suspended job becomes `Suspended=False/Resumed`;
/// a job never suspended gets no condition.
pub fn apply_suspend(status: &mut TrainJobStatus, suspend: bool, now: &Time) {
    if suspend {
        set(
            status,
            CONDITION_SUSPENDED,
            ConditionStatus::True,
            REASON_SUSPENDED,
            MESSAGE_SUSPENDED,
            now,
        );
    } else if is_true(status, CONDITION_SUSPENDED) {
        set(
            status,
            CONDITION_SUSPENDED,
            ConditionStatus::False,
            REASON_RESUMED,
            MESSAGE_RESUMED,
            now,
        );
    }
}

/// The `PluginsReady` extension: with `problem` (why no plugin set can
/// serve), `PluginsReady=False/NoServingPlugins` with that message (cut at
/// 4096 characters); without, no `PluginsReady` condition at all.
pub fn set_plugins_ready(status: &mut TrainJobStatus, problem: Option<&str>, now: &Time) {
    set_plugins_problem(status, problem.map(|m| (REASON_NO_SERVING_PLUGINS, m)), now);
}

/// The `PluginsReady` extension with any reason: with `(reason, message)`,
/// `PluginsReady=False` with them (the message cut at 4096 characters);
/// without, no `PluginsReady` condition at all.
pub fn set_plugins_problem(status: &mut TrainJobStatus, problem: Option<(&str, &str)>, now: &Time) {
    set_or_remove(
        status,
        CONDITION_PLUGINS_READY,
        ConditionStatus::False,
        problem,
        now,
    );
}

/// The `Blocked` extension: with `(reason, message)`, `Blocked=True` with
/// them (the message cut at 4096 characters); without, no `Blocked`
/// condition at all.
pub fn set_blocked(status: &mut TrainJobStatus, cause: Option<(&str, &str)>, now: &Time) {
    set_or_remove(status, CONDITION_BLOCKED, ConditionStatus::True, cause, now);
}

/// The `RuntimePatchesIgnored` extension: with a message,
/// `RuntimePatchesIgnored=True/RuntimePatchesChangedWhileRunning`; without,
/// no such condition.
pub fn set_runtime_patches_ignored(status: &mut TrainJobStatus, message: Option<&str>, now: &Time) {
    set_or_remove(
        status,
        CONDITION_RUNTIME_PATCHES_IGNORED,
        ConditionStatus::True,
        message.map(|m| (REASON_RUNTIME_PATCHES_CHANGED, m)),
        now,
    );
}

/// Mark the job failed because it (or its runtime) is invalid: upstream's
/// terminal `Failed=True`, reason `InvalidTrainJob`, the message cut at
/// 4096 characters.
pub fn fail_invalid(status: &mut TrainJobStatus, message: &str, now: &Time) {
    let message: String = message.chars().take(MESSAGE_LIMIT).collect();
    set(
        status,
        CONDITION_FAILED,
        ConditionStatus::True,
        REASON_INVALID_TRAINJOB,
        &message,
        now,
    );
}

/// Set `kind` to `state` with `(reason, message)` (the message cut at 4096
/// characters), or remove it when there is none.
fn set_or_remove(
    status: &mut TrainJobStatus,
    kind: &str,
    state: ConditionStatus,
    cause: Option<(&str, &str)>,
    now: &Time,
) {
    match cause {
        Some((reason, message)) => {
            let message: String = message.chars().take(MESSAGE_LIMIT).collect();
            set(status, kind, state, reason, &message, now);
        }
        None => {
            remove(status, kind);
        }
    }
}

/// The `Failed/DeadlineExceeded` condition, if the status has it (it is
/// re-applied over whatever the status plugin computes).
pub fn deadline_exceeded(status: &TrainJobStatus) -> Option<Condition> {
    find(status, CONDITION_FAILED)
        .filter(|c| c.reason == REASON_DEADLINE_EXCEEDED)
        .cloned()
}

/// Put a remembered condition back (replacing the one of the same type).
pub fn restore(status: &mut TrainJobStatus, condition: Condition) {
    let list = status.conditions.get_or_insert_with(Vec::new);
    list.retain(|c| c.type_ != condition.type_);
    list.push(condition);
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

/// The active deadline: the clock starts at creation, or at the
/// last resume (`Suspended=False` transition), and does not run while the
/// job is suspended or finished.
pub fn deadline(
    active_deadline_seconds: Option<i64>,
    suspended: bool,
    created: Option<Timestamp>,
    status: &TrainJobStatus,
    now: Timestamp,
) -> Deadline {
    let Some(ads) = active_deadline_seconds.filter(|s| *s > 0) else {
        return Deadline::None;
    };
    if suspended || is_finished(status) {
        return Deadline::None;
    }
    let resumed = find(status, CONDITION_SUSPENDED)
        .filter(|c| ConditionStatus::of(c) == Some(ConditionStatus::False))
        .map(|c| c.last_transition_time.0);
    let Some(start) = resumed.or(created) else {
        return Deadline::None;
    };
    let Ok(end) = start.checked_add(SignedDuration::from_secs(ads)) else {
        return Deadline::None;
    };
    if now > end {
        return Deadline::Exceeded;
    }
    Deadline::Remaining(until(now, end))
}

/// How long from `now` to `end`, at least 1 s (a reconcile coming back
/// for a clock never comes back at once).
fn until(now: Timestamp, end: Timestamp) -> Duration {
    now.duration_until(end)
        .unsigned_abs()
        .max(Duration::from_secs(1))
}

/// What the time to live after finishing asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterFinished {
    /// No time to live, or the job is not finished.
    Keep,
    /// Not yet: reconcile again after this long (at least 1 s).
    Remaining(Duration),
    /// Expired: delete the TrainJob (its objects go with it).
    Expired,
}

/// The time to live after finishing: the clock starts when the job
/// finished (the `lastTransitionTime` of its `Complete=True` or
/// `Failed=True`, the earlier if both); `0` expires at once.
pub fn after_finished(
    ttl_seconds: Option<i64>,
    status: &TrainJobStatus,
    now: Timestamp,
) -> AfterFinished {
    let Some(ttl) = ttl_seconds.filter(|s| *s >= 0) else {
        return AfterFinished::Keep;
    };
    let finished = [CONDITION_COMPLETE, CONDITION_FAILED]
        .into_iter()
        .filter_map(|kind| find(status, kind))
        .filter(|c| ConditionStatus::of(c) == Some(ConditionStatus::True))
        .map(|c| c.last_transition_time.0)
        .min();
    let Some(finished) = finished else {
        return AfterFinished::Keep;
    };
    let Ok(end) = finished.checked_add(SignedDuration::from_secs(ttl)) else {
        return AfterFinished::Keep;
    };
    if now >= end {
        return AfterFinished::Expired;
    }
    AfterFinished::Remaining(until(now, end))
}

/// Mark the job failed by its deadline.
pub fn fail_deadline(status: &mut TrainJobStatus, now: &Time) {
    set(
        status,
        CONDITION_FAILED,
        ConditionStatus::True,
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
    /// New status.
    pub status: ConditionStatus,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// The condition of that type it replaces (status, reason and
    /// `lastTransitionTime`; empty when there was none): with the rest, what
    /// tells this transition from any other of the same TrainJob, however
    /// often it is computed before the new status is stored.
    pub from: String,
}

/// Conditions whose status or reason changed from `old` to `new` (a
/// condition whose status string is not a condition status is no
/// transition).
pub fn transitions(old: &TrainJobStatus, new: &TrainJobStatus) -> Vec<Transition> {
    conditions(new)
        .iter()
        .filter_map(|c| {
            let before = find(old, &c.type_);
            if before.is_some_and(|b| b.status == c.status && b.reason == c.reason) {
                return None;
            }
            Some(Transition {
                kind: c.type_.clone(),
                status: ConditionStatus::of(c)?,
                reason: c.reason.clone(),
                message: c.message.clone(),
                from: before
                    .map(|b| format!("{}/{}/{}", b.status, b.reason, b.last_transition_time.0))
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The JSON merge patch (RFC 7386) of the status subresource that turns
/// `old` into `new`, computed from the old status: changed fields at any
/// depth, lists replaced whole, removed fields `null`. An empty `new` is
/// written as no status (`{"status": null}`: the CRD refuses an empty one).
pub fn status_patch(old: &TrainJobStatus, new: &TrainJobStatus) -> Result<Value, StatusError> {
    if is_empty(new) {
        return Ok(json!({ "status": null }));
    }
    let old = serde_json::to_value(old).map_err(StatusError::Serialize)?;
    let new = serde_json::to_value(new).map_err(StatusError::Serialize)?;
    Ok(json!({ "status": merge_diff(&old, &new) }))
}

/// The merge patch from `old` to `new`.
fn merge_diff(old: &Value, new: &Value) -> Value {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return new.clone();
    };
    let mut patch = Map::new();
    for (k, v) in new {
        match old.get(k) {
            Some(o) if o == v => {}
            Some(o) if o.is_object() && v.is_object() => {
                patch.insert(k.clone(), merge_diff(o, v));
            }
            _ => {
                patch.insert(k.clone(), v.clone());
            }
        }
    }
    for k in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(k.clone(), Value::Null);
    }
    Value::Object(patch)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use pretty_assertions::assert_eq;
    use trainforge_api::trainer::v1alpha1::{JobStatus, TrainerStatus};

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn status(v: Value) -> TrainJobStatus {
        parse_status(v).unwrap()
    }

    #[test]
    fn suspend_then_resume_keeps_upstream_reasons_and_times() {
        let mut s = TrainJobStatus::default();
        apply_suspend(&mut s, false, &t("2026-01-01T00:00:00Z"));
        assert!(is_empty(&s), "a job never suspended gets no condition");
        apply_suspend(&mut s, true, &t("2026-01-01T00:00:00Z"));
        apply_suspend(&mut s, true, &t("2026-01-01T00:05:00Z"));
        assert_eq!(
            s,
            status(
                json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "Suspended",
                "message": "TrainJob is suspended", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
            )
        );
        apply_suspend(&mut s, false, &t("2026-01-01T00:10:00Z"));
        assert_eq!(
            serde_json::to_value(find(&s, "Suspended").unwrap()).unwrap(),
            json!({"type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2026-01-01T00:10:00Z"})
        );
        apply_suspend(&mut s, false, &t("2026-01-01T00:20:00Z"));
        assert_eq!(
            find(&s, "Suspended").unwrap().last_transition_time,
            t("2026-01-01T00:10:00Z")
        );
    }

    #[test]
    fn set_keeps_the_time_while_the_status_holds_and_updates_the_rest() {
        let mut s = TrainJobStatus::default();
        set(
            &mut s,
            "X",
            ConditionStatus::False,
            "A",
            "first",
            &t("2026-01-01T00:00:00Z"),
        );
        set(
            &mut s,
            "X",
            ConditionStatus::False,
            "B",
            "second",
            &t("2026-01-01T00:01:00Z"),
        );
        let c = find(&s, "X").unwrap();
        assert_eq!((c.reason.as_str(), c.message.as_str()), ("B", "second"));
        assert_eq!(c.last_transition_time, t("2026-01-01T00:00:00Z"));
        set(
            &mut s,
            "X",
            ConditionStatus::Unknown,
            "C",
            "",
            &t("2026-01-01T00:02:00Z"),
        );
        assert_eq!(
            find(&s, "X").unwrap().last_transition_time,
            t("2026-01-01T00:02:00Z")
        );
        assert!(has(&s, "X", ConditionStatus::Unknown));
        assert_eq!(conditions(&s).len(), 1);
    }

    #[test]
    fn plugins_ready_is_present_only_while_the_problem_lasts() {
        let now = t("2026-01-01T00:00:00Z");
        let mut s = status(
            json!({"jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0,
            "failed": 0, "active": 1, "suspended": 0}]}),
        );
        let healthy = s.clone();
        set_plugins_ready(&mut s, None, &now);
        assert_eq!(s, healthy, "a healthy status is left exactly as it was");

        set_plugins_ready(&mut s, Some("no plugin in service builds JobSets"), &now);
        let c = find(&s, CONDITION_PLUGINS_READY).unwrap();
        assert_eq!(ConditionStatus::of(c), Some(ConditionStatus::False));
        assert_eq!(c.reason, REASON_NO_SERVING_PLUGINS);
        assert_eq!(c.message, "no plugin in service builds JobSets");
        assert!(!is_finished(&s));

        set_plugins_ready(&mut s, None, &t("2026-01-01T00:05:00Z"));
        assert_eq!(s, healthy, "the condition (and the emptied list) is gone");

        let mut fresh = TrainJobStatus::default();
        set_plugins_ready(&mut fresh, Some(&"y".repeat(10_000)), &now);
        assert_eq!(
            find(&fresh, CONDITION_PLUGINS_READY)
                .unwrap()
                .message
                .chars()
                .count(),
            MESSAGE_LIMIT
        );
        set_plugins_ready(&mut fresh, None, &now);
        assert!(is_empty(&fresh));
    }

    #[test]
    fn the_extensions_come_and_go_with_their_cause() {
        let now = t("2026-01-01T00:00:00Z");
        let mut s = TrainJobStatus::default();
        set_blocked(
            &mut s,
            Some((REASON_RUNTIME_NOT_FOUND, "not found ClusterTrainingRuntime")),
            &now,
        );
        set_plugins_problem(
            &mut s,
            Some((REASON_POLICY_NOT_SERVED, "mlPolicy.torch")),
            &now,
        );
        let b = find(&s, CONDITION_BLOCKED).unwrap();
        assert_eq!(
            (b.status.as_str(), b.reason.as_str()),
            ("True", "TrainingRuntimeNotFound")
        );
        assert!(!is_finished(&s), "non-terminal");
        let p = find(&s, CONDITION_PLUGINS_READY).unwrap();
        assert_eq!(
            (p.status.as_str(), p.reason.as_str()),
            ("False", "PolicyNotServed")
        );
        set_blocked(&mut s, None, &now);
        set_plugins_problem(&mut s, None, &now);
        assert!(is_empty(&s), "both gone: {s:?}");

        fail_invalid(&mut s, &"m".repeat(5000), &now);
        let f = find(&s, CONDITION_FAILED).unwrap();
        assert_eq!(f.reason, "InvalidTrainJob");
        assert_eq!(f.message.chars().count(), MESSAGE_LIMIT);
        assert!(is_finished(&s), "terminal: the SDK reports Failed");

        let mut r = TrainJobStatus::default();
        set_runtime_patches_ignored(&mut r, Some("changed"), &now);
        let c = find(&r, CONDITION_RUNTIME_PATCHES_IGNORED).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "RuntimePatchesChangedWhileRunning")
        );
        set_runtime_patches_ignored(&mut r, None, &now);
        assert!(is_empty(&r));
    }

    #[test]
    fn deadline_runs_from_creation_or_resume_and_not_while_suspended() {
        let ts = |s: &str| t(s).0;
        let created = Some(ts("2026-01-01T00:00:00Z"));
        let none = TrainJobStatus::default();
        assert_eq!(
            deadline(None, false, created, &none, ts("2030-01-01T00:00:00Z")),
            Deadline::None
        );
        assert_eq!(
            deadline(Some(0), false, created, &none, ts("2030-01-01T00:00:00Z")),
            Deadline::None
        );
        assert_eq!(
            deadline(Some(60), false, created, &none, ts("2026-01-01T00:00:30Z")),
            Deadline::Remaining(Duration::from_secs(30))
        );
        assert_eq!(
            deadline(
                Some(60),
                false,
                created,
                &none,
                ts("2026-01-01T00:00:59.900Z")
            ),
            Deadline::Remaining(Duration::from_secs(1)),
            "at least one second"
        );
        assert_eq!(
            deadline(Some(60), false, created, &none, ts("2026-01-01T00:01:01Z")),
            Deadline::Exceeded
        );
        assert_eq!(
            deadline(Some(60), true, created, &none, ts("2026-01-01T00:01:01Z")),
            Deadline::None
        );
        let resumed = status(
            json!({"conditions": [{"type": "Suspended", "status": "False",
            "reason": "Resumed", "message": "", "lastTransitionTime": "2026-01-01T00:01:00Z"}]}),
        );
        assert_eq!(
            deadline(
                Some(60),
                false,
                created,
                &resumed,
                ts("2026-01-01T00:01:30Z")
            ),
            Deadline::Remaining(Duration::from_secs(30)),
            "resuming resets the clock"
        );
        let mut done = TrainJobStatus::default();
        fail_deadline(&mut done, &t("2026-01-01T00:02:00Z"));
        assert_eq!(
            deadline(Some(60), false, created, &done, ts("2026-01-01T00:03:00Z")),
            Deadline::None
        );
        assert!(is_finished(&done));
        assert_eq!(deadline_exceeded(&done).unwrap().reason, "DeadlineExceeded");
    }

    #[test]
    fn restore_replaces_the_condition_of_the_same_type() {
        let mut s = status(json!({"conditions": [{"type": "Failed", "status": "False",
            "reason": "x", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}));
        let mut remembered = TrainJobStatus::default();
        fail_deadline(&mut remembered, &t("2026-01-01T00:01:00Z"));
        restore(&mut s, deadline_exceeded(&remembered).unwrap());
        assert_eq!(conditions(&s).len(), 1);
        assert!(is_true(&s, "Failed"));
    }

    #[test]
    fn the_status_plugin_output_must_be_a_status() {
        assert!(matches!(
            parse_status(json!({"conditions": "nope"})),
            Err(StatusError::Parse(_))
        ));
        assert!(
            matches!(
                parse_status(json!({"conditions": [{"type": "Complete", "status": "True",
                "reason": "r", "message": "m"}]})),
                Err(StatusError::Parse(_))
            ),
            "lastTransitionTime is required"
        );
        let err = parse_status(json!({"conditions": [{"type": "Complete", "status": "true",
            "reason": "r", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"condition "Complete" has status "true" (expected True, False or Unknown)"#
        );
        assert_eq!(parse_status(json!({})).unwrap(), TrainJobStatus::default());
    }

    #[test]
    fn transitions_and_patch() {
        let old = status(
            json!({"conditions": [{"type": "Suspended", "status": "True",
            "reason": "Suspended", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0,
            "suspended": 1}]}),
        );
        let new = status(json!({"conditions": [
            {"type": "Suspended", "status": "False", "reason": "Resumed",
             "message": "TrainJob is resumed", "lastTransitionTime": "2026-01-01T00:01:00Z"},
            {"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
             "message": "done", "lastTransitionTime": "2026-01-01T00:02:00Z"}]}));
        let tr = transitions(&old, &new);
        assert_eq!(
            tr.iter()
                .map(|t| (t.reason.as_str(), t.status))
                .collect::<Vec<_>>(),
            [
                ("Resumed", ConditionStatus::False),
                ("AllJobsCompleted", ConditionStatus::True)
            ]
        );
        assert!(transitions(&new, &new).is_empty());
        assert_eq!(
            status_patch(&old, &new).unwrap(),
            json!({"status": {
                "conditions": serde_json::to_value(&new.conditions).unwrap(),
                "jobsStatus": null}})
        );
        assert_eq!(
            status_patch(&old, &TrainJobStatus::default()).unwrap(),
            json!({"status": null}),
            "no empty status object"
        );
    }

    #[test]
    fn the_patch_is_a_merge_patch_at_every_depth() {
        let time = t("2026-01-01T00:00:00Z");
        let old = TrainJobStatus {
            trainer_status: Some(TrainerStatus {
                progress_percentage: Some(10),
                estimated_remaining_seconds: Some(60),
                metrics: None,
                last_updated_time: Some(time.clone()),
            }),
            jobs_status: Some(vec![JobStatus {
                name: "node".into(),
                ..JobStatus::default()
            }]),
            ..TrainJobStatus::default()
        };
        let mut new = old.clone();
        if let Some(ts) = new.trainer_status.as_mut() {
            ts.progress_percentage = Some(50);
            ts.estimated_remaining_seconds = None;
        }
        assert_eq!(
            status_patch(&old, &new).unwrap(),
            json!({"status": {"trainerStatus": {
                "progressPercentage": 50, "estimatedRemainingSeconds": null}}}),
            "only what changed, a removed field as null"
        );
        assert_eq!(
            status_patch(&TrainJobStatus::default(), &old).unwrap(),
            json!({"status": serde_json::to_value(&old).unwrap()})
        );
        assert_eq!(
            status_patch(&old, &old).unwrap(),
            json!({"status": {}}),
            "equal statuses patch nothing"
        );
    }

    #[test]
    fn condition_statuses_round_trip() {
        for s in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(ConditionStatus::parse("true"), None);
    }
}
