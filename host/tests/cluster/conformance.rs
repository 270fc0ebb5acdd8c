//! Upstream Kubeflow Trainer's own scenarios as our conformance suite: one
//! test per `It`/`Entry` of upstream's TrainJob controller integration
//! tests (`trainjob_controller_test.go`, the two runtime controller tests)
//! and of the controller-observable end-to-end tests (`e2e_test.go`), named
//! after the scenario, with upstream's words in its doc comment
//! (`docs/conformance.md` lists them; the status server's five scenarios and
//! the progress end-to-end one are in `testenv/sdk/test_progress.py`).
//!
//! One operator on the full control plane (JobSet controller, Job
//! controller, scheduler, kwok) serves every test, each in its own
//! namespace, with admission on. Where upstream's integration tests write a
//! JobSet's status by hand (they run without a JobSet controller), these
//! run the pods under kwok to the same state and compare the TrainJob with
//! what the real JobSet says; where we deliberately differ, the test says
//! so and asserts ours.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::operator_common::*;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use trainforge_testenv::{FAIL_POD_LABEL, Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(180);
const TRAINER: &str = "trainer.kubeflow.org/v1alpha1";
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const PODGROUP: &str = "scheduling.x-k8s.io/v1alpha1";
const STEP: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const COMPLETION_INDEX: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";
/// Upstream's TrainJob name in every scenario.
const ALPHA: &str = "alpha";
/// The ClusterTrainingRuntime of upstream's timeout scenarios.
const MOCK_MPI: &str = "mock-mpi";
/// The prefix of the node label that releases the pods a TrainJob of one
/// namespace [`hold`]s.
const HOLD_LABEL: &str = "conformance.trainforge.dev/release-";

/// The environment and the operator, started once; plugins, the shipped
/// runtimes and `mock-mpi` installed.
async fn setup() -> Option<(&'static TestEnv, &'static Operator, kube::Client)> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    static OP: OnceLock<Operator> = OnceLock::new();
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let client = env.client().await.unwrap();
    let op = OP
        .get_or_init(|| Operator::start(env, "operator-conformance", &["--resync-seconds", "30"]));
    INSTALLED
        .get_or_init(|| async {
            apply_default_plugins(&client).await;
            op.wait_ready().await;
            wait_default_plugins_ready(&client).await;
            // Every shipped runtime.
            for f in trainforge_testenv::manifests::yaml_files(&root().join("manifests/runtimes"))
                .unwrap()
                .iter()
                .filter(|f| !f.ends_with("kustomization.yaml"))
            {
                for d in docs(f, None) {
                    apply(&client, &d).await;
                }
            }
            let mut mock = mpi_runtime(None, MOCK_MPI, false);
            mock["kind"] = json!("ClusterTrainingRuntime");
            apply(&client, &mock).await;
        })
        .await;
    op.wait_ready().await;
    Some((env, op, client))
}

// ------------------------------------------------------------ the objects

/// A container of upstream's test wrapper: 1 CPU and 4Gi.
fn container(name: &str, image: &str, mounts: &[&str], volumes: bool) -> Value {
    let mut c = json!({
        "name": name, "image": image, "command": ["runtime"], "args": ["runtime"],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "1", "memory": "4Gi"}},
    });
    if volumes {
        c["volumeMounts"] = mounts
            .iter()
            .map(|m| json!({"name": "initializer", "mountPath": m}))
            .collect();
    }
    c
}

/// A replicated job of the wrapper: one container named after the job.
fn rjob(name: &str, step: &str, image: &str, mounts: &[&str], volumes: bool) -> Value {
    let mut pod = json!({"containers": [container(name, image, mounts, volumes)]});
    if volumes {
        pod["volumes"] =
            json!([{"name": "initializer", "persistentVolumeClaim": {"claimName": "initializer"}}]);
    }
    json!({"name": name, "template": {"metadata": {"labels": {STEP: step}},
        "spec": {"template": {"spec": pod}}}})
}

/// Upstream's test runtime (`MakeTrainingRuntimeWrapper`): replicated jobs
/// `dataset-initializer`, `model-initializer` and `node` with their ancestor
/// labels, each container 1 CPU / 4Gi, `mlPolicy.numNodes` 100 and
/// `ml_policy` besides. `volumes`: the PVC `initializer` mounted at
/// `/workspace/dataset` and `/workspace/model` as upstream's; left out where
/// pods run (kwok schedules no pod of a claim that does not exist).
fn wrapper(ns: Option<&str>, name: &str, ml_policy: Value, volumes: bool) -> Value {
    let mut ml = json!({"numNodes": 100});
    if let (Some(m), Value::Object(p)) = (ml.as_object_mut(), ml_policy) {
        m.extend(p);
    }
    let mut meta = json!({"name": name});
    let kind = match ns {
        Some(ns) => {
            meta["namespace"] = json!(ns);
            "TrainingRuntime"
        }
        None => "ClusterTrainingRuntime",
    };
    json!({"apiVersion": TRAINER, "kind": kind, "metadata": meta,
    "spec": {"mlPolicy": ml, "template": {"spec": {"replicatedJobs": [
        rjob("dataset-initializer", "dataset-initializer", "docker.io/kubeflow/dataset-initializer",
            &["/workspace/dataset"], volumes),
        rjob("model-initializer", "model-initializer", "docker.io/kubeflow/model-initializer",
            &["/workspace/model"], volumes),
        rjob("node", "trainer", "docker.io/kubeflow/trainer", &["/workspace/dataset", "/workspace/model"],
            volumes),
    ]}}}})
}

/// The wrapper with upstream's OpenMPI policy (slots 8, `/root/.ssh`, no
/// launcher as node) and a `launcher` job that starts once `node` is Ready.
fn mpi_runtime(ns: Option<&str>, name: &str, volumes: bool) -> Value {
    let mut rt = wrapper(
        ns,
        name,
        json!({"mpi": {"numProcPerNode": 8, "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": false}}),
        volumes,
    );
    let mut launcher = rjob(
        "launcher",
        "trainer",
        "docker.io/kubeflow/mpi-launcher",
        &[],
        false,
    );
    launcher["template"]["metadata"]["labels"] = json!({});
    launcher["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = json!("node");
    launcher["dependsOn"] = json!([{"name": "node", "status": "Ready"}]);
    rt["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array_mut()
        .unwrap()
        .push(launcher);
    rt
}

/// Upstream's TrainJob `alpha` on a namespaced runtime: the trainer image
/// `test:trainjob` running `trainjob trainjob`, and `extra` merged into the
/// spec.
fn alpha(ns: &str, runtime: &str, extra: Value) -> Value {
    let mut tj = trainjob_object(
        ns,
        ALPHA,
        runtime,
        json!({"runtimeRef": {"name": runtime, "kind": "TrainingRuntime"},
            "trainer": {"image": "test:trainjob", "command": ["trainjob"], "args": ["trainjob"]}}),
    );
    if let (Some(s), Value::Object(e)) = (tj["spec"].as_object_mut(), extra) {
        for (k, v) in e {
            match (s.get_mut(&k), v) {
                (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
                (_, v) => {
                    s.insert(k, v);
                }
            }
        }
    }
    tj
}

/// A runtime patch of `manager` on the `node` job's pod template.
fn node_patch(manager: &str, pod_meta: Value, pod_spec: Value) -> Value {
    json!({"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod_spec}}}}]}}}})
}

/// A patch that keeps the `node` pods Pending until [`release`]: they
/// select a label of their namespace no node has yet.
fn hold(ns: &str) -> Value {
    node_patch(
        "conformance.trainforge.dev/hold",
        json!({}),
        json!({"nodeSelector": {format!("{HOLD_LABEL}{ns}"): "yes"}}),
    )
}

/// Let the pods [`hold`] kept Pending schedule: the first kwok node gets
/// the namespace's label (a merge patch: other tests' labels stay).
async fn release(client: &kube::Client, ns: &str) {
    kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            trainforge_testenv::kwok::NODE_NAMES[0],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {format!("{HOLD_LABEL}{ns}"): "yes"}}}),
            ),
        )
        .await
        .unwrap();
}

