//! The watch cache of the kinds the active plugins declared (what they emit
//! and what they read), plus the runtime snapshot ConfigMaps.
//!
//! One reflector per kind, started and stopped as the plugin set changes.
//! It serves three purposes:
//! - `host.get-object` for plugins ([`ObjectSource`]), straight from memory;
//! - the live objects the apply step compares against (no-op resyncs);
//! - triggers: an event on an object controlled by a TrainJob enqueues
//!   that TrainJob, batched unless it made the TrainJob's JobSet all ready
//!   ([`super::ready_edge`]).
//!
//! Cached objects keep their metadata parsed and their body and field sets
//! as JSON text (parsed again by [`ObjectCache::live`]; readers of the
//! metadata only use [`ObjectCache::live_metadata`]), and only the
//! operator's own `managedFields` entry.
//!
//! Kinds whose resource does not exist in the cluster (e.g. Volcano's
//! PodGroup without Volcano installed) are skipped and retried when the
//! plugin set changes or every [`RETRY_DISCOVERY`].
//!
//! Reads see the operator's own writes: an object it wrote is served as
//! the API server returned it ([`ObjectCache::remember_write`]) until the
//! watch delivers an event for it at least as new, or for
//! [`READ_YOUR_WRITES`] at most. Without this, a reconcile that runs before
//! the watch delivers a just-created object would create it again (and be
//! refused), or render again what nothing changed.

use crate::plugin::kinds::gvk;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use trainforge_api::plugin::KindRef;
use trainforge_api::trainer::v1alpha1::TrainJob;
use trainforge_api::trainer::v1alpha1::constants::{GROUP, TRAINJOB_KIND};

use super::batch::ChildChange;
use super::ready_edge::ReadyEdges;

use crate::plugin::ObjectSource;

/// How long an object the operator wrote is served from its write when
/// the watch has not delivered it (a watch that stalls must not pin an old
/// write forever).
pub const READ_YOUR_WRITES: Duration = Duration::from_secs(60);

/// How often kinds missing from discovery are looked up again.
pub const RETRY_DISCOVERY: Duration = Duration::from_secs(30);

/// How long [`ObjectCache::ensure`] waits for a new watch to list before
/// reporting the kind as not synced (it keeps trying in the background):
/// readiness never waits on a watch forever.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a kind cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// The watch did not list within [`SYNC_TIMEOUT`] (e.g. the operator
    /// may not list the kind).
    #[error("{api_version} {kind}: the watch did not sync within {timeout:?}")]
    NotSynced {
        /// apiVersion.
        api_version: String,
        /// Kind.
        kind: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// Discovery does not know the kind.
    #[error("{api_version} {kind} is not served by the API server: {reason}")]
    Unknown {
        /// apiVersion.
        api_version: String,
        /// Kind.
        kind: String,
        /// Discovery's answer.
        reason: String,
    },
}

struct Watched {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
    task: JoinHandle<()>,
}

impl Watched {
    /// The store key; cluster-scoped kinds ignore the namespace.
    fn key(&self, namespace: &str, name: &str) -> ObjectRef<DynamicObject> {
        let r = ObjectRef::new_with(name, self.resource.clone());
        if self.namespaced {
            r.within(namespace)
        } else {
            r
        }
    }
}

/// `(kind, namespace, name)`; the namespace is empty for cluster-scoped kinds.
type WriteKey = (KindRef, String, String);

/// Objects the operator wrote that the watch has not delivered yet.
type Writes = Arc<Mutex<HashMap<WriteKey, (Arc<DynamicObject>, Instant)>>>;

/// Reflectors for a changing set of kinds.
pub struct ObjectCache {
    client: kube::Client,
    trigger: UnboundedSender<ChildChange>,
    watched: Mutex<HashMap<KindRef, Arc<Watched>>>,
    writes: Writes,
}

/// Whether a watch event for an object at `seen` (its resourceVersion)
/// is at least as new as the write at `written`. Resource versions are
/// compared as numbers when both are (etcd's revisions); otherwise any
/// event counts as newer.
fn caught_up(seen: Option<&str>, written: Option<&str>) -> bool {
    match (
        seen.and_then(|s| s.parse::<u64>().ok()),
        written.and_then(|w| w.parse::<u64>().ok()),
    ) {
        (Some(s), Some(w)) => s >= w,
        _ => true,
    }
}

/// Whether a watch event for an object at `seen` (its resourceVersion)
/// delivers the very write the operator made at `written`.
fn is_own_write(seen: Option<&str>, written: Option<&str>) -> bool {
    seen.is_some() && seen == written
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache").finish_non_exhaustive()
    }
}

