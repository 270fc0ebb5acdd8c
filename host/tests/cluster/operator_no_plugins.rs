//! An operator whose plugin set cannot serve TrainJobs, on the full control
//! plane (its own, so that no other operator's plugins are in the way):
//!
//! - `/readyz` is 503 and `/readyz?verbose` names the plugins not serving
//!   and why;
//! - a TrainJob created then gets a Warning Event and `PluginsReady=False`
//!   (`NoServingPlugins`) naming them, and no object at all;
//! - once a plugin serves again the operator is ready, the TrainJob gets its
//!   JobSet and runs to `Complete`, and `PluginsReady` is gone;
//! - removing every `ClusterTrainerPlugin` makes the operator unready again,
//!   and so does removing the JobSet plugin while another plugin with a
//!   `build` phase serves (no TrainJob could get its JobSet); a TrainJob
//!   then waits `Blocked` and gets its JobSet once the plugin is back.
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use crate::operator_common::*;
use serde_json::{Value, json};
use trainforge_testenv::Mode;

const TIMEOUT: Duration = Duration::from_secs(180);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const CTP: &str = "trainforge.dev/v1alpha1";

/// The JobSet plugin pinned to a digest no component has: refused.
fn refused_jobset() -> Value {
    json!({"apiVersion": CTP, "kind": "ClusterTrainerPlugin", "metadata": {"name": "jobset"},
        "spec": {"source": {"builtin": "jobset"}, "sha256": "0".repeat(64), "order": 300}})
}

/// The PlainML plugin as the default manifests configure it: it serves,
/// but has no `build` phase.
fn plainml() -> Value {
    docs(&root().join("manifests/plugins/plainml.yaml"), None).remove(0)
}

