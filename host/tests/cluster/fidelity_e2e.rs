//! Drop-in fidelity of the TrainJob controller on the real control plane
//! (its own, with every default `ClusterTrainerPlugin` but `torch`, whose
//! policy is served by a stand-in loaded from a ConfigMap), one operator at
//! a time, steps in order:
//!
//! 1. a TrainJob whose runtime needs a policy no serving plugin declares is
//!    not built: the stand-in serves (PET_* env in the JobSet); its source is
//!    removed and the operator restarted with an empty artifact cache (no
//!    last good version): `/readyz` stays 200 but names the plugin and why,
//!    a new TrainJob gets `PluginsReady=False`/`Blocked=True`
//!    (`PolicyNotServed`) and a Warning Event naming the policy key and the
//!    plugin, and no object; the source back, the JobSet appears with PET_*
//!    env and the conditions are gone;
//! 2. a TrainJob on a runtime that does not exist is `Blocked`
//!    (`TrainingRuntimeNotFound`, not terminal) until the runtime appears;
//! 3. an invalid TrainJob (a runtime patch naming a job the runtime does
//!    not have) is `Failed` (`InvalidTrainJob`) at once, with nothing built;
//! 4. editing `runtimePatches` of a running TrainJob changes nothing but
//!    gives `RuntimePatchesIgnored` and one Warning Event per edit; once
//!    suspended, the edit is applied and the condition is gone.
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::plugin_common;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::operator_common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use trainforge::plugin::sha256_hex;
use trainforge_testenv::{FAIL_POD_LABEL, Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(150);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const CTP: &str = "trainforge.dev/v1alpha1";
const TRAINER: &str = "trainer.kubeflow.org/v1alpha1";
const STAND_IN: &str = "torchrun";
const RUNTIME: &str = "torch-distributed";

/// The stand-in for the torch plugin: the hostile guest declaring
/// `mlPolicy.torch` and, in `enforce-ml-policy`, setting PET_* env on the
/// trainer container.
fn stand_in_bytes() -> Vec<u8> {
    plugin_common::hostile_declaring(&json!({
        "name": STAND_IN, "version": "1.0.0",
        "policy_keys": ["mlPolicy.torch"],
        "phases": ["enforce-ml-policy"],
        "emits": [], "reads": [],
    }))
}

fn stand_in_config() -> Value {
    json!({"set": [{"phase": "enforce-ml-policy", "target": "info",
        "pointer": "/templateSpec/podSets/0/containers/0/env",
        "value": [{"name": "PET_NNODES", "value": "1"}, {"name": "PET_NPROC_PER_NODE", "value": "1"}]}]})
}

async fn put_source(client: &kube::Client, ns: &str, bytes: &[u8]) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("torchrun-wasm".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "plugin.wasm".to_owned(),
            ByteString(bytes.to_vec()),
        )])),
        ..Default::default()
    };
    cms.patch(
        "torchrun-wasm",
        &PatchParams::apply("fidelity-test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

/// Events on the TrainJob `name` in `ns` with `reason`.
async fn events(client: &kube::Client, ns: &str, name: &str, reason: &str) -> Vec<Event> {
    let api = Api::<Event>::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// How often `events` were observed: a repeated Event (same reason on the
/// same object) is one object whose count counts them (`series.count`, or
/// the core/v1 `count` the operator writes, `deprecatedCount` here).
fn occurrences(events: &[Event]) -> i32 {
    events
        .iter()
        .map(|e| {
            e.series
                .as_ref()
                .map(|s| s.count)
                .or(e.deprecated_count)
                .unwrap_or(1)
        })
        .sum()
}

/// `(status, reason, message)` of condition `t`.
fn cond(obj: &Value, t: &str) -> Option<(String, String, String)> {
    let c = condition(obj, t)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    Some((s("status"), s("reason"), s("message")))
}

fn condition_types(obj: &Value) -> Vec<String> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c["type"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    t: &str,
    status: &str,
) -> Value {
    eventually(
        &format!("{t}={status} on TrainJob {ns}/{name}"),
        TIMEOUT,
        || async {
            let tj = trainjob(client, ns, name).await?;
            cond(&tj, t)
                .is_some_and(|(s, _, _)| s == status)
                .then_some(tj)
        },
    )
    .await
}

async fn wait_jobset(client: &kube::Client, ns: &str, name: &str) -> Value {
    eventually(&format!("JobSet {ns}/{name}"), TIMEOUT, || async {
        get(client, JOBSET, "JobSet", Some(ns), name).await
    })
    .await
}

/// The env names of the JobSet's first container.
fn env_names(jobset: &Value) -> Vec<String> {
    jobset
        .pointer("/spec/replicatedJobs/0/template/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Nothing of `name` built after giving the operator a few more reconciles.
async fn assert_nothing_built(client: &kube::Client, ns: &str, name: &str) {
    tokio::time::sleep(Duration::from_secs(4)).await;
    for (api, kind, obj) in [
        (JOBSET, "JobSet", name.to_owned()),
        ("v1", "ConfigMap", format!("{name}-runtime-snapshot")),
    ] {
        assert!(
            get(client, api, kind, Some(ns), &obj).await.is_none(),
            "{kind} {obj} was built"
        );
    }
}

async fn readyz_until(op: &Operator, what: &str, pred: impl Fn(u16, &str) -> bool) -> String {
    eventually(&format!("/readyz: {what}"), TIMEOUT, || async {
        let (code, body) = op.readyz(true).await?;
        pred(code, &body).then_some(body)
    })
    .await
}

struct Fx {
    env: &'static TestEnv,
    client: kube::Client,
    source_ns: String,
}

async fn setup() -> Option<Fx> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    let client = env.client().await.unwrap();
    apply_default_plugins(&client).await;
    delete(&client, CTP, "ClusterTrainerPlugin", None, "torch").await;
    for d in docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    let source_ns = env.create_namespace("fidelity-plugins").await.unwrap();
    let bytes = stand_in_bytes();
    put_source(&client, &source_ns, &bytes).await;
    apply(
        &client,
        &json!({"apiVersion": CTP, "kind": "ClusterTrainerPlugin", "metadata": {"name": STAND_IN},
            "spec": {
                "source": {"configMap": {"namespace": source_ns, "name": "torchrun-wasm", "key": "plugin.wasm"}},
                "sha256": sha256_hex(&bytes),
                "order": 600,
                "failurePolicy": "Fail",
                "config": stand_in_config(),
            }}),
    )
    .await;
    Some(Fx {
        env,
        client,
        source_ns,
    })
}

#[tokio::test]
async fn trainjobs_that_cannot_be_built_say_why_and_running_ones_keep_running() {
    let Some(fx) = setup().await else { return };
    let op = Operator::start(fx.env, "operator-fidelity", &["--resync-seconds", "30"]);
    op.wait_ready().await;
    let ns = fx.env.create_namespace("fidelity").await.unwrap();
    // What the controller does when admission did not run (webhooks not
    // installed, or `Ignore` during an outage): the webhooks skip this
    // namespace, so the objects they would refuse are stored.
    bypass_admission(&fx.client, &ns).await;

    policy_needs_a_serving_plugin(&fx, &op, &ns).await;
    missing_runtime_blocks_until_it_exists(&fx, &ns).await;
    invalid_trainjob_fails_at_once(&fx, &ns).await;
    runtime_patches_edit_of_a_running_job_is_reported(&fx, &ns).await;
}

/// Item 1: the stand-in serves, is lost, comes back.
async fn policy_needs_a_serving_plugin(fx: &Fx, op: &Operator, ns: &str) {
    let client = &fx.client;
    // Serving: PET_* env from the stand-in.
    apply(client, &trainjob_object(ns, "served", RUNTIME, json!({}))).await;
    let js = wait_jobset(client, ns, "served").await;
    assert!(
        env_names(&js).iter().any(|n| n == "PET_NNODES"),
        "the stand-in serves mlPolicy.torch: {:?}",
        env_names(&js)
    );

    // Its source removed, the operator restarted with an empty cache: no
    // last good version.
    op.kill();
    delete(
        client,
        "v1",
        "ConfigMap",
        Some(&fx.source_ns),
        "torchrun-wasm",
    )
    .await;
    let cache = fx.env.dir().join("plugin-cache");
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&cache).unwrap();
    op.restart("operator-fidelity-2");
    op.wait_ready().await;
    let body = readyz_until(op, "degraded, naming the stand-in", |code, body| {
        code == 200 && body.contains(STAND_IN)
    })
    .await;
    assert!(
        body.contains("[+]plugins ok, degraded: ClusterTrainerPlugins not serving: torchrun (")
            && body.contains("not found"),
        "{body}"
    );
    let (code, plain) = op.readyz(false).await.unwrap();
    assert_eq!(code, 200, "still ready: the other plugins serve");
    assert!(
        plain.starts_with("ok (degraded: plugins: ") && plain.contains(STAND_IN),
        "{plain}"
    );

    // A new TrainJob needing torch: conditions, a Warning Event, nothing built.
    apply(client, &trainjob_object(ns, "unserved", RUNTIME, json!({}))).await;
    let tj = wait_condition(client, ns, "unserved", "PluginsReady", "False").await;
    let (_, reason, message) = cond(&tj, "PluginsReady").unwrap();
    assert_eq!(reason, "PolicyNotServed");
    assert!(
        message.contains("runtime policy mlPolicy.torch served by no plugin in service")
            && message.contains("ClusterTrainerPlugins not serving: torchrun (")
            && message.contains("not found"),
        "{message}"
    );
    let (status, reason, _) = cond(&tj, "Blocked").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "PolicyNotServed")
    );
    assert!(!is_true(&tj, "Failed"), "not terminal");
    let ev = eventually("PolicyNotServed Event", TIMEOUT, || async {
        events(client, ns, "unserved", "PolicyNotServed")
            .await
            .pop()
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let note = ev.note.unwrap_or_default();
    assert!(
        note.contains("mlPolicy.torch") && note.contains("torchrun ("),
        "{note}"
    );
    assert_nothing_built(client, ns, "unserved").await;

    // The source back: the JobSet with PET_* env, the conditions gone.
    put_source(client, &fx.source_ns, &stand_in_bytes()).await;
    let js = wait_jobset(client, ns, "unserved").await;
    assert!(
        env_names(&js).iter().any(|n| n == "PET_NNODES"),
        "built with the stand-in: {:?}",
        env_names(&js)
    );
    let done = eventually("unserved Complete", TIMEOUT, || async {
        let t = trainjob(client, ns, "unserved").await?;
        is_true(&t, "Complete").then_some(t)
    })
    .await;
    assert_eq!(condition_types(&done), ["Complete"], "{}", done["status"]);
    readyz_until(op, "no longer degraded", |code, body| {
        code == 200 && !body.contains("degraded")
    })
    .await;
    assert_eq!(op.readyz(false).await.unwrap(), (200, "ok".to_owned()));
}

/// Item 4: a runtime that does not exist yet blocks, without failing.
async fn missing_runtime_blocks_until_it_exists(fx: &Fx, ns: &str) {
    let client = &fx.client;
    apply(
        client,
        &trainjob_object(ns, "early", "fidelity-later", json!({})),
    )
    .await;
    let tj = wait_condition(client, ns, "early", "Blocked", "True").await;
    let (_, reason, message) = cond(&tj, "Blocked").unwrap();
    assert_eq!(reason, "TrainingRuntimeNotFound");
    assert!(message.contains("fidelity-later"), "{message}");
    assert!(!is_true(&tj, "Failed"), "may appear later: not terminal");
    assert_nothing_built(client, ns, "early").await;

    let mut rt = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    rt["metadata"]["name"] = json!("fidelity-later");
    apply(client, &rt).await;
    wait_jobset(client, ns, "early").await;
    let done = eventually("early Complete", TIMEOUT, || async {
        let t = trainjob(client, ns, "early").await?;
        is_true(&t, "Complete").then_some(t)
    })
    .await;
    assert_eq!(condition_types(&done), ["Complete"], "{}", done["status"]);
}

/// Item 4: invalid and never built: terminal Failed.
async fn invalid_trainjob_fails_at_once(fx: &Fx, ns: &str) {
    let client = &fx.client;
    let patches = json!([{ "manager": "e2e.example.com/test", "trainingRuntimeSpec": { "template": { "spec": { "replicatedJobs": [
        { "name": "nope", "template": { "spec": { "template": { "metadata": { "labels": { "a": "b" } } } } } }
    ] } } } }]);
    apply(
        client,
        &trainjob_object(ns, "invalid", RUNTIME, json!({"runtimePatches": patches})),
    )
    .await;
    let tj = wait_condition(client, ns, "invalid", "Failed", "True").await;
    let (_, reason, message) = cond(&tj, "Failed").unwrap();
    assert_eq!(reason, "InvalidTrainJob");
    assert!(
        message.starts_with("the TrainJob is invalid:")
            && message.contains(
                "must not have replicated job that doesn't exist in the runtime job template"
            ),
        "{message}"
    );
    assert!(cond(&tj, "Blocked").is_none(), "{}", tj["status"]);
    let ev = eventually("InvalidTrainJob Event", TIMEOUT, || async {
        events(client, ns, "invalid", "InvalidTrainJob").await.pop()
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_nothing_built(client, ns, "invalid").await;
}

/// runtimePatches keeping the node pods running for 10 minutes, plus a
/// pod label `edit: <n>`.
fn running_patches(edit: u32) -> Value {
    json!([{ "manager": "e2e.example.com/test", "trainingRuntimeSpec": { "template": { "spec": { "replicatedJobs": [
        { "name": "node", "template": { "spec": { "template": { "metadata": {
            "labels": { FAIL_POD_LABEL: "true", "edit": edit.to_string() },
            "annotations": { format!("{FAIL_POD_LABEL}/delay"): "600s", format!("{FAIL_POD_LABEL}/jitter-delay"): "600s" }
        } } } } }
    ] } } } }])
}

fn pod_label(jobset: &Value, key: &str) -> Option<String> {
    jobset
        .pointer("/spec/replicatedJobs/0/template/spec/template/metadata/labels")?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

async fn patch_trainjob(client: &kube::Client, ns: &str, name: &str, spec: Value) {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
        )),
    );
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .unwrap();
}

/// Item 5: an edit of runtimePatches while running.
async fn runtime_patches_edit_of_a_running_job_is_reported(fx: &Fx, ns: &str) {
    let client = &fx.client;
    apply(
        client,
        &trainjob_object(
            ns,
            "running",
            RUNTIME,
            json!({"runtimePatches": running_patches(1)}),
        ),
    )
    .await;
    let js = wait_jobset(client, ns, "running").await;
    assert_eq!(pod_label(&js, "edit").as_deref(), Some("1"));
    let recorded = js["metadata"]["annotations"]["trainforge.dev/runtime-patches-hash"]
        .as_str()
        .unwrap_or_else(|| panic!("the JobSet records its patches: {}", js["metadata"]))
        .to_owned();
    let (generation, spec) = (js["metadata"]["generation"].clone(), js["spec"].clone());

    // Two edits while running: a condition, one Event per edit, nothing changed.
    for (edit, events_expected) in [(2, 1), (3, 2)] {
        patch_trainjob(
            client,
            ns,
            "running",
            json!({"runtimePatches": running_patches(edit)}),
        )
        .await;
        let start = std::time::Instant::now();
        let tj = loop {
            let t = trainjob(client, ns, "running").await.unwrap();
            let evs = events(client, ns, "running", "RuntimePatchesChangedWhileRunning").await;
            if let Some((status, _, message)) = cond(&t, "RuntimePatchesIgnored")
                && status == "True"
                && occurrences(&evs) == events_expected
                && message.contains(&recorded)
            {
                break t;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "RuntimePatchesIgnored and {events_expected} Events for edit {edit}: status {}, events {:?}",
                t["status"],
                evs.iter()
                    .map(|e| (
                        e.series.as_ref().map(|s| s.count),
                        e.deprecated_count,
                        e.note.clone()
                    ))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (_, reason, message) = cond(&tj, "RuntimePatchesIgnored").unwrap();
        assert_eq!(reason, "RuntimePatchesChangedWhileRunning");
        assert!(
            message.contains("RuntimePatches can only be modified when the TrainJob is suspended"),
            "{message}"
        );
        assert!(
            !is_true(&tj, "Failed") && cond(&tj, "Blocked").is_none(),
            "{}",
            tj["status"]
        );
    }
    // More reconciles (JobSet status changes, a resync) add no Event.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let evs = events(client, ns, "running", "RuntimePatchesChangedWhileRunning").await;
    assert_eq!(occurrences(&evs), 2, "once per edit, not every reconcile");
    assert_eq!(evs[0].type_.as_deref(), Some("Warning"));
    let js = get(client, JOBSET, "JobSet", Some(ns), "running")
        .await
        .unwrap();
    assert_eq!(
        js["metadata"]["generation"], generation,
        "the JobSet is untouched"
    );
    assert_eq!(js["spec"], spec, "the JobSet is untouched");
    assert_eq!(
        js["metadata"]["annotations"]["trainforge.dev/runtime-patches-hash"],
        json!(recorded)
    );
    assert_eq!(pod_label(&js, "edit").as_deref(), Some("1"));

    // Suspended: the edit takes effect, the condition is gone.
    patch_trainjob(client, ns, "running", json!({"suspend": true})).await;
    let js = eventually("the JobSet re-rendered with the edit", TIMEOUT, || async {
        let js = get(client, JOBSET, "JobSet", Some(ns), "running").await?;
        (pod_label(&js, "edit").as_deref() == Some("3")).then_some(js)
    })
    .await;
    assert_ne!(
        js["metadata"]["annotations"]["trainforge.dev/runtime-patches-hash"].as_str(),
        Some(recorded.as_str())
    );
    let tj = eventually("RuntimePatchesIgnored gone", TIMEOUT, || async {
        let t = trainjob(client, ns, "running").await?;
        cond(&t, "RuntimePatchesIgnored").is_none().then_some(t)
    })
    .await;
    assert!(is_true(&tj, "Suspended"), "{}", tj["status"]);
    delete(client, TRAINER, "TrainJob", Some(ns), "running").await;
}
