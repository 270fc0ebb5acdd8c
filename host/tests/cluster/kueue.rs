//! Kueue's writes to a TrainJob, played on the real control plane as
//! Kueue v0.19 makes them (its TrainJob integration,
//! `pkg/controller/jobs/trainjob`), against one operator:
//! - its webhook adds an empty runtime patch of manager
//!   `kueue.x-k8s.io/manager` to every TrainJob, queued or not, after ours
//!   ran (so without `time`);
//! - admission: an update of the suspended TrainJob that fills that patch's
//!   `replicatedJobs` with the flavor's pod labels, annotations,
//!   `nodeSelector` and `tolerations` (Go's `ObjectMeta` brings
//!   `creationTimestamp: null`), then an update that unsuspends it;
//! - preemption: an update that suspends it, then, once no job is active, a
//!   merge patch that empties the patch's `replicatedJobs` again.
//!
//! Upstream Kubeflow Trainer v2.3 accepts `trainer.numProcPerNode` 0 and
//! below; so do we, with a warning.
//!
//! Kueue's `PodsReady` (for `waitForPodsReady`) is `ready + succeeded`
//! summed over the TrainJob's `jobsStatus` reaching the JobSet's replicas,
//! read only while the TrainJob runs. The operator here batches child
//! changes for [`CHILD_BATCH_MS`], far longer than the default, so a status
//! that waited for its window would show it.
//!
//! Real Kueue is not run here: its controller (a Go build of its own module
//! graph, its CRDs and webhooks) would cost CI several minutes cold; these
//! are the writes it makes, to the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Duration;

use crate::operator_common::*;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use trainforge_testenv::{FAIL_POD_LABEL, Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(120);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const KUEUE_MANAGER: &str = "kueue.x-k8s.io/manager";
/// The operator's child batch window here (the default is 1000).
const CHILD_BATCH_MS: u64 = 10_000;

/// Kueue's webhook's patch: empty, without `time`.
fn kueue_empty_patch() -> Value {
    json!({"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}})
}

/// Pods that keep running (kwok fails them only after 10 minutes: its
/// stage takes the smaller of `delay` and `jitter-delay`, so both are set),
/// with a pod label of the user's own.
fn long_running() -> Value {
    json!({"manager": "e2e.example.com/test", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
            "labels": {FAIL_POD_LABEL: "true", "team-label": "kept"},
            "annotations": {format!("{FAIL_POD_LABEL}/delay"): "600s",
                format!("{FAIL_POD_LABEL}/jitter-delay"): "600s"}}}}}}]}}}})
}

struct Setup {
    env: &'static TestEnv,
    op: &'static Operator,
    /// This test's client (a client lives on the runtime it was made on,
    /// and each test has its own).
    client: kube::Client,
    /// The namespace of the TrainJob created before the operator (and its
    /// webhooks) existed.
    early_ns: String,
}

/// The control plane, the default plugins and runtimes, a TrainJob created
/// before any webhook was registered (as when Kueue's webhook adds its patch
/// after ours), then the operator.
async fn setup() -> Option<Setup> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    static SETUP: OnceCell<(Operator, String)> = OnceCell::const_new();
    let (op, early_ns) = SETUP
        .get_or_init(|| async {
            let client = env.client().await.unwrap();
            apply_default_plugins(&client).await;
            for f in ["torch-distributed.yaml", "deepspeed-distributed.yaml"] {
                for d in docs(&root().join("api/tests/fixtures/upstream").join(f), None) {
                    apply(&client, &d).await;
                }
            }
            let ns = env.create_namespace("kueue-early").await.unwrap();
            // A running TrainJob with a v2.1 field, and Kueue's patch
            // without time (no webhook of ours is registered yet).
            let tj = trainjob_object(
                &ns,
                "early",
                "torch-distributed",
                json!({"suspend": false, "labels": {"team": "a"},
                        "runtimePatches": [long_running(), kueue_empty_patch()]}),
            );
            let stored = apply(&client, &tj).await;
            assert!(
                stored["spec"]["runtimePatches"][1].get("time").is_none(),
                "{stored}"
            );
            let op = Operator::start(
                env,
                "kueue",
                &["--child-batch-ms", &CHILD_BATCH_MS.to_string()],
            );
            op.wait_ready().await;
            (op, ns)
        })
        .await;
    Some(Setup {
        env,
        op,
        client: env.client().await.unwrap(),
        early_ns: early_ns.clone(),
    })
}

fn trainjobs(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
        )),
    )
}

