//! The moment a JobSet's jobs are all ready, seen from its watch events.
//!
//! Rule: a JobSet whose jobs are all ready or succeeded (per replicated
//! job, `ready + succeeded` summed over its status reaches the `replicas`
//! summed over its spec) and that has not finished (no `Completed` or
//! `Failed` condition that is `True`) is *all ready*. The watch event in
//! which a JobSet becomes all ready — it was not in the previous event the
//! watch delivered for it — is an *edge*, and the change it brings is not
//! batched ([`super::batch`]): the TrainJob's `jobsStatus` shows its pods
//! ready at once. Kueue's `PodsReady` (its `waitForPodsReady`) is computed
//! from exactly that sum on the TrainJob, and only while the TrainJob has
//! not finished: a TrainJob whose pods run for less than one batch window
//! would otherwise never show them ready.
//!
//! The objects a (re)list delivers set the state without edges: a restart
//! is no reason to skip batching for every running JobSet.
//!
//! The state is one key per JobSet that is all ready now, so it is bounded
//! by the running JobSets the watch holds; a deleted or finished JobSet
//! leaves it, and a relist starts it again.

use std::collections::HashSet;

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::Value;

/// `(namespace, name)` of a JobSet.
type Key = (String, String);

/// What the watch of JobSets last saw of each one's readiness, and the edges
/// not yet taken.
#[derive(Debug, Default)]
pub struct ReadyEdges {
    /// JobSets all ready in the last event the watch delivered for them.
    ready: HashSet<Key>,
    /// JobSets of edges not yet taken by [`ReadyEdges::take`].
    edges: HashSet<Key>,
    /// Keys of the relist in progress (they replace `ready` when it ends).
    relist: Option<HashSet<Key>>,
}

fn key(o: &DynamicObject) -> Key {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether a JobSet's body (its `spec` and `status`, as a watch delivers
/// them, before any compaction) says it is all ready (see the module rule).
pub fn all_ready(body: &Value) -> bool {
    let count = |v: &Value, field: &str| v.get(field).and_then(Value::as_i64).unwrap_or(0);
    let Some(jobs) = body
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
    else {
        return false;
    };
    // A replicated job's `replicas` defaults to 1.
    let replicas: i64 = jobs
        .iter()
        .map(|j| j.get("replicas").and_then(Value::as_i64).unwrap_or(1))
        .sum();
    let status = body.get("status").unwrap_or(&Value::Null);
    let ready: i64 = status
        .get("replicatedJobsStatus")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| count(s, "ready") + count(s, "succeeded"))
        .sum();
    let finished = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(c["type"].as_str(), Some("Completed" | "Failed"))
                && c["status"].as_str() == Some("True")
        });
    replicas > 0 && ready >= replicas && !finished
}

impl ReadyEdges {
    /// Note a watch event of JobSets (called before the event reaches the
    /// store; objects must still have their bodies as JSON).
    pub fn observe(&mut self, event: &Event<DynamicObject>) {
        match event {
            Event::Apply(o) => {
                let k = key(o);
                if all_ready(&o.data) {
                    if self.ready.insert(k.clone()) {
                        self.edges.insert(k);
                    }
                } else {
                    self.ready.remove(&k);
                    self.edges.remove(&k);
                }
            }
            Event::Delete(o) => {
                let k = key(o);
                self.ready.remove(&k);
                self.edges.remove(&k);
            }
            Event::Init => self.relist = Some(HashSet::new()),
            Event::InitApply(o) => {
                if all_ready(&o.data) {
                    self.relist.get_or_insert_with(HashSet::new).insert(key(o));
                }
            }
            Event::InitDone => {
                self.ready = self.relist.take().unwrap_or_default();
                self.edges.retain(|k| self.ready.contains(k));
            }
        }
    }

    /// Whether the last event delivered for `o` was an edge; takes it.
    pub fn take(&mut self, o: &DynamicObject) -> bool {
        self.edges.remove(&key(o))
    }