/// A patch that fails the `node` pods at once, with no retry.
fn failing() -> Value {
    json!({"manager": "conformance.trainforge.dev/fail", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": {FAIL_POD_LABEL: "true"}}}}}}]}}}})
}

/// A patch that keeps the `node` pods running (kwok fails them after 10 min).
fn long_running() -> Value {
    node_patch(
        "conformance.trainforge.dev/long",
        json!({"labels": {FAIL_POD_LABEL: "true"},
            "annotations": {format!("{FAIL_POD_LABEL}/delay"): "600s"}}),
        json!({}),
    )
}

// ------------------------------------------------------------ reading

/// The JobSet, once there; on a timeout, the TrainJob's status says why.
async fn jobset(client: &kube::Client, ns: &str, name: &str) -> Value {
    let start = Instant::now();
    loop {
        if let Some(js) = get(client, JOBSET, "JobSet", Some(ns), name).await {
            return js;
        }
        if start.elapsed() > TIMEOUT {
            let tj = trainjob(client, ns, name).await;
            panic!(
                "no JobSet {ns}/{name} after {TIMEOUT:?}; TrainJob status: {:?}",
                tj.map(|t| t["status"].clone())
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The replicated job `name` of a JobSet.
fn rj<'a>(js: &'a Value, name: &str) -> &'a Value {
    js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("no replicated job {name}: {}", js["spec"]))
}

fn pod_spec(rj: &Value) -> &Value {
    &rj["template"]["spec"]["template"]["spec"]
}

/// The container `name` of a replicated job (init containers too).
fn ctr<'a>(rj: &'a Value, name: &str) -> &'a Value {
    let spec = pod_spec(rj);
    ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec[k].as_array())
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}: {spec}"))
}

