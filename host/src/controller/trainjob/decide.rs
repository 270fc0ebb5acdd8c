//! The status step's decision, as pure functions over typed values: no
//! I/O, no [`Context`](super::Context), so every rule is table tested.
//!
//! A reconcile's status is decided in two parts around the status
//! plugin's call:
//!
//! 1. [`suspend`]: `Suspended` from `spec.suspend`; the status plugin
//!    starts from this status;
//! 2. [`decide`]: from the status after the plugin's view, the
//!    remembered `Failed/DeadlineExceeded`, `PluginsReady`, `Blocked`,
//!    `InvalidTrainJob`, `RuntimePatchesIgnored`, the active deadline
//!    (and whether the JobSet must be deleted for it), and when to
//!    reconcile again.
//!
//! [`restarts`] is the host's rule for the restart counters, applied to
//! the status plugin's view; [`times`] (inside [`decide`]) the rule for
//! `startTime` and `completionTime`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use trainforge_api::trainer::v1alpha1::TrainJobStatus;
use trainforge_api::trainer::v1alpha1::constants::{
    CONDITION_COMPLETE, CONDITION_FAILED, CONDITION_SUSPENDED,
};

use super::conditions::{self, AfterFinished, ConditionStatus, Deadline};

/// How soon a reconcile comes back when the status plugin's view is not
/// available yet (e.g. the JobSet is not in the watch cache yet).
pub const RETRY_SOON: Duration = Duration::from_secs(2);

/// How soon a job whose time to live is over when it finishes comes back
/// to be deleted (its finishing status is written first).
pub const FINISHED_NOW_TTL_RETRY: Duration = Duration::from_secs(1);

/// What a failure of the resolve, build or apply step says about the
/// TrainJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    /// Invalid and never built: terminal `Failed=True/InvalidTrainJob` with
    /// this message.
    Invalid(String),
    /// Cannot be built or applied for now: `Blocked=True` with this reason
    /// and message.
    Blocked(&'static str, String),
    /// Transient: no condition change.
    Transient,
}

/// The status the status plugin starts from: `old` with `Suspended` as
/// `spec.suspend` says (`True` while suspended, `False/Resumed` once a
/// suspended job resumes, none for a job never suspended).
pub fn suspend(old: &TrainJobStatus, suspended: bool, now: &Time) -> TrainJobStatus {
    let mut status = old.clone();
    conditions::apply_suspend(&mut status, suspended, now);
    status
}

/// Whether the status plugin is asked for its view: not for a job that is
/// invalid (this build found it so, or an earlier reconcile failed it with
/// `InvalidTrainJob`), which was never built, so has no status to read (and
/// no runtime info to build).
pub fn reads_plugin_status(build: Option<&Stuck>, old: &TrainJobStatus) -> bool {
    let invalid = matches!(build, Some(Stuck::Invalid(_)))
        || conditions::find(old, CONDITION_FAILED)
            .is_some_and(|c| c.reason == conditions::REASON_INVALID_TRAINJOB);
    !invalid
}

/// Everything the status decision depends on.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    /// The status the reconcile started from (as stored).
    pub old: &'a TrainJobStatus,
    /// The status after [`suspend`] and the status plugin's view.
    pub viewed: TrainJobStatus,
    /// The job was finished when the reconcile started (`Complete=True` or
    /// `Failed=True`).
    pub finished: bool,
    /// `spec.suspend`.
    pub suspended: bool,
    /// The job's JobSet exists and is not suspended.
    pub jobset_running: bool,
    /// The job's JobSet runs with every job ready or succeeded
    /// ([`super::ready_edge::all_ready`]): its pods run.
    pub jobs_all_ready: bool,
    /// Why no plugin set can serve TrainJobs (only asked of unfinished
    /// jobs).
    pub not_serving: Option<&'a str>,
    /// Why a policy of the runtime is served by no plugin (the build
    /// step's refusal).
    pub policy_problem: Option<&'a str>,
    /// What a failure of the resolve, build or apply step says about the
    /// job (`None`: they succeeded or did not run).
    pub build: Option<&'a Stuck>,
    /// The `RuntimePatchesIgnored` message, while `spec.runtimePatches`
    /// diverge from those the running objects were built from.
    pub patches_ignored: Option<&'a str>,
    /// Now, at second precision.
    pub now: &'a Time,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `spec.activeDeadlineSeconds`, else the runtime's
    /// `runPolicy.activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// `spec.ttlSecondsAfterFinished`, else the runtime's
    /// `runPolicy.ttlSecondsAfterFinished`.
    pub ttl_seconds_after_finished: Option<i64>,
    /// The longest wait before the next reconcile.
    pub resync: Duration,
    /// The status plugin's view was not available yet.
    pub retry_soon: bool,
    /// Why the pods of its running JobSet cannot be created
    /// ([`super::pod_failures`]), while that stands.
    pub pod_failure: Option<&'a str>,
}