    /// How many JobSets are all ready now (the state's size).
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Whether no JobSet is all ready now.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn jobset(
        name: &str,
        replicas: &[i64],
        ready: &[(i64, i64)],
        finished: Option<&str>,
    ) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"replicatedJobs": replicas.iter().enumerate()
                .map(|(i, r)| json!({"name": format!("j{i}"), "replicas": r})).collect::<Vec<_>>()},
            "status": {
                "replicatedJobsStatus": ready.iter().enumerate()
                    .map(|(i, (r, s))| json!({"name": format!("j{i}"), "ready": r, "succeeded": s}))
                    .collect::<Vec<_>>(),
                "conditions": finished.map(|t| vec![json!({"type": t, "status": "True"})]).unwrap_or_default(),
            },
        }))
        .unwrap();
        o.metadata.managed_fields = None;
        o
    }

    #[test]
    fn ready_and_succeeded_jobs_count_until_the_jobset_finishes() {
        assert!(all_ready(
            &jobset("a", &[1, 2], &[(1, 0), (2, 0)], None).data
        ));
        assert!(all_ready(
            &jobset("a", &[1, 2], &[(0, 1), (1, 1)], None).data
        ));
        assert!(!all_ready(
            &jobset("a", &[1, 2], &[(1, 0), (1, 0)], None).data
        ));
        assert!(!all_ready(
            &jobset("a", &[1, 2], &[(1, 0), (2, 0)], Some("Completed")).data
        ));
        assert!(!all_ready(
            &jobset("a", &[1], &[(1, 0)], Some("Failed")).data
        ));
        // No status yet, no replicated jobs, or a body that is not a JobSet.
        assert!(!all_ready(&jobset("a", &[1], &[], None).data));
        assert!(!all_ready(&json!({"spec": {"replicatedJobs": []}})));
        assert!(!all_ready(&json!("text")));
        // `replicas` defaults to 1.
        assert!(all_ready(
            &json!({"spec": {"replicatedJobs": [{"name": "n"}]},
            "status": {"replicatedJobsStatus": [{"name": "n", "ready": 1}]}})
        ));
    }

    #[test]
    fn only_the_event_that_makes_a_jobset_all_ready_is_an_edge() {
        let mut e = ReadyEdges::default();
        let starting = jobset("a", &[2], &[(1, 0)], None);
        let ready = jobset("a", &[2], &[(2, 0)], None);
        e.observe(&Event::Apply(starting.clone()));
        assert!(!e.take(&starting));
        e.observe(&Event::Apply(ready.clone()));
        assert!(e.take(&ready), "not ready → ready is an edge");
        assert!(!e.take(&ready), "taken once");
        e.observe(&Event::Apply(ready.clone()));
        assert!(!e.take(&ready), "still ready: no edge");
        // Finishing leaves the state; a JobSet of that name made again may
        // have an edge of its own.
        let done = jobset("a", &[2], &[(0, 2)], Some("Completed"));
        e.observe(&Event::Apply(done.clone()));
        assert!(!e.take(&done));
        assert!(e.is_empty(), "a finished JobSet is not kept");
        e.observe(&Event::Apply(ready.clone()));
        assert!(e.take(&ready));
        e.observe(&Event::Delete(ready.clone()));
        assert!(e.is_empty(), "a deleted JobSet is not kept");
    }

    #[test]
    fn an_edge_not_taken_before_the_jobset_stops_being_ready_is_dropped() {
        let mut e = ReadyEdges::default();
        let ready = jobset("a", &[1], &[(1, 0)], None);
        e.observe(&Event::Apply(ready.clone()));
        e.observe(&Event::Apply(jobset("a", &[1], &[(0, 0)], None)));
        assert!(!e.take(&ready));
    }

    #[test]
    fn a_relist_sets_the_state_without_edges_and_forgets_what_it_did_not_list() {
        let mut e = ReadyEdges::default();
        let a = jobset("a", &[1], &[(1, 0)], None);
        let b = jobset("b", &[1], &[(1, 0)], None);
        e.observe(&Event::Apply(a.clone()));
        assert_eq!(e.len(), 1);
        e.observe(&Event::Init);
        e.observe(&Event::InitApply(b.clone()));
        e.observe(&Event::InitDone);
        assert!(!e.take(&b), "a listed object is no edge");
        assert!(
            !e.take(&a),
            "a's edge went with the relist that did not list it"
        );
        assert_eq!(e.len(), 1, "only b is kept");
        e.observe(&Event::Apply(b.clone()));
        assert!(!e.take(&b), "b was ready before: no edge");
    }
}