/// The TrainJob that controls `object`, if any.
pub fn controller_trainjob(object: &DynamicObject) -> Option<ObjectRef<TrainJob>> {
    let owner = object
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = owner.api_version.split('/').next().unwrap_or_default();
    (owner.kind == TRAINJOB_KIND && group == GROUP).then(|| {
        let r = ObjectRef::new(&owner.name);
        match &object.metadata.namespace {
            Some(ns) => r.within(ns),
            None => r,
        }
    })
}

impl ObjectCache {
    /// An empty cache; events on watched objects controlled by a TrainJob
    /// are sent to `trigger`.
    pub fn new(client: kube::Client, trigger: UnboundedSender<ChildChange>) -> Self {
        ObjectCache {
            client,
            trigger,
            watched: Mutex::new(HashMap::new()),
            writes: Arc::default(),
        }
    }

    fn get_watched(&self, kind: &KindRef) -> Option<Arc<Watched>> {
        self.watched.lock().ok()?.get(kind).cloned()
    }

    /// The kinds currently watched.
    pub fn kinds(&self) -> BTreeSet<KindRef> {
        self.watched
            .lock()
            .map(|w| w.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Watch exactly `kinds` (start new reflectors, stop the others) and
    /// wait until the new ones have listed. Kinds the cluster does not serve
    /// are returned as errors and retried on the next call.
    pub async fn ensure(&self, kinds: &BTreeSet<KindRef>) -> Vec<ObjectsError> {
        let mut errors = Vec::new();
        let current = self.kinds();
        if let Ok(mut w) = self.watched.lock() {
            w.retain(|k, v| {
                let keep = kinds.contains(k);
                if !keep {
                    info!(api_version = %k.api_version, kind = %k.kind, "stopping watch");
                    v.task.abort();
                }
                keep
            });
        }
        // New kinds start at once (each is a discovery request, then a list).
        let new: Vec<&KindRef> = kinds.iter().filter(|k| !current.contains(k)).collect();
        let started = futures::future::join_all(new.iter().map(|kind| self.start(kind))).await;
        for (kind, started) in new.into_iter().zip(started) {
            match started {
                Ok(w) => {
                    if let Ok(mut map) = self.watched.lock() {
                        map.insert(kind.clone(), Arc::new(w));
                    }
                }
                Err(e) => {
                    warn!(error = %e, "kind not watched");
                    errors.push(e);
                }
            }
        }
        let waits = kinds.iter().filter_map(|kind| {
            let w = self.get_watched(kind)?;
            Some(async move {
                match tokio::time::timeout(SYNC_TIMEOUT, w.store.wait_until_ready()).await {
                    Ok(_) => None,
                    Err(_) => {
                        warn!(api_version = %kind.api_version, kind = %kind.kind, "watch not synced in time; not waiting for it");
                        Some(ObjectsError::NotSynced {
                            api_version: kind.api_version.clone(),
                            kind: kind.kind.clone(),
                            timeout: SYNC_TIMEOUT,
                        })
                    }
                }
            })
        });
        errors.extend(futures::future::join_all(waits).await.into_iter().flatten());
        errors
    }

    /// The resource of a kind, and whether it is namespaced, from discovery.
    async fn discover(&self, kind: &KindRef) -> Result<(ApiResource, bool), ObjectsError> {
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk(kind))
            .await
            .map_err(|e| ObjectsError::Unknown {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
                reason: e.to_string(),
            })?;
        Ok((resource, caps.scope == kube::discovery::Scope::Namespaced))
    }

    async fn start(&self, kind: &KindRef) -> Result<Watched, ObjectsError> {
        let (resource, namespaced) = self.discover(kind).await?;
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let trigger = self.trigger.clone();
        let writes = self.writes.clone();
        let watched_kind = kind.clone();
        let label = format!("{} {}", kind.api_version, kind.kind);
        info!(kind = %label, "starting watch");
        // managedFields are the bulk of an applied object's size: only our
        // own Apply entry is kept (the apply step compares against it). The
        // body is kept as text (see `compact`).
        // JobSets' readiness is read before their bodies become text.
        let edges = (kind.group() == "jobset.x-k8s.io" && kind.kind == "JobSet")
            .then(|| Arc::new(Mutex::new(ReadyEdges::default())));
        let observed = edges.clone();
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .map(move |event| {
                if let (Some(edges), Ok(e)) = (&observed, &event)
                    && let Ok(mut edges) = edges.lock()
                {
                    edges.observe(e);
                }
                event
            })
            .modify(|o| {
                if let Some(fields) = o.metadata.managed_fields.as_mut() {
                    fields.retain(super::apply::is_ours);
                }
                compact(o);
            });
        let stream = reflector::reflector(writer, events).touched_objects();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match item {
                    Ok(object) => {
                        // The store has this event now: a write it is at
                        // least as new as is served from the store again.
                        // The event of exactly the operator's own write (same
                        // resourceVersion) tells the reconcile that wrote it
                        // nothing new: it triggers nothing.
                        let mut own_write = false;
                        if let Ok(mut w) = writes.lock() {
                            let key = (
                                watched_kind.clone(),
                                if namespaced {
                                    object.metadata.namespace.clone().unwrap_or_default()
                                } else {
                                    String::new()
                                },
                                object.metadata.name.clone().unwrap_or_default(),
                            );
                            let seen = object.metadata.resource_version.as_deref();
                            if let Some((written, _)) = w.get(&key) {
                                let written = written.metadata.resource_version.as_deref();
                                own_write = is_own_write(seen, written);
                                if caught_up(seen, written) {
                                    w.remove(&key);
                                }
                            }
                        }
                        let at_once = edges
                            .as_ref()
                            .and_then(|e| e.lock().ok())
                            .is_some_and(|mut e| e.take(&object));
                        if !own_write && let Some(trainjob) = controller_trainjob(&object) {
                            let _ = trigger.send(ChildChange { trainjob, at_once });
                        }
                    }
                    Err(e) => warn!(kind = %label, error = %e, "watch error (retrying)"),
                }
            }
        });
        Ok(Watched {
            resource,
            namespaced,
            store,
            task,
        })
    }

    /// The live object: the operator's own write of it if the watch has not
    /// delivered that yet, else the cache's (`None` if absent or the kind is
    /// not watched).
    pub fn live(&self, kind: &KindRef, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.live_metadata(kind, namespace, name).map(expand)
    }

    /// [`ObjectCache::live`] for a reader of the metadata only: the body may
    /// be the cache's text form, which is not parsed (cheaper).
    pub fn live_metadata(
        &self,
        kind: &KindRef,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<DynamicObject>> {
        let w = self.get_watched(kind)?;
        let ns = if w.namespaced { namespace } else { "" };
        if let Ok(mut writes) = self.writes.lock() {
            let key = (kind.clone(), ns.to_owned(), name.to_owned());
            match writes.get(&key) {
                Some((o, at)) if at.elapsed() < READ_YOUR_WRITES => return Some(o.clone()),
                Some(_) => {
                    writes.remove(&key);
                }
                None => {}
            }
        }
        w.store.get(&w.key(namespace, name))
    }

    /// Serve `object` (as the API server returned it for the operator's
    /// write) until the watch delivers it; see the module rules.
    pub fn remember_write(&self, kind: &KindRef, object: DynamicObject) {
        let Some(w) = self.get_watched(kind) else {
            return;
        };
        let ns = if w.namespaced {
            object.metadata.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let key = (
            kind.clone(),
            ns,
            object.metadata.name.clone().unwrap_or_default(),
        );
        if let Ok(mut writes) = self.writes.lock() {
            writes.insert(key, (Arc::new(object), Instant::now()));
        }
    }

    /// Stop serving a write of the object (the operator deleted it).
    pub fn forget_write(&self, kind: &KindRef, namespace: &str, name: &str) {
        let ns = match self.get_watched(kind) {
            Some(w) if !w.namespaced => "",
            _ => namespace,
        };
        if let Ok(mut writes) = self.writes.lock() {
            writes.remove(&(kind.clone(), ns.to_owned(), name.to_owned()));
        }
    }

    /// Drop writes older than [`READ_YOUR_WRITES`]; how many are left.
    pub fn prune_writes(&self) -> usize {
        self.writes.lock().map_or(0, |mut w| {
            w.retain(|_, (_, at)| at.elapsed() < READ_YOUR_WRITES);
            w.len()
        })
    }

    /// How to reach a kind: from a watch, else from discovery.
    pub async fn resource(&self, kind: &KindRef) -> Result<(ApiResource, bool), ObjectsError> {
        if let Some(w) = self.get_watched(kind) {
            return Ok((w.resource.clone(), w.namespaced));
        }
        self.discover(kind).await
    }
}

/// Keep a cached object's body (everything but apiVersion, kind and
/// metadata) and its managed field sets (`fieldsV1`) as JSON text: a parsed
/// tree takes several times the memory of its text, and the caches hold
/// every JobSet and snapshot of the cluster. A field set is read only when
/// an apply cannot be skipped by resourceVersion (after a restart), and is
/// the largest part of an applied object's metadata. The text is in `data`
/// (and in `fieldsV1`) as a JSON string, which neither ever is in an object
/// read from the API server (both are always JSON objects): a string body
/// marks a compact object.
fn compact(o: &mut DynamicObject) {
    if let Value::Object(_) = o.data
        && let Ok(text) = serde_json::to_string(&o.data)
    {
        o.data = Value::String(text);
        for entry in o.metadata.managed_fields.iter_mut().flatten() {
            if let Some(FieldsV1(set @ Value::Object(_))) = entry.fields_v1.as_mut()
                && let Ok(text) = serde_json::to_string(set)
            {
                *set = Value::String(text);
            }
        }
    }
}

/// The body of `o` (everything but apiVersion, kind and metadata) as JSON
/// text: a cached object's text as it is (the watch cache keeps bodies as
/// text), else serialised.
pub fn body_text(o: &DynamicObject) -> Result<Cow<'_, str>, serde_json::Error> {
    match &o.data {
        Value::String(text) => Ok(Cow::Borrowed(text)),
        other => serde_json::to_string(other).map(Cow::Owned),
    }
}

