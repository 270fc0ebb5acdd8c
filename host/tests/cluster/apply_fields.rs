//! The apply step against a real API server (api mode): the "already up to
//! date" check compares the fields our manager (`trainer`) owns, so
//!
//! - a desired object that drops a field we applied (a nodeSelector, a
//!   label) is written and the field disappears from the live object, while
//!   fields another manager owns stay;
//! - an unchanged desired object (also after a restart, i.e. without the
//!   memo, and with defaulted list-map keys and empty maps) writes nothing:
//!   the outcome is `Unchanged` and the resourceVersion stays.
//!
//! And end to end (full mode, the operator with the default plugins): a
//! suspended TrainJob's JobSet (re-rendered on every reconcile) is not
//! written again by resyncs, and a pod label dropped from the TrainJob's
//! runtime patch disappears from the JobSet.
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::operator_common;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use trainforge::controller::trainjob::apply::{AppliedMemo, FIELD_MANAGER, Ledger, Outcome, apply};
use trainforge::controller::trainjob::write_budget::WriteBudget;

/// What `apply` remembers in `memo`, with no write budget.
fn ledger<'a>(memo: &'a AppliedMemo, writes: &'a WriteBudget) -> Ledger<'a> {
    Ledger { memo, writes }
}
use trainforge_testenv::Mode;

use crate::operator_common::{
    Operator, apply_default_plugins, docs, eventually, get, metric, root, trainjob_object,
};

/// A Deployment (no controller runs in api mode, so only we and the test
/// write it) controlled by `owner`.
fn deployment(
    ns: &str,
    owner: &ConfigMap,
    node_selector: Option<Value>,
    drop_label: bool,
) -> Value {
    let mut labels = json!({"app": "child", "trainer.kubeflow.org/trainjob-name": "child"});
    if !drop_label {
        labels["kueue.x-k8s.io/queue-name"] = json!("q");
    }
    let mut pod_spec = json!({
        "containers": [{
            "name": "node",
            "image": "busybox",
            "args": ["--epochs", "1"],
            // `protocol` is a key of this list; the API server defaults it.
            "ports": [{"containerPort": 29400}],
            "resources": {"limits": {"cpu": "1"}},
        }],
    });
    if let Some(sel) = node_selector {
        pod_spec["nodeSelector"] = sel;
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "child",
            "namespace": ns,
            "labels": labels,
            "annotations": {},
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner.metadata.name.clone().unwrap(),
                "uid": owner.metadata.uid.clone().unwrap(),
                "controller": true,
            }],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "child"}},
            "template": {"metadata": {"labels": {"app": "child"}}, "spec": pod_spec},
        },
    })
}

#[tokio::test]
async fn removals_are_applied_and_unchanged_objects_are_not_written() {
    let Some(env) = trainforge_testenv::require!(Mode::Api) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("apply-fields").await.unwrap();
    let owner = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let uid = owner.metadata.uid.clone().unwrap();
    let resource = ApiResource::erase::<Deployment>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let get = || async { api.get("child").await.unwrap() };
    let selector = json!({"zone": "a", "pool": "gpu"});

    // Created with a nodeSelector and a label.
    let first = deployment(&ns, &owner, Some(selector.clone()), false);
    let memo = AppliedMemo::default();
    let writes = WriteBudget::new(0);
    let out = apply(
        &client,
        &resource,
        true,
        &first,
        None,
        &uid,
        ledger(&memo, &writes),
    )
    .await
    .unwrap();
    assert!(
        out.1.as_ref().is_some_and(|o| o.metadata.uid.is_some()),
        "a written object comes back as the API server stored it"
    );
    let out = out.0;
    assert_eq!(out, Outcome::Created);

    // Another manager adds labels of its own (not to the nodeSelector: it is
    // an atomic map, a forced apply of it would take all of it over).
    api.patch(
        "child",
        &PatchParams::apply("kueue").force(),
        &Patch::Apply(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "child", "labels": {"foreign": "x"}},
            "spec": {"template": {"metadata": {"labels": {"kueue": "k"}}}},
        })),
    )
    .await
    .unwrap();

    // Unchanged desired object, after a restart (empty memo): no write.
    let live = get().await;
    let rv = live.metadata.resource_version.clone();
    let out = apply(
        &client,
        &resource,
        true,
        &first,
        Some(&live),
        &uid,
        ledger(&AppliedMemo::default(), &writes),
    )
    .await
    .unwrap()
    .0;
    assert_eq!(
        out,
        Outcome::Unchanged,
        "desired as live, other manager's fields aside"
    );
    assert_eq!(get().await.metadata.resource_version, rv, "nothing written");

    // The nodeSelector and a label are dropped from the desired object:
    // written, and gone from the live object; the other manager's stay.
    let second = deployment(&ns, &owner, None, true);
    let out = apply(
        &client,
        &resource,
        true,
        &second,
        Some(&live),
        &uid,
        ledger(&memo, &writes),
    )
    .await
    .unwrap()
    .0;
    assert_eq!(out, Outcome::Updated);
    let live = get().await;
    let json = serde_json::to_value(&live).unwrap();
    assert_eq!(
        json.pointer("/spec/template/spec/nodeSelector"),
        None,
        "our nodeSelector removed"
    );
    assert_eq!(
        json.pointer("/spec/template/metadata/labels"),
        Some(&json!({"app": "child", "kueue": "k"})),
        "the other manager's fields kept"
    );
    let labels = json.pointer("/metadata/labels").unwrap();
    assert!(
        labels.get("kueue.x-k8s.io/queue-name").is_none(),
        "{labels}"
    );
    assert_eq!(labels.get("foreign"), Some(&json!("x")));
    assert_eq!(labels.get("app"), Some(&json!("child")));

    // And that is stable: applying it again (memo or not) writes nothing.
    let rv = live.metadata.resource_version.clone();
    for memo in [&memo, &AppliedMemo::default()] {
        let out = apply(
            &client,
            &resource,
            true,
            &second,
            Some(&live),
            &uid,
            ledger(memo, &writes),
        )
        .await
        .unwrap()
        .0;
        assert_eq!(out, Outcome::Unchanged);
    }
    assert_eq!(get().await.metadata.resource_version, rv, "nothing written");

    // A hand edit of a field we own is restored.
    api.patch(
        "child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "edited"}}})),
    )
    .await
    .unwrap();
    let live = get().await;
    let out = apply(
        &client,
        &resource,
        true,
        &second,
        Some(&live),
        &uid,
        ledger(&memo, &writes),
    )
    .await
    .unwrap()
    .0;
    assert_eq!(out, Outcome::Updated);
    let live = get().await;
    assert_eq!(
        live.metadata
            .labels
            .as_ref()
            .unwrap()
            .get("app")
            .map(String::as_str),
        Some("child")
    );
    assert!(
        live.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|e| e.manager.as_deref() == Some(FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")),
        "applied as {FIELD_MANAGER}"
    );
}

