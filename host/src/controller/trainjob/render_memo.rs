//! Reusing a TrainJob's last render when nothing it depends on changed.
//!
//! Most reconciles of a running TrainJob come from its JobSet's status
//! changing, or from the operator's own status write; neither changes what
//! the plugins would build. A render (reconcile phases, `build`, apply) is
//! reused — nothing is called, nothing is written — only when all of these
//! hold; otherwise the TrainJob is rendered again:
//!
//! - the TrainJob is the same apart from its status (same uid, labels,
//!   annotations, owner references, spec; `resourceVersion` and
//!   `managedFields` are ignored). Plugins' reconcile phases and `build` see
//!   the status but must not depend on it: the `status` phase, which runs on
//!   every reconcile, is where it matters;
//! - the runtime it was rendered from is the same (the snapshot or the live
//!   runtime, compared by name, labels, annotations and spec), and so is
//!   the `runtimePatches` hash;
//! - the plugin set is the same set (see [`crate::plugin::PluginSet::id`]);
//! - every object applied, and every object a plugin read through
//!   `get-object`, is in the watch cache as it was left: for an object with
//!   a `metadata.generation`, the same generation, labels, annotations,
//!   owner references and deletion mark (its status may change); for
//!   others the same `resourceVersion`; an object read as absent is still
//!   absent;
//! - no plugin took another input from outside its arguments (random bytes,
//!   a granted clock): such renders are never reused;
//! - the render is younger than the resync period, so every TrainJob is
//!   rendered in full at least that often.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use trainforge_api::plugin::KindRef;

use crate::plugin::HostInputs;
use trainforge_api::trainer::v1alpha1::TrainJob;

use crate::pipeline::run::RuntimeObject;

/// `(kind, namespace, name)` of an object in the watch cache.
pub type ObjectId = (KindRef, String, String);

/// What a render's reuse depends on, for one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// Not there when rendered (read as absent).
    Absent,
    /// There, with this fingerprint (see [`RenderMemo::marker`]).
    Seen(u64),
    /// Not known (e.g. written but not yet seen): never matches.
    Unknown,
}

struct Entry {
    uid: String,
    inputs: u64,
    depends: Vec<(ObjectId, Marker)>,
    /// The render's runtime info as JSON, what the status phase is given
    /// (a string is a fraction of the parsed tree's memory).
    info: Arc<str>,
    at: Instant,
}

/// Per TrainJob, the last reusable render.
pub struct RenderMemo {
    /// Keys hashes with per-process secrets: a TrainJob cannot be crafted
    /// to collide with another render's fingerprint.
    hasher: RandomState,
    entries: Mutex<HashMap<ObjectRef<TrainJob>, Entry>>,
}

impl std::fmt::Debug for RenderMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderMemo")
            .field("entries", &self.len())
            .finish_non_exhaustive()
    }
}

