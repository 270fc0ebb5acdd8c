//! Full mode: JobSet → Jobs → Pods on kwok nodes, garbage collection, failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use trainforge_testenv::{FAIL_POD_LABEL, Mode};

const TIMEOUT: Duration = Duration::from_secs(120);

fn selector(jobset: &str) -> ListParams {
    ListParams::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={jobset}"))
}

#[tokio::test]
async fn jobset_with_two_replicated_jobs_completes() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("complete").await.unwrap();
    let api = common::jobsets(&client, &ns);
    let js = common::jobset(
        "two",
        &ns,
        vec![
            common::replicated_job("leader", 1, 1, json!({})),
            common::replicated_job("workers", 2, 2, json!({})),
        ],
    );
    let start = Instant::now();
    api.patch("two", &PatchParams::apply("test"), &Patch::Apply(&js))
        .await
        .unwrap();
    let done = common::eventually("JobSet two Completed", TIMEOUT, || {
        let api = api.clone();
        async move {
            let js = api.get("two").await.ok()?;
            assert!(
                !common::has_condition(&js.data, "Failed"),
                "JobSet failed: {:?}",
                js.data["status"]
            );
            common::has_condition(&js.data, "Completed").then_some(js)
        }
    })
    .await;
    common::report(&format!(
        "JobSet (3 Jobs, 5 pods) created -> Completed in {:.1}s",
        start.elapsed().as_secs_f64()
    ));
    // The webhook defaulted it (successPolicy is only set by JobSet's mutating webhook).
    assert!(
        done.data["spec"]["successPolicy"].is_object(),
        "not defaulted: {:?}",
        done.data["spec"]
    );
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&selector("two"))
        .await
        .unwrap();
    assert_eq!(jobs.items.len(), 3, "1 leader job + 2 worker jobs");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&selector("two"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 5, "1 + 2*2 pods");
    for pod in &pods.items {
        let status = pod.status.as_ref().unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Succeeded"),
            "{:?}",
            pod.metadata.name
        );
        let node = pod
            .spec
            .as_ref()
            .unwrap()
            .node_name
            .as_deref()
            .unwrap_or_default();
        assert!(
            trainforge_testenv::kwok::NODE_NAMES.contains(&node),
            "pod on {node}"
        );
    }
}

#[tokio::test]
async fn deleting_jobset_garbage_collects_jobs_and_pods() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("gc").await.unwrap();
    let api = common::jobsets(&client, &ns);
    let js = common::jobset(
        "gc",
        &ns,
        vec![common::replicated_job("workers", 2, 1, json!({}))],
    );
    api.patch("gc", &PatchParams::apply("test"), &Patch::Apply(&js))
        .await
        .unwrap();
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    common::eventually("2 Jobs and 2 Pods of JobSet gc", TIMEOUT, || {
        let (jobs, pods) = (jobs.clone(), pods.clone());
        async move {
            let j = jobs.list(&selector("gc")).await.ok()?.items.len();
            let p = pods.list(&selector("gc")).await.ok()?.items.len();
            (j == 2 && p == 2).then_some(())
        }
    })
    .await;
    api.delete("gc", &DeleteParams::background()).await.unwrap();
    let start = Instant::now();
    common::eventually(
        "Jobs and Pods of JobSet gc garbage-collected",
        TIMEOUT,
        || {
            let (jobs, pods) = (jobs.clone(), pods.clone());
            async move {
                let j = jobs.list(&selector("gc")).await.ok()?.items.len();
                let p = pods.list(&selector("gc")).await.ok()?.items.len();
                (j == 0 && p == 0).then_some(())
            }
        },
    )
    .await;
    common::report(&format!(
        "JobSet deleted -> Jobs and Pods gone in {:.1}s",
        start.elapsed().as_secs_f64()
    ));
    assert!(api.get_opt("gc").await.unwrap().is_none());
}

#[tokio::test]
async fn failed_pod_fails_the_jobset() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("fail").await.unwrap();
    let api = common::jobsets(&client, &ns);
    let js = common::jobset(
        "fail",
        &ns,
        vec![
            common::replicated_job("ok", 1, 1, json!({})),
            common::replicated_job("bad", 1, 1, json!({ FAIL_POD_LABEL: "true" })),
        ],
    );
    api.patch("fail", &PatchParams::apply("test"), &Patch::Apply(&js))
        .await
        .unwrap();
    let failed = common::eventually("JobSet fail Failed", TIMEOUT, || {
        let api = api.clone();
        async move {
            let js = api.get("fail").await.ok()?;
            common::has_condition(&js.data, "Failed").then_some(js)
        }
    })
    .await;
    assert!(!common::has_condition(&failed.data, "Completed"));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{FAIL_POD_LABEL}=true")))
        .await
        .unwrap();
    assert!(
        pods.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")),
        "expected a Failed pod"
    );
}

#[tokio::test]
async fn kubectl_works_with_the_kubeconfig() {
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .args(["get", "nodes", "-o", "name"])
            .output(),
    )
    .await
    .expect("kubectl timed out")
    .expect("kubectl not runnable");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for node in trainforge_testenv::kwok::NODE_NAMES {
        assert!(stdout.contains(&format!("node/{node}")), "{stdout}");
    }
}