const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";

/// A runtime patch giving the `node` pods `labels`.
fn node_pod_labels(labels: Value) -> Value {
    json!([{ "manager": "e2e.example.com/test", "trainingRuntimeSpec": { "template": { "spec": {
        "replicatedJobs": [{ "name": "node", "template": { "spec": { "template": {
            "metadata": { "labels": labels } } } } }] } } } }])
}

#[tokio::test]
async fn resyncs_write_nothing_and_a_dropped_runtime_patch_label_is_removed() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    apply_default_plugins(&client).await;
    for d in docs(
        &root().join("manifests/runtimes/torch-distributed.yaml"),
        None,
    ) {
        operator_common::apply(&client, &d).await;
    }
    let op = Operator::start(env, "operator-apply-fields", &["--resync-seconds", "2"]);
    op.wait_ready().await;
    let ns = env.create_namespace("apply-e2e").await.unwrap();
    let job = |labels: Value| {
        trainjob_object(
            &ns,
            "patched",
            "torch-distributed",
            json!({"suspend": true, "runtimePatches": node_pod_labels(labels)}),
        )
    };
    operator_common::apply(&client, &job(json!({"keep": "1", "drop": "1"}))).await;
    let pod_labels = |js: &Value| -> Value {
        js["spec"]["replicatedJobs"]
            .as_array()
            .and_then(|r| r.iter().find(|j| j["name"] == "node"))
            .map(|j| j["template"]["spec"]["template"]["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    };
    eventually(
        "JobSet with both labels",
        Duration::from_secs(180),
        || async {
            let js = get(&client, JOBSET, "JobSet", Some(&ns), "patched").await?;
            (pod_labels(&js)["drop"] == "1").then_some(())
        },
    )
    .await;

    // Several resyncs (every 2 s) of the suspended TrainJob: no JobSet write.
    let writes = |text: &str| metric(text, "trainforge_api_writes_total", &[("kind", "JobSet")]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let noop = |text: &str| metric(text, "trainforge_noop_resyncs_total", &[]);
    let text = op.scrape().await;
    let (before, noop_before) = (writes(&text), noop(&text));
    let rv = get(&client, JOBSET, "JobSet", Some(&ns), "patched")
        .await
        .unwrap()["metadata"]["resourceVersion"]
        .clone();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let text = op.scrape().await;
    assert!(
        noop(&text) >= noop_before + 2.0,
        "resynced at least twice: {} -> {}",
        noop_before,
        noop(&text)
    );
    assert_eq!(writes(&text), before, "resyncs wrote the JobSet");
    assert_eq!(
        get(&client, JOBSET, "JobSet", Some(&ns), "patched")
            .await
            .unwrap()["metadata"]["resourceVersion"],
        rv
    );

    // The label is dropped from the runtime patch: gone from the JobSet.
    operator_common::apply(&client, &job(json!({"keep": "1"}))).await;
    let js = eventually(
        "label removed from the JobSet",
        Duration::from_secs(60),
        || async {
            let js = get(&client, JOBSET, "JobSet", Some(&ns), "patched").await?;
            pod_labels(&js).get("drop").is_none().then_some(js)
        },
    )
    .await;
    assert_eq!(pod_labels(&js)["keep"], "1", "{js:#}");
}