/// What the reconcile does besides writing the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Reconcile again after this long.
    pub requeue: Duration,
    /// The active deadline was exceeded now: delete the JobSet.
    pub delete_jobset: bool,
    /// The job's time to live after finishing is over: delete the
    /// TrainJob (its objects go with it), and write nothing else.
    pub delete_trainjob: bool,
}

/// The new status and the decision, from `input`:
///
/// - a remembered `Failed/DeadlineExceeded` (in `old`) is put back over
///   whatever the status plugin computed;
/// - `PluginsReady=False/NoServingPlugins` while no plugin set can serve,
///   else `PluginsReady=False/PolicyNotServed` while a policy is served by
///   no plugin, else left as it was after a transient failure (not known
///   this time), else no `PluginsReady`;
/// - an unfinished job: `Failed=True/InvalidTrainJob` (and no `Blocked`)
///   when invalid; `Blocked=True` with the cause while stuck and its
///   JobSet is not running; `Blocked` left as it was after a transient
///   failure; else no `Blocked`. `RuntimePatchesIgnored=True` exactly while
///   the patches diverge;
/// - a finished job: no `Blocked`, `RuntimePatchesIgnored` left alone;
/// - a resumed job (`Suspended=False`) whose pods all run again loses its
///   `Suspended` condition: it says nothing a job never suspended does not,
///   and while it stands the Kubeflow SDK never reports `Running` (it
///   derives `Running` only for a job without conditions), so a job Kueue
///   admitted would read `Created` for its whole run (upstream #3666,
///   kubeflow/sdk#803);
/// - the active deadline (its clock stops while suspended or finished):
///   exceeded fails the job (`Failed=True/DeadlineExceeded`) and deletes
///   its JobSet; not yet brings the reconcile back when it passes;
/// - the time to live after finishing (from when the job finished, as this
///   decision leaves it): over deletes the TrainJob if it was finished when
///   the reconcile started, else brings the reconcile back after
///   [`FINISHED_NOW_TTL_RETRY`] (the finishing status is written first);
///   not yet over brings the reconcile back when it is;
/// - the reconcile comes back after `resync` at most, within
///   [`RETRY_SOON`] while the plugin's view is not available yet.
pub fn decide(input: Input<'_>) -> (TrainJobStatus, Decision) {
    let now = input.now;
    let mut status = input.viewed;
    if let Some(c) = conditions::deadline_exceeded(input.old) {
        conditions::restore(&mut status, c);
    }
    match (input.not_serving, input.policy_problem, input.build) {
        (Some(message), _, _) => conditions::set_plugins_problem(
            &mut status,
            Some((conditions::REASON_NO_SERVING_PLUGINS, message)),
            now,
        ),
        (None, Some(message), _) => conditions::set_plugins_problem(
            &mut status,
            Some((conditions::REASON_POLICY_NOT_SERVED, message)),
            now,
        ),
        // Not known this time (the runtime could not be read).
        (None, None, Some(Stuck::Transient)) => {}
        (None, None, _) => conditions::set_plugins_problem(&mut status, None, now),
    }
    times(
        &mut status,
        input.old,
        input.suspended,
        input.jobset_running,
        now,
    );
    if input.finished {
        conditions::set_blocked(&mut status, None, now);
    } else {
        match input.build {
            Some(Stuck::Invalid(message)) => {
                conditions::fail_invalid(&mut status, message, now);
                conditions::set_blocked(&mut status, None, now);
            }
            Some(Stuck::Blocked(reason, message)) if !input.jobset_running => {
                conditions::set_blocked(&mut status, Some((reason, message)), now);
            }
            Some(Stuck::Transient) => {}
            Some(Stuck::Blocked(..)) | None => conditions::set_blocked(
                &mut status,
                input
                    .pod_failure
                    .map(|m| (super::pod_failures::REASON_POD_CREATION_FAILED, m)),
                now,
            ),
        }
        conditions::set_runtime_patches_ignored(&mut status, input.patches_ignored, now);
        let resumed = conditions::find(&status, CONDITION_SUSPENDED)
            .is_some_and(|c| c.status == ConditionStatus::False.as_str());
        if resumed && !input.suspended && input.jobs_all_ready {
            conditions::remove(&mut status, CONDITION_SUSPENDED);
        }
    }

    let mut decision = Decision {
        requeue: input.resync,
        delete_jobset: false,
        delete_trainjob: false,
    };
    match conditions::deadline(
        input.active_deadline_seconds,
        input.suspended,
        input.created,
        &status,
        now.0,
    ) {
        Deadline::None => {}
        Deadline::Remaining(left) => decision.requeue = decision.requeue.min(left),
        Deadline::Exceeded => {
            conditions::fail_deadline(&mut status, now);
            decision.delete_jobset = true;
        }
    }
    match conditions::after_finished(input.ttl_seconds_after_finished, &status, now.0) {
        AfterFinished::Keep => {}
        AfterFinished::Remaining(left) => decision.requeue = decision.requeue.min(left),
        // Finished in this reconcile: its status (and the transition's
        // Event) is written first; deleted on the next one.
        AfterFinished::Expired if !input.finished => {
            decision.requeue = decision.requeue.min(FINISHED_NOW_TTL_RETRY);
        }
        AfterFinished::Expired => decision.delete_trainjob = true,
    }
    if input.retry_soon {
        decision.requeue = decision.requeue.min(RETRY_SOON);
    }
    (status, decision)
}