/// Kueue's `c.Update`: read, change, write the whole object back, retrying
/// conflicts (its reconciler retries).
async fn kueue_update(client: &kube::Client, ns: &str, name: &str, change: impl Fn(&mut Value)) {
    let api = trainjobs(client, ns);
    for _ in 0..50 {
        let mut tj = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        change(&mut tj);
        let obj: DynamicObject = serde_json::from_value(tj).unwrap();
        match api.replace(name, &PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("Kueue's update of {ns}/{name}: {e}"),
        }
    }
    panic!("Kueue's update of {ns}/{name}: too many conflicts");
}

/// The Kueue patch of a stored TrainJob.
fn kueue_patch(tj: &mut Value) -> &mut Value {
    tj["spec"]["runtimePatches"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["manager"] == KUEUE_MANAGER)
        .expect("Kueue's runtime patch")
}

/// `RunWithPodSetsInfo`: the flavor's pod set info into Kueue's patch
/// (suspended), then unsuspend.
async fn admit(client: &kube::Client, ns: &str, name: &str, flavor: &str) {
    kueue_update(client, ns, name, |tj| {
        kueue_patch(tj)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = json!([{
            "name": "node",
            "template": {"spec": {"template": {
                // The flavor's pod labels keep kwok's pods running (so
                // that a preemption finds active jobs), also when the
                // TrainJob sets no pod labels of its own.
                "metadata": {"creationTimestamp": null,
                    "labels": {"kueue.x-k8s.io/podset": "node", "flavor": flavor, FAIL_POD_LABEL: "true"},
                    "annotations": {"kueue.x-k8s.io/workload": format!("trainjob-{name}"),
                        format!("{FAIL_POD_LABEL}/delay"): "600s",
                        format!("{FAIL_POD_LABEL}/jitter-delay"): "600s"}},
                "spec": {"nodeSelector": {"kueue-flavor": flavor},
                    "tolerations": [{"key": "kueue-flavor", "operator": "Equal", "value": flavor, "effect": "NoSchedule"}]}
            }}}
        }]);
    })
    .await;
    kueue_update(client, ns, name, |tj| tj["spec"]["suspend"] = json!(false)).await;
}

/// `Stop`: suspend; once the TrainJob reports no active job, a merge patch
/// of the runtime patches with Kueue's `replicatedJobs` removed.
async fn preempt(client: &kube::Client, ns: &str, name: &str) {
    kueue_update(client, ns, name, |tj| tj["spec"]["suspend"] = json!(true)).await;
    eventually("no active job after the suspend", TIMEOUT, || async {
        let tj = trainjob(client, ns, name).await?;
        let active: i64 = tj["status"]["jobsStatus"]
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["active"].as_i64()).sum())
            .unwrap_or(0);
        (active == 0).then_some(())
    })
    .await;
    let api = trainjobs(client, ns);
    let mut tj = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
    let spec = kueue_patch(&mut tj)["trainingRuntimeSpec"]["template"]["spec"]
        .as_object_mut()
        .unwrap();
    spec.remove("replicatedJobs");
    let patches = tj["spec"]["runtimePatches"].clone();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runtimePatches": patches}})),
    )
    .await
    .unwrap_or_else(|e| panic!("Kueue's restore of {ns}/{name}: {e}"));
}

fn pod_template(js: &Value) -> &Value {
    &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
}

