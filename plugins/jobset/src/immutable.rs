//! What a re-render may change on a JobSet that already exists.
//!
//! JobSet rejects most spec changes: its validating webhook compares
//! `spec.replicatedJobs` with the stored object after masking the pod
//! fields Kueue needs to edit on a suspended JobSet (pod template labels,
//! annotations, `nodeSelector`, `tolerations`, `schedulingGates`), and CEL
//! rules freeze `network`, `successPolicy`, `failurePolicy`, `startupPolicy`,
//! `managedBy` and `volumeClaimPolicies`.
//!
//! Our build re-renders the JobSet while the TrainJob or the JobSet is
//! suspended (so `runtimePatches` scheduling edits reach it before resume).
//! The render can differ in frozen parts for reasons the user did not cause:
//! a plugin upgraded since the JobSet was created (new env, a new init
//! container), or a runtime edited before the snapshot existed. Applying
//! such a render is denied on every reconcile, so instead the frozen parts
//! are taken from the JobSet as stored and only the mutable ones from the
//! render: a JobSet's jobs are fixed when it is created.

use serde_json::{Map, Value};

/// Top-level spec fields JobSet never lets change after creation (besides
/// `replicatedJobs`, handled per job below).
const FROZEN_SPEC: [&str; 6] = [
    "network",
    "successPolicy",
    "failurePolicy",
    "startupPolicy",
    "managedBy",
    "volumeClaimPolicies",
];

/// Pod-spec fields JobSet accepts changes to while suspended.
const MUTABLE_POD_SPEC: [&str; 3] = ["nodeSelector", "tolerations", "schedulingGates"];

/// Pod-metadata fields JobSet accepts changes to while suspended.
const MUTABLE_POD_META: [&str; 2] = ["labels", "annotations"];

/// Make `rendered` (a full JobSet) acceptable as an update of `existing`:
/// frozen spec fields and every replicated job come from `existing`, with
/// the mutable pod fields of the rendered job of the same name laid over
/// them. Jobs the render adds are dropped and jobs it lacks are kept (the
/// list itself is frozen). Everything else (`suspend`, metadata, …) is the
/// render's. An `existing` without a spec leaves `rendered` unchanged.
pub fn keep_frozen_parts(rendered: &mut Value, existing: &Value) {
    let Some(old) = existing.get("spec").and_then(Value::as_object) else {
        return;
    };
    let Some(new) = rendered.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for key in FROZEN_SPEC {
        if let Some(v) = old.get(key) {
            new.insert(key.to_owned(), v.clone());
        }
    }
    let Some(old_jobs) = old.get("replicatedJobs").and_then(Value::as_array) else {
        return;
    };
    let rendered_jobs = match new.remove("replicatedJobs") {
        Some(Value::Array(jobs)) => jobs,
        _ => Vec::new(),
    };
    let jobs = old_jobs
        .iter()
        .map(|old_job| {
            let mut job = old_job.clone();
            let name = old_job.get("name");
            if let Some(r) = rendered_jobs.iter().find(|r| r.get("name") == name) {
                overlay_mutable_pod_fields(&mut job, r);
            }
            job
        })
        .collect();
    new.insert("replicatedJobs".to_owned(), Value::Array(jobs));
}

/// Copy the mutable pod fields of `from`'s pod template onto `job`'s; a
/// field the render leaves out is removed (the render is the desired state).
fn overlay_mutable_pod_fields(job: &mut Value, from: &Value) {
    let src = from.pointer("/template/spec/template");
    let Some(dst) = job
        .pointer_mut("/template/spec/template")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    copy_fields(
        dst,
        "metadata",
        src.and_then(|t| t.get("metadata")),
        &MUTABLE_POD_META,
    );
    copy_fields(
        dst,
        "spec",
        src.and_then(|t| t.get("spec")),
        &MUTABLE_POD_SPEC,
    );
}

/// `dst[section][k] := src[k]` for each `k` in `keys` (removed when `src`
/// has none); `dst[section]` is created only when something is copied.
fn copy_fields(dst: &mut Map<String, Value>, section: &str, src: Option<&Value>, keys: &[&str]) {
    for key in keys {
        match src.and_then(|s| s.get(*key)) {
            Some(v) => {
                let entry = dst
                    .entry(section)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = entry {
                    m.insert((*key).to_owned(), v.clone());
                }
            }
            None => {
                if let Some(Value::Object(m)) = dst.get_mut(section) {
                    m.remove(*key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn job(name: &str, env: &str, node_selector: Value, labels: Value) -> Value {
        json!({"name": name, "replicas": 1, "template": {"spec": {"completionMode": "Indexed", "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": node_selector, "restartPolicy": "OnFailure",
                     "containers": [{"name": "node", "env": [{"name": "E", "value": env}]}]}}}}})
    }

    #[test]
    fn frozen_parts_come_from_the_stored_jobset_mutable_ones_from_the_render() {
        let existing = json!({"spec": {
        "network": {"enableDNSHostnames": true, "subdomain": "demo"},
        "successPolicy": {"operator": "All"},
        "suspend": true,
        "replicatedJobs": [
            job("init", "v1", json!({"a": "1"}), json!({"l": "old"})),
            job("node", "v1", json!({"a": "1"}), json!({"l": "old"})),
        ]}});
        let mut rendered = json!({"metadata": {"name": "demo", "labels": {"new": "x"}}, "spec": {
        "network": {"enableDNSHostnames": true},
        "suspend": false,
        "ttlSecondsAfterFinished": 60,
        "replicatedJobs": [
            job("node", "v2", json!({"b": "2"}), json!({"l": "new"})),
            job("extra", "v2", json!({}), json!({})),
        ]}});
        keep_frozen_parts(&mut rendered, &existing);

        let node = job("node", "v1", json!({"b": "2"}), json!({"l": "new"}));
        assert_eq!(
            rendered,
            json!({"metadata": {"name": "demo", "labels": {"new": "x"}}, "spec": {
            "network": {"enableDNSHostnames": true, "subdomain": "demo"},
            "successPolicy": {"operator": "All"},
            "suspend": false,
            "ttlSecondsAfterFinished": 60,
            "replicatedJobs": [
                job("init", "v1", json!({"a": "1"}), json!({"l": "old"})),
                node,
            ]}})
        );
    }

    #[test]
    fn mutable_fields_the_render_drops_are_removed() {
        let mut stored = job("node", "v1", json!({"a": "1"}), json!({"l": "old"}));
        stored["template"]["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "k"}]);
        let existing = json!({"spec": {"replicatedJobs": [stored]}});
        let mut rendered = json!({"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"schedulingGates": [{"name": "g"}]}}}}}
        ]}});
        keep_frozen_parts(&mut rendered, &existing);
        let pod = &rendered["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
        assert_eq!(pod["metadata"], json!({}));
        assert_eq!(pod["spec"].get("nodeSelector"), None);
        assert_eq!(pod["spec"].get("tolerations"), None);
        assert_eq!(pod["spec"]["schedulingGates"], json!([{"name": "g"}]));
        assert_eq!(
            pod["spec"]["restartPolicy"], "OnFailure",
            "frozen fields kept"
        );
        assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "v1");
    }

    #[test]
    fn an_existing_object_without_spec_or_jobs_leaves_the_render_alone() {
        let rendered = json!({"spec": {"suspend": true, "replicatedJobs": [job("node", "v2", json!({}), json!({}))]}});
        for existing in [json!({}), json!({"spec": {"suspend": true}})] {
            let mut r = rendered.clone();
            keep_frozen_parts(&mut r, &existing);
            assert_eq!(r, rendered);
        }
    }
}