/// A container's env as `NAME=value`, `NAME<-fieldPath` for field refs, in order.
fn env_of(c: &Value) -> Vec<String> {
    c["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|v| match v["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some(f) => format!("{}<-{f}", v["name"].as_str().unwrap()),
                    None => format!(
                        "{}={}",
                        v["name"].as_str().unwrap(),
                        v["value"].as_str().unwrap_or_default()
                    ),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `name:mountPath` of a container's mounts.
fn mounts(c: &Value) -> Vec<String> {
    c["volumeMounts"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|v| {
                    format!(
                        "{}:{}",
                        v["name"].as_str().unwrap(),
                        v["mountPath"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn volume<'a>(rj: &'a Value, name: &str) -> &'a Value {
    pod_spec(rj)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no volume {name}: {}", pod_spec(rj)))
}

async fn wait_condition(client: &kube::Client, ns: &str, kind: &str, op: &Operator) -> Value {
    let start = Instant::now();
    loop {
        let tj = trainjob(client, ns, ALPHA).await;
        if let Some(tj) = tj.as_ref().filter(|t| is_true(t, kind)) {
            return tj.clone();
        }
        if start.elapsed() > TIMEOUT {
            panic!(
                "TrainJob {ns}/{ALPHA} not {kind} after {TIMEOUT:?}; status: {:?}\noperator log:\n{}",
                tj.and_then(|t| t.get("status").cloned()),
                op.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// For `window`, the TrainJob is not `kind` (upstream's `Consistently`).
async fn never(client: &kube::Client, ns: &str, kind: &str, window: Duration) -> Value {
    let start = Instant::now();
    loop {
        let tj = trainjob(client, ns, ALPHA).await.unwrap();
        assert!(
            !is_true(&tj, kind),
            "{kind} within {window:?}: {}",
            tj["status"]
        );
        if start.elapsed() > window {
            return tj;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A list of per-job counts with absent counts as 0 (the JobSet's
/// `replicatedJobsStatus` and the TrainJob's `jobsStatus` have one shape).
fn counts(list: &Value) -> Value {
    let n = |s: &Value, k: &str| s[k].as_i64().unwrap_or(0);
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    json!({"name": s["name"], "ready": n(s, "ready"), "succeeded": n(s, "succeeded"),
                        "failed": n(s, "failed"), "active": n(s, "active"), "suspended": n(s, "suspended")})
                })
                .collect()
        })
        .unwrap_or(json!([]))
}

/// The JobSet's `replicatedJobsStatus` as the TrainJob's `jobsStatus` says it.
fn as_jobs_status(js: &Value) -> Value {
    counts(&js["status"]["replicatedJobsStatus"])
}

/// The TrainJob's `jobsStatus`.
fn jobs_status(tj: &Value) -> Value {
    counts(&tj["status"]["jobsStatus"])
}

/// Until the JobSet's status satisfies `state` and the TrainJob's
/// `jobsStatus` says the same, 1:1; returns that `jobsStatus`.
async fn jobs_status_follows(
    client: &kube::Client,
    ns: &str,
    what: &str,
    state: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let js = get(client, JOBSET, "JobSet", Some(ns), ALPHA).await;
        let tj = trainjob(client, ns, ALPHA).await.unwrap();
        if let Some(js) = js.as_ref().filter(|js| state(js)) {
            let want = as_jobs_status(js);
            if jobs_status(&tj) == want {
                return want;
            }
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "jobsStatus never followed the JobSet ({what}): JobSet {:?}, TrainJob {}",
            js.map(|j| j["status"].clone()),
            tj["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a JobSet's condition `type_` is `True`.
fn js_has(js: &Value, type_: &str) -> bool {
    js["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

/// The condition `type_` of a JobSet.
fn js_condition<'a>(js: &'a Value, type_: &str) -> &'a Value {
    js["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("JobSet has no {type_}: {}", js["status"]))
}

/// Apply `runtime` (namespaced, in `ns`) and upstream's TrainJob `alpha`
/// of it with `extra`; the JobSet built for it.
async fn built(client: &kube::Client, ns: &str, runtime: Value, extra: Value) -> Value {
    let name = runtime["metadata"]["name"].as_str().unwrap().to_owned();
    apply(client, &runtime).await;
    apply(client, &alpha(ns, &name, extra)).await;
    jobset(client, ns, ALPHA).await
}

/// PUT the stored TrainJob after `edit` (an update through admission),
/// read and edited again while the operator's status writes make it
/// conflict (409), as a client does.
async fn update_trainjob(client: &kube::Client, ns: &str, edit: impl Fn(&mut Value)) -> Outcome {
    let mut attempts = 0;
    loop {
        let mut tj = trainjob(client, ns, ALPHA).await.unwrap();
        edit(&mut tj);
        let out = update(client, &tj).await;
        attempts += 1;
        if out.code != 409 || attempts == 20 {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn unsuspend(client: &kube::Client, ns: &str) {
    let out = update_trainjob(client, ns, |t| t["spec"]["suspend"] = json!(false)).await;
    assert!(out.ok(), "unsuspend: {out:?}");
}

// ------------------------------------------------------------ shared scenarios

/// Upstream's "…conditions with Complete condition" / "…with Failed
/// condition" for one runtime: suspended ⇒ `Suspended=True (Suspended, "TrainJob
/// is suspended")`; resumed ⇒ `Suspended=False (Resumed, "TrainJob is
/// resumed")`; the JobSet finished ⇒ the TrainJob's `Complete` / `Failed`
/// copies its reason and message, with `jobsStatus` matching the JobSet's.
///
/// Differences, deliberate: the pods run under kwok instead of a status
/// written by hand (the `node` pods are held Pending after the resume, so
/// that `Resumed` is seen before they run); once they are all seen
/// running, the `Suspended` condition goes, so that the state reads
/// `Running` (upstream #3666; `operator_e2e::suspend_and_resume_are_followed_by_the_jobset`),
/// where upstream keeps `Suspended=False` for the job's life.
async fn conditions_follow_the_jobset(runtime: Value, complete: bool) {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env
        .create_namespace(if complete {
            "conf-complete"
        } else {
            "conf-failed"
        })
        .await
        .unwrap();
    let name = runtime["metadata"]["name"].as_str().unwrap().to_owned();
    let mut runtime = runtime;
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"]["namespace"] = json!(ns);
    rj_mut(&mut runtime, "node")["template"]["spec"]["backoffLimit"] = json!(0);
    apply(&client, &runtime).await;
    let mut patches = vec![hold(&ns)];
    if !complete {
        patches.push(failing());
    }
    apply(
        &client,
        &alpha(
            &ns,
            &name,
            json!({"suspend": true, "trainer": {"numNodes": 2}, "runtimePatches": patches}),
        ),
    )
    .await;
    let suspended = wait_condition(&client, &ns, "Suspended", op).await;
    let c = condition(&suspended, "Suspended").unwrap();
    assert_eq!(
        (&c["reason"], &c["message"]),
        (&json!("Suspended"), &json!("TrainJob is suspended"))
    );
    unsuspend(&client, &ns).await;
    let resumed = eventually("Suspended=False (Resumed)", TIMEOUT, || async {
        let t = trainjob(&client, &ns, ALPHA).await?;
        condition(&t, "Suspended")
            .filter(|c| c["status"] == "False")
            .cloned()
    })
    .await;
    assert_eq!(
        (&resumed["reason"], &resumed["message"]),
        (&json!("Resumed"), &json!("TrainJob is resumed"))
    );
    release(&client, &ns).await;
    let kind = if complete { "Complete" } else { "Failed" };
    let done = wait_condition(&client, &ns, kind, op).await;
    let js = jobset(&client, &ns, ALPHA).await;
    let js_kind = if complete { "Completed" } else { "Failed" };
    let jc = js_condition(&js, js_kind);
    let c = condition(&done, kind).unwrap();
    assert_eq!(c["reason"], jc["reason"], "reason copied: {c} / {jc}");
    assert_eq!(c["message"], jc["message"], "message copied: {c} / {jc}");
    if complete {
        assert_eq!(
            (&c["reason"], &c["message"]),
            (
                &json!("AllJobsCompleted"),
                &json!("jobset completed successfully")
            )
        );
    } else {
        // JobSet v0.12 names the first failed Job after upstream's words.
        assert_eq!(c["reason"], "FailedJobs");
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .starts_with("jobset failed due to one or more job failures"),
            "{c}"
        );
    }
    jobs_status_follows(&client, &ns, "finished", |js| {
        js["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == js_kind && c["status"] == "True")
        })
    })
    .await;
    // Ours: the condition goes once every pod was seen running (kwok may
    // finish them first); it never goes back to `True`.
    assert!(
        condition(&done, "Suspended")
            .is_none_or(|c| c["status"] == "False" && c["reason"] == "Resumed"),
        "{}",
        done["status"]
    );
}

fn rj_mut<'a>(rt: &'a mut Value, name: &str) -> &'a mut Value {
    rt["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|j| j["name"] == name)
        .unwrap()
}

/// A shipped runtime runs a TrainJob of two nodes to `Complete`
/// (upstream's e2e "… job reaches Complete").
async fn reaches_complete(runtime: &str) {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-e2e").await.unwrap();
    let tj = trainjob_object(&ns, ALPHA, runtime, json!({"trainer": {"numNodes": 2}}));
    apply(&client, &tj).await;
    let done = wait_condition(&client, &ns, "Complete", op).await;
    assert!(!is_true(&done, "Failed"), "{}", done["status"]);
    let js = jobset(&client, &ns, ALPHA).await;
    assert_eq!(jobs_status(&done), as_jobs_status(&js));
}

/// Upstream's "should not be reconciled by the built-in controller" /
/// "Should not reconcile TrainJob managed by an external controller": with
/// `managedBy: kueue.x-k8s.io/multikueue` nothing is built and the
/// conditions stay empty.
async fn left_to_its_manager(runtime: Option<&str>) {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-managed").await.unwrap();
    let tj = match runtime {
        Some(r) => trainjob_object(
            &ns,
            ALPHA,
            r,
            json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
        ),
        None => {
            apply(&client, &wrapper(Some(&ns), "plain", json!({}), true)).await;
            alpha(
                &ns,
                "plain",
                json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
            )
        }
    };
    apply(&client, &tj).await;
    let tj = never(&client, &ns, "Complete", Duration::from_secs(4)).await;
    assert!(tj["status"]["conditions"].is_null(), "{}", tj["status"]);
    for (api, kind, name) in [
        (JOBSET, "JobSet", ALPHA.to_owned()),
        ("v1", "ConfigMap", format!("{ALPHA}-runtime-snapshot")),
    ] {
        assert!(
            get(&client, api, kind, Some(&ns), &name).await.is_none(),
            "{kind} {name}"
        );
    }
}

/// Upstream's "a suspended TrainJob should use the original runtime
/// configuration and not pick up the new configuration" (e2e, for both
/// kinds) and "Should use the runtime snapshot during reconciliation rather
/// than the current runtime contents" (integration): the runtime's template
/// label changes while the TrainJob is suspended; resumed, the JobSet runs
/// with the original label and the snapshot is unchanged.
async fn keeps_the_original_runtime(cluster: bool) {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-snapshot").await.unwrap();
    let name = format!("pinned-{ns}");
    let mut rt = wrapper(
        (!cluster).then_some(ns.as_str()),
        &name,
        json!({"torch": {}}),
        true,
    );
    rt["spec"]["template"]["metadata"] = json!({"labels": {"version": "original"}});
    apply(&client, &rt).await;
    let mut tj = alpha(&ns, &name, json!({"suspend": true}));
    if cluster {
        tj["spec"]["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime");
    }
    apply(&client, &tj).await;
    assert_eq!(
        jobset(&client, &ns, ALPHA).await["metadata"]["labels"]["version"],
        "original"
    );
    let snap = |client: kube::Client, ns: String| async move {
        get(
            &client,
            "v1",
            "ConfigMap",
            Some(&ns),
            &format!("{ALPHA}-runtime-snapshot"),
        )
        .await
        .unwrap()["data"]["runtime"]
            .clone()
    };
    let before = snap(client.clone(), ns.clone()).await;
    rt["spec"]["template"]["metadata"] = json!({"labels": {"version": "new"}});
    apply(&client, &rt).await;
    unsuspend(&client, &ns).await;
    let js = eventually("JobSet resumed", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), ALPHA).await?;
        (js["spec"]["suspend"] == false).then_some(js)
    })
    .await;
    assert_eq!(
        js["metadata"]["labels"]["version"], "original",
        "{}",
        js["metadata"]
    );
    assert_eq!(
        snap(client.clone(), ns.clone()).await,
        before,
        "snapshot unchanged"
    );
    if cluster {
        delete(&client, TRAINER, "ClusterTrainingRuntime", None, &name).await;
    }
}

/// Upstream's snapshot scenarios: the snapshot ConfigMap has one controller
/// owner (blocking owner deletion), the key `runtime` and the runtime's
/// YAML naming its kind and name.
async fn snapshot_of(cluster: bool) {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-snap").await.unwrap();
    let name = format!("snap-{ns}");
    apply(
        &client,
        &wrapper((!cluster).then_some(ns.as_str()), &name, json!({}), true),
    )
    .await;
    let mut tj = alpha(&ns, &name, json!({"suspend": true}));
    let kind = if cluster {
        tj["spec"]["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime");
        "ClusterTrainingRuntime"
    } else {
        "TrainingRuntime"
    };
    apply(&client, &tj).await;
    let cm = eventually("runtime snapshot", TIMEOUT, || async {
        get(
            &client,
            "v1",
            "ConfigMap",
            Some(&ns),
            &format!("{ALPHA}-runtime-snapshot"),
        )
        .await
    })
    .await;
    let owners = cm["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let tj = trainjob(&client, &ns, ALPHA).await.unwrap();
    assert_eq!(owners[0]["uid"], tj["metadata"]["uid"]);
    assert_eq!(owners[0]["controller"], true);
    assert_eq!(owners[0]["blockOwnerDeletion"], true);
    let data = cm["data"].as_object().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["runtime"], "{data:?}");
    let yaml = data["runtime"].as_str().unwrap();
    assert!(
        yaml.contains(&format!("kind: {kind}")) && yaml.contains(&format!("name: {name}")),
        "{yaml}"
    );
    if cluster {
        delete(&client, TRAINER, "ClusterTrainingRuntime", None, &name).await;
    }
}

/// Upstream's runtime controller scenarios: a runtime can be deleted while
/// a TrainJob references it (no finalizer holds it; v2.1's finalizer is
/// gone), and the TrainJob keeps running on its snapshot.
async fn runtime_deleted_while_referenced(cluster: bool) {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-rtdel").await.unwrap();
    let name = format!("gone-{ns}");
    let rt = wrapper((!cluster).then_some(ns.as_str()), &name, json!({}), true);
    apply(&client, &rt).await;
    let mut tj = alpha(&ns, &name, json!({"suspend": true}));
    if cluster {
        tj["spec"]["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime");
    }
    apply(&client, &tj).await;
    jobset(&client, &ns, ALPHA).await;
    let (kind, rt_ns) = if cluster {
        ("ClusterTrainingRuntime", None)
    } else {
        ("TrainingRuntime", Some(ns.as_str()))
    };
    let stored = get(&client, TRAINER, kind, rt_ns, &name).await.unwrap();
    assert!(
        stored["metadata"]["finalizers"].is_null(),
        "no finalizer: {}",
        stored["metadata"]
    );
    delete(&client, TRAINER, kind, rt_ns, &name).await;
    eventually(&format!("{kind} {name} deleted"), TIMEOUT, || async {
        get(&client, TRAINER, kind, rt_ns, &name)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(trainjob(&client, &ns, ALPHA).await.is_some());
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), ALPHA)
            .await
            .is_some()
    );
}

// ================================================= §7.1 TrainJob controller

/// PlainML: "Should succeed to create TrainJob with TrainingRuntime".
#[tokio::test]
async fn plainml_should_succeed_to_create_trainjob_with_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-plainml").await.unwrap();
    let mut rt = wrapper(Some(&ns), "plain", json!({}), true);
    rt["spec"]["podGroupPolicy"] = json!({"coscheduling": {"scheduleTimeoutSeconds": 100}});
    apply(&client, &rt).await;
    let meta = json!({"labels": {"testingKey": "testingVal"}, "annotations": {"testingKey": "testingVal"}});
    apply(
        &client,
        &alpha(
            &ns,
            "plain",
            json!({"suspend": true,
                "initializer": {"dataset": {"storageUri": "hf://trainjob-dataset"},
                                "model": {"storageUri": "hf://trainjob-model"}},
                "runtimePatches": [{"manager": "test.io/manager",
                    "trainingRuntimeSpec": {"template": {"metadata": meta}}}]}),
        ),
    )
    .await;
    let js = jobset(&client, &ns, ALPHA).await;
    let tj = trainjob(&client, &ns, ALPHA).await.unwrap();
    let owner = &js["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"], &owner["controller"]),
        (&json!("TrainJob"), &tj["metadata"]["uid"], &json!(true))
    );
    assert_eq!(js["spec"]["suspend"], true);
    assert_eq!(js["metadata"]["labels"]["testingKey"], "testingVal");
    assert_eq!(js["metadata"]["annotations"]["testingKey"], "testingVal");
    for (job, count) in [
        ("dataset-initializer", 1),
        ("model-initializer", 1),
        ("node", 100),
    ] {
        let j = rj(&js, job);
        assert_eq!(j["replicas"], 1, "{job}");
        assert_eq!(j["template"]["spec"]["parallelism"], count, "{job}");
        assert_eq!(j["template"]["spec"]["completions"], count, "{job}");
        assert_eq!(
            j["template"]["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
            ALPHA,
            "{job}"
        );
    }
    for (job, uri) in [
        ("dataset-initializer", "hf://trainjob-dataset"),
        ("model-initializer", "hf://trainjob-model"),
    ] {
        let c = ctr(rj(&js, job), job);
        assert_eq!(c["image"], format!("docker.io/kubeflow/{job}"));
        assert_eq!(
            (&c["command"], &c["args"]),
            (&json!(["runtime"]), &json!(["runtime"]))
        );
        assert!(
            env_of(c).contains(&format!("STORAGE_URI={uri}")),
            "{job}: {:?}",
            env_of(c)
        );
    }
    let node = ctr(rj(&js, "node"), "node");
    assert_eq!(
        (&node["image"], &node["command"], &node["args"]),
        (
            &json!("test:trainjob"),
            &json!(["trainjob"]),
            &json!(["trainjob"])
        )
    );
    let pg = eventually("PodGroup", TIMEOUT, || async {
        get(&client, PODGROUP, "PodGroup", Some(&ns), ALPHA).await
    })
    .await;
    assert_eq!(pg["spec"]["minMember"], 102);
    assert_eq!(
        pg["spec"]["minResources"],
        json!({"cpu": "102", "memory": "408Gi"})
    );
    assert_eq!(pg["spec"]["scheduleTimeoutSeconds"], 100);
    assert_eq!(
        pg["metadata"]["ownerReferences"][0]["uid"],
        tj["metadata"]["uid"]
    );
    assert_eq!(pg["metadata"]["ownerReferences"][0]["controller"], true);
}

/// PlainML: "Should not reconcile TrainJob managed by an external controller".
#[tokio::test]
async fn plainml_should_not_reconcile_trainjob_managed_by_an_external_controller() {
    left_to_its_manager(None).await;
}

/// PlainML: "Should succeeded to update JobSet when TrainJob is suspended":
/// a runtime patch's `nodeSelector` edited while suspended reaches the
/// `node` pod template, the PodGroup stays as it was; `trainer.image`
/// cannot change (422 Invalid).
#[tokio::test]
async fn plainml_should_succeeded_to_update_jobset_when_trainjob_is_suspended() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-update").await.unwrap();
    let mut rt = wrapper(Some(&ns), "plain", json!({}), true);
    rt["spec"]["podGroupPolicy"] = json!({"coscheduling": {"scheduleTimeoutSeconds": 100}});
    apply(&client, &rt).await;
    let patch = |value: &str| {
        json!([node_patch(
            "test.io/manager",
            json!({}),
            json!({"nodeSelector": {"disktype": value}})
        )])
    };
    apply(
        &client,
        &alpha(
            &ns,
            "plain",
            json!({"suspend": true, "runtimePatches": patch("ssd")}),
        ),
    )
    .await;
    jobset(&client, &ns, ALPHA).await;
    let pg = eventually("PodGroup", TIMEOUT, || async {
        get(&client, PODGROUP, "PodGroup", Some(&ns), ALPHA).await
    })
    .await;
    let out = update_trainjob(&client, &ns, |t| t["spec"]["runtimePatches"] = patch("hdd")).await;
    assert!(out.ok(), "{out:?}");
    eventually("nodeSelector updated", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), ALPHA).await?;
        (pod_spec(rj(&js, "node"))["nodeSelector"] == json!({"disktype": "hdd"})).then_some(())
    })
    .await;
    let after = get(&client, PODGROUP, "PodGroup", Some(&ns), ALPHA)
        .await
        .unwrap();
    assert_eq!(after["spec"], pg["spec"], "the PodGroup is as before");
    let out = update_trainjob(&client, &ns, |t| {
        t["spec"]["trainer"]["image"] = json!("updated")
    })
    .await;
    assert_eq!(out.code, 422, "{out:?}");
    assert_eq!(out.object["reason"], "Invalid", "{out:?}");
}

/// PlainML: "Should propagate terminationGracePeriodSeconds from
/// RuntimePatches to JobSet pods".
#[tokio::test]
async fn plainml_should_propagate_termination_grace_period_seconds_from_runtimepatches_to_jobset_pods()
 {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-grace").await.unwrap();
    let patch = node_patch(
        "test.io/manager",
        json!({}),
        json!({"terminationGracePeriodSeconds": 300}),
    );
    let js = built(
        &client,
        &ns,
        wrapper(Some(&ns), "plain", json!({}), true),
        json!({"suspend": true, "runtimePatches": [patch]}),
    )
    .await;
    assert_eq!(
        pod_spec(rj(&js, "node"))["terminationGracePeriodSeconds"],
        300
    );
}

/// The torch env upstream expects on `node`, `TRAIN_JOB=value` first, then
/// ours after it: the framework-neutral `TRAINER_*` variables
/// (`docs/differences.md`).
fn torch_env(nodes: u32) -> Vec<String> {
    vec![
        "TRAIN_JOB=value".into(),
        format!("PET_NNODES={nodes}"),
        "PET_NPROC_PER_NODE=1".into(),
        format!("PET_NODE_RANK<-{COMPLETION_INDEX}"),
        "PET_MASTER_ADDR=alpha-node-0-0.alpha".into(),
        "PET_MASTER_PORT=29500".into(),
        format!("TRAINER_NNODES={nodes}"),
        "TRAINER_NPROC_PER_NODE=1".into(),
        "TRAINER_NODE_0_HOSTNAME=alpha-node-0-0.alpha".into(),
        "TRAINER_JOB_ID=alpha".into(),
    ]
}

fn assert_port(c: &Value, port: i64) {
    let ports = c["ports"]
        .as_array()
        .unwrap_or_else(|| panic!("no ports: {c}"));
    assert!(
        ports
            .iter()
            .any(|p| p["containerPort"] == port && p["protocol"].as_str().unwrap_or("TCP") == "TCP"),
        "{ports:?}"
    );
}

/// Torch: "Should succeed to create TrainJob with Torch TrainingRuntime".
#[tokio::test]
async fn torch_should_succeed_to_create_trainjob_with_torch_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-torch").await.unwrap();
    let js = built(
        &client,
        &ns,
        wrapper(Some(&ns), "torch", json!({"torch": {}}), true),
        json!({"suspend": true, "trainer": {"env": [{"name": "TRAIN_JOB", "value": "value"}]}}),
    )
    .await;
    let node = ctr(rj(&js, "node"), "node");
    assert_eq!(env_of(node), torch_env(100));
    assert_port(node, 29500);
}

/// Torch: "Should succeeded to reconcile TrainJob conditions with Complete condition".
#[tokio::test]
async fn torch_should_succeeded_to_reconcile_trainjob_conditions_with_complete_condition() {
    conditions_follow_the_jobset(wrapper(None, "torch", json!({"torch": {}}), false), true).await;
}

/// Torch: "Should succeeded to reconcile TrainJob conditions with Failed condition".
#[tokio::test]
async fn torch_should_succeeded_to_reconcile_trainjob_conditions_with_failed_condition() {
    conditions_follow_the_jobset(wrapper(None, "torch", json!({"torch": {}}), false), false).await;
}

/// Torch: "Should synchronize JobsStatus from JobSet ReplicatedJobsStatus":
/// successive JobSet states (suspended; resumed with its pods Pending;
/// finished) are reflected 1:1, driven by real pods instead of status
/// writes.
#[tokio::test]
async fn torch_should_synchronize_jobsstatus_from_jobset_replicatedjobsstatus() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-jobs").await.unwrap();
    apply(
        &client,
        &wrapper(Some(&ns), "torch", json!({"torch": {}}), false),
    )
    .await;
    apply(
        &client,
        &alpha(
            &ns,
            "torch",
            json!({"suspend": true, "trainer": {"numNodes": 2}, "runtimePatches": [hold(&ns)]}),
        ),
    )
    .await;
    let all = |js: &Value, k: &str, n: i64| {
        js["status"]["replicatedJobsStatus"]
            .as_array()
            .is_some_and(|a| a.len() == 3 && a.iter().all(|s| s[k].as_i64() == Some(n)))
    };
    let first = jobs_status_follows(&client, &ns, "suspended", |js| {
        js_has(js, "Suspended")
            && js["status"]["replicatedJobsStatus"]
                .as_array()
                .is_some_and(|a| a.len() == 3)
    })
    .await;
    unsuspend(&client, &ns).await;
    let second = jobs_status_follows(&client, &ns, "node active, Pending", |js| {
        js["status"]["replicatedJobsStatus"]
            .as_array()
            .is_some_and(|a| {
                a.iter().any(|s| {
                    s["name"] == "node"
                        && s["active"] == 1
                        && s["suspended"].as_i64().unwrap_or(0) == 0
                })
            })
    })
    .await;
    assert_ne!(first, second);
    release(&client, &ns).await;
    wait_condition(&client, &ns, "Complete", op).await;
    let third =
        jobs_status_follows(&client, &ns, "all succeeded", |js| all(js, "succeeded", 1)).await;
    assert_ne!(second, third);
}

/// Torch: "Should succeed to create TrainJob with RuntimePatches": pod
/// labels/annotations, `serviceAccountName`, an init container's env merged
/// by name, and the trainer env as in the Torch scenario.
#[tokio::test]
async fn torch_should_succeed_to_create_trainjob_with_runtimepatches() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-patches").await.unwrap();
    let mut rt = wrapper(Some(&ns), "torch", json!({"torch": {}}), true);
    pod_mut(&mut rt, "node")["initContainers"] = json!([{"name": "override-init-container",
        "image": "busybox", "env": [{"name": "INIT_ENV", "value": "runtime"},
                                    {"name": "DATASET_PATH", "value": "runtime"}]}]);
    apply(&client, &rt).await;
    let patch = node_patch(
        "test.io/manager",
        json!({"labels": {"custom-label": "override"}, "annotations": {"custom-annotation": "override"}}),
        json!({"serviceAccountName": "override-sa", "initContainers": [{"name": "override-init-container",
            "env": [{"name": "INIT_ENV", "value": "override_init"},
                    {"name": "NEW_VALUE", "value": "from_overrides"}]}]}),
    );
    apply(
        &client,
        &alpha(
            &ns,
            "torch",
            json!({"suspend": true, "runtimePatches": [patch],
                "trainer": {"env": [{"name": "TRAIN_JOB", "value": "value"}]}}),
        ),
    )
    .await;
    let js = jobset(&client, &ns, ALPHA).await;
    let node = rj(&js, "node");
    let meta = &node["template"]["spec"]["template"]["metadata"];
    assert_eq!(meta["labels"]["custom-label"], "override", "{meta}");
    assert_eq!(
        meta["annotations"]["custom-annotation"], "override",
        "{meta}"
    );
    assert_eq!(pod_spec(node)["serviceAccountName"], "override-sa");
    let mut init = env_of(ctr(node, "override-init-container"));
    init.sort();
    assert_eq!(
        init,
        [
            "DATASET_PATH=runtime",
            "INIT_ENV=override_init",
            "NEW_VALUE=from_overrides"
        ],
        "merged by name, the patch's value winning"
    );
    assert_eq!(env_of(ctr(node, "node")), torch_env(100));
}