impl Default for RenderMemo {
    fn default() -> Self {
        RenderMemo {
            hasher: RandomState::new(),
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl RenderMemo {
    fn hash_str(&self, s: &str) -> u64 {
        self.hasher.hash_one(s)
    }

    /// The fingerprint of a render's inputs: the TrainJob without status,
    /// `resourceVersion` and `managedFields`, the runtime, the plugin set
    /// and the `runtimePatches` hash.
    pub fn inputs(
        &self,
        job: &TrainJob,
        runtime: &RuntimeObject,
        set_id: u64,
        patches_hash: &str,
    ) -> u64 {
        let mut job = serde_json::to_value(job).unwrap_or(Value::Null);
        if let Some(o) = job.as_object_mut() {
            o.remove("status");
            if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
                m.remove("managedFields");
            }
        }
        // The runtime by what renders read of it (a snapshot read back and
        // the live runtime it was taken from differ in bookkeeping only).
        let (meta, spec) = match runtime {
            RuntimeObject::Namespaced(r) => (&r.metadata, serde_json::to_string(&r.spec)),
            RuntimeObject::Cluster(r) => (&r.metadata, serde_json::to_string(&r.spec)),
        };
        let runtime = format!(
            "{}/{:?}/{:?}/{:?}/{:?}/{}",
            runtime.kind(),
            meta.namespace,
            meta.name,
            meta.labels,
            meta.annotations,
            spec.unwrap_or_default()
        );
        let mut h = self.hasher.build_hasher();
        job.to_string().hash(&mut h);
        runtime.hash(&mut h);
        set_id.hash(&mut h);
        patches_hash.hash(&mut h);
        h.finish()
    }

    /// An object's fingerprint: generation, labels, annotations, owner
    /// references and deletion mark when it has a generation (status
    /// changes leave it alone), else its `resourceVersion`.
    fn marker(&self, object: &DynamicObject) -> Marker {
        let m = &object.metadata;
        let text = match m.generation {
            Some(g) => serde_json::json!([
                g,
                m.labels,
                m.annotations,
                m.owner_references,
                m.deletion_timestamp,
                m.uid
            ])
            .to_string(),
            None => match &m.resource_version {
                Some(rv) => format!("rv:{rv}:{}", m.uid.as_deref().unwrap_or_default()),
                None => return Marker::Unknown,
            },
        };
        Marker::Seen(self.hash_str(&text))
    }

    fn marker_of(&self, live: Option<&DynamicObject>) -> Marker {
        live.map_or(Marker::Absent, |o| self.marker(o))
    }

    /// The info of the last render of `job` when it may be reused (see the
    /// module rules), reading live objects through `live`.
    pub fn reusable(
        &self,
        job: &TrainJob,
        inputs: u64,
        max_age: Duration,
        live: impl Fn(&ObjectId) -> Option<Arc<DynamicObject>>,
    ) -> Option<Arc<str>> {
        let entries = self.entries.lock().ok()?;
        let e = entries.get(&ObjectRef::from_obj(job))?;
        let same = e.uid == job.metadata.uid.as_deref().unwrap_or_default()
            && e.inputs == inputs
            && e.at.elapsed() < max_age
            && e.depends.iter().all(|(id, marker)| {
                *marker != Marker::Unknown && self.marker_of(live(id).as_deref()) == *marker
            });
        same.then(|| e.info.clone())
    }

    /// Remember a successful render of `job`: the objects it applied (with
    /// the object the API server returned for each one written, `None` for
    /// one left unchanged) and what plugins read, as the cache has them now.
    /// An opaque render is forgotten instead.
    pub fn record(
        &self,
        job: &TrainJob,
        inputs: u64,
        applied: Vec<(ObjectId, Option<DynamicObject>)>,
        taken: HostInputs,
        info: Arc<str>,
        live: impl Fn(&ObjectId) -> Option<Arc<DynamicObject>>,
    ) {
        let key = ObjectRef::from_obj(job);
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if taken.opaque {
            entries.remove(&key);
            return;
        }
        let mut depends: Vec<(ObjectId, Marker)> = applied
            .into_iter()
            .map(|(id, written)| {
                let marker = match written {
                    Some(o) => self.marker(&o),
                    // Unchanged: the cache had it.
                    None => match live(&id) {
                        Some(o) => self.marker(&o),
                        None => Marker::Unknown,
                    },
                };
                (id, marker)
            })
            .collect();
        for id in taken.reads {
            if depends.iter().any(|(d, _)| *d == id) {
                continue;
            }
            let marker = self.marker_of(live(&id).as_deref());
            depends.push((id, marker));
        }
        entries.insert(
            key,
            Entry {
                uid: job.metadata.uid.clone().unwrap_or_default(),
                inputs,
                depends,
                info,
                at: Instant::now(),
            },
        );
    }

    /// Forget `job`'s render (it failed, or did not run).
    pub fn forget(&self, job: &TrainJob) {
        if let Ok(mut e) = self.entries.lock() {
            e.remove(&ObjectRef::from_obj(job));
        }
    }

    /// Keep only the renders of TrainJobs for which `exists` holds.
    pub fn retain(&self, exists: impl Fn(&ObjectRef<TrainJob>) -> bool) {
        if let Ok(mut e) = self.entries.lock() {
            e.retain(|r, _| exists(r));
        }
    }

    /// Renders remembered.
    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn job(spec_nodes: i64, status: Value) -> TrainJob {
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "a", "namespace": "n", "uid": "u1", "resourceVersion": "7"},
            "spec": {"runtimeRef": {"name": "rt"}, "trainer": {"numNodes": spec_nodes}},
            "status": status,
        }))
        .unwrap()
    }

    fn runtime() -> RuntimeObject {
        RuntimeObject::Cluster(
            serde_json::from_value(json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "rt"},
                "spec": {"template": {"spec": {"replicatedJobs": []}}},
            }))
            .unwrap(),
        )
    }

    fn object(generation: Option<i64>, rv: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "a", "namespace": "n", "uid": "js", "resourceVersion": rv,
                "generation": generation, "labels": labels},
        }))
        .unwrap()
    }

    fn id(kind: &str) -> ObjectId {
        (KindRef::new("x/v1", kind), "n".into(), "a".into())
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn reused_only_while_inputs_and_dependencies_are_unchanged() {
        let memo = RenderMemo::default();
        let j = job(1, json!({}));
        let inputs = memo.inputs(&j, &runtime(), 1, "h");
        let jobset = Arc::new(object(Some(1), "10", json!({"a": "1"})));
        let secret = Arc::new(object(None, "20", json!({})));
        let cache: std::cell::RefCell<HashMap<String, Arc<DynamicObject>>> =
            std::cell::RefCell::new(HashMap::from([
                ("JobSet".to_owned(), jobset.clone()),
                ("Secret".to_owned(), secret.clone()),
            ]));
        let live = |i: &ObjectId| cache.borrow().get(&i.0.kind).cloned();
        memo.record(
            &j,
            inputs,
            vec![(id("JobSet"), Some((*jobset).clone()))],
            HostInputs {
                reads: [id("Secret"), id("Missing")].into(),
                opaque: false,
            },
            Arc::from("{}"),
            live,
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_some());

        // Status and resourceVersion of the TrainJob do not count...
        let mut j2 = job(
            1,
            json!({"conditions": [{"type": "Complete", "status": "True", "reason": "r", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
        j2.metadata.resource_version = Some("8".into());
        assert_eq!(memo.inputs(&j2, &runtime(), 1, "h"), inputs);
        // ... its spec, the plugin set and the patches hash do.
        assert_ne!(memo.inputs(&job(2, json!({})), &runtime(), 1, "h"), inputs);
        assert_ne!(memo.inputs(&j, &runtime(), 2, "h"), inputs);
        assert_ne!(memo.inputs(&j, &runtime(), 1, "other"), inputs);
        assert!(memo.reusable(&j, inputs ^ 1, DAY, live).is_none());

        // The JobSet's status changing (new resourceVersion, same generation)
        // keeps it reusable; a new generation or label does not.
        cache.borrow_mut().insert(
            "JobSet".into(),
            Arc::new(object(Some(1), "11", json!({"a": "1"}))),
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_some());
        cache.borrow_mut().insert(
            "JobSet".into(),
            Arc::new(object(Some(2), "12", json!({"a": "1"}))),
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        cache.borrow_mut().insert(
            "JobSet".into(),
            Arc::new(object(Some(1), "13", json!({"a": "2"}))),
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        cache.borrow_mut().insert("JobSet".into(), jobset.clone());
        assert!(memo.reusable(&j, inputs, DAY, live).is_some());

        // A read object without generation: any change counts; one read as
        // absent must stay absent; a deleted output counts.
        cache
            .borrow_mut()
            .insert("Secret".into(), Arc::new(object(None, "21", json!({}))));
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        cache.borrow_mut().insert("Secret".into(), secret.clone());
        cache
            .borrow_mut()
            .insert("Missing".into(), Arc::new(object(None, "1", json!({}))));
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        cache.borrow_mut().remove("Missing");
        assert!(memo.reusable(&j, inputs, DAY, live).is_some());
        cache.borrow_mut().remove("JobSet");
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        cache.borrow_mut().insert("JobSet".into(), jobset.clone());

        // Too old, another uid under the same name, forgotten.
        assert!(memo.reusable(&j, inputs, Duration::ZERO, live).is_none());
        let mut other = j.clone();
        other.metadata.uid = Some("u2".into());
        assert!(memo.reusable(&other, inputs, DAY, live).is_none());
        memo.forget(&j);
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
    }

    #[test]
    fn opaque_or_unseen_renders_are_not_reused() {
        let memo = RenderMemo::default();
        let j = job(1, json!({}));
        let inputs = memo.inputs(&j, &runtime(), 1, "h");
        let none = |_: &ObjectId| None;
        // Written object unknown to the cache and left unchanged: unknown.
        memo.record(
            &j,
            inputs,
            vec![(id("JobSet"), None)],
            HostInputs::default(),
            Arc::from("{}"),
            none,
        );
        assert!(memo.reusable(&j, inputs, DAY, none).is_none());
        // Random bytes or a clock: never reused, and an older render is dropped.
        let jobset = object(Some(1), "1", json!({}));
        let live = |_: &ObjectId| Some(Arc::new(jobset.clone()));
        memo.record(
            &j,
            inputs,
            vec![(id("JobSet"), Some(jobset.clone()))],
            HostInputs::default(),
            Arc::from("{}"),
            live,
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_some());
        memo.record(
            &j,
            inputs,
            vec![(id("JobSet"), Some(jobset.clone()))],
            HostInputs {
                reads: Default::default(),
                opaque: true,
            },
            Arc::from("{}"),
            live,
        );
        assert!(memo.reusable(&j, inputs, DAY, live).is_none());
        assert!(memo.is_empty());
        memo.record(
            &j,
            inputs,
            vec![],
            HostInputs::default(),
            Arc::from("{}"),
            live,
        );
        memo.retain(|_| false);
        assert!(memo.is_empty());
    }
}