/// Rule: `startTime` and `completionTime` are the host's, with a Job's
/// meaning (whatever a status plugin returns for them is replaced by the
/// stored ones first):
/// - `startTime` is set when the job's JobSet is seen running while the job
///   is not suspended, and set again when it runs after a resume (a
///   `Suspended=False` condition newer than it); it is never after
///   `completionTime` (a job that finished before it was seen running
///   starts when it completed);
/// - `completionTime` is the time of the `Complete=True` condition, once
///   there; a failed job has none.
pub fn times(
    status: &mut TrainJobStatus,
    old: &TrainJobStatus,
    suspended: bool,
    jobset_running: bool,
    now: &Time,
) {
    status.completion_time = old.completion_time.clone().or_else(|| {
        conditions::find(status, CONDITION_COMPLETE)
            .filter(|c| c.status == ConditionStatus::True.as_str())
            .map(|c| c.last_transition_time.clone())
    });
    status.start_time = old.start_time.clone();
    let resumed_since = |start: &Time| {
        conditions::find(status, CONDITION_SUSPENDED).is_some_and(|c| {
            c.status == ConditionStatus::False.as_str() && c.last_transition_time.0 > start.0
        })
    };
    let restart = match &status.start_time {
        None => true,
        Some(start) => status.completion_time.is_none() && resumed_since(start),
    };
    if restart && jobset_running && !suspended {
        let start = match &status.completion_time {
            Some(done) if done.0 < now.0 => done.clone(),
            _ => now.clone(),
        };
        status.start_time = Some(start);
    }
}