fn pod_mut<'a>(rt: &'a mut Value, job: &str) -> &'a mut Value {
    &mut rj_mut(rt, job)["template"]["spec"]["template"]["spec"]
}

/// OpenMPI: "Should succeed to create TrainJob with OpenMPI TrainingRuntime":
/// the ssh and hostfile volumes, mounts and OpenMPI env on `launcher` and
/// `node`, `node` parallelism 2, the hostfile, and the immutable ssh Secret.
#[tokio::test]
async fn openmpi_should_succeed_to_create_trainjob_with_openmpi_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-mpi").await.unwrap();
    let js = built(
        &client,
        &ns,
        mpi_runtime(Some(&ns), "mpi", true),
        json!({"suspend": true, "trainer": {"numNodes": 2}}),
    )
    .await;
    let ssh = json!({"name": "mpi-ssh-auth", "secret": {"secretName": "alpha-mpi-ssh-auth", "defaultMode": 256,
        "items": [{"key": "ssh-privatekey", "path": "id_rsa", "mode": 416},
                  {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 420},
                  {"key": "ssh-publickey", "path": "authorized_keys", "mode": 420}]}});
    let node = rj(&js, "node");
    assert_eq!(node["template"]["spec"]["parallelism"], 2);
    assert_eq!(volume(node, "mpi-ssh-auth"), &ssh);
    assert!(mounts(ctr(node, "node")).contains(&"mpi-ssh-auth:/root/.ssh".to_owned()));
    let launcher = rj(&js, "launcher");
    assert_eq!(volume(launcher, "mpi-ssh-auth"), &ssh);
    assert_eq!(
        volume(launcher, "mpi-hostfile"),
        &json!({"name": "mpi-hostfile", "configMap": {"name": "alpha-mpi-hostfile",
            "items": [{"key": "hostfile", "path": "hostfile", "mode": 292}]}})
    );
    let lc = ctr(launcher, "node");
    let m = mounts(lc);
    assert!(
        m.contains(&"mpi-ssh-auth:/root/.ssh".to_owned())
            && m.contains(&"mpi-hostfile:/etc/mpi".to_owned()),
        "{m:?}"
    );
    let e = env_of(lc);
    for want in [
        "OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames=true",
        "OMPI_MCA_orte_set_default_slots=8",
        "OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10",
    ] {
        assert!(e.contains(&want.to_owned()), "{want} in {e:?}");
    }
    let hostfile = get(&client, "v1", "ConfigMap", Some(&ns), "alpha-mpi-hostfile")
        .await
        .unwrap();
    assert_eq!(
        hostfile["data"]["hostfile"],
        "alpha-node-0-0.alpha slots=8\nalpha-node-0-1.alpha slots=8\n"
    );
    let secret = get(&client, "v1", "Secret", Some(&ns), "alpha-mpi-ssh-auth")
        .await
        .unwrap();
    assert_eq!(secret["immutable"], true);
    assert_eq!(secret["type"], "kubernetes.io/ssh-auth");
    let mut keys: Vec<&String> = secret["data"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["ssh-privatekey", "ssh-publickey"]);
    let tj = trainjob(&client, &ns, ALPHA).await.unwrap();
    for o in [&hostfile, &secret] {
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["uid"], tj["metadata"]["uid"],
            "{o}"
        );
    }
}