/// The object with its body and field sets parsed again (see [`compact`]);
/// one that is not compact is returned as it is.
fn expand(o: Arc<DynamicObject>) -> Arc<DynamicObject> {
    let Value::String(text) = &o.data else {
        return o;
    };
    let parsed = serde_json::from_str(text).and_then(|data| {
        let mut metadata = o.metadata.clone();
        for entry in metadata.managed_fields.iter_mut().flatten() {
            if let Some(FieldsV1(set)) = entry.fields_v1.as_mut()
                && let Value::String(text) = set
            {
                *set = serde_json::from_str(text)?;
            }
        }
        Ok(DynamicObject {
            types: o.types.clone(),
            metadata,
            data,
        })
    });
    match parsed {
        Ok(object) => Arc::new(object),
        // Unreachable: the text was written from a parsed value.
        Err(e) => {
            warn!(error = %e, "a cached object's body does not parse again");
            o
        }
    }
}

impl Drop for ObjectCache {
    fn drop(&mut self) {
        if let Ok(w) = self.watched.lock() {
            for v in w.values() {
                v.task.abort();
            }
        }
    }
}

impl ObjectSource for ObjectCache {
    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        self.get_watched(kind).map(|w| w.namespaced)
    }

    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        if self.get_watched(kind).is_none() {
            return Err(format!(
                "{} {} is not watched by the operator",
                kind.api_version, kind.kind
            ));
        }
        match self.live(kind, namespace, name) {
            None => Ok(None),
            Some(o) => serde_json::to_string(o.as_ref())
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{caught_up, compact, expand, is_own_write};
    use kube::api::DynamicObject;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_cached_body_is_text_and_reads_back_the_same() {
        let original: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {
                "name": "j", "namespace": "n", "generation": 2, "labels": {"a": "b"},
                "managedFields": [{
                    "manager": "trainer", "operation": "Apply", "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:suspend": {}, "f:replicatedJobs": {"k:{\"name\":\"node\"}": {".": {}}}}},
                }],
            },
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}], "suspend": false},
            "status": {"conditions": [], "restarts": 0},
        }))
        .unwrap();
        let mut cached = original.clone();
        compact(&mut cached);
        assert!(cached.data.is_string(), "{:?}", cached.data);
        let sets: Vec<_> = cached.metadata.managed_fields.iter().flatten().collect();
        assert_eq!(sets.len(), 1);
        assert!(
            sets[0].fields_v1.as_ref().is_some_and(|f| f.0.is_string()),
            "the field set is text: {:?}",
            sets[0].fields_v1
        );
        let without_sets = |m: &kube::api::ObjectMeta| {
            let mut m = m.clone();
            m.managed_fields = None;
            m
        };
        assert_eq!(
            without_sets(&cached.metadata),
            without_sets(&original.metadata),
            "the rest of the metadata stays parsed"
        );
        compact(&mut cached);
        let back = expand(Arc::new(cached));
        assert_eq!(
            serde_json::to_value(back.as_ref()).unwrap(),
            serde_json::to_value(&original).unwrap()
        );
        // An object that is not compact (the operator's own write) is served as is.
        let write = Arc::new(original.clone());
        assert!(Arc::ptr_eq(&expand(write.clone()), &write));
    }

    #[test]
    fn only_the_event_of_the_write_itself_is_the_operators_own() {
        assert!(is_own_write(Some("100"), Some("100")));
        assert!(!is_own_write(Some("101"), Some("100")), "a later change");
        assert!(!is_own_write(Some("99"), Some("100")), "an older event");
        assert!(
            !is_own_write(None, None),
            "versions unknown: not known to be ours"
        );
        assert!(!is_own_write(Some("100"), None));
    }

    #[test]
    fn a_write_is_served_until_an_event_at_least_as_new() {
        assert!(!caught_up(Some("99"), Some("100")), "an older event");
        assert!(caught_up(Some("100"), Some("100")), "the write itself");
        assert!(
            caught_up(Some("101"), Some("100")),
            "a later change or the deletion"
        );
        assert!(
            caught_up(Some("x"), Some("100")),
            "not comparable: any event"
        );
        assert!(caught_up(None, Some("100")));
    }
}
