//! The operator's life on the full control plane, one scenario at a time
//! (they share the plugin set and measure the process): plugin hot swap and
//! rollback, a crash and restart mid-run, and the figures of the closing
//! note (create → JobSet latency, API writes per lifecycle and per no-op
//! resync, the applied-object memo over many TrainJobs, plugin edit → new digest serving).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::plugin_common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::operator_common::*;
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, MutexGuard, OnceCell};
use trainforge_testenv::{FAIL_POD_LABEL, Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(240);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const CTP: &str = "trainforge.dev/v1alpha1";
/// Seconds between resyncs of every TrainJob in this file's operator.
const RESYNC: u64 = 4;

struct Setup {
    env: &'static TestEnv,
    op: &'static Operator,
    client: kube::Client,
    _serial: MutexGuard<'static, ()>,
}

async fn setup() -> Option<Setup> {
    static SERIAL: Mutex<()> = Mutex::const_new(());
    let serial = SERIAL.lock().await;
    let env = trainforge_testenv::require!(Mode::Full)?;
    static OP: OnceLock<Operator> = OnceLock::new();
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let client = env.client().await.unwrap();
    INSTALLED
        .get_or_init(|| async {
            apply_default_plugins(&client).await;
            for d in docs(
                &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
                None,
            ) {
                apply(&client, &d).await;
            }
            for d in docs(
                &root().join("api/tests/fixtures/upstream/deepspeed-distributed.yaml"),
                None,
            ) {
                apply(&client, &d).await;
            }
        })
        .await;
    let op = OP.get_or_init(|| {
        Operator::start(
            env,
            "operator-lifecycle",
            &["--resync-seconds", &RESYNC.to_string()],
        )
    });
    op.wait_ready().await;
    Some(Setup {
        env,
        op,
        client,
        _serial: serial,
    })
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A ConfigMap holding a module under `module.wasm`.
fn module_config_map(ns: &str, name: &str, bytes: &[u8]) -> Value {
    let data = serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).unwrap();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
        "binaryData": {"module.wasm": data}})
}

fn greeter(ns: &str, cm: &str, sha: &str, greeting: &str) -> Value {
    json!({"apiVersion": CTP, "kind": "ClusterTrainerPlugin", "metadata": {"name": "greeter"},
        "spec": {"source": {"configMap": {"namespace": ns, "name": cm, "key": "module.wasm"}},
                 "sha256": sha, "order": 50, "config": {"greeting": greeting}}})
}

/// The same component with a custom section appended: a rebuilt plugin
/// with a new digest.
fn rebuilt(bytes: &[u8], tag: &str) -> Vec<u8> {
    let name = b"trainforge-test-build";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    let mut n = payload.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(&payload);
    out
}

async fn plugin_status(client: &kube::Client, name: &str) -> Value {
    get(client, CTP, "ClusterTrainerPlugin", None, name)
        .await
        .unwrap_or(Value::Null)
}

fn plugin_condition<'a>(p: &'a Value, t: &str) -> Option<&'a Value> {
    p.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
}