/// Rule: `restarts` and `restartsCountTowardsMax` are counted by the
/// TrainJob's JobSet, which the host reads from its watch cache (`jobset`),
/// never taken from a status plugin: each is the stored count, raised to
/// the JobSet's `status.restarts` / `status.restartsCountTowardsMax` when
/// that is higher. They never go down (a JobSet missing, re-created or
/// reporting less keeps them), and a plugin cannot raise them: a raised
/// count writes a `TrainJobRestarted` Event, so a plugin that could raise
/// it on every reconcile would write an Event on every reconcile. Returns
/// `(restarts, restartsCountTowardsMax)`, each `None` while 0.
pub fn restarts(
    old: &TrainJobStatus,
    jobset: Option<&serde_json::Value>,
) -> (Option<i32>, Option<i32>) {
    let count = |stored: Option<i32>, key: &str| {
        let seen = jobset
            .and_then(|j| j.pointer(&format!("/status/{key}")))
            .and_then(serde_json::Value::as_i64)
            .and_then(|n| i32::try_from(n).ok());
        stored.into_iter().chain(seen).max().filter(|n| *n > 0)
    };
    (
        count(old.restarts, "restarts"),
        count(old.restarts_count_towards_max, "restartsCountTowardsMax"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use trainforge_api::trainer::v1alpha1::constants::{
        REASON_DEADLINE_EXCEEDED, REASON_RESUMED, REASON_SUSPENDED,
    };

    use super::*;
    use crate::controller::trainjob::conditions::{
        CONDITION_BLOCKED, CONDITION_PLUGINS_READY, CONDITION_RUNTIME_PATCHES_IGNORED,
        REASON_APPLY_FAILED, REASON_INVALID_TRAINJOB, REASON_NO_SERVING_PLUGINS,
        REASON_POLICY_NOT_SERVED, REASON_RUNTIME_NOT_FOUND, REASON_RUNTIME_PATCHES_CHANGED,
    };

    const RESYNC: Duration = Duration::from_secs(600);

    /// The clock of every row: creation at 00:00:00, now at 00:10:00.
    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + seconds).unwrap()
    }

    fn now() -> Time {
        Time(at(600))
    }

    /// A condition `(type, status, reason)`, changed at `at(0)` (now, for
    /// a reason ending in `Now`).
    fn cond((kind, status, reason): (&str, &str, &str)) -> Condition {
        let changed = if reason.ends_with("Now") { 600 } else { 0 };
        Condition {
            type_: kind.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: format!("{kind} was {status}"),
            last_transition_time: Time(at(changed)),
            observed_generation: None,
        }
    }

    fn status(conds: &[(&str, &str, &str)]) -> TrainJobStatus {
        TrainJobStatus {
            conditions: (!conds.is_empty()).then(|| conds.iter().copied().map(cond).collect()),
            ..TrainJobStatus::default()
        }
    }

    /// One row: what the reconcile saw, what it must decide.
    struct Row {
        name: &'static str,
        old: &'static [(&'static str, &'static str, &'static str)],
        /// The status plugin's view (`None`: it left the status as
        /// [`suspend`] made it).
        viewed: Option<&'static [(&'static str, &'static str, &'static str)]>,
        suspended: bool,
        jobset_running: bool,
        jobs_all_ready: bool,
        not_serving: Option<&'static str>,
        policy_problem: Option<&'static str>,
        build: Option<Stuck>,
        patches_ignored: Option<&'static str>,
        active_deadline_seconds: Option<i64>,
        ttl_seconds_after_finished: Option<i64>,
        retry_soon: bool,
        /// Every condition of the new status, `(type, status, reason)`.
        expect: &'static [(&'static str, &'static str, &'static str)],
        requeue: Duration,
        delete_jobset: bool,
        delete_trainjob: bool,
    }

    const ROW: Row = Row {
        name: "",
        old: &[],
        viewed: None,
        suspended: false,
        jobset_running: false,
        jobs_all_ready: false,
        not_serving: None,
        policy_problem: None,
        build: None,
        patches_ignored: None,
        active_deadline_seconds: None,
        ttl_seconds_after_finished: None,
        retry_soon: false,
        expect: &[],
        requeue: RESYNC,
        delete_jobset: false,
        delete_trainjob: false,
    };

    const BLOCKED_NOT_FOUND: (&str, &str, &str) =
        (CONDITION_BLOCKED, "True", REASON_RUNTIME_NOT_FOUND);
    const NO_PLUGINS: (&str, &str, &str) =
        (CONDITION_PLUGINS_READY, "False", REASON_NO_SERVING_PLUGINS);
    const RUNNING: (&str, &str, &str) = ("Running", "True", "JobSetRunning");
    const COMPLETE: (&str, &str, &str) = (CONDITION_COMPLETE, "True", "JobSetCompleted");
    const RESUMED: (&str, &str, &str) = (CONDITION_SUSPENDED, "False", REASON_RESUMED);
    /// Marks its condition as changed now (see [`cond`]).
    const COMPLETE_NOW: (&str, &str, &str) = (CONDITION_COMPLETE, "True", "JobSetCompletedNow");

    fn blocked() -> Option<Stuck> {
        Some(Stuck::Blocked(
            REASON_RUNTIME_NOT_FOUND,
            "not found ClusterTrainingRuntime specified in TrainJob: rt".into(),
        ))
    }

    fn rows() -> Vec<Row> {
        vec![
            Row {
                name: "a healthy job gets no extension and comes back at resync",
                expect: &[],
                ..ROW
            },
            Row {
                name: "resumed, pods not all running yet: Suspended=False stays",
                old: &[RESUMED],
                jobset_running: true,
                expect: &[RESUMED],
                ..ROW
            },
            Row {
                name: "resumed and its pods all run: Suspended goes (the SDK reads Running)",
                old: &[RESUMED],
                jobset_running: true,
                jobs_all_ready: true,
                expect: &[],
                ..ROW
            },
            Row {
                name: "resumed with other conditions: only Suspended goes",
                old: &[
                    RESUMED,
                    (
                        CONDITION_RUNTIME_PATCHES_IGNORED,
                        "True",
                        REASON_RUNTIME_PATCHES_CHANGED,
                    ),
                ],
                patches_ignored: Some("patches changed"),
                jobset_running: true,
                jobs_all_ready: true,
                expect: &[(
                    CONDITION_RUNTIME_PATCHES_IGNORED,
                    "True",
                    REASON_RUNTIME_PATCHES_CHANGED,
                )],
                ..ROW
            },
            Row {
                name: "suspended: Suspended=True stays whatever the pods",
                old: &[(CONDITION_SUSPENDED, "True", REASON_SUSPENDED)],
                viewed: Some(&[(CONDITION_SUSPENDED, "True", REASON_SUSPENDED)]),
                suspended: true,
                jobs_all_ready: true,
                expect: &[(CONDITION_SUSPENDED, "True", REASON_SUSPENDED)],
                ..ROW
            },
            Row {
                name: "a finished resumed job keeps Suspended=False",
                old: &[RESUMED, COMPLETE],
                jobs_all_ready: true,
                expect: &[RESUMED, COMPLETE],
                ..ROW
            },
            Row {
                name: "the status plugin's view is kept",
                viewed: Some(&[RUNNING]),
                expect: &[RUNNING],
                ..ROW
            },
            Row {
                name: "no plugin set can serve: PluginsReady=False/NoServingPlugins",
                not_serving: Some("no plugin in service builds JobSets"),
                expect: &[NO_PLUGINS],
                ..ROW
            },
            Row {
                name: "a policy served by no plugin: PluginsReady=False/PolicyNotServed",
                policy_problem: Some("runtime policy mlPolicy.torch served by no plugin"),
                expect: &[(CONDITION_PLUGINS_READY, "False", REASON_POLICY_NOT_SERVED)],
                ..ROW
            },
            Row {
                name: "no serving set wins over a policy problem",
                not_serving: Some("no plugin in service builds JobSets"),
                policy_problem: Some("runtime policy mlPolicy.torch served by no plugin"),
                expect: &[NO_PLUGINS],
                ..ROW
            },
            Row {
                name: "plugins back: PluginsReady goes",
                old: &[NO_PLUGINS],
                expect: &[],
                ..ROW
            },
            Row {
                name: "a transient failure leaves PluginsReady and Blocked as they were",
                old: &[NO_PLUGINS, BLOCKED_NOT_FOUND],
                build: Some(Stuck::Transient),
                expect: &[NO_PLUGINS, BLOCKED_NOT_FOUND],
                ..ROW
            },
            Row {
                name: "a transient failure adds nothing",
                build: Some(Stuck::Transient),
                expect: &[],
                ..ROW
            },
            Row {
                name: "stuck while the JobSet is not running: Blocked=True with the cause",
                build: blocked(),
                expect: &[BLOCKED_NOT_FOUND],
                ..ROW
            },
            Row {
                name: "a running JobSet is never marked Blocked",
                old: &[BLOCKED_NOT_FOUND],
                build: blocked(),
                jobset_running: true,
                expect: &[],
                ..ROW
            },
            Row {
                name: "built again: Blocked goes",
                old: &[BLOCKED_NOT_FOUND],
                expect: &[],
                ..ROW
            },
            Row {
                name: "invalid and never built: Failed=True/InvalidTrainJob, not Blocked",
                old: &[(CONDITION_BLOCKED, "True", REASON_APPLY_FAILED)],
                build: Some(Stuck::Invalid(
                    "jobset: spec.runtimePatches[0]: no job".into(),
                )),
                expect: &[(CONDITION_FAILED, "True", REASON_INVALID_TRAINJOB)],
                ..ROW
            },
            Row {
                name: "a finished job with a stuck build is not Blocked",
                old: &[
                    (CONDITION_COMPLETE, "True", "JobSetCompleted"),
                    BLOCKED_NOT_FOUND,
                ],
                build: blocked(),
                expect: &[(CONDITION_COMPLETE, "True", "JobSetCompleted")],
                ..ROW
            },
            Row {
                name: "a finished job is never failed as invalid",
                old: &[(CONDITION_COMPLETE, "True", "JobSetCompleted")],
                build: Some(Stuck::Invalid("x".into())),
                expect: &[(CONDITION_COMPLETE, "True", "JobSetCompleted")],
                ..ROW
            },
            Row {
                name: "a finished job keeps its RuntimePatchesIgnored",
                old: &[
                    (CONDITION_FAILED, "True", "JobSetFailed"),
                    (
                        CONDITION_RUNTIME_PATCHES_IGNORED,
                        "True",
                        REASON_RUNTIME_PATCHES_CHANGED,
                    ),
                ],
                expect: &[
                    (CONDITION_FAILED, "True", "JobSetFailed"),
                    (
                        CONDITION_RUNTIME_PATCHES_IGNORED,
                        "True",
                        REASON_RUNTIME_PATCHES_CHANGED,
                    ),
                ],
                ..ROW
            },
            Row {
                name: "diverged patches: RuntimePatchesIgnored=True",
                patches_ignored: Some("spec.runtimePatches changed while the TrainJob is running"),
                jobset_running: true,
                expect: &[(
                    CONDITION_RUNTIME_PATCHES_IGNORED,
                    "True",
                    REASON_RUNTIME_PATCHES_CHANGED,
                )],
                ..ROW
            },
            Row {
                name: "patches agree again: RuntimePatchesIgnored goes",
                old: &[(
                    CONDITION_RUNTIME_PATCHES_IGNORED,
                    "True",
                    REASON_RUNTIME_PATCHES_CHANGED,
                )],
                expect: &[],
                ..ROW
            },
            Row {
                name: "deadline not reached: back when it passes",
                active_deadline_seconds: Some(900),
                expect: &[],
                requeue: Duration::from_secs(300),
                ..ROW
            },
            Row {
                name: "deadline further than resync: back at resync",
                active_deadline_seconds: Some(3600),
                expect: &[],
                ..ROW
            },
            Row {
                name: "deadline exceeded while running: Failed=True/DeadlineExceeded, JobSet deleted",
                active_deadline_seconds: Some(60),
                jobset_running: true,
                expect: &[(CONDITION_FAILED, "True", REASON_DEADLINE_EXCEEDED)],
                delete_jobset: true,
                ..ROW
            },
            Row {
                name: "deadline passed while suspended: the clock stops, nothing deleted",
                suspended: true,
                active_deadline_seconds: Some(60),
                expect: &[(CONDITION_SUSPENDED, "True", REASON_SUSPENDED)],
                ..ROW
            },
            Row {
                name: "deadline counted from the resume",
                old: &[(CONDITION_SUSPENDED, "True", REASON_SUSPENDED)],
                active_deadline_seconds: Some(60),
                expect: &[(CONDITION_SUSPENDED, "False", REASON_RESUMED)],
                requeue: Duration::from_secs(60),
                ..ROW
            },
            Row {
                name: "a remembered DeadlineExceeded is put back over the plugin's view, once",
                old: &[(CONDITION_FAILED, "True", REASON_DEADLINE_EXCEEDED)],
                viewed: Some(&[(CONDITION_FAILED, "True", "JobSetFailed")]),
                active_deadline_seconds: Some(60),
                expect: &[(CONDITION_FAILED, "True", REASON_DEADLINE_EXCEEDED)],
                ..ROW
            },
            Row {
                name: "the plugin's view not there yet: back soon",
                retry_soon: true,
                expect: &[],
                requeue: RETRY_SOON,
                ..ROW
            },
            Row {
                name: "back soon, or at the deadline if sooner",
                retry_soon: true,
                active_deadline_seconds: Some(601),
                expect: &[],
                requeue: Duration::from_secs(1),
                ..ROW
            },
            Row {
                name: "finished, its time to live not over: back when it is",
                old: &[COMPLETE],
                ttl_seconds_after_finished: Some(900),
                expect: &[COMPLETE],
                requeue: Duration::from_secs(300),
                ..ROW
            },
            Row {
                name: "finished, its time to live further than resync: back at resync",
                old: &[COMPLETE],
                ttl_seconds_after_finished: Some(3600),
                expect: &[COMPLETE],
                ..ROW
            },
            Row {
                name: "finished, its time to live over: the TrainJob is deleted",
                old: &[COMPLETE],
                ttl_seconds_after_finished: Some(600),
                expect: &[COMPLETE],
                delete_trainjob: true,
                ..ROW
            },
            Row {
                name: "failed with a time to live of 0: deleted at once",
                old: &[(CONDITION_FAILED, "True", "JobSetFailed")],
                ttl_seconds_after_finished: Some(0),
                expect: &[(CONDITION_FAILED, "True", "JobSetFailed")],
                delete_trainjob: true,
                ..ROW
            },
            Row {
                name: "finishing now (its view): the time to live starts now",
                viewed: Some(&[COMPLETE_NOW]),
                ttl_seconds_after_finished: Some(120),
                expect: &[COMPLETE_NOW],
                requeue: Duration::from_secs(120),
                ..ROW
            },
            Row {
                name: "unfinished: a time to live changes nothing",
                viewed: Some(&[RUNNING]),
                ttl_seconds_after_finished: Some(0),
                expect: &[RUNNING],
                ..ROW
            },
            Row {
                name: "a condition that is not True does not finish the job",
                old: &[(CONDITION_COMPLETE, "False", "NotYet")],
                ttl_seconds_after_finished: Some(0),
                expect: &[(CONDITION_COMPLETE, "False", "NotYet")],
                ..ROW
            },
            Row {
                name: "deadline exceeded now with a time to live of 0: failed, JobSet deleted, the TrainJob on the next reconcile",
                active_deadline_seconds: Some(60),
                ttl_seconds_after_finished: Some(0),
                jobset_running: true,
                expect: &[(CONDITION_FAILED, "True", REASON_DEADLINE_EXCEEDED)],
                delete_jobset: true,
                requeue: FINISHED_NOW_TTL_RETRY,
                ..ROW
            },
            Row {
                name: "finishing now with a time to live of 0: the status first, deleted on the next reconcile",
                viewed: Some(&[COMPLETE]),
                ttl_seconds_after_finished: Some(0),
                expect: &[COMPLETE],
                requeue: FINISHED_NOW_TTL_RETRY,
                ..ROW
            },
        ]
    }

    #[test]
    fn every_row_decides_as_written() {
        let now = now();
        for row in rows() {
            let old = status(row.old);
            let finished = conditions::is_finished(&old);
            let viewed = match row.viewed {
                Some(v) => status(v),
                None => suspend(&old, row.suspended, &now),
            };
            let (new, decision) = decide(Input {
                old: &old,
                viewed,
                finished,
                suspended: row.suspended,
                jobset_running: row.jobset_running,
                jobs_all_ready: row.jobs_all_ready,
                not_serving: row.not_serving,
                policy_problem: row.policy_problem,
                build: row.build.as_ref(),
                patches_ignored: row.patches_ignored,
                now: &now,
                created: Some(at(0)),
                active_deadline_seconds: row.active_deadline_seconds,
                ttl_seconds_after_finished: row.ttl_seconds_after_finished,
                resync: RESYNC,
                retry_soon: row.retry_soon,
                pod_failure: None,
            });
            let mut got: Vec<(&str, &str, &str)> = conditions::conditions(&new)
                .iter()
                .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
                .collect();
            got.sort();
            let mut want = row.expect.to_vec();
            want.sort();
            assert_eq!(got, want, "{}: conditions", row.name);
            assert_eq!(
                decision,
                Decision {
                    requeue: row.requeue,
                    delete_jobset: row.delete_jobset,
                    delete_trainjob: row.delete_trainjob,
                },
                "{}: decision",
                row.name
            );
        }
    }

    #[test]
    fn messages_and_transition_times_are_kept_where_nothing_changed() {
        let now = now();
        let old = status(&[BLOCKED_NOT_FOUND]);
        let build = blocked();
        let (new, _) = decide(Input {
            old: &old,
            viewed: old.clone(),
            finished: false,
            suspended: false,
            jobset_running: false,
            jobs_all_ready: false,
            not_serving: None,
            policy_problem: None,
            build: build.as_ref(),
            patches_ignored: None,
            now: &now,
            created: None,
            active_deadline_seconds: Some(1),
            ttl_seconds_after_finished: None,
            resync: RESYNC,
            retry_soon: false,
            pod_failure: None,
        });
        let c = conditions::find(&new, CONDITION_BLOCKED).unwrap();
        assert_eq!(
            c.message,
            "not found ClusterTrainingRuntime specified in TrainJob: rt"
        );
        assert_eq!(c.last_transition_time, Time(at(0)), "still Blocked=True");
        // No creation time, no resume: the deadline has no clock.
        assert_eq!(conditions::find(&new, CONDITION_FAILED), None);
    }

    #[test]
    fn suspension_comes_before_the_plugin() {
        let now = now();
        let fresh = TrainJobStatus::default();
        assert_eq!(suspend(&fresh, false, &now), fresh, "never suspended");
        let suspended = suspend(&fresh, true, &now);
        assert!(conditions::is_true(&suspended, CONDITION_SUSPENDED));
        let resumed = suspend(&suspended, false, &now);
        let c = conditions::find(&resumed, CONDITION_SUSPENDED).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_RESUMED)
        );
        assert_eq!(c.last_transition_time, now, "resumed now");
    }

    #[test]
    fn an_invalid_job_has_no_plugin_status_to_read() {
        let fresh = TrainJobStatus::default();
        assert!(reads_plugin_status(None, &fresh));
        assert!(reads_plugin_status(Some(&Stuck::Transient), &fresh));
        assert!(reads_plugin_status(blocked().as_ref(), &fresh));
        assert!(!reads_plugin_status(
            Some(&Stuck::Invalid("x".into())),
            &fresh
        ));
        let failed_invalid = status(&[(CONDITION_FAILED, "True", REASON_INVALID_TRAINJOB)]);
        assert!(!reads_plugin_status(None, &failed_invalid));
        let failed_otherwise = status(&[(CONDITION_FAILED, "True", "JobSetFailed")]);
        assert!(reads_plugin_status(None, &failed_otherwise));
    }

    /// Start and completion times, as a Job's: set when the JobSet runs,
    /// reset when it runs after a resume, completion from `Complete`
    /// only; a plugin's are never taken.
    #[test]
    fn start_and_completion_times_follow_the_jobset_and_the_conditions() {
        let at = |s: &str| Time(format!("2026-01-01T00:{s}Z").parse().unwrap());
        let with = |conds: &[(&str, &str, &str)], start: Option<&str>, done: Option<&str>| {
            let mut s = status(conds);
            for c in s.conditions.iter_mut().flatten() {
                c.last_transition_time = at("05:00");
            }
            s.start_time = start.map(at);
            s.completion_time = done.map(at);
            s
        };
        let run = |viewed: &TrainJobStatus,
                   old: &TrainJobStatus,
                   suspended: bool,
                   running: bool,
                   now: &str| {
            let mut s = viewed.clone();
            times(&mut s, old, suspended, running, &at(now));
            (
                s.start_time.map(|t| t.0.to_string()),
                s.completion_time.map(|t| t.0.to_string()),
            )
        };
        let iso = |s: &str| Some(at(s).0.to_string());
        let empty = with(&[], None, None);
        // Not running yet, or suspended: no start.
        assert_eq!(run(&empty, &empty, false, false, "01:00"), (None, None));
        assert_eq!(run(&empty, &empty, true, true, "01:00"), (None, None));
        // Running: starts now, and keeps that start.
        assert_eq!(
            run(&empty, &empty, false, true, "01:00"),
            (iso("01:00"), None)
        );
        let started = with(&[], Some("01:00"), None);
        assert_eq!(
            run(&started, &started, false, true, "02:00"),
            (iso("01:00"), None)
        );
        // A plugin's times are not taken.
        let forged = with(&[], Some("00:01"), Some("00:02"));
        assert_eq!(
            run(&forged, &started, false, true, "02:00"),
            (iso("01:00"), None)
        );
        // Resumed at 05:00 after it started: starts again once running.
        let resumed = with(
            &[(CONDITION_SUSPENDED, "False", REASON_RESUMED)],
            Some("01:00"),
            None,
        );
        assert_eq!(
            run(&resumed, &started, false, false, "05:00"),
            (iso("01:00"), None)
        );
        assert_eq!(
            run(&resumed, &started, false, true, "06:00"),
            (iso("06:00"), None)
        );
        let restarted = with(&[], Some("06:00"), None);
        assert_eq!(
            run(&resumed, &restarted, false, true, "07:00"),
            (iso("06:00"), None)
        );
        // Complete: completion from the condition; a failed job has none.
        let complete = with(
            &[(CONDITION_COMPLETE, "True", "AllJobsCompleted")],
            None,
            None,
        );
        assert_eq!(
            run(&complete, &started, false, true, "09:00"),
            (iso("01:00"), iso("05:00"))
        );
        let failed = with(&[(CONDITION_FAILED, "True", "FailedJobs")], None, None);
        assert_eq!(
            run(&failed, &started, false, true, "09:00"),
            (iso("01:00"), None)
        );
        // Complete before it was ever seen running: starts when it completed.
        assert_eq!(
            run(&complete, &empty, false, true, "09:00"),
            (iso("05:00"), iso("05:00"))
        );
    }

    /// A hostile status plugin's counters are never read: only the stored
    /// ones and the JobSet's count, and they never go down.
    #[test]
    fn restarts_come_from_the_jobset_and_never_go_down() {
        let counted = |r: Option<i32>, c: Option<i32>| TrainJobStatus {
            restarts: r,
            restarts_count_towards_max: c,
            ..TrainJobStatus::default()
        };
        let js = |r: i64, c: i64| serde_json::json!({"status": {"restarts": r, "restartsCountTowardsMax": c}});
        let none = counted(None, None);
        assert_eq!(restarts(&none, None), (None, None));
        assert_eq!(restarts(&none, Some(&js(0, 0))), (None, None));
        assert_eq!(restarts(&none, Some(&js(2, 1))), (Some(2), Some(1)));
        let stored = counted(Some(3), Some(2));
        // A JobSet that is gone, re-created (0) or reporting less keeps them.
        assert_eq!(restarts(&stored, None), (Some(3), Some(2)));
        assert_eq!(restarts(&stored, Some(&js(0, 0))), (Some(3), Some(2)));
        assert_eq!(restarts(&stored, Some(&js(4, 2))), (Some(4), Some(2)));
        // Garbage from the cache (not a number, out of range) is not a count.
        let odd = serde_json::json!({"status": {"restarts": "9", "restartsCountTowardsMax": 1_i64 << 40}});
        assert_eq!(restarts(&stored, Some(&odd)), (Some(3), Some(2)));
    }
}
