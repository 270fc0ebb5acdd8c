//! Kubernetes Events on TrainJobs (reporter `trainer-trainjob-controller`):
//! upstream's `TrainJobResourcesCreationFailed`, plus one Event per
//! important transition (JobSet created, suspended, resumed, complete,
//! failed, deadline exceeded, unsupported or missing runtime, no plugin set
//! that can serve).
//!
//! Events are written through the core `v1` API with the fields its
//! readers sort and filter on: `firstTimestamp`, `lastTimestamp`, `count`,
//! `source.component` (and `eventTime`, `reportingComponent`,
//! `reportingInstance`, `action` for `events.k8s.io` readers, which see the
//! same objects). The `events.k8s.io/v1` API refuses those legacy fields on
//! create, and clients that list core Events and keep only those with a
//! `firstTimestamp` (the Kubeflow Python SDK's `get_job_events`) would see
//! none of ours.
//!
//! Repeats are aggregated like Kubernetes' event recorders do: an Event with
//! the same type, reason, action and object as one written in the last six
//! minutes is not written again; its `count` goes up and `lastTimestamp`
//! and the message become the latest ones (if it has expired meanwhile, a
//! new one is created).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Mutex;
use tracing::warn;
use trainforge_api::trainer::v1alpha1::TrainJob;

use super::Context;
use super::conditions::{CONDITION_PLUGINS_READY, ConditionStatus, Transition};

/// How long after its last occurrence an Event is updated rather than
/// written anew.
const AGGREGATION_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Who writes the Events: `source.component` / `reportingComponent`, and
/// this replica (`reportingInstance`; the component when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The component name.
    pub controller: String,
    /// This replica's identity.
    pub instance: Option<String>,
}

/// Why an Event could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// Creating a new Event failed.
    #[error("creating Event {name}: {source}")]
    Create {
        /// The Event's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Updating the count of a repeated Event failed.
    #[error("updating Event {name}: {source}")]
    Update {
        /// The Event's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// What makes two Events the same occurrence, repeated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    warning: bool,
    reason: String,
    action: String,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

/// Writes core `v1` Events, aggregating repeats (see the module rules).
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    /// What is kept of the last Event written per key (its name, count and
    /// time: an Event as the API server returns it is ~2 KiB, and one is
    /// kept per TrainJob for the aggregation window).
    written: Mutex<HashMap<EventKey, Sent>>,
}

/// What aggregating an Event's repeats needs of it.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    /// The Event's name.
    name: String,
    /// Its `count`.
    count: i32,
    /// Its `lastTimestamp`.
    last: Timestamp,
}

impl Sent {
    /// What is kept of `event`, written at `now`.
    fn of(event: &CoreEvent, now: Timestamp) -> Sent {
        Sent {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or(1),
            last: event.last_timestamp.as_ref().map_or(now, |t| t.0),
        }
    }
}

/// What to write for one occurrence.
#[derive(Debug, Clone, PartialEq)]
enum Write {
    /// A new Event.
    Create(Box<CoreEvent>),
    /// The repeat of an Event written before: its new count, last time and
    /// the latest note (its first time stays).
    Update {
        /// The Event's new state.
        sent: Sent,
        /// The latest note.
        message: String,
    },
}

impl Write {
    /// The merge patch of an [`Write::Update`].
    fn update_patch(sent: &Sent, message: &str) -> serde_json::Value {
        json!({
            "count": sent.count,
            "lastTimestamp": Time(sent.last),
            "message": message,
        })
    }
}

/// One occurrence to record.
struct Occurrence<'a> {
    warning: bool,
    reason: &'a str,
    action: &'a str,
    note: String,
    regarding: &'a ObjectReference,
}

/// A new Event for `o` at `now`.
fn new_event(reporter: &Reporter, o: &Occurrence<'_>, now: Timestamp) -> CoreEvent {
    let instance = reporter
        .instance
        .clone()
        .unwrap_or_else(|| reporter.controller.clone());
    let object = o.regarding.name.as_deref().unwrap_or(&reporter.controller);
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!("{object}.{:x}", now.as_nanosecond())),
            namespace: o.regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: o.regarding.clone(),
        reason: Some(o.reason.to_owned()),
        message: Some(o.note.clone()),
        type_: Some(if o.warning { "Warning" } else { "Normal" }.to_owned()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        source: Some(EventSource {
            component: Some(reporter.controller.clone()),
            host: None,
        }),
        event_time: Some(MicroTime(now)),
        action: Some(o.action.to_owned()),
        reporting_component: Some(reporter.controller.clone()),
        reporting_instance: Some(instance),
        ..CoreEvent::default()
    }
}