/// Create a TrainJob of the greeter runtime and return its greeting.
async fn greeting_of(client: &kube::Client, ns: &str, job: &str) -> String {
    apply(
        client,
        &trainjob_object(
            ns,
            job,
            "greet",
            json!({"runtimeRef": {"name": "greet", "kind": "TrainingRuntime"}, "suspend": true}),
        ),
    )
    .await;
    let cm = eventually(&format!("ConfigMap {job}-minimal"), TIMEOUT, || async {
        get(
            client,
            "v1",
            "ConfigMap",
            Some(ns),
            &format!("{job}-minimal"),
        )
        .await
    })
    .await;
    cm["data"]["greeting"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn plugin_versions_swap_roll_back_and_bad_modules_are_refused() {
    let Some(s) = setup().await else { return };
    let (client, op) = (&s.client, s.op);
    let ns = s.env.create_namespace("swap").await.unwrap();
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "greet", "namespace": ns});
    runtime["spec"]["mlPolicy"]["minimal"] = json!({});
    apply(client, &runtime).await;

    let v1 = std::fs::read(plugin_common::minimal_wasm()).unwrap();
    let v2 = rebuilt(&v1, "v2");
    let (d1, d2) = (sha256(&v1), sha256(&v2));
    apply(client, &module_config_map(&ns, "greeter-v1", &v1)).await;
    apply(client, &module_config_map(&ns, "greeter-v2", &v2)).await;
    apply(client, &greeter(&ns, "greeter-v1", &d1, "v1")).await;
    eventually("greeter v1 serving", TIMEOUT, || async {
        let p = plugin_status(client, "greeter").await;
        (p.pointer("/status/servingDigest") == Some(&json!(d1))).then_some(())
    })
    .await;
    assert_eq!(greeting_of(client, &ns, "a").await, "v1");

    // Swap to v2 while TrainJobs keep arriving: zero reconcile errors.
    let errors_before = metric(&op.scrape().await, "trainforge_reconcile_errors_total", &[]);
    let edit = Instant::now();
    apply(client, &greeter(&ns, "greeter-v2", &d2, "v2")).await;
    let mut during = Vec::new();
    let mut served = None;
    for i in 0..40 {
        if i < 8 {
            let name = format!("during-{i}");
            apply(client, &trainjob_object(&ns, &name, "greet", json!({"runtimeRef": {"name": "greet", "kind": "TrainingRuntime"}, "suspend": true}))).await;
            during.push(name);
        }
        let p = plugin_status(client, "greeter").await;
        if served.is_none() && p.pointer("/status/servingDigest") == Some(&json!(d2)) {
            served = Some(edit.elapsed());
        }
        if served.is_some() && i >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let served = match served {
        Some(t) => t,
        None => {
            eventually("greeter v2 serving", TIMEOUT, || async {
                let p = plugin_status(client, "greeter").await;
                (p.pointer("/status/servingDigest") == Some(&json!(d2))).then_some(())
            })
            .await;
            edit.elapsed()
        }
    };
    report(&format!(
        "FIGURE plugin config edit -> new digest serving (status observed): {} ms",
        served.as_millis()
    ));
    for name in &during {
        let cm = eventually(&format!("{name}-minimal"), TIMEOUT, || async {
            get(
                client,
                "v1",
                "ConfigMap",
                Some(&ns),
                &format!("{name}-minimal"),
            )
            .await
        })
        .await;
        let g = cm["data"]["greeting"].as_str().unwrap();
        assert!(
            g == "v1" || g == "v2",
            "every TrainJob saw one whole plugin version: {g}"
        );
    }
    assert_eq!(
        greeting_of(client, &ns, "b").await,
        "v2",
        "new TrainJobs get the new version"
    );
    let scraped = op.scrape().await;
    let errors_after = metric(&scraped, "trainforge_reconcile_errors_total", &[]);
    let by_reason: Vec<&str> = scraped
        .lines()
        .filter(|l| l.starts_with("trainforge_reconcile_errors_total"))
        .collect();
    assert_eq!(
        errors_after,
        errors_before,
        "no reconcile errors during the swap; errors: {by_reason:?}; operator log:\n{}",
        op.log_tail(40)
    );
    // An unfinished TrainJob's objects follow the plugins in service: "a"
    // (created under v1, still suspended) gets v2's ConfigMap on a resync,
    // while its JobSet keeps the jobs it was created with (JobSet freezes
    // them; re-applying a v2 pod template would be denied every time).
    eventually("a-minimal re-rendered by v2", TIMEOUT, || async {
        let a = get(client, "v1", "ConfigMap", Some(&ns), "a-minimal").await?;
        (a["data"]["greeting"] == "v2").then_some(())
    })
    .await;
    let js = get(client, JOBSET, "JobSet", Some(&ns), "a").await.unwrap();
    let env = js
        .pointer("/spec/replicatedJobs/0/template/spec/template/spec/containers/0/env")
        .cloned()
        .unwrap_or_default();
    let greeting = env
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "MINIMAL_GREETING");
    assert_eq!(
        greeting.map(|e| e["value"].clone()),
        Some(json!("v1")),
        "JobSet a keeps its v1 pod template: {env}"
    );
    let errors_now = metric(&op.scrape().await, "trainforge_reconcile_errors_total", &[]);
    assert_eq!(
        errors_now,
        errors_before,
        "no reconcile errors once a was re-rendered by v2:\n{}",
        op.log_tail(40)
    );
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let failures: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        // About TrainJobs: the JobSet controller's own Warnings (it races
        // itself creating a JobSet's headless Service, "already exists")
        // are not ours.
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("TrainJob")
        })
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect();
    assert!(
        failures.is_empty(),
        "no warnings for the TrainJobs created during the swap: {failures:?}"
    );

    // A corrupt module with a matching digest: refused, v2 keeps serving.
    let junk = b"\0asm\x0d\0\x01\0this is not a component".to_vec();
    apply(client, &module_config_map(&ns, "greeter-junk", &junk)).await;
    apply(
        client,
        &greeter(&ns, "greeter-junk", &sha256(&junk), "junk"),
    )
    .await;
    let p = eventually("corrupt module refused", TIMEOUT, || async {
        let p = plugin_status(client, "greeter").await;
        (plugin_condition(&p, "Degraded")?["status"] == "True"
            && p.pointer("/status/lastError")
                .and_then(Value::as_str)
                .is_some_and(|e| e.contains("LoadFailed") || e.contains("compil")))
        .then_some(p)
    })
    .await;
    assert_eq!(p.pointer("/status/servingDigest"), Some(&json!(d2)), "{p}");
    assert_eq!(greeting_of(client, &ns, "c").await, "v2");

    // A digest mismatch: refused before compiling, v2 keeps serving.
    apply(client, &greeter(&ns, "greeter-v1", &"0".repeat(64), "v1")).await;
    let p = eventually("digest mismatch refused", TIMEOUT, || async {
        let p = plugin_status(client, "greeter").await;
        let verified = plugin_condition(&p, "Verified")?;
        (verified["status"] == "False" && verified["reason"] == "DigestMismatch").then_some(p)
    })
    .await;
    assert_eq!(p.pointer("/status/servingDigest"), Some(&json!(d2)), "{p}");

    // Pointing back at the first digest rolls back.
    let back = Instant::now();
    apply(client, &greeter(&ns, "greeter-v1", &d1, "v1")).await;
    eventually("rolled back to v1", TIMEOUT, || async {
        let p = plugin_status(client, "greeter").await;
        (p.pointer("/status/servingDigest") == Some(&json!(d1))
            && plugin_condition(&p, "Ready")?["status"] == "True")
            .then_some(())
    })
    .await;
    report(&format!(
        "FIGURE plugin rollback to a cached digest -> serving: {} ms",
        back.elapsed().as_millis()
    ));
    assert_eq!(greeting_of(client, &ns, "d").await, "v1");

    // Removing the plugin config removes the plugin: a new TrainJob whose
    // runtime selects its policy (`mlPolicy.minimal`) is not built without
    // it, and says so.
    delete(client, CTP, "ClusterTrainerPlugin", None, "greeter").await;
    apply(
        client,
        &trainjob_object(
            &ns,
            "e",
            "greet",
            json!({"runtimeRef": {"name": "greet", "kind": "TrainingRuntime"}, "suspend": true}),
        ),
    )
    .await;
    let blocked = eventually("TrainJob e Blocked by PolicyNotServed", TIMEOUT, || async {
        let tj = trainjob(client, &ns, "e").await?;
        let c = condition(&tj, "Blocked")?;
        (c["status"] == "True" && c["reason"] == "PolicyNotServed").then(|| c.clone())
    })
    .await;
    assert!(
        blocked["message"]
            .as_str()
            .unwrap_or_default()
            .contains("mlPolicy.minimal"),
        "{blocked}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        get(client, JOBSET, "JobSet", Some(&ns), "e")
            .await
            .is_none()
    );
    assert!(
        get(client, "v1", "ConfigMap", Some(&ns), "e-minimal")
            .await
            .is_none()
    );
}