/// The JobSet once `pred` holds for it.
async fn jobset_when(
    s: &Setup,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let start = std::time::Instant::now();
    loop {
        let js = get(&s.client, JOBSET, "JobSet", Some(ns), name).await;
        if let Some(js) = js.as_ref().filter(|js| pred(js)) {
            return js.clone();
        }
        if start.elapsed() > TIMEOUT {
            let tj = trainjob(&s.client, ns, name).await;
            panic!(
                "JobSet {ns}/{name}: not {what} after {TIMEOUT:?}\nJobSet: {js:?}\nTrainJob status: {:?}\noperator log:\n{}",
                tj.and_then(|t| t.get("status").cloned()),
                s.op.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// No `Blocked=True` and no Warning Event about applying, for the whole
/// life of the TrainJob so far.
async fn never_blocked(s: &Setup, ns: &str, name: &str) {
    let tj = trainjob(&s.client, ns, name).await.unwrap();
    assert!(!is_true(&tj, "Blocked"), "{}", tj["status"]);
    let warned = warnings(&s.client, ns, name).await;
    assert!(
        warned.iter().all(|w| !w.contains("apply")),
        "{warned:?}\noperator log:\n{}",
        s.op.log_tail(30)
    );
}

/// One Kueue admission, preemption and re-admission of TrainJob `name`;
/// `user_patch`: whether the TrainJob has pod labels of its own (without,
/// its pod template has no metadata once Kueue's is removed).
async fn preemption_cycle(s: &Setup, ns: &str, name: &str, user_patch: bool) {
    let mut patches = vec![kueue_empty_patch()];
    if user_patch {
        patches.insert(0, long_running());
    }
    let tj = trainjob_object(
        ns,
        name,
        "torch-distributed",
        json!({"suspend": true, "runtimePatches": patches}),
    );
    apply(&s.client, &tj).await;
    jobset_when(s, ns, name, "created suspended", |js| {
        js["spec"]["suspend"] == true
    })
    .await;

    admit(&s.client, ns, name, "f1").await;
    let js = jobset_when(s, ns, name, "resumed with flavor f1", |js| {
        js["spec"]["suspend"] == false
    })
    .await;
    let pod = pod_template(&js);
    assert_eq!(pod["spec"]["nodeSelector"]["kueue-flavor"], "f1", "{pod}");
    assert_eq!(pod["spec"]["tolerations"][0]["value"], "f1", "{pod}");
    assert_eq!(
        pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], "node",
        "{pod}"
    );
    eventually("an active job", TIMEOUT, || async {
        let tj = trainjob(&s.client, ns, name).await?;
        let active: i64 = tj["status"]["jobsStatus"]
            .as_array()?
            .iter()
            .filter_map(|j| j["active"].as_i64())
            .sum();
        (active > 0).then_some(())
    })
    .await;

    preempt(&s.client, ns, name).await;
    let js = jobset_when(s, ns, name, "suspended without the flavor", |js| {
        let pod = pod_template(js);
        js["spec"]["suspend"] == true
            && pod["spec"]
                .get("nodeSelector")
                .is_none_or(|n| n.get("kueue-flavor").is_none())
            && pod["spec"]
                .get("tolerations")
                .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty))
            && pod
                .pointer("/metadata/labels/kueue.x-k8s.io~1podset")
                .is_none()
    })
    .await;
    if user_patch {
        // What the user asked for stays.
        assert_eq!(
            pod_template(&js)["metadata"]["labels"]["team-label"],
            "kept"
        );
    }
    let tj = eventually("Suspended=True", TIMEOUT, || async {
        let tj = trainjob(&s.client, ns, name).await?;
        is_true(&tj, "Suspended").then_some(tj)
    })
    .await;
    assert!(!is_true(&tj, "Blocked"), "{}", tj["status"]);

    // Admitted again on another flavor.
    admit(&s.client, ns, name, "f2").await;
    let js = jobset_when(s, ns, name, "resumed with flavor f2", |js| {
        js["spec"]["suspend"] == false
            && pod_template(js)["spec"]["nodeSelector"]["kueue-flavor"] == "f2"
    })
    .await;
    assert_eq!(pod_template(&js)["spec"]["tolerations"][0]["value"], "f2");
    never_blocked(s, ns, name).await;
}

#[tokio::test]
async fn preemption_suspends_the_jobset_without_the_flavor_and_readmission_resumes_it() {
    let Some(s) = setup().await else {
        return;
    };
    let ns = s.env.create_namespace("kueue-preempt").await.unwrap();
    let (with, without) = tokio::join!(
        preemption_cycle(&s, &ns, "own-labels", true),
        preemption_cycle(&s, &ns, "no-labels", false),
    );
    let _ = (with, without);
}

#[tokio::test]
async fn v21_fields_convert_beside_kueues_patch_without_time() {
    let Some(s) = setup().await else {
        return;
    };
    let s = &s;
    let early = s.early_ns.as_str();
    let converted = eventually("the v2.1 fields converted", TIMEOUT, || async {
        let tj = trainjob(&s.client, early, "early").await?;
        tj["spec"].get("labels").is_none().then_some(tj)
    })
    .await;
    let patches = converted["spec"]["runtimePatches"].as_array().unwrap();
    let managers: Vec<&str> = patches
        .iter()
        .filter_map(|p| p["manager"].as_str())
        .collect();
    assert_eq!(
        managers,
        [
            "trainer.kubeflow.org/v2.1-fields",
            "e2e.example.com/test",
            KUEUE_MANAGER
        ],
        "{}",
        s.op.log_tail(20)
    );
    // Kueue's patch is as Kueue left it: no time added by our webhook.
    assert_eq!(patches[2], kueue_empty_patch(), "{}", patches[2]);
    let js = jobset_when(s, early, "early", "carrying the converted label", |js| {
        js["metadata"]["labels"]["team"] == "a"
    })
    .await;
    assert_eq!(js["spec"]["suspend"], false);
    let notes = warnings(&s.client, early, "early").await;
    assert!(
        notes.iter().all(|n| !n.contains("stay in place")),
        "{notes:?}"
    );
    never_blocked(s, early, "early").await;
}

#[tokio::test]
async fn num_proc_per_node_below_one_is_accepted_with_a_warning_as_upstream_does() {
    let Some(s) = setup().await else {
        return;
    };
    let s = &s;
    let ns = s.env.create_namespace("kueue-nproc").await.unwrap();
    for (name, runtime, n) in [
        ("torch-zero", "torch-distributed", 0),
        ("torch-negative", "torch-distributed", -1),
        ("mpi-zero", "deepspeed-distributed", 0),
        ("mpi-negative", "deepspeed-distributed", -1),
    ] {
        let tj = trainjob_object(
            &ns,
            name,
            runtime,
            json!({"suspend": true, "trainer": {"numProcPerNode": n}}),
        );
        let out = create(&s.client, &tj, false).await;
        assert!(out.ok(), "{name}: {} {}", out.code, out.message);
        assert!(
            out.warnings
                .iter()
                .any(|w| w.starts_with(&format!("spec.trainer.numProcPerNode: {n} is accepted"))),
            "{name}: {:?}",
            out.warnings
        );
        let js = jobset_when(s, &ns, name, "built", |_| true).await;
        if runtime == "torch-distributed" {
            let env = &pod_template(&js)["spec"]["containers"][0]["env"];
            let nproc = env
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "PET_NPROC_PER_NODE")
                .unwrap_or_else(|| panic!("{name}: {env}"));
            assert_eq!(nproc["value"], n.to_string(), "{name}");
        } else {
            let cm = get(
                &s.client,
                "v1",
                "ConfigMap",
                Some(&ns),
                &format!("{name}-mpi-hostfile"),
            )
            .await
            .unwrap_or_else(|| panic!("{name}: no hostfile"));
            let hostfile = cm["data"]["hostfile"].as_str().unwrap();
            assert!(
                hostfile.contains(&format!(" slots={n}\n")),
                "{name}: {hostfile}"
            );
        }
        never_blocked(s, &ns, name).await;
    }
}

