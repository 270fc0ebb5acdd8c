//! How far a change of the plugin set in service has reached the TrainJobs.
//!
//! When the set changes, every unfinished TrainJob is queued to be rendered
//! again with the new set (the controller's `wake_waiting`): that is
//! a rollout. [`Rollouts`] keeps the one in progress — which TrainJobs are
//! still to be rendered — and publishes its [`Progress`]: the metrics
//! `trainforge_plugin_swap_remaining_trainjobs` and
//! `trainforge_plugin_swap_rerendered_trainjobs_total`, and the
//! `ClusterTrainerPlugin` statuses (`status.rollout`, written by
//! [`crate::controller::catalog::rollout`]).
//!
//! Rules:
//! - a TrainJob counts as re-rendered when a reconcile that took a set at
//!   least as new as the rollout's built its objects (a reconcile that
//!   started before the swap does not count: the wake-up reconciles the
//!   TrainJob again);
//! - as failed when such a reconcile could not build them (its own
//!   conditions say why; its retries may still re-render it);
//! - as skipped when it needs no objects built: deleted, finished, managed
//!   by another controller, or running with an ignored `runtimePatches`
//!   edit;
//! - a rollout is complete when none remain (failed ones are not waited
//!   for);
//! - a newer rollout replaces one in progress: it queues every unfinished
//!   TrainJob again, those still remaining or failed included.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;
use trainforge_api::trainer::v1alpha1::TrainJob;

pub use crate::controller::catalog::rollout::Progress;
use crate::ops::metrics::Metrics;

/// What one reconcile did about a TrainJob's objects, for the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Built with the cluster set of this id (or a newer one).
    Built(u64),
    /// Could not build them with the cluster set of this id (or a newer
    /// one).
    Failed(u64),
    /// The TrainJob needs no objects built.
    NotNeeded,
}

/// The rollout in progress (see the module's rules).
#[derive(Debug)]
struct Active {
    set_id: u64,
    train_jobs: usize,
    re_rendered: usize,
    skipped: usize,
    pending: HashSet<ObjectRef<TrainJob>>,
    failed: HashSet<ObjectRef<TrainJob>>,
    started_at: Timestamp,
    completed_at: Option<Timestamp>,
}

impl Active {
    fn progress(&self) -> Progress {
        Progress {
            id: self.set_id,
            train_jobs: self.train_jobs,
            re_rendered: self.re_rendered,
            failed: self.failed.len(),
            skipped: self.skipped,
            remaining: self.pending.len(),
            started_at: self.started_at,
            completed_at: self.completed_at,
        }
    }

    /// Count `attempt` for `job`; whether anything changed.
    fn record(&mut self, job: &ObjectRef<TrainJob>, attempt: Attempt, now: Timestamp) -> bool {
        let new_enough = |id: u64| id >= self.set_id;
        let changed = match attempt {
            Attempt::Built(id) if new_enough(id) => {
                let counted = self.pending.remove(job) || self.failed.remove(job);
                self.re_rendered += usize::from(counted);
                counted
            }
            Attempt::Failed(id) if new_enough(id) => {
                self.pending.remove(job) && self.failed.insert(job.clone())
            }
            Attempt::NotNeeded => {
                let counted = self.pending.remove(job) || self.failed.remove(job);
                self.skipped += usize::from(counted);
                counted
            }
            Attempt::Built(_) | Attempt::Failed(_) => false,
        };
        if changed && self.pending.is_empty() && self.completed_at.is_none() {
            self.completed_at = Some(now);
        }
        changed
    }
}

/// The rollout in progress, shared by the controller's wake-up task (which
/// starts rollouts) and its reconciles (which record what they did).
pub struct Rollouts {
    active: Mutex<Option<Active>>,
    published: watch::Sender<Option<Progress>>,
    metrics: Arc<Metrics>,
}