/// runtimePatches keeping the node pods running for 10 minutes.
fn long_running() -> Value {
    // The launcher too: the MPI runtime's JobSet succeeds when its launcher
    // does, which kwok would complete as soon as the nodes are ready — while
    // the operator is down, before the test suspends one of them.
    let running = |job: &str| {
        json!({ "name": job, "template": { "spec": { "template": { "metadata": {
            "labels": { FAIL_POD_LABEL: "true" },
            "annotations": { format!("{FAIL_POD_LABEL}/delay"): "600s", format!("{FAIL_POD_LABEL}/jitter-delay"): "600s" }
        } } } } })
    };
    json!([{ "manager": "e2e.example.com/test", "trainingRuntimeSpec": { "template": { "spec": {
        "replicatedJobs": [running("node"), running("launcher")]
    } } } }])
}

#[tokio::test]
async fn killing_the_operator_mid_run_loses_and_duplicates_nothing() {
    let Some(s) = setup().await else { return };
    let (client, op) = (&s.client, s.op);
    let ns = s.env.create_namespace("crash").await.unwrap();
    // TrainJobs are created while the operator is down, which its own
    // admission (failurePolicy Fail) would refuse, as Kubeflow Trainer's
    // does: the webhooks skip this namespace.
    bypass_admission(client, &ns).await;
    let n = 12;
    for i in 0..n / 2 {
        let spec = json!({"trainer": {"numNodes": 2}, "runtimePatches": long_running()});
        apply(
            client,
            &trainjob_object(&ns, &format!("mpi-{i}"), "deepspeed-distributed", spec),
        )
        .await;
    }
    // Half of them have their objects; note what exists.
    let mut before = Vec::new();
    for i in 0..n / 2 {
        let name = format!("mpi-{i}");
        let js = eventually(&format!("JobSet {name}"), TIMEOUT, || async {
            get(client, JOBSET, "JobSet", Some(&ns), &name).await
        })
        .await;
        let secret = get(
            client,
            "v1",
            "Secret",
            Some(&ns),
            &format!("{name}-mpi-ssh-auth"),
        )
        .await
        .unwrap();
        before.push((
            name,
            js["metadata"]["uid"].clone(),
            secret["metadata"]["uid"].clone(),
            secret["data"].clone(),
        ));
    }
    // A TrainJob that finishes now, and whose time to live runs out while
    // the operator is down, is deleted after the restart (in a namespace of
    // its own, so that the counts below are this test's).
    let ttl_ns = s.env.create_namespace("crash-ttl").await.unwrap();
    let ttl = 10;
    apply(
        client,
        &trainjob_object(
            &ttl_ns,
            "ttl",
            "torch-distributed",
            json!({"ttlSecondsAfterFinished": ttl}),
        ),
    )
    .await;
    eventually("TrainJob ttl Complete", TIMEOUT, || async {
        let tj = trainjob(client, &ttl_ns, "ttl").await?;
        is_true(&tj, "Complete").then_some(())
    })
    .await;
    let finished_at = Instant::now();
    op.kill();
    assert!(
        trainjob(client, &ttl_ns, "ttl").await.is_some(),
        "deleted before its time to live was over"
    );
    // While it is down, more work arrives and one job is suspended.
    for i in n / 2..n {
        let spec = json!({"trainer": {"numNodes": 2}, "runtimePatches": long_running()});
        apply(
            client,
            &trainjob_object(&ns, &format!("mpi-{i}"), "deepspeed-distributed", spec),
        )
        .await;
    }
    let mut suspend = trainjob_object(
        &ns,
        "mpi-0",
        "deepspeed-distributed",
        json!({"trainer": {"numNodes": 2}, "runtimePatches": long_running(), "suspend": true}),
    );
    suspend["metadata"]["name"] = json!("mpi-0");
    apply(client, &suspend).await;
    tokio::time::sleep(
        Duration::from_secs(ttl + 1)
            .saturating_sub(finished_at.elapsed())
            .max(Duration::from_secs(2)),
    )
    .await;
    assert!(
        trainjob(client, &ttl_ns, "ttl").await.is_some(),
        "nothing deletes it while the operator is down"
    );
    op.restart("operator-lifecycle-restarted");
    op.wait_ready().await;
    eventually(
        "TrainJob ttl deleted after the restart",
        TIMEOUT,
        || async {
            trainjob(client, &ttl_ns, "ttl")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;

    for i in 0..n {
        let name = format!("mpi-{i}");
        eventually(&format!("JobSet {name} after restart"), TIMEOUT, || async {
            get(client, JOBSET, "JobSet", Some(&ns), &name).await
        })
        .await;
    }
    for (name, js_uid, secret_uid, secret_data) in &before {
        let js = get(client, JOBSET, "JobSet", Some(&ns), name)
            .await
            .unwrap();
        assert_eq!(
            &js["metadata"]["uid"], js_uid,
            "{name}: JobSet not re-created"
        );
        let secret = get(
            client,
            "v1",
            "Secret",
            Some(&ns),
            &format!("{name}-mpi-ssh-auth"),
        )
        .await
        .unwrap();
        assert_eq!(
            &secret["metadata"]["uid"], secret_uid,
            "{name}: key Secret kept"
        );
        assert_eq!(&secret["data"], secret_data, "{name}: same keys");
    }
    // Not `eventually`: on a timeout, what the operator did is the report.
    let start = Instant::now();
    loop {
        let js = get(client, JOBSET, "JobSet", Some(&ns), "mpi-0").await;
        let tj = trainjob(client, &ns, "mpi-0").await;
        let done = js.as_ref().is_some_and(|js| js["spec"]["suspend"] == true)
            && tj.as_ref().is_some_and(|tj| is_true(tj, "Suspended"));
        if done {
            break;
        }
        if start.elapsed() > TIMEOUT {
            panic!(
                "mpi-0 not suspended {TIMEOUT:?} after the restart: JobSet suspend {:?}, \
                 TrainJob spec.suspend {:?}, status {:?}\noperator log:\n{}",
                js.map(|j| j["spec"]["suspend"].clone()),
                tj.as_ref().map(|t| t["spec"]["suspend"].clone()),
                tj.map(|t| t["status"].clone()),
                op.log_tail(80)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Exactly one of each object per TrainJob.
    let cms = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap();
    let hostfiles = cms
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-mpi-hostfile"))
        })
        .count();
    let snapshots = cms
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-runtime-snapshot"))
        })
        .count();
    assert_eq!((hostfiles, snapshots), (n, n));
}

/// Watch JobSets in `ns`, reporting the time each name is first seen.
fn jobset_seen(
    client: &kube::Client,
    ns: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, Instant)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        ns,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
        )),
    );
    tokio::spawn(async move {
        let mut s = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(Ok(o)) = s.next().await {
            if tx
                .send((o.metadata.name.unwrap_or_default(), Instant::now()))
                .is_err()
            {
                return;
            }
        }
    });
    rx
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A figure, not a test (`make bench` runs it): TrainJob create → JobSet
/// created, one at a time (no queueing), over 100 TrainJobs.
#[tokio::test]
#[ignore = "figure: run by make bench"]
async fn figure_create_to_jobset_latency() {
    let Some(s) = setup().await else { return };
    let client = &s.client;
    let ns = s.env.create_namespace("latency").await.unwrap();
    let mut seen = jobset_seen(client, &ns);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut lat = Vec::new();
    for i in 0..100 {
        let name = format!("lat-{i}");
        let t0 = Instant::now();
        apply(
            client,
            &trainjob_object(&ns, &name, "torch-distributed", json!({"suspend": true})),
        )
        .await;
        loop {
            let (n, at) = tokio::time::timeout(TIMEOUT, seen.recv())
                .await
                .unwrap()
                .unwrap();
            if n == name {
                lat.push(at - t0);
                break;
            }
        }
    }
    let mut sorted = lat.clone();
    sorted.sort();
    report(&format!(
        "FIGURE TrainJob create -> JobSet created over 100 jobs: median {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        median(lat).as_secs_f64() * 1e3,
        sorted[90].as_secs_f64() * 1e3,
        sorted[99].as_secs_f64() * 1e3
    ));
}