/// OpenMPI: "Should succeeded to reconcile TrainJob conditions with Complete condition".
#[tokio::test]
async fn openmpi_should_succeeded_to_reconcile_trainjob_conditions_with_complete_condition() {
    conditions_follow_the_jobset(mpi_runtime(None, "mpi", false), true).await;
}

/// OpenMPI: "Should succeeded to reconcile TrainJob conditions with Failed condition".
#[tokio::test]
async fn openmpi_should_succeeded_to_reconcile_trainjob_conditions_with_failed_condition() {
    conditions_follow_the_jobset(mpi_runtime(None, "mpi", false), false).await;
}

/// A TrainJob of `mock-mpi` with `activeDeadlineSeconds`, pods running long.
fn deadline_job(ns: &str, seconds: u32, suspend: bool) -> Value {
    let mut tj = alpha(
        ns,
        MOCK_MPI,
        json!({"activeDeadlineSeconds": seconds, "suspend": suspend, "trainer": {"numNodes": 1},
            "runtimePatches": [long_running()]}),
    );
    tj["spec"]["runtimeRef"]["kind"] = json!("ClusterTrainingRuntime");
    tj
}

async fn failed_by_deadline_and_jobset_deleted(client: &kube::Client, ns: &str, op: &Operator) {
    let failed = wait_condition(client, ns, "Failed", op).await;
    assert_eq!(
        condition(&failed, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    eventually("JobSet deleted", TIMEOUT, || async {
        get(client, JOBSET, "JobSet", Some(ns), ALPHA)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// Timeouts: "Should fail TrainJob with DeadlineExceeded when ActiveDeadlineSeconds expires".
#[tokio::test]
async fn timeouts_should_fail_trainjob_with_deadlineexceeded_when_activedeadlineseconds_expires() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-deadline").await.unwrap();
    apply(&client, &deadline_job(&ns, 1, false)).await;
    failed_by_deadline_and_jobset_deleted(&client, &ns, op).await;
}

/// Timeouts: "Should not fail TrainJob if ActiveDeadlineSeconds is not exceeded".
#[tokio::test]
async fn timeouts_should_not_fail_trainjob_if_activedeadlineseconds_is_not_exceeded() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-nodeadline").await.unwrap();
    apply(&client, &deadline_job(&ns, 3600, false)).await;
    let js = jobset(&client, &ns, ALPHA).await;
    assert_eq!(js["spec"]["suspend"], false);
    never(&client, &ns, "Failed", Duration::from_secs(4)).await;
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), ALPHA)
            .await
            .is_some()
    );
}

