//! Kubernetes Events, written by a [`Recorder`] for any object the operator
//! reports on (TrainJobs, `TrainerPlugin`s).
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
//! new one is created). Notes are cut at [`NOTE_LIMIT`] characters, as
//! upstream cuts them (an Event note must stay under 1 KiB).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Mutex;

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
    event_type: EventType,
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

/// An Event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something users may want to know (`Normal`).
    Normal,
    /// Something that went wrong (`Warning`).
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One occurrence to record.
pub struct Occurrence<'a> {
    /// Normal or Warning.
    pub event_type: EventType,
    /// The machine-readable reason (`TrainJobResourcesCreationFailed`).
    pub reason: &'a str,
    /// What was being done (`Reconciling`).
    pub action: &'a str,
    /// The human-readable note, at most [`NOTE_LIMIT`] characters (see
    /// [`bounded`]).
    pub note: String,
    /// The object the Event is about.
    pub regarding: &'a ObjectReference,
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
        type_: Some(o.event_type.as_str().to_owned()),
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

    /// Record one occurrence of an Event (its note as given).
    pub async fn record(&self, o: Occurrence<'_>) -> Result<(), EventError> {
        let key = EventKey {
            event_type: o.event_type,
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

    /// Record an Event that must be written exactly once, under the name
    /// `name` its caller derives from what happened (so that recording it
    /// again, after a crash or by another replica, finds it written):
    /// `true` when this call wrote it, `false` when it was there already.
    /// Such an Event is never aggregated with repeats.
    pub async fn record_once(&self, o: Occurrence<'_>, name: &str) -> Result<bool, EventError> {
        let ns = o.regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), ns);
        let mut event = new_event(&self.reporter, &o, Timestamp::now());
        event.metadata.name = Some(name.to_owned());
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(source) => Err(EventError::Create {
                name: name.to_owned(),
                source,
            }),
        }
    }

    /// Record one occurrence of an Event about any object (a
    /// `TrainerPlugin`); the note is cut to [`NOTE_LIMIT`] characters.
    pub async fn record_about(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError> {
        self.record(Occurrence {
            event_type,
            reason,
            action,
            note: bounded(note),
            regarding,
        })
        .await
    }
}

/// Upstream truncates the error in a note to this many characters.
pub const NOTE_LIMIT: usize = 950;

/// `text` cut at [`NOTE_LIMIT`] characters, with ` ...` appended when cut.
pub fn bounded(text: &str) -> String {
    let mut chars = text.chars();
    let cut: String = chars.by_ref().take(NOTE_LIMIT).collect();
    if chars.next().is_some() {
        format!("{cut} ...")
    } else {
        cut
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
            event_type: EventType::Warning,
            reason: "TrainJobResourcesCreationFailed",
            action: "Reconciling",
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
        assert_eq!(e.reason.as_deref(), Some("TrainJobResourcesCreationFailed"));
        assert_eq!(e.message.as_deref(), Some("boom"));
        assert_eq!(e.action.as_deref(), Some("Reconciling"));
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
    fn notes_are_cut_on_characters_at_the_limit() {
        assert_eq!(
            bounded(&"é".repeat(NOTE_LIMIT)),
            "é".repeat(NOTE_LIMIT),
            "at the limit: not cut"
        );
        let cut = bounded(&"é".repeat(NOTE_LIMIT + 1));
        assert!(cut.ends_with("é ..."), "{cut}");
        assert_eq!(cut.chars().count(), NOTE_LIMIT + 4);
    }

    #[test]
    fn event_types_are_spelled_as_the_api_spells_them() {
        assert_eq!(EventType::Normal.as_str(), "Normal");
        assert_eq!(EventType::Warning.as_str(), "Warning");
    }
}