impl Rollouts {
    /// No rollout yet; counts go to `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Rollouts {
            active: Mutex::new(None),
            published: watch::channel(None).0,
            metrics,
        }
    }

    /// The progress of the latest rollout, as it changes (`None` until the
    /// first one).
    pub fn subscribe(&self) -> watch::Receiver<Option<Progress>> {
        self.published.subscribe()
    }

    /// The progress of the latest rollout now.
    pub fn progress(&self) -> Option<Progress> {
        self.lock().as_ref().map(Active::progress)
    }

    /// Start the rollout of the set with id `set_id` to `jobs` (every
    /// unfinished TrainJob), replacing one in progress.
    pub fn start(&self, set_id: u64, jobs: impl IntoIterator<Item = ObjectRef<TrainJob>>) {
        let pending: HashSet<_> = jobs.into_iter().collect();
        let now = Timestamp::now();
        let active = Active {
            set_id,
            train_jobs: pending.len(),
            re_rendered: 0,
            skipped: 0,
            completed_at: pending.is_empty().then_some(now),
            pending,
            failed: HashSet::new(),
            started_at: now,
        };
        let progress = active.progress();
        *self.lock() = Some(active);
        self.publish(progress);
    }

    /// Record what a reconcile of `job` did about its objects.
    pub fn record(&self, job: &ObjectRef<TrainJob>, attempt: Attempt) {
        let progress = {
            let mut guard = self.lock();
            let Some(active) = guard.as_mut() else {
                return;
            };
            let rendered = active.re_rendered;
            if !active.record(job, attempt, Timestamp::now()) {
                return;
            }
            if active.re_rendered > rendered {
                self.metrics.swap_rerendered();
            }
            active.progress()
        };
        self.publish(progress);
    }

    /// Count every remaining or failed TrainJob for which `exists` is false
    /// as skipped (deleted).
    pub fn retain(&self, exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
        let gone: Vec<ObjectRef<TrainJob>> = match self.lock().as_ref() {
            Some(a) => a
                .pending
                .iter()
                .chain(&a.failed)
                .filter(|r| !exists(r))
                .cloned()
                .collect(),
            None => return,
        };
        for r in gone {
            self.record(&r, Attempt::NotNeeded);
        }
    }

    fn publish(&self, progress: Progress) {
        self.metrics.swap_remaining(progress.remaining);
        self.published.send_replace(Some(progress));
    }

    fn lock(&self) -> MutexGuard<'_, Option<Active>> {
        // Every update is one insert, remove or replacement: a panic while
        // holding the lock leaves nothing half-done.
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn job(name: &str) -> ObjectRef<TrainJob> {
        ObjectRef::new(name).within("ns")
    }

    fn rollouts() -> Rollouts {
        Rollouts::new(Arc::new(Metrics::new()))
    }

    fn counts(r: &Rollouts) -> (usize, usize, usize, usize, usize) {
        let p = r.progress().unwrap();
        assert_eq!(
            p.train_jobs,
            p.re_rendered + p.failed + p.skipped + p.remaining,
            "the counts add up: {p:?}"
        );
        (
            p.train_jobs,
            p.re_rendered,
            p.failed,
            p.skipped,
            p.remaining,
        )
    }

    #[test]
    fn a_rollout_counts_re_renders_with_its_set_or_a_newer_one_only() {
        let r = rollouts();
        let rx = r.subscribe();
        assert_eq!(*rx.borrow(), None);
        r.start(7, [job("a"), job("b"), job("c"), job("d")]);
        assert_eq!(r.progress().unwrap().id, 7);
        assert_eq!(counts(&r), (4, 0, 0, 0, 4));

        // A reconcile that took the old set does not count, either way.
        r.record(&job("a"), Attempt::Built(6));
        r.record(&job("b"), Attempt::Failed(6));
        assert_eq!(counts(&r), (4, 0, 0, 0, 4));
        r.record(&job("a"), Attempt::Built(7));
        r.record(&job("a"), Attempt::Built(7)); // once only
        r.record(&job("b"), Attempt::Built(9));
        r.record(&job("zz"), Attempt::Built(9)); // not part of it
        assert_eq!(counts(&r), (4, 2, 0, 0, 2));
        assert_eq!(r.progress().unwrap().completed_at, None);
        assert_eq!(rx.borrow().as_ref(), r.progress().as_ref(), "published");

        // A failure is no longer remaining, and a later success counts.
        r.record(&job("c"), Attempt::Failed(7));
        r.record(&job("c"), Attempt::Failed(7));
        assert_eq!(counts(&r), (4, 2, 1, 0, 1));
        r.record(&job("d"), Attempt::NotNeeded);
        assert_eq!(counts(&r), (4, 2, 1, 1, 0));
        let done = r.progress().unwrap().completed_at;
        assert!(done.is_some(), "complete once none remain");
        r.record(&job("c"), Attempt::Built(8));
        assert_eq!(counts(&r), (4, 3, 0, 1, 0));
        assert_eq!(r.progress().unwrap().completed_at, done, "completed once");
    }

    #[test]
    fn a_newer_rollout_replaces_one_in_progress() {
        let r = rollouts();
        r.start(1, [job("a"), job("b")]);
        r.record(&job("a"), Attempt::Built(1));
        r.start(2, [job("a"), job("b"), job("c")]);
        assert_eq!(r.progress().unwrap().id, 2);
        assert_eq!(counts(&r), (3, 0, 0, 0, 3));
        // Rendered with the first set: not the second's.
        r.record(&job("b"), Attempt::Built(1));
        assert_eq!(counts(&r), (3, 0, 0, 0, 3));
    }

    #[test]
    fn deleted_trainjobs_are_skipped_and_an_empty_rollout_is_complete_at_once() {
        let r = rollouts();
        r.start(3, [job("a"), job("b"), job("c")]);
        r.record(&job("c"), Attempt::Failed(3));
        r.retain(|j| j.name == "a");
        assert_eq!(counts(&r), (3, 0, 0, 2, 1));
        r.start(4, []);
        assert_eq!(counts(&r), (0, 0, 0, 0, 0));
        assert!(r.progress().unwrap().completed_at.is_some());
    }

    #[test]
    fn remaining_and_re_rendered_are_metrics() {
        let metrics = Arc::new(Metrics::new());
        let r = Rollouts::new(metrics.clone());
        r.start(5, [job("a"), job("b")]);
        r.record(&job("a"), Attempt::Built(5));
        let text = metrics.encode();
        assert!(
            text.contains("trainforge_plugin_swap_remaining_trainjobs 1"),
            "{text}"
        );
        assert!(
            text.contains("trainforge_plugin_swap_rerendered_trainjobs_total 1"),
            "{text}"
        );
    }
}
