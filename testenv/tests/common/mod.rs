//! Helpers shared by the control-plane tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

use std::future::Future;
use std::io::Write;
use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// The JobSet resource (v1alpha2).
pub fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    )
}

/// `Api<DynamicObject>` for JobSets in `ns`.
pub fn jobsets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &jobset_resource())
}

/// A replicated job: `replicas` Jobs of `pods` pods each; `labels` go on the pod template.
pub fn replicated_job(name: &str, replicas: u32, pods: u32, labels: Value) -> Value {
    json!({
        "name": name,
        "replicas": replicas,
        "template": { "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{ "name": "main", "image": "example.invalid/noop:1" }]
                }
            }
        }}
    })
}

/// A JobSet object.
pub fn jobset(name: &str, ns: &str, replicated_jobs: Vec<Value>) -> Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "replicatedJobs": replicated_jobs }
    })
}

/// Whether a condition of `type_` is `True` in `.status.conditions`.
pub fn has_condition(obj: &Value, type_: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Poll `f` every 200 ms until `Some`, panicking after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    trainforge_testenv::wait::poll_until(what, timeout, Duration::from_millis(200), || Ok(()), f)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Print to the real stderr (not captured by libtest), for figures.
pub fn report(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}
