//! `status.rollout` of the `ClusterTrainerPlugin`s: how far the latest
//! change of the plugin set has re-rendered the unfinished TrainJobs
//! (the TrainJob controller counts, in its `rollout` module; this writes).
//!
//! Rules:
//! - a rollout is shown on the `ClusterTrainerPlugin`s whose version it
//!   brings: each serving one whose `status.rollout` is absent, names
//!   another `servingGeneration`, or never completed (a newer rollout
//!   carries on an unfinished one: it re-renders every unfinished
//!   TrainJob again);
//! - a rollout with no unfinished TrainJob is shown only where an earlier
//!   rollout never completed (it completes it); elsewhere it writes nothing
//!   (a plugin change in a quiet cluster, or one full of finished
//!   TrainJobs, costs no writes);
//! - writes go through the status subresource with this writer's own field
//!   manager ([`FIELD_MANAGER`]), at most every [`WRITE_EVERY`] per
//!   object, and the last counts (the completion) are always written;
//! - only the leader runs it (it is started with the TrainJob controller),
//!   through the fenced client.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use trainforge_api::trainforge::v1alpha1::{
    API_VERSION, CLUSTER_TRAINER_PLUGIN_KIND, ClusterTrainerPlugin, ClusterTrainerPluginStatus,
    PluginRollout,
};

use super::PluginCatalog;

/// A rollout's counts, as published. `train_jobs` is the sum of the
/// others.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Identifies the rollout: the id of the plugin set it brings
    /// ([`crate::plugin::PluginSet::id`]), unique in this process.
    pub id: u64,
    /// Unfinished TrainJobs when the set changed.
    pub train_jobs: usize,
    /// Of those, re-rendered with the new set (or a newer one).
    pub re_rendered: usize,
    /// Of those, whose reconcile with the new set failed (and has not
    /// succeeded since).
    pub failed: usize,
    /// Of those, that needed no re-render.
    pub skipped: usize,
    /// Of those, not yet reconciled with the new set.
    pub remaining: usize,
    /// When the rollout started.
    pub started_at: Timestamp,
    /// When `remaining` reached zero.
    pub completed_at: Option<Timestamp>,
}

/// Field manager of `status.rollout`.
pub const FIELD_MANAGER: &str = "trainforge-rollout";

/// The shortest time between two writes of a rollout's counts.
pub const WRITE_EVERY: Duration = Duration::from_secs(2);

/// Whether a rollout (`empty`: of no TrainJob) is shown on a
/// `ClusterTrainerPlugin` whose version of `serving_generation` serves and
/// whose status is `status`.
pub fn is_target(
    status: Option<&ClusterTrainerPluginStatus>,
    serving_generation: i64,
    empty: bool,
) -> bool {
    match status.and_then(|s| s.rollout.as_ref()) {
        None => !empty,
        Some(r) if r.completed_at.is_none() => true,
        Some(r) => !empty && r.serving_generation != serving_generation,
    }
}

/// `progress` as the status of the version of `serving_generation`.
pub fn status_of(progress: &Progress, serving_generation: i64) -> PluginRollout {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    PluginRollout {
        serving_generation,
        train_jobs: count(progress.train_jobs),
        re_rendered: count(progress.re_rendered),
        failed: count(progress.failed),
        skipped: count(progress.skipped),
        remaining: count(progress.remaining),
        started_at: Time(progress.started_at),
        completed_at: progress.completed_at.map(Time),
    }
}

/// Until `shutdown`: write each rollout of `progress` to the
/// `ClusterTrainerPlugin`s of `catalog` it brings (see the module's rules).
pub async fn report(
    api: Api<ClusterTrainerPlugin>,
    catalog: Arc<PluginCatalog>,
    mut progress: watch::Receiver<Option<Progress>>,
    shutdown: CancellationToken,
) {
    // The rollout being written, and its objects with their generation.
    let mut current: Option<(u64, Vec<(String, i64)>)> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = progress.changed() => if changed.is_err() { return },
        }
        let Some(p) = progress.borrow_and_update().clone() else {
            continue;
        };
        if current.as_ref().is_none_or(|(id, _)| *id != p.id) {
            let objects = targets(&api, &catalog, p.train_jobs == 0).await;
            debug!(rollout = p.id, plugins = ?objects, "rollout shown on");
            current = Some((p.id, objects));
        }
        let Some((_, objects)) = &current else {
            continue;
        };
        for (name, generation) in objects {
            write(&api, name, &status_of(&p, *generation)).await;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(WRITE_EVERY) => {}
        }
    }
}