/// Poll `/readyz?verbose` until `pred` holds for `(code, body)`.
async fn readyz_until(op: &Operator, what: &str, pred: impl Fn(u16, &str) -> bool) -> String {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some((code, body)) = op.readyz(true).await {
            if pred(code, &body) {
                return body;
            }
            last = Some((code, body));
        }
        if start.elapsed() > TIMEOUT {
            panic!(
                "timed out waiting for /readyz: {what}; last answer: {last:?}\noperator log:\n{}",
                op.log_tail(60)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn no_serving_plugins_is_not_ready_and_trainjobs_wait_for_them() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    // Without its torch policy: JobSet and PlainML alone serve it (a policy
    // needs a serving plugin that declares it).
    for mut d in docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    ) {
        if let Some(policy) = d
            .pointer_mut("/spec/mlPolicy")
            .and_then(Value::as_object_mut)
        {
            policy.remove("torch");
        }
        apply(&client, &d).await;
    }
    apply(&client, &refused_jobset()).await;
    apply(&client, &plainml()).await;

    // Not ready, and the verbose report says why.
    let op = Operator::start(env, "operator-no-plugins", &["--resync-seconds", "30"]);
    let body = readyz_until(&op, "plugins failing, caches synced", |code, body| {
        code == 503
            && body.contains("[+]caches ok")
            && body.contains("[+]admission ok")
            && body.contains("[-]plugins failed: no plugin set can serve")
    })
    .await;
    let plugins_line = body
        .lines()
        .find(|l| l.starts_with("[-]plugins failed:"))
        .unwrap();
    assert!(
        plugins_line
            .contains("no plugin set can serve TrainJobs: no plugin in service builds JobSets")
            && plugins_line.contains(
                "ClusterTrainerPlugins not serving: jobset (DigestMismatch: expected sha256 0000"
            )
            && plugins_line.contains("serving without building JobSets: plainml"),
        "{body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert_eq!(
        op.readyz(false).await.unwrap(),
        (503, "not ready: plugins".to_owned()),
        "plain /readyz keeps its contract"
    );
    assert!(
        std::fs::read_to_string(&op.log)
            .unwrap()
            .contains("readiness check fails"),
        "the reason is logged:\n{}",
        op.log_tail(40)
    );

    // A TrainJob now: a Warning Event and the extension condition, nothing built.
    let ns = env.create_namespace("no-plugins").await.unwrap();
    apply(
        &client,
        &trainjob_object(&ns, "waits", "torch-distributed", json!({})),
    )
    .await;
    // A namespace the operator has just seen first waits for its tenant
    // plugins to be listed (`TenantPluginsLoading`); then it says why
    // nothing serves.
    let waiting = eventually("PluginsReady=False on the TrainJob", TIMEOUT, || async {
        let t = trainjob(&client, &ns, "waits").await?;
        condition(&t, "PluginsReady")
            .is_some_and(|c| c["reason"] != "TenantPluginsLoading")
            .then_some(t)
    })
    .await;
    let c = condition(&waiting, "PluginsReady").unwrap();
    assert_eq!(c["status"], "False", "{c}");
    assert_eq!(c["reason"], "NoServingPlugins", "{c}");
    let message = c["message"].as_str().unwrap();
    assert!(
        message.contains("jobset (DigestMismatch") && message.contains("plainml"),
        "{message}"
    );
    let types: Vec<&str> = waiting["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(
        types,
        ["PluginsReady", "Blocked"],
        "only the extension conditions"
    );
    let blocked = condition(&waiting, "Blocked").unwrap();
    assert_eq!(
        (&blocked["status"], &blocked["reason"]),
        (&json!("True"), &json!("NoServingPlugins")),
        "{blocked}"
    );
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let ev = eventually("NoServingPlugins Event", TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("NoServingPlugins"))
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let note = ev.note.unwrap_or_default();
    assert!(note.contains("jobset (DigestMismatch"), "{note}");
    let errors = metric(
        &op.scrape().await,
        "trainforge_reconcile_errors_total",
        &[("reason", "NoServingPlugins")],
    );
    assert!(errors >= 1.0, "the reconcile error names its cause");
    // Give more reconciles the chance to (wrongly) build something.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (api, kind, name) in [
        (JOBSET, "JobSet", "waits"),
        ("v1", "ConfigMap", "waits-runtime-snapshot"),
    ] {
        assert!(
            get(&client, api, kind, Some(&ns), name).await.is_none(),
            "{kind} {name} built without plugins"
        );
    }
    assert!(
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|e| e.reason.as_deref() != Some("TrainJobResourcesCreationFailed")),
        "no plugin set is not a resources failure"
    );

    // The JobSet plugin as the default manifests configure it: it serves again.
    let jobset = docs(&root().join("manifests/plugins/jobset.yaml"), None).remove(0);
    apply(&client, &jobset).await;
    let body = readyz_until(&op, "ready", |code, _| code == 200).await;
    let ready_at = Instant::now();
    assert_eq!(
        body, "[+]plugins ok\n[+]caches ok\n[+]admission ok\nreadyz check passed\n",
        "{body}"
    );
    eventually("the waiting TrainJob's JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "waits").await
    })
    .await;
    let proceeded = ready_at.elapsed();
    report(&format!(
        "figure: TrainJob proceeded {:.1}s after the plugin set could serve again",
        proceeded.as_secs_f64()
    ));
    assert!(
        proceeded < Duration::from_secs(15),
        "a change of the plugin set wakes the waiting TrainJob: {proceeded:?}"
    );
    let done = eventually("Complete", TIMEOUT, || async {
        let t = trainjob(&client, &ns, "waits").await?;
        is_true(&t, "Complete").then_some(t)
    })
    .await;
    assert!(
        condition(&done, "PluginsReady").is_none(),
        "the extension condition is gone: {}",
        done["status"]
    );
    let types: Vec<&str> = done["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["Complete"], "upstream's status, nothing else");

    // Every plugin removed: not ready again, and why.
    for p in ["jobset", "plainml"] {
        delete(&client, CTP, "ClusterTrainerPlugin", None, p).await;
    }
    // (The two deletions are seen one after the other: between them, the
    // check fails for another reason, that plainml builds no JobSet.)
    let body = readyz_until(&op, "plugins failing again", |code, body| {
        code == 503
            && body.contains("[-]plugins failed:")
            && body.contains("no ClusterTrainerPlugin is configured")
    })
    .await;
    assert!(body.contains("[-]plugins failed:"), "{body}");
    // And ready again once one that builds is back.
    apply(&client, &jobset).await;
    readyz_until(&op, "ready again", |code, _| code == 200).await;

    // The JobSet plugin removed while another plugin with a build phase
    // serves (MPI builds ConfigMaps and Secrets): no TrainJob could get its
    // JobSet, so not ready naming it, and a TrainJob waits Blocked; back
    // as soon as the JobSet plugin returns.
    let mpi = docs(&root().join("manifests/plugins/mpi.yaml"), None).remove(0);
    apply(&client, &mpi).await;
    eventually("MPI in service", TIMEOUT, || async {
        let p = get(&client, CTP, "ClusterTrainerPlugin", None, "mpi").await?;
        p.pointer("/status/servingDigest")
            .is_some_and(|d| !d.is_null())
            .then_some(())
    })
    .await;
    delete(&client, CTP, "ClusterTrainerPlugin", None, "jobset").await;
    let body = readyz_until(
        &op,
        "no plugin builds JobSets, MPI serving",
        |code, body| code == 503 && body.contains("serving without building JobSets: mpi"),
    )
    .await;
    assert!(
        body.contains("no plugin in service builds JobSets")
            && body.contains("serving without building JobSets: mpi"),
        "{body}"
    );
    apply(
        &client,
        &trainjob_object(&ns, "after-removal", "torch-distributed", json!({})),
    )
    .await;
    let waiting = eventually(
        "the TrainJob Blocked (NoServingPlugins)",
        TIMEOUT,
        || async {
            let t = trainjob(&client, &ns, "after-removal").await?;
            condition(&t, "Blocked")
                .is_some_and(|c| c["reason"] == "NoServingPlugins")
                .then_some(t)
        },
    )
    .await;
    assert!(
        condition(&waiting, "PluginsReady").is_some_and(|c| c["status"] == "False"),
        "{}",
        waiting["status"]
    );
    apply(&client, &jobset).await;
    readyz_until(&op, "ready once the JobSet plugin is back", |code, _| {
        code == 200
    })
    .await;
    eventually("the waiting TrainJob's JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "after-removal").await
    })
    .await;
}