/// Timeouts: "Should not start deadline timer if TrainJob is suspended".
#[tokio::test]
async fn timeouts_should_not_start_deadline_timer_if_trainjob_is_suspended() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-susdeadline").await.unwrap();
    apply(&client, &deadline_job(&ns, 1, true)).await;
    jobset(&client, &ns, ALPHA).await;
    never(&client, &ns, "Failed", Duration::from_secs(4)).await;
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), ALPHA)
            .await
            .is_some()
    );
}

/// Timeouts: "Should reset deadline timer upon resume": suspended past its
/// 2 s deadline, then resumed, the TrainJob fails no sooner than 2 s after
/// the resume, and its JobSet is deleted.
#[tokio::test]
async fn timeouts_should_reset_deadline_timer_upon_resume() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-resetdeadline").await.unwrap();
    apply(&client, &deadline_job(&ns, 2, true)).await;
    jobset(&client, &ns, ALPHA).await;
    never(&client, &ns, "Failed", Duration::from_secs(3)).await;
    let resumed = Instant::now();
    unsuspend(&client, &ns).await;
    failed_by_deadline_and_jobset_deleted(&client, &ns, op).await;
    assert!(
        resumed.elapsed() >= Duration::from_millis(1900),
        "failed {:?} after the resume",
        resumed.elapsed()
    );
}

/// JAX: "Should succeed to create TrainJob with JAX TrainingRuntime".
#[tokio::test]
async fn jax_should_succeed_to_create_trainjob_with_jax_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-jax").await.unwrap();
    let js = built(
        &client,
        &ns,
        wrapper(Some(&ns), "jax", json!({"jax": {}}), true),
        json!({"suspend": true, "trainer": {"numNodes": 2}}),
    )
    .await;
    let node = ctr(rj(&js, "node"), "node");
    assert_eq!(
        env_of(node),
        [
            "JAX_NUM_PROCESSES=2".to_owned(),
            format!("JAX_PROCESS_ID<-{COMPLETION_INDEX}"),
            "JAX_COORDINATOR_ADDRESS=alpha-node-0-0.alpha:29500".to_owned(),
        ]
    );
    assert_port(node, 29500);
}

/// JAX: "Should succeeded to reconcile TrainJob conditions with Complete condition".
#[tokio::test]
async fn jax_should_succeeded_to_reconcile_trainjob_conditions_with_complete_condition() {
    conditions_follow_the_jobset(wrapper(None, "jax", json!({"jax": {}}), false), true).await;
}

/// JAX: "Should succeeded to reconcile TrainJob conditions with Failed condition".
#[tokio::test]
async fn jax_should_succeeded_to_reconcile_trainjob_conditions_with_failed_condition() {
    conditions_follow_the_jobset(wrapper(None, "jax", json!({"jax": {}}), false), false).await;
}

/// XGBoost: "Should succeed to create TrainJob with XGBoost TrainingRuntime" (CPU only).
#[tokio::test]
async fn xgboost_should_succeed_to_create_trainjob_with_xgboost_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-xgb").await.unwrap();
    let js = built(
        &client,
        &ns,
        wrapper(Some(&ns), "xgb", json!({"xgboost": {}}), true),
        json!({"suspend": true, "trainer": {"numNodes": 2}}),
    )
    .await;
    let node = ctr(rj(&js, "node"), "node");
    let e = env_of(node);
    for want in [
        "DMLC_TRACKER_URI=alpha-node-0-0.alpha".to_owned(),
        "DMLC_TRACKER_PORT=29500".to_owned(),
        format!("DMLC_TASK_ID<-{COMPLETION_INDEX}"),
        "DMLC_NUM_WORKER=2".to_owned(),
    ] {
        assert!(e.contains(&want), "{want} in {e:?}");
    }
    assert_port(node, 29500);
}