/// The serving `ClusterTrainerPlugin`s a new rollout (`empty`: of no
/// TrainJob) is shown on, with their serving generation.
async fn targets(
    api: &Api<ClusterTrainerPlugin>,
    catalog: &PluginCatalog,
    empty: bool,
) -> Vec<(String, i64)> {
    let mut found = Vec::new();
    for report in catalog.reports() {
        let Some(generation) = report.serving_generation else {
            continue;
        };
        match api.get_opt(&report.name).await {
            Ok(Some(obj)) if is_target(obj.status.as_ref(), generation, empty) => {
                found.push((report.name, generation));
            }
            // Unknown: show it (one more write at worst), unless the
            // rollout is empty.
            Err(e) if !empty => {
                warn!(plugin = %report.name, error = %e, "reading a ClusterTrainerPlugin for its rollout");
                found.push((report.name, generation));
            }
            Ok(_) | Err(_) => {}
        }
    }
    found
}

/// Write `rollout` to the status of `name` (errors are logged: the next
/// counts are written anyway).
async fn write(api: &Api<ClusterTrainerPlugin>, name: &str, rollout: &PluginRollout) {
    let patch = json!({
        "apiVersion": API_VERSION,
        "kind": CLUSTER_TRAINER_PLUGIN_KIND,
        "status": {"rollout": rollout},
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Err(e) = api.patch_status(name, &params, &Patch::Apply(&patch)).await {
        warn!(plugin = %name, error = %e, "writing the rollout status");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn progress(remaining: usize) -> Progress {
        Progress {
            id: 4,
            train_jobs: 50,
            re_rendered: 47 - remaining,
            failed: 1,
            skipped: 2,
            remaining,
            started_at: Timestamp::UNIX_EPOCH,
            completed_at: (remaining == 0).then_some(Timestamp::UNIX_EPOCH),
        }
    }

    fn status(rollout: Option<PluginRollout>) -> ClusterTrainerPluginStatus {
        ClusterTrainerPluginStatus {
            rollout,
            ..Default::default()
        }
    }

    #[test]
    fn a_rollout_is_shown_on_new_versions_and_on_unfinished_rollouts() {
        assert!(is_target(None, 3, false), "no status yet");
        assert!(is_target(Some(&status(None)), 3, false), "no rollout yet");
        let done = status(Some(status_of(&progress(0), 3)));
        assert!(!is_target(Some(&done), 3, false), "its own, complete");
        assert!(is_target(Some(&done), 4, false), "a newer version");
        let unfinished = status(Some(status_of(&progress(5), 3)));
        assert!(
            is_target(Some(&unfinished), 3, false),
            "a rollout that never completed"
        );
        // A rollout of no TrainJob completes an unfinished one, and writes
        // nowhere else.
        assert!(is_target(Some(&unfinished), 3, true));
        assert!(!is_target(None, 3, true));
        assert!(!is_target(Some(&status(None)), 3, true));
        assert!(!is_target(Some(&done), 4, true));
    }

    #[test]
    fn counts_are_written_as_they_are() {
        let s = status_of(&progress(5), 7);
        assert_eq!(
            (
                s.serving_generation,
                s.train_jobs,
                s.re_rendered,
                s.failed,
                s.skipped,
                s.remaining
            ),
            (7, 50, 42, 1, 2, 5)
        );
        assert_eq!(s.completed_at, None);
        let json = serde_json::to_value(status_of(&progress(0), 7)).unwrap();
        assert_eq!(json["reRendered"], 47);
        assert_eq!(json["completedAt"], "1970-01-01T00:00:00Z");
    }
}
