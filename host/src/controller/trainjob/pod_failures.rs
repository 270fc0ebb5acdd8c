//! Pods that cannot be created, surfaced on their TrainJob.
//!
//! Rule: when the Job controller fails to create a pod of a TrainJob's
//! JobSet (its `FailedCreate` Event on the Job: a quota exceeded, a pod
//! security level, a LimitRange, a webhook refusing the pod), the TrainJob
//! gets `Blocked=True`, reason `PodCreationFailed`, with the API server's
//! message and a Warning Event — instead of an empty STATE and the SDK
//! waiting at `Created` forever. The failure stands until the JobSet's jobs
//! are all ready (the pods were created after all), the TrainJob finishes
//! or is suspended, or the Event is gone.
//!
//! The Events are watched with a field selector (`reason=FailedCreate`,
//! `involvedObject.kind=Job`), so the cache holds only failures. A Job of a
//! JobSet is named `<jobset>-<replicated job>-<index>`, and a TrainJob's
//! JobSet is named as the TrainJob: the TrainJob is the one whose JobSet has
//! such a replicated job ([`trainjob_of_job`]). What is kept is one entry
//! per TrainJob with a failure, dropped as above.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use trainforge_api::trainer::v1alpha1::TrainJob;

/// The condition reason of a TrainJob whose pods cannot be created.
pub const REASON_POD_CREATION_FAILED: &str = "PodCreationFailed";

/// The most characters of the API server's message kept.
const MESSAGE_LIMIT: usize = 1024;

/// Per TrainJob, the latest failure to create its pods: the message, and
/// the Event it came from (`namespace/name`).
#[derive(Debug, Default)]
pub struct PodFailures(Mutex<HashMap<ObjectRef<TrainJob>, (String, String)>>);

impl PodFailures {
    /// Record `message` for `trainjob`, from Event `event`.
    pub fn record(&self, trainjob: ObjectRef<TrainJob>, event: String, message: String) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(trainjob, (event, message));
        }
    }

    /// The failure of `trainjob` standing now, if any.
    pub fn current(&self, trainjob: &ObjectRef<TrainJob>) -> Option<String> {
        self.0
            .lock()
            .ok()
            .and_then(|m| m.get(trainjob).map(|(_, message)| message.clone()))
    }

    /// `trainjob`'s pods exist (or no longer matter): forget its failure.
    pub fn forget(&self, trainjob: &ObjectRef<TrainJob>) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(trainjob);
        }
    }

    /// Event `event` is gone: forget the failure it told of.
    fn forget_event(&self, event: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|_, (e, _)| e != event);
        }
    }

    /// Keep only the failures of TrainJobs that exist.
    pub fn retain(&self, exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|r, _| exists(r));
        }
    }
}

/// The TrainJob (by name) whose JobSet has Job `job`: a candidate name
/// (`job` cut at a `-`, longest first) for which `replicated_jobs` answers
/// the JobSet's replicated job names, one of which with an index is the
/// rest of `job`.
pub fn trainjob_of_job(
    job: &str,
    replicated_jobs: impl Fn(&str) -> Option<Vec<String>>,
) -> Option<String> {
    let (rest, index) = job.rsplit_once('-')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.match_indices('-').rev().find_map(|(at, _)| {
        let (jobset, replicated) = (&rest[..at], &rest[at + 1..]);
        replicated_jobs(jobset)
            .filter(|names| names.iter().any(|n| n == replicated))
            .map(|_| jobset.to_owned())
    })
}

/// The replicated job names of a JobSet body.
pub fn replicated_job_names(jobset: &Value) -> Vec<String> {
    jobset
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|j| j.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Until `shutdown`: watch the Jobs' `FailedCreate` Events (in `namespace`,
/// else everywhere), record each one whose Job belongs to a TrainJob's
/// JobSet (`jobset_of`: the replicated job names of the JobSet of that
/// namespace and name, if it is controlled by a TrainJob) in `failures`, and
/// send that TrainJob to `wake`.
pub async fn watch(
    client: kube::Client,
    namespace: Option<String>,
    failures: Arc<PodFailures>,
    jobset_of: impl Fn(&str, &str) -> Option<Vec<String>> + Send + 'static,
    wake: UnboundedSender<ObjectRef<TrainJob>>,
    shutdown: CancellationToken,
) {
    let api: Api<Event> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let config = watcher::Config::default().fields("reason=FailedCreate,involvedObject.kind=Job");
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    info!("watching the Jobs' FailedCreate Events");
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            e = events.next() => match e {
                Some(e) => e,
                None => return,
            },
        };
        let (e, gone) = match event {
            Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => (e, false),
            Ok(watcher::Event::Delete(e)) => (e, true),
            Ok(_) => continue,
            Err(err) => {
                warn!(error = %err, "watching FailedCreate Events (retrying)");
                continue;
            }
        };
        let ns = e.metadata.namespace.clone().unwrap_or_default();
        let key = format!("{ns}/{}", e.metadata.name.as_deref().unwrap_or_default());
        if gone {
            failures.forget_event(&key);
            continue;
        }
        let Some(job) = e.involved_object.name.as_deref() else {
            continue;
        };
        let Some(name) = trainjob_of_job(job, |jobset| jobset_of(&ns, jobset)) else {
            continue;
        };
        let message: String = e
            .message
            .as_deref()
            .unwrap_or("the Job controller could not create a pod")
            .chars()
            .take(MESSAGE_LIMIT)
            .collect();
        let trainjob = ObjectRef::new(&name).within(&ns);
        failures.record(
            trainjob.clone(),
            key,
            format!("the pods of Job {job} cannot be created: {message}"),
        );
        if wake.send(trainjob).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_maps_to_the_trainjob_whose_jobset_has_its_replicated_job() {
        let jobsets = |name: &str| match name {
            "train" => Some(vec!["node".to_owned(), "dataset-initializer".to_owned()]),
            "train-node" => Some(vec!["launcher".to_owned()]),
            _ => None,
        };
        assert_eq!(
            trainjob_of_job("train-node-0", jobsets).as_deref(),
            Some("train")
        );
        assert_eq!(
            trainjob_of_job("train-dataset-initializer-0", jobsets).as_deref(),
            Some("train")
        );
        // The longest JobSet name whose replicated job fits wins.
        assert_eq!(
            trainjob_of_job("train-node-launcher-3", jobsets).as_deref(),
            Some("train-node")
        );
        // No index, an unknown replicated job, no JobSet: nothing.
        assert_eq!(trainjob_of_job("train-node", jobsets), None);
        assert_eq!(trainjob_of_job("train-other-0", jobsets), None);
        assert_eq!(trainjob_of_job("solo-0", jobsets), None);
        assert_eq!(trainjob_of_job("-0", jobsets), None);
        assert_eq!(trainjob_of_job("", jobsets), None);
    }

    #[test]
    fn a_failure_stands_until_forgotten_or_its_event_is_gone() {
        let f = PodFailures::default();
        let tj = ObjectRef::<TrainJob>::new("train").within("team");
        f.record(tj.clone(), "team/e1".into(), "quota".into());
        assert_eq!(f.current(&tj).as_deref(), Some("quota"));
        f.forget_event("team/other");
        assert!(f.current(&tj).is_some());
        f.forget_event("team/e1");
        assert!(f.current(&tj).is_none());
        f.record(tj.clone(), "team/e2".into(), "webhook".into());
        f.forget(&tj);
        assert!(f.current(&tj).is_none());
        f.record(tj.clone(), "team/e3".into(), "x".into());
        f.retain(|_| false);
        assert!(f.current(&tj).is_none());
    }
}