/// XGBoost: "Should succeeded to reconcile TrainJob conditions with Complete condition".
#[tokio::test]
async fn xgboost_should_succeeded_to_reconcile_trainjob_conditions_with_complete_condition() {
    conditions_follow_the_jobset(wrapper(None, "xgb", json!({"xgboost": {}}), false), true).await;
}

/// XGBoost: "Should succeeded to reconcile TrainJob conditions with Failed condition".
#[tokio::test]
async fn xgboost_should_succeeded_to_reconcile_trainjob_conditions_with_failed_condition() {
    conditions_follow_the_jobset(wrapper(None, "xgb", json!({"xgboost": {}}), false), false).await;
}

/// Upstream's Flux runtime: the wrapper with `numNodes` 2 and
/// `flux.numProcPerNode` 1.
fn flux_runtime(ns: Option<&str>, volumes: bool) -> Value {
    let mut rt = wrapper(ns, "flux", json!({"flux": {"numProcPerNode": 1}}), volumes);
    rt["spec"]["mlPolicy"]["numNodes"] = json!(2);
    rt
}

/// Flux: "Should succeed to create TrainJob with Flux TrainingRuntime": the
/// installer init container, the five volumes and mounts, the wrapped
/// command, the scripts ConfigMap and the CURVE certificate Secret.
#[tokio::test]
async fn flux_should_succeed_to_create_trainjob_with_flux_trainingruntime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-flux").await.unwrap();
    // Upstream's Flux needs `trainer.numNodes` (it dereferences it
    // unchecked); without it ours says so (`Blocked`, `PluginFailed`).
    let js = built(
        &client,
        &ns,
        flux_runtime(Some(&ns), true),
        json!({"suspend": true, "trainer": {"numNodes": 2}}),
    )
    .await;
    assert_eq!(js["spec"]["replicatedJobs"].as_array().unwrap().len(), 3);
    let node = rj(&js, "node");
    assert_eq!(node["replicas"], 1);
    assert_eq!(node["template"]["spec"]["parallelism"], 2);
    assert_eq!(node["template"]["spec"]["completions"], 2);
    let installer = ctr(node, "flux-installer");
    assert!(installer["image"].is_string(), "{installer}");
    assert_eq!(
        installer["command"],
        json!(["/bin/bash", "/etc/flux-config/init.sh"])
    );
    assert_eq!(mounts(installer).len(), 2, "{installer}");
    for v in [
        "spack-install",
        "flux-install",
        "shared-memory",
        "alpha-flux-entrypoint",
        "flux-curve",
    ] {
        volume(node, v);
    }
    assert_eq!(
        volume(node, "shared-memory")["emptyDir"]["medium"],
        "Memory"
    );
    assert_eq!(
        volume(node, "alpha-flux-entrypoint")["configMap"]["name"],
        "alpha-flux-entrypoint"
    );
    assert_eq!(
        volume(node, "flux-curve")["secret"]["secretName"],
        "alpha-flux-curve"
    );
    let c = ctr(node, "node");
    assert_eq!(c["image"], "test:trainjob");
    assert_eq!(
        c["command"],
        json!([
            "/bin/bash",
            "/etc/flux-config/entrypoint.sh",
            "trainjob trainjob"
        ])
    );
    // The TrainJob's args are in the command; the runtime's stay, as
    // upstream's builder leaves them.
    assert_eq!(c["args"], json!(["runtime"]), "{c}");
    let m = mounts(c);
    for want in [
        "flux-install:/mnt/flux",
        "spack-install:/opt/software",
        "alpha-flux-entrypoint:/etc/flux-config",
        "flux-curve:/curve",
        "shared-memory:/dev/shm",
    ] {
        assert!(m.contains(&want.to_owned()), "{want} in {m:?}");
    }
    let scripts = get(
        &client,
        "v1",
        "ConfigMap",
        Some(&ns),
        "alpha-flux-entrypoint",
    )
    .await
    .unwrap();
    let mut keys: Vec<&String> = scripts["data"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["entrypoint.sh", "init.sh"]);
    let curve = get(&client, "v1", "Secret", Some(&ns), "alpha-flux-curve")
        .await
        .unwrap();
    let cert = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        curve["data"]["curve.cert"].as_str().unwrap(),
    )
    .unwrap();
    let cert = String::from_utf8(cert).unwrap();
    assert!(
        cert.contains("public-key") && cert.contains("secret-key"),
        "{cert}"
    );
}

/// Flux: "Should succeeded to reconcile TrainJob conditions with Complete condition".
#[tokio::test]
async fn flux_should_succeeded_to_reconcile_trainjob_conditions_with_complete_condition() {
    conditions_follow_the_jobset(flux_runtime(None, false), true).await;
}

/// Flux: "Should succeeded to reconcile TrainJob conditions with Failed condition".
#[tokio::test]
async fn flux_should_succeeded_to_reconcile_trainjob_conditions_with_failed_condition() {
    conditions_follow_the_jobset(flux_runtime(None, false), false).await;
}

/// Snapshots: the snapshot ConfigMap of a TrainJob of a TrainingRuntime.
#[tokio::test]
async fn snapshot_should_create_the_runtime_snapshot_for_trainingruntime() {
    snapshot_of(false).await;
}

/// Snapshots: the snapshot ConfigMap of a TrainJob of a ClusterTrainingRuntime.
#[tokio::test]
async fn snapshot_should_create_the_runtime_snapshot_for_clustertrainingruntime() {
    snapshot_of(true).await;
}

/// Snapshots: "Should use the runtime snapshot during reconciliation rather
/// than the current runtime contents".
#[tokio::test]
async fn snapshot_should_use_the_runtime_snapshot_during_reconciliation_rather_than_the_current_runtime_contents()
 {
    keeps_the_original_runtime(false).await;
}

/// Snapshots: "Should create snapshots for existing TrainJobs that were
/// created before the snapshot feature was added": the snapshot deleted,
/// the next reconcile creates it again, with the same runtime.
#[tokio::test]
async fn snapshot_should_create_snapshots_for_existing_trainjobs_that_were_created_before_the_snapshot_feature_was_added()
 {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-resnap").await.unwrap();
    apply(&client, &wrapper(Some(&ns), "plain", json!({}), true)).await;
    apply(&client, &alpha(&ns, "plain", json!({"suspend": true}))).await;
    let snap = format!("{ALPHA}-runtime-snapshot");
    let first = eventually("snapshot", TIMEOUT, || async {
        get(&client, "v1", "ConfigMap", Some(&ns), &snap).await
    })
    .await;
    delete(&client, "v1", "ConfigMap", Some(&ns), &snap).await;
    // A reconcile: the TrainJob changes (a label; no spec change).
    let out = update_trainjob(&client, &ns, |t| {
        t["metadata"]["labels"] = json!({"touched": "yes"})
    })
    .await;
    assert!(out.ok(), "{out:?}");
    let again = eventually("snapshot re-created", TIMEOUT, || async {
        get(&client, "v1", "ConfigMap", Some(&ns), &snap)
            .await
            .filter(|c| c["metadata"]["uid"] != first["metadata"]["uid"])
    })
    .await;
    assert_eq!(again["data"], first["data"]);
}

/// Runtime controllers: "TrainingRuntime can be deleted while referenced by a TrainJob".
#[tokio::test]
async fn trainingruntime_can_be_deleted_while_referenced_by_a_trainjob() {
    runtime_deleted_while_referenced(false).await;
}

/// Runtime controllers: "ClusterTrainingRuntime can be deleted while referenced by a TrainJob".
#[tokio::test]
async fn clustertrainingruntime_can_be_deleted_while_referenced_by_a_trainjob() {
    runtime_deleted_while_referenced(true).await;
}

// ================================================= §7.4 end to end

/// e2e: "PyTorch job reaches Complete" (`torch-distributed`).
#[tokio::test]
async fn e2e_pytorch_job_reaches_complete() {
    reaches_complete("torch-distributed").await;
}

/// e2e: "DeepSpeed job reaches Complete" (`deepspeed-distributed`, OpenMPI).
#[tokio::test]
async fn e2e_deepspeed_job_reaches_complete() {
    reaches_complete("deepspeed-distributed").await;
}