/// Resyncs that find nothing changed write nothing (after whole lifecycles
/// of torch jobs to Complete), and the applied-object memo forgets the
/// objects of deleted TrainJobs. Prints the writes per lifecycle and the
/// memo's size as it goes.
#[tokio::test]
async fn resyncs_write_nothing_and_the_memo_forgets_deleted_trainjobs() {
    let Some(s) = setup().await else { return };
    let (client, op) = (&s.client, s.op);

    // 1. API writes over whole lifecycles (10 torch jobs to Complete), then
    //    what two resync periods write once nothing changes.
    let ns = s.env.create_namespace("writes").await.unwrap();
    // Let earlier work settle (other tests' status writes).
    tokio::time::sleep(Duration::from_secs(RESYNC + 1)).await;
    let w0 = metric(&op.scrape().await, "trainforge_api_writes_total", &[]);
    let jobs = 10;
    for i in 0..jobs {
        apply(
            client,
            &trainjob_object(
                &ns,
                &format!("life-{i}"),
                "torch-distributed",
                json!({"trainer": {"numNodes": 2}}),
            ),
        )
        .await;
    }
    for i in 0..jobs {
        let name = format!("life-{i}");
        eventually(&format!("{name} Complete"), TIMEOUT, || async {
            let t = trainjob(client, &ns, &name).await?;
            is_true(&t, "Complete").then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = op.scrape().await;
    let w1 = metric(&text, "trainforge_api_writes_total", &[]);
    let by_kind: Vec<String> = ["ConfigMap", "JobSet", "TrainJob/status", "Event"]
        .iter()
        .map(|k| {
            format!(
                "{k}={}",
                metric(&text, "trainforge_api_writes_total", &[("kind", k)])
            )
        })
        .collect();
    report(&format!(
        "FIGURE API writes per TrainJob lifecycle (create -> Complete, torch, 2 nodes): {:.1} (all jobs since start by kind: {})",
        (w1 - w0) / jobs as f64,
        by_kind.join(", ")
    ));
    let noop0 = metric(&text, "trainforge_noop_resyncs_total", &[]);
    tokio::time::sleep(Duration::from_secs(2 * RESYNC + 1)).await;
    let text = op.scrape().await;
    let w2 = metric(&text, "trainforge_api_writes_total", &[]);
    let noop1 = metric(&text, "trainforge_noop_resyncs_total", &[]);
    report(&format!(
        "FIGURE no-op resyncs: {} reconciles over {}s wrote {} objects",
        noop1 - noop0,
        2 * RESYNC + 1,
        w2 - w1
    ));
    assert!(
        noop1 - noop0 >= (2 * jobs) as f64,
        "every TrainJob was resynced at least twice: {}",
        noop1 - noop0
    );
    assert_eq!(w2, w1, "a resync that finds nothing changed writes nothing");

    // 2. Many TrainJobs at once (suspended: JobSets but no pods), and the
    //    applied-object memo forgetting them once they are deleted. 20 by
    //    default (TRAINFORGE_E2E_SCALE for more): memory, CPU and API
    //    requests per TrainJob at scale are `make bench`'s figures
    //    (testenv/src/bin/trainforge-bench).
    let many: usize = std::env::var("TRAINFORGE_E2E_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    // What the memo holds before (the gauge is set every resync).
    let base = metric(
        &op.scrape().await,
        "trainforge_applied_objects_remembered",
        &[],
    );
    let ns = s.env.create_namespace("scale").await.unwrap();
    let start = Instant::now();
    let names: Vec<String> = (0..many).map(|i| format!("s-{i}")).collect();
    futures::stream::iter(names.iter().cloned())
        .for_each_concurrent(16, |name| {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                apply(
                    &client,
                    &trainjob_object(&ns, &name, "torch-distributed", json!({"suspend": true})),
                )
                .await;
            }
        })
        .await;
    let jobsets = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
        )),
    );
    eventually(
        &format!("{many} JobSets"),
        Duration::from_secs(900),
        || async {
            let list = jobsets.list_metadata(&Default::default()).await.ok()?;
            (list.items.len() >= many).then_some(())
        },
    )
    .await;
    let rss = op.peak_rss_kib().unwrap_or(0);
    let now = op.rss_kib().unwrap_or(0);
    report(&format!(
        "FIGURE {many} TrainJobs created and reconciled to JobSets in {:.1}s; operator RSS {:.1} MiB after, \
         peak {:.1} MiB over its life (includes compiling the plugins at start)",
        start.elapsed().as_secs_f64(),
        now as f64 / 1024.0,
        rss as f64 / 1024.0
    ));
    assert!(rss > 0);
    let remembered_before = eventually(
        "applied-object memo holds the scale objects",
        Duration::from_secs(120),
        || async {
            let n = metric(
                &op.scrape().await,
                "trainforge_applied_objects_remembered",
                &[],
            );
            // A snapshot ConfigMap and a JobSet per scale TrainJob.
            (n >= base + many as f64).then_some(n)
        },
    )
    .await;
    // Leave a quiet cluster to the next scenario (its resyncs would keep the operator busy).
    delete(client, "v1", "Namespace", None, &ns).await;
    let trainjobs = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
        )),
    );
    eventually(
        "scale TrainJobs deleted",
        Duration::from_secs(600),
        || async {
            let list = trainjobs.list_metadata(&Default::default()).await.ok()?;
            list.items.is_empty().then_some(())
        },
    )
    .await;
    // Deleted TrainJobs get no reconcile; the operator still forgets their
    // objects (pruned every resync once they are gone from the watch cache).
    let deleted = Instant::now();
    let remembered = eventually(
        "applied-object memo pruned",
        Duration::from_secs(300),
        || async {
            let n = metric(
                &op.scrape().await,
                "trainforge_applied_objects_remembered",
                &[],
            );
            (n <= remembered_before - many as f64).then_some(n)
        },
    )
    .await;
    report(&format!(
        "FIGURE applied-object memo: {remembered_before} entries with the scale TrainJobs, {remembered} {:.1}s after they were gone",
        deleted.elapsed().as_secs_f64()
    ));
}