/// Pods that are ready for about a second, far less than the window: kwok
/// fails each one second after it runs, and its Job starts another after
/// a back-off.
fn ready_for_a_second() -> Value {
    json!({"manager": "e2e.example.com/test", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
            "labels": {FAIL_POD_LABEL: "true"},
            "annotations": {format!("{FAIL_POD_LABEL}/delay"): "1s",
                format!("{FAIL_POD_LABEL}/jitter-delay"): "1s"}}}}}}]}}}})
}

/// `ready + succeeded` summed over a JobSet's `replicatedJobsStatus` or a
/// TrainJob's `jobsStatus`, as Kueue sums them.
fn ready_jobs(statuses: &Value) -> i64 {
    statuses
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| j["ready"].as_i64().unwrap_or(0) + j["succeeded"].as_i64().unwrap_or(0))
        .sum()
}

#[tokio::test]
async fn pods_ready_shows_at_once_not_after_the_child_batch_window() {
    let Some(s) = setup().await else {
        return;
    };
    let s = &s;
    let ns = s.env.create_namespace("kueue-ready").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "ready",
        "torch-distributed",
        json!({"trainer": {"numNodes": 2}, "runtimePatches": [ready_for_a_second(), kueue_empty_patch()]}),
    );
    apply(&s.client, &tj).await;
    let js = jobset_when(s, &ns, "ready", "with all its jobs ready", |js| {
        let replicas: i64 = js["spec"]["replicatedJobs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|j| j["replicas"].as_i64().unwrap_or(1))
            .sum();
        replicas > 0 && ready_jobs(&js["status"]["replicatedJobsStatus"]) >= replicas
    })
    .await;
    let ready_at = std::time::Instant::now();
    let replicas: i64 = js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["replicas"].as_i64().unwrap_or(1))
        .sum();
    let tj = eventually("Kueue's PodsReady on the TrainJob", TIMEOUT, || async {
        let tj = trainjob(&s.client, &ns, "ready").await?;
        (ready_jobs(&tj["status"]["jobsStatus"]) >= replicas).then_some(tj)
    })
    .await;
    let took = ready_at.elapsed();
    // Polled every 200 ms (`jobset_when`): well below half the window even on
    // a loaded machine. A status that waited for its window would never
    // show these pods ready: they are not ready any more when it closes.
    assert!(
        took < Duration::from_millis(CHILD_BATCH_MS / 2),
        "TrainJob showed its jobs ready {took:?} after its JobSet: {}\n{}",
        tj["status"],
        s.op.log_tail(30)
    );
    assert!(
        !is_true(&tj, "Complete") && !is_true(&tj, "Failed"),
        "{}",
        tj["status"]
    );
}