/// The write for `o` given the Event last written for its key.
fn plan(reporter: &Reporter, last: Option<&Sent>, o: &Occurrence<'_>, now: Timestamp) -> Write {
    match last.filter(|e| e.last + AGGREGATION_WINDOW > now) {
        Some(e) => Write::Update {
            sent: Sent {
                name: e.name.clone(),
                count: e.count.saturating_add(1),
                last: now,
            },
            message: o.note.clone(),
        },
        None => Write::Create(Box::new(new_event(reporter, o, now))),
    }
}

impl Recorder {
    /// A recorder writing as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            written: Mutex::new(HashMap::new()),
        }
    }

    async fn create(
        &self,
        api: &Api<CoreEvent>,
        event: &CoreEvent,
    ) -> Result<CoreEvent, EventError> {
        api.create(&PostParams::default(), event)
            .await
            .map_err(|source| EventError::Create {
                name: event.metadata.name.clone().unwrap_or_default(),
                source,
            })
    }

    /// Record one occurrence of an Event about `regarding`.
    async fn record(&self, o: Occurrence<'_>) -> Result<(), EventError> {
        let key = EventKey {
            warning: o.warning,
            reason: o.reason.to_owned(),
            action: o.action.to_owned(),
            kind: o.regarding.kind.clone(),
            namespace: o.regarding.namespace.clone(),
            name: o.regarding.name.clone(),
            uid: o.regarding.uid.clone(),
        };
        let ns = o.regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), ns);
        // Held across the write so that two repeats cannot both create.
        let mut written = self.written.lock().await;
        let now = Timestamp::now();
        written.retain(|_, e| e.last + AGGREGATION_WINDOW > now);
        let stored = match plan(&self.reporter, written.get(&key), &o, now) {
            Write::Create(event) => self.create(&api, &event).await?,
            Write::Update { sent, message } => {
                let name = sent.name.clone();
                let patch = Write::update_patch(&sent, &message);
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(e) => e,
                    // Expired (or deleted) meanwhile: a new one.
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        self.create(&api, &new_event(&self.reporter, &o, now))
                            .await?
                    }
                    Err(source) => return Err(EventError::Update { name, source }),
                }
            }
        };
        written.insert(key, Sent::of(&stored, now));
        Ok(())
    }

    /// Record one occurrence of an Event about any object (a
    /// `TrainerPlugin`); the note is cut as TrainJob notes are.
    pub async fn record_about(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError> {
        self.record(Occurrence {
            warning,
            reason,
            action,
            note: bounded(note),
            regarding,
        })
        .await
    }
}

/// Upstream's reason for any failure to build or apply a TrainJob's objects.
pub const REASON_CREATION_FAILED: &str = "TrainJobResourcesCreationFailed";
/// Upstream's action for it.
pub const ACTION_RECONCILING: &str = "Reconciling";
/// Upstream truncates the error in the note to this many characters (an
/// Event note must stay under 1 KiB).
const NOTE_LIMIT: usize = 950;