/// e2e: "JAX job reaches Complete" (`jax-distributed`).
#[tokio::test]
async fn e2e_jax_job_reaches_complete() {
    reaches_complete("jax-distributed").await;
}

/// e2e: "XGBoost job reaches Complete" (`xgboost-distributed`).
#[tokio::test]
async fn e2e_xgboost_job_reaches_complete() {
    reaches_complete("xgboost-distributed").await;
}

/// Every shipped runtime runs to `Complete` (the reading of
/// upstream's e2e, which runs five of them): MLX.
#[tokio::test]
async fn e2e_mlx_job_reaches_complete() {
    reaches_complete("mlx-distributed").await;
}

/// A shipped torchtune runtime runs its TrainJob to `Complete`: the
/// dataset and model initializers, then the trainer once both completed
/// (`dependsOn`). Their JobSet's `volumeClaimPolicies` claim 20Gi
/// (`initializer-<jobset>`); no provisioner runs here, so the test makes
/// the volume the claim binds to (the persistent volume binder runs).
async fn torchtune_reaches_complete(runtime: &str) {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-torchtune").await.unwrap();
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("initializer-{ns}")},
            "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "", "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"namespace": ns, "name": format!("initializer-{ALPHA}")},
                "hostPath": {"path": format!("/tmp/{ns}")}}}),
    )
    .await;
    apply(&client, &trainjob_object(&ns, ALPHA, runtime, json!({}))).await;
    let done = wait_condition(&client, &ns, "Complete", op).await;
    let js = jobset(&client, &ns, ALPHA).await;
    assert_eq!(jobs_status(&done), as_jobs_status(&js));
    let names: Vec<&str> = js["status"]["replicatedJobsStatus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["succeeded"] == 1)
        .filter_map(|s| s["name"].as_str())
        .collect();
    for job in ["dataset-initializer", "model-initializer", "node"] {
        assert!(names.contains(&job), "{job} succeeded: {}", js["status"]);
    }
    let pvc = get(
        &client,
        "v1",
        "PersistentVolumeClaim",
        Some(&ns),
        &format!("initializer-{ALPHA}"),
    )
    .await
    .unwrap();
    assert_eq!(pvc["spec"]["volumeName"], format!("initializer-{ns}"));
    delete(
        &client,
        "v1",
        "PersistentVolume",
        None,
        &format!("initializer-{ns}"),
    )
    .await;
}

/// Every shipped runtime runs to `Complete`: `torchtune-llama3.2-1b`.
#[tokio::test]
async fn e2e_torchtune_llama3_2_1b_job_reaches_complete() {
    torchtune_reaches_complete("torchtune-llama3.2-1b").await;
}

/// Every shipped runtime runs to `Complete`: `torchtune-llama3.2-3b`.
#[tokio::test]
async fn e2e_torchtune_llama3_2_3b_job_reaches_complete() {
    torchtune_reaches_complete("torchtune-llama3.2-3b").await;
}

/// Every shipped runtime runs to `Complete`: `torchtune-qwen2.5-1.5b`.
#[tokio::test]
async fn e2e_torchtune_qwen2_5_1_5b_job_reaches_complete() {
    torchtune_reaches_complete("torchtune-qwen2.5-1.5b").await;
}

/// e2e: "Flux job reaches Complete": upstream ships no Flux runtime, only
/// examples; ours, `examples/clustertrainingruntime-flux.yaml` and
/// `examples/trainjob-flux.yaml` (the demo's), applied as written.
#[tokio::test]
async fn e2e_flux_job_reaches_complete() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-e2e-flux").await.unwrap();
    for d in docs(
        &root().join("examples/clustertrainingruntime-flux.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    let mut tj = docs(&root().join("examples/trainjob-flux.yaml"), Some(&ns)).remove(0);
    tj["metadata"]["name"] = json!(ALPHA);
    apply(&client, &tj).await;
    let done = wait_condition(&client, &ns, "Complete", op).await;
    let js = jobset(&client, &ns, ALPHA).await;
    assert_eq!(jobs_status(&done), as_jobs_status(&js));
    let node = rj(&js, "node");
    assert_eq!(node["template"]["spec"]["parallelism"], 2);
    assert_eq!(
        ctr(node, "flux-installer")["command"],
        json!(["/bin/bash", "/etc/flux-config/init.sh"])
    );
    assert_eq!(
        ctr(node, "node")["command"][1],
        "/etc/flux-config/entrypoint.sh",
        "the example's command runs through Flux"
    );
}

/// e2e RuntimePatches: "should preserve user-provided manager fields".
#[tokio::test]
async fn e2e_runtimepatches_should_preserve_user_provided_manager_fields() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-managers").await.unwrap();
    let managers = ["kueue.x-k8s.io/manager", "example.com/tool"];
    let patches: Vec<Value> = managers
        .iter()
        .map(|m| node_patch(m, json!({"labels": {"by": "user"}}), json!({})))
        .collect();
    let tj = trainjob_object(
        &ns,
        ALPHA,
        "torch-distributed",
        json!({"suspend": true, "runtimePatches": patches}),
    );
    let out = create(&client, &tj, false).await;
    assert!(out.ok(), "{out:?}");
    let stored = trainjob(&client, &ns, ALPHA).await.unwrap();
    let got: Vec<&str> = stored["spec"]["runtimePatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["manager"].as_str().unwrap())
        .collect();
    assert_eq!(got, managers);
}

/// e2e RuntimePatches: "should update Time only for the changed patch on update".
#[tokio::test]
async fn e2e_runtimepatches_should_update_time_only_for_the_changed_patch_on_update() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-time").await.unwrap();
    let patch = |m: &str, v: &str| node_patch(m, json!({"labels": {"value": v}}), json!({}));
    let tj = trainjob_object(
        &ns,
        ALPHA,
        "torch-distributed",
        json!({"suspend": true, "runtimePatches": [patch("a.example.com/one", "1"), patch("b.example.com/two", "1")]}),
    );
    assert!(create(&client, &tj, false).await.ok());
    let times = |t: &Value| -> Vec<String> {
        t["spec"]["runtimePatches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                p["time"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no time: {p}"))
                    .to_owned()
            })
            .collect()
    };
    let before = times(&trainjob(&client, &ns, ALPHA).await.unwrap());
    // Times are to the second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let out = update_trainjob(&client, &ns, |t| {
        t["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            [0]["template"]["spec"]["template"]["metadata"]["labels"]["value"] = json!("2");
    })
    .await;
    assert!(out.ok(), "{out:?}");
    let after = times(&out.object);
    assert_eq!(after[0], before[0], "the unchanged patch keeps its time");
    assert!(
        after[1] > before[1],
        "the changed patch's time moves: {before:?} → {after:?}"
    );
}

/// e2e: "should not be reconciled by the built-in controller".
#[tokio::test]
async fn e2e_should_not_be_reconciled_by_the_built_in_controller() {
    left_to_its_manager(Some("torch-distributed")).await;
}

/// e2e: "should fail the TrainJob with DeadlineExceeded when active timeout expires".
#[tokio::test]
async fn e2e_should_fail_the_trainjob_with_deadlineexceeded_when_active_timeout_expires() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("conf-e2e-deadline").await.unwrap();
    let tj = trainjob_object(
        &ns,
        ALPHA,
        "torch-distributed",
        json!({"activeDeadlineSeconds": 2, "runtimePatches": [long_running()]}),
    );
    apply(&client, &tj).await;
    failed_by_deadline_and_jobset_deleted(&client, &ns, op).await;
}

/// e2e: "a suspended TrainJob should use the original runtime configuration
/// and not pick up the new configuration" (TrainingRuntime).
#[tokio::test]
async fn e2e_a_suspended_trainjob_should_use_the_original_trainingruntime_configuration() {
    keeps_the_original_runtime(false).await;
}

/// e2e: "a suspended TrainJob should use the original runtime configuration
/// and not pick up the new configuration" (ClusterTrainingRuntime).
#[tokio::test]
async fn e2e_a_suspended_trainjob_should_use_the_original_clustertrainingruntime_configuration() {
    keeps_the_original_runtime(true).await;
}