#[tokio::test]
async fn two_replicas_one_leads_and_the_standby_takes_over() {
    let Some(s) = setup().await else { return };
    let (client, op) = (&s.client, s.op);
    let ns = s.env.create_namespace("replicas").await.unwrap();
    op.kill(); // this file's operator runs without an election; step it aside
    let elect = [
        "--leader-elect",
        "--lease-namespace",
        "default",
        "--resync-seconds",
        "30",
    ];
    let a = Operator::start(s.env, "replica-a", &elect);
    let b = Operator::start(s.env, "replica-b", &elect);
    // Both are ready: the standby loads the plugins and serves admission too.
    a.wait_ready().await;
    b.wait_ready().await;
    apply(
        client,
        &trainjob_object(&ns, "first", "torch-distributed", json!({"suspend": true})),
    )
    .await;
    eventually("JobSet first", TIMEOUT, || async {
        get(client, JOBSET, "JobSet", Some(&ns), "first").await
    })
    .await;
    let reconciles = |text: &str| metric(text, "trainforge_reconcile_total", &[]);
    let (ra, rb) = (reconciles(&a.scrape().await), reconciles(&b.scrape().await));
    assert!(
        (ra > 0.0) != (rb > 0.0),
        "exactly one replica reconciles: a={ra} b={rb}"
    );
    let (leader, standby) = if ra > 0.0 { (&a, &b) } else { (&b, &a) };
    let admitted = |text: &str| metric(text, "trainforge_admission_requests_total", &[]);
    let standby_admitted = admitted(&standby.scrape().await);
    let killed = Instant::now();
    leader.kill();
    apply(
        client,
        &trainjob_object(&ns, "second", "torch-distributed", json!({"suspend": true})),
    )
    .await;
    eventually("JobSet second from the standby", TIMEOUT, || async {
        get(client, JOBSET, "JobSet", Some(&ns), "second").await
    })
    .await;
    report(&format!(
        "FIGURE leader killed -> standby created the next JobSet: {:.1}s (Lease 15s)",
        killed.elapsed().as_secs_f64()
    ));
    assert!(reconciles(&standby.scrape().await) > 0.0);
    // "second" was admitted while only the standby was up: a standby
    // serves admission (its counter moved).
    assert!(
        admitted(&standby.scrape().await) > standby_admitted,
        "the standby answered the admission of \"second\""
    );
    standby.kill();
    op.restart("operator-lifecycle-after-replicas");
    op.wait_ready().await;
}