/// `text` cut at 950 characters, with ` ...` appended when cut.
fn bounded(text: &str) -> String {
    let mut chars = text.chars();
    let cut: String = chars.by_ref().take(NOTE_LIMIT).collect();
    if chars.next().is_some() {
        format!("{cut} ...")
    } else {
        cut
    }
}

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
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) -> bool {
    let regarding = job.object_ref(&());
    let occurrence = Occurrence {
        warning,
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

/// The Event for a condition transition, if it is one users care about:
/// `(warning, reason, note)`.
pub fn for_transition(t: &Transition) -> Option<(bool, String, String)> {
    let note = |fallback: &str| {
        if t.message.is_empty() {
            fallback.to_owned()
        } else {
            bounded(&t.message)
        }
    };
    match (t.kind.as_str(), t.status) {
        ("Suspended", ConditionStatus::True) => {
            Some((false, "Suspended".into(), note("TrainJob is suspended")))
        }
        ("Suspended", ConditionStatus::False) => {
            Some((false, "Resumed".into(), note("TrainJob is resumed")))
        }
        ("Complete", ConditionStatus::True) => {
            Some((false, "Completed".into(), note("TrainJob completed")))
        }
        ("Failed", ConditionStatus::True) => {
            Some((true, t.reason.clone(), note("TrainJob failed")))
        }
        (CONDITION_PLUGINS_READY, ConditionStatus::False) => Some((
            true,
            t.reason.clone(),
            note("no plugin set can serve TrainJobs"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    fn reporter() -> Reporter {
        Reporter {
            controller: "trainer-trainjob-controller".into(),
            instance: Some("op_abc".into()),
        }
    }

    fn regarding() -> ObjectReference {
        ObjectReference {
            api_version: Some("trainer.kubeflow.org/v1alpha1".into()),
            kind: Some("TrainJob".into()),
            name: Some("job".into()),
            namespace: Some("team".into()),
            uid: Some("u".into()),
            ..ObjectReference::default()
        }
    }

    fn occurrence<'a>(regarding: &'a ObjectReference, note: &str) -> Occurrence<'a> {
        Occurrence {
            warning: true,
            reason: REASON_CREATION_FAILED,
            action: ACTION_RECONCILING,
            note: note.into(),
            regarding,
        }
    }

    #[test]
    fn a_new_event_has_the_core_fields_its_readers_filter_on() {
        let r = regarding();
        let now = Timestamp::now();
        let Write::Create(e) = plan(&reporter(), None, &occurrence(&r, "boom"), now) else {
            panic!("not a create");
        };
        assert_eq!(e.first_timestamp, Some(Time(now)));
        assert_eq!(e.last_timestamp, Some(Time(now)));
        assert_eq!(e.count, Some(1));
        assert_eq!(
            e.source.unwrap().component.as_deref(),
            Some("trainer-trainjob-controller")
        );
        assert_eq!(e.involved_object, r);
        assert_eq!(e.metadata.namespace.as_deref(), Some("team"));
        assert!(e.metadata.name.unwrap().starts_with("job."));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some(REASON_CREATION_FAILED));
        assert_eq!(e.message.as_deref(), Some("boom"));
        assert_eq!(e.action.as_deref(), Some(ACTION_RECONCILING));
        assert_eq!(e.reporting_instance.as_deref(), Some("op_abc"));
        assert_eq!(e.event_time, Some(MicroTime(now)));
    }

    #[test]
    fn a_repeat_within_the_window_counts_up_and_keeps_the_first_time() {
        let r = regarding();
        let t0 = Timestamp::now();
        let Write::Create(first) = plan(&reporter(), None, &occurrence(&r, "a"), t0) else {
            panic!("not a create");
        };
        let kept = Sent::of(&first, t0);
        assert_eq!(kept.last, t0);
        let t1 = t0 + SignedDuration::from_mins(5);
        let Write::Update { sent, message } =
            plan(&reporter(), Some(&kept), &occurrence(&r, "b"), t1)
        else {
            panic!("not an update");
        };
        assert_eq!(Some(&sent.name), first.metadata.name.as_ref());
        assert_eq!(sent.count, 2);
        assert_eq!(sent.last, t1);
        assert_eq!(message, "b", "the latest message");
        let patch = Write::update_patch(&sent, &message);
        assert_eq!(
            patch,
            json!({"count": 2, "lastTimestamp": Time(t1), "message": "b"}),
            "the first time is left as it was"
        );
        // Six minutes after the last occurrence: a new Event.
        let t2 = t1 + AGGREGATION_WINDOW;
        let Write::Create(third) = plan(&reporter(), Some(&sent), &occurrence(&r, "c"), t2) else {
            panic!("not a create");
        };
        assert_eq!(third.count, Some(1));
        assert_ne!(third.metadata.name, first.metadata.name);
    }

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
    fn transitions_worth_an_event() {
        let t = |kind: &str, status: ConditionStatus, reason: &str| Transition {
            kind: kind.into(),
            status,
            reason: reason.into(),
            message: String::new(),
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
                .0,
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
    fn no_serving_plugins_is_a_warning_naming_them() {
        let mut tr = Transition {
            kind: CONDITION_PLUGINS_READY.into(),
            status: ConditionStatus::False,
            reason: "NoServingPlugins".into(),
            message: "no plugin in service calls build; ClusterTrainerPlugins not serving: jobset (DigestMismatch: x)".into(),
        };
        let (warning, reason, note) = for_transition(&tr).unwrap();
        assert!(warning);
        assert_eq!(reason, "NoServingPlugins");
        assert!(note.contains("jobset (DigestMismatch: x)"), "{note}");
        tr.message = "z".repeat(5000);
        assert_eq!(
            for_transition(&tr).unwrap().2.chars().count(),
            NOTE_LIMIT + 4
        );
        tr.status = ConditionStatus::True;
        assert!(
            for_transition(&tr).is_none(),
            "only the problem is an Event"
        );
    }
}
