//! The operator end to end on the full control plane (etcd, kube-apiserver,
//! controller-manager, scheduler, JobSet, kwok): one `trainforge operator`
//! process serves every test of this file, each in its own namespace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::OnceLock;
use std::time::Duration;

use crate::operator_common::*;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use trainforge_testenv::{FAIL_POD_LABEL, Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(180);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";

/// The environment and the operator, started once; plugins and shipped
/// runtimes installed.
async fn setup() -> Option<(&'static TestEnv, &'static Operator, kube::Client)> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    static OP: OnceLock<Operator> = OnceLock::new();
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let client = env.client().await.unwrap();
    INSTALLED
        .get_or_init(|| async {
            apply_default_plugins(&client).await;
            for f in ["torch-distributed.yaml", "deepspeed-distributed.yaml"] {
                for d in docs(&root().join("api/tests/fixtures/upstream").join(f), None) {
                    apply(&client, &d).await;
                }
            }
        })
        .await;
    let op = OP.get_or_init(|| {
        Operator::start(
            env,
            "operator-e2e",
            &[
                "--resync-seconds",
                "30",
                "--feature-gates",
                "TrainJobFailurePolicy=true",
            ],
        )
    });
    op.wait_ready().await;
    Some((env, op, client))
}

/// runtimePatches adding pod labels/annotations to the `node` job.
fn node_pod_patch(labels: Value, annotations: Value) -> Value {
    json!([{ "manager": "e2e.example.com/test", "trainingRuntimeSpec": { "template": { "spec": { "replicatedJobs": [
        { "name": "node", "template": { "spec": { "template": { "metadata": {
            "labels": labels, "annotations": annotations } } } } }
    ] } } } }])
}

/// Pods that keep running (kwok fails them only after 10 minutes).
fn long_running() -> Value {
    node_pod_patch(
        json!({ FAIL_POD_LABEL: "true" }),
        json!({ format!("{FAIL_POD_LABEL}/delay"): "600s", format!("{FAIL_POD_LABEL}/jitter-delay"): "600s" }),
    )
}

async fn wait_condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    kind: &str,
    op: &Operator,
) -> Value {
    let start = std::time::Instant::now();
    loop {
        let tj = trainjob(client, ns, name).await;
        if let Some(tj) = tj.as_ref().filter(|t| is_true(t, kind)) {
            return tj.clone();
        }
        if start.elapsed() > TIMEOUT {
            panic!(
                "TrainJob {ns}/{name} not {kind} after {TIMEOUT:?}; status: {:?}\noperator log:\n{}",
                tj.and_then(|t| t.get("status").cloned()),
                op.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn torch_trainjob_runs_to_complete_with_jobs_status() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-complete").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "llm",
        "torch-distributed",
        json!({"trainer": {"numNodes": 2}}),
    );
    apply(&client, &tj).await;
    let done = wait_condition(&client, &ns, "llm", "Complete", op).await;
    let c = condition(&done, "Complete").unwrap();
    assert_eq!(c["reason"], "AllJobsCompleted", "{c}");
    // Start and completion times: completion is the Complete condition's
    // time; the start is not after it (RFC 3339 UTC strings order as times).
    let (start, completion) = (
        done["status"]["startTime"].as_str().unwrap(),
        done["status"]["completionTime"].as_str().unwrap(),
    );
    assert_eq!(completion, c["lastTransitionTime"]);
    assert!(start <= completion, "{start} > {completion}");
    assert!(
        start >= done["metadata"]["creationTimestamp"].as_str().unwrap(),
        "{start}"
    );
    let jobs = done
        .pointer("/status/jobsStatus")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["name"], "node");
    assert_eq!(
        jobs[0]["succeeded"], 1,
        "one Job of the node replicated job succeeded: {jobs:?}"
    );

    let js = get(&client, JOBSET, "JobSet", Some(&ns), "llm")
        .await
        .unwrap();
    let owner = &js["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "TrainJob");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["uid"], done["metadata"]["uid"]);
    let managers: Vec<&str> = js["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"trainer"),
        "field manager trainer: {managers:?}"
    );
    let env_names: Vec<&str> = js
        .pointer("/spec/replicatedJobs/0/template/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for want in [
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
    ] {
        assert!(env_names.contains(&want), "{want} in {env_names:?}");
    }
    let snap = get(
        &client,
        "v1",
        "ConfigMap",
        Some(&ns),
        "llm-runtime-snapshot",
    )
    .await
    .unwrap();
    let yaml = snap["data"]["runtime"].as_str().unwrap();
    assert!(
        yaml.contains("kind: ClusterTrainingRuntime") && yaml.contains("name: torch-distributed"),
        "{yaml}"
    );
}

#[tokio::test]
async fn failing_pod_fails_the_trainjob_with_the_jobset_reason() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-fail").await.unwrap();
    // No pod retries, so the Job (and the JobSet) fails with the first pod.
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "no-retries", "namespace": ns});
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] =
        json!(0);
    apply(&client, &runtime).await;
    let tj = trainjob_object(
        &ns,
        "bad",
        "no-retries",
        json!({"runtimeRef": {"name": "no-retries", "kind": "TrainingRuntime"},
               "runtimePatches": node_pod_patch(json!({ FAIL_POD_LABEL: "true" }), json!({}))}),
    );
    apply(&client, &tj).await;
    let failed = wait_condition(&client, &ns, "bad", "Failed", op).await;
    assert!(
        failed["status"]["completionTime"].is_null(),
        "a failed TrainJob has no completionTime, as a failed Job: {}",
        failed["status"]
    );
    let c = condition(&failed, "Failed").unwrap();
    let js = get(&client, JOBSET, "JobSet", Some(&ns), "bad")
        .await
        .unwrap();
    let js_failed = js["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap();
    assert_eq!(
        c["reason"], js_failed["reason"],
        "reason copied from the JobSet"
    );
    assert_eq!(c["message"], js_failed["message"]);
    assert!(!is_true(&failed, "Complete"));
}

/// Suspend and resume, as Kueue does: `Suspended=True/Suspended`, then
/// `Suspended=False/Resumed` (and its Event) until the pods all run again,
/// when the condition goes, so the SDK reads the job as `Running` (it does
/// only for a job without conditions; upstream #3666).
#[tokio::test]
async fn suspend_and_resume_are_followed_by_the_jobset() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-suspend").await.unwrap();
    let mut tj = trainjob_object(
        &ns,
        "pause",
        "torch-distributed",
        json!({"suspend": true, "runtimePatches": long_running()}),
    );
    apply(&client, &tj).await;
    let suspended = wait_condition(&client, &ns, "pause", "Suspended", op).await;
    assert_eq!(
        condition(&suspended, "Suspended").unwrap()["reason"],
        "Suspended"
    );
    assert!(
        suspended["status"]["startTime"].is_null(),
        "created suspended: not started ({})",
        suspended["status"]
    );
    let js = eventually("suspended JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "pause").await
    })
    .await;
    assert_eq!(js["spec"]["suspend"], true);

    tj["spec"]["suspend"] = json!(false);
    apply(&client, &tj).await;
    eventually("JobSet resumed", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), "pause").await?;
        (js["spec"]["suspend"] == false).then_some(())
    })
    .await;
    let running = eventually("pods running, no condition left", TIMEOUT, || async {
        let t = trainjob(&client, &ns, "pause").await?;
        let ready: i64 = t["status"]["jobsStatus"]
            .as_array()?
            .iter()
            .filter_map(|j| j["ready"].as_i64())
            .sum();
        (ready > 0 && t["status"].get("conditions").is_none()).then_some(t)
    })
    .await;
    assert!(!is_true(&running, "Suspended"), "{}", running["status"]);
    let first_start = running["status"]["startTime"].as_str().unwrap().to_owned();
    // Suspended and resumed again: the start moves to when it runs again.
    tj["spec"]["suspend"] = json!(true);
    apply(&client, &tj).await;
    wait_condition(&client, &ns, "pause", "Suspended", op).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    tj["spec"]["suspend"] = json!(false);
    apply(&client, &tj).await;
    let restarted = eventually(
        "a later startTime after the second resume",
        TIMEOUT,
        || async {
            let t = trainjob(&client, &ns, "pause").await?;
            let start = t["status"]["startTime"].as_str()?.to_owned();
            (start > first_start).then_some(t)
        },
    )
    .await;
    assert!(restarted["status"]["completionTime"].is_null());
    // The resume is on record: its Event, written before the condition.
    let events = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns)
        .list(&kube::api::ListParams::default().fields("involvedObject.name=pause"))
        .await
        .unwrap();
    let reasons: Vec<&str> = events
        .items
        .iter()
        .filter_map(|e| e.reason.as_deref())
        .collect();
    assert!(
        reasons.contains(&"Suspended") && reasons.contains(&"Resumed"),
        "{reasons:?}\n{}",
        op.log_tail(20)
    );
}

#[tokio::test]
async fn active_deadline_fails_the_job_and_deletes_the_jobset() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-deadline").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "slow",
        "torch-distributed",
        json!({"activeDeadlineSeconds": 3, "runtimePatches": long_running()}),
    );
    apply(&client, &tj).await;
    let failed = wait_condition(&client, &ns, "slow", "Failed", op).await;
    let c = condition(&failed, "Failed").unwrap();
    assert_eq!(c["reason"], "DeadlineExceeded");
    assert_eq!(c["message"], "TrainJob exceeded its active deadline");
    eventually("JobSet deleted after the deadline", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "slow")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // Terminal: the JobSet is not re-created by later reconciles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), "slow")
            .await
            .is_none()
    );
    assert_eq!(
        condition(&trainjob(&client, &ns, "slow").await.unwrap(), "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
}

/// A finished TrainJob whose time to live is over is deleted, its objects
/// with it, and nothing is created again (upstream #3779 deleted only the
/// JobSet, which the next reconcile re-created). The TTL comes from the
/// TrainJob, else from its runtime's `runPolicy`; the TrainJob's wins.
#[tokio::test]
async fn finished_trainjobs_are_deleted_after_their_time_to_live() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-ttl").await.unwrap();
    let mut rt = one_node_runtime(&ns, "torch-ttl", json!({"torch": {}}));
    rt["spec"]["runPolicy"] = json!({"ttlSecondsAfterFinished": 1});
    apply(&client, &rt).await;
    let on_runtime = |name: &str, spec: Value| {
        let mut tj = trainjob_object(&ns, name, "torch-ttl", spec);
        tj["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
        tj
    };
    // Its own TTL; the runtime's; its own, longer than the runtime's.
    apply(
        &client,
        &trainjob_object(
            &ns,
            "own",
            "torch-distributed",
            json!({"ttlSecondsAfterFinished": 2}),
        ),
    )
    .await;
    apply(&client, &on_runtime("inherits", json!({}))).await;
    apply(
        &client,
        &on_runtime("kept", json!({"ttlSecondsAfterFinished": 3600})),
    )
    .await;
    let kept = wait_condition(&client, &ns, "kept", "Complete", op).await;
    for name in ["own", "inherits"] {
        eventually(&format!("TrainJob {name} deleted"), TIMEOUT, || async {
            trainjob(&client, &ns, name).await.is_none().then_some(())
        })
        .await;
        for (api, kind, object) in [
            (JOBSET, "JobSet", name.to_owned()),
            ("v1", "ConfigMap", format!("{name}-runtime-snapshot")),
        ] {
            eventually(&format!("{kind} {object} collected"), TIMEOUT, || async {
                get(&client, api, kind, Some(&ns), &object)
                    .await
                    .is_none()
                    .then_some(())
            })
            .await;
        }
    }
    // Nothing comes back, and the TrainJob with its own longer TTL stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["own", "inherits"] {
        assert!(trainjob(&client, &ns, name).await.is_none(), "{name}");
        assert!(
            get(&client, JOBSET, "JobSet", Some(&ns), name)
                .await
                .is_none(),
            "JobSet {name} re-created"
        );
    }
    let still = trainjob(&client, &ns, "kept").await.unwrap();
    assert_eq!(still["metadata"]["uid"], kept["metadata"]["uid"]);
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), "kept")
            .await
            .is_some()
    );
}

#[tokio::test]
async fn mpi_trainjob_gets_ssh_secret_and_hostfile() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-mpi").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "mpi",
        "deepspeed-distributed",
        json!({"trainer": {"numNodes": 2}}),
    );
    apply(&client, &tj).await;
    let secret = eventually("MPI ssh Secret", TIMEOUT, || async {
        get(&client, "v1", "Secret", Some(&ns), "mpi-mpi-ssh-auth").await
    })
    .await;
    assert_eq!(secret["type"], "kubernetes.io/ssh-auth");
    assert_eq!(secret["immutable"], true);
    assert!(
        secret["data"]["ssh-privatekey"].is_string() && secret["data"]["ssh-publickey"].is_string()
    );
    let hostfile = get(&client, "v1", "ConfigMap", Some(&ns), "mpi-mpi-hostfile")
        .await
        .unwrap();
    let text = hostfile["data"]["hostfile"].as_str().unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.starts_with("mpi-node-0-0.mpi slots="), "{text}");
    // The key is generated once: a later reconcile keeps the same Secret.
    let uid = secret["metadata"]["uid"].clone();
    let done = wait_condition(&client, &ns, "mpi", "Complete", op).await;
    assert!(
        done["status"]["jobsStatus"]
            .as_array()
            .is_some_and(|j| j.len() == 2),
        "launcher + node"
    );
    let again = get(&client, "v1", "Secret", Some(&ns), "mpi-mpi-ssh-auth")
        .await
        .unwrap();
    assert_eq!(again["metadata"]["uid"], uid);
}

/// Upstream's Flux scenario (§7 item 23–24): the scripts ConfigMap, the
/// CURVE certificate Secret, the installer init container and the wrapped
/// command, then Complete.
#[tokio::test]
async fn flux_trainjob_gets_scripts_certificate_and_installer_and_completes() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-flux").await.unwrap();
    apply(
        &client,
        &json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "flux", "namespace": ns},
            "spec": {
                "mlPolicy": {"numNodes": 2, "flux": {"numProcPerNode": 1}},
                "template": {"spec": {"replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"template": {"spec": {"containers": [{
                            "name": "node", "image": "test:trainjob",
                            "command": ["trainjob"], "args": ["trainjob"],
                        }]}}},
                    },
                }]}},
            },
        }),
    )
    .await;
    let mut tj = trainjob_object(&ns, "alpha", "flux", json!({"trainer": {"numNodes": 2}}));
    tj["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
    apply(&client, &tj).await;
    let scripts = eventually("Flux scripts ConfigMap", TIMEOUT, || async {
        get(
            &client,
            "v1",
            "ConfigMap",
            Some(&ns),
            "alpha-flux-entrypoint",
        )
        .await
    })
    .await;
    for key in ["entrypoint.sh", "init.sh"] {
        assert!(scripts["data"][key].is_string(), "{key}: {scripts}");
    }
    let curve = get(&client, "v1", "Secret", Some(&ns), "alpha-flux-curve")
        .await
        .unwrap();
    let cert = curve["data"]["curve.cert"].as_str().unwrap();
    let cert = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, cert).unwrap(),
    )
    .unwrap();
    assert!(
        cert.contains("public-key") && cert.contains("secret-key"),
        "{cert}"
    );
    let done = wait_condition(&client, &ns, "alpha", "Complete", op).await;
    for o in [&scripts, &curve] {
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["uid"], done["metadata"]["uid"],
            "owned by the TrainJob: {o}"
        );
    }
    let js = get(&client, JOBSET, "JobSet", Some(&ns), "alpha")
        .await
        .unwrap();
    let job = &js["spec"]["replicatedJobs"][0];
    assert_eq!(job["name"], "node");
    assert_eq!(job["template"]["spec"]["parallelism"], 2, "{job}");
    let pod = &job["template"]["spec"]["template"]["spec"];
    assert_eq!(pod["initContainers"][0]["name"], "flux-installer", "{pod}");
    assert_eq!(
        pod["containers"][0]["command"],
        json!(["/bin/bash", "/etc/flux-config/entrypoint.sh", "trainjob"]),
        "the runtime command, no TrainJob args"
    );
}

#[tokio::test]
async fn coscheduling_runtime_produces_the_podgroup() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-gang").await.unwrap();
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "torch-gang", "namespace": ns});
    runtime["spec"]["podGroupPolicy"] = json!({"coscheduling": {"scheduleTimeoutSeconds": 120}});
    apply(&client, &runtime).await;
    let tj = trainjob_object(
        &ns,
        "gang",
        "torch-gang",
        json!({"runtimeRef": {"name": "torch-gang", "kind": "TrainingRuntime"}, "trainer": {"numNodes": 2}}),
    );
    apply(&client, &tj).await;
    let pg = eventually("PodGroup", TIMEOUT, || async {
        get(
            &client,
            "scheduling.x-k8s.io/v1alpha1",
            "PodGroup",
            Some(&ns),
            "gang",
        )
        .await
    })
    .await;
    assert_eq!(pg["spec"]["minMember"], 2);
    assert_eq!(pg["spec"]["scheduleTimeoutSeconds"], 120);
    assert_eq!(pg["metadata"]["ownerReferences"][0]["name"], "gang");
    // The PodGroup is applied before the JobSet, in the same reconcile.
    let js = eventually("JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "gang").await
    })
    .await;
    assert_eq!(
        js.pointer("/spec/replicatedJobs/0/template/spec/template/metadata/labels/scheduling.x-k8s.io~1pod-group"),
        Some(&json!("gang"))
    );
}

#[tokio::test]
async fn deleting_the_trainjob_garbage_collects_everything() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-gc").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "gone",
        "deepspeed-distributed",
        json!({"suspend": true}),
    );
    apply(&client, &tj).await;
    for (api, kind, name) in [
        (JOBSET, "JobSet", "gone"),
        ("v1", "ConfigMap", "gone-runtime-snapshot"),
        ("v1", "ConfigMap", "gone-mpi-hostfile"),
        ("v1", "Secret", "gone-mpi-ssh-auth"),
    ] {
        eventually(&format!("{kind} {name}"), TIMEOUT, || async {
            get(&client, api, kind, Some(&ns), name).await
        })
        .await;
    }
    delete(
        &client,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Some(&ns),
        "gone",
    )
    .await;
    for (api, kind, name) in [
        (JOBSET, "JobSet", "gone"),
        ("v1", "ConfigMap", "gone-runtime-snapshot"),
        ("v1", "ConfigMap", "gone-mpi-hostfile"),
        ("v1", "Secret", "gone-mpi-ssh-auth"),
    ] {
        eventually(&format!("{kind} {name} collected"), TIMEOUT, || async {
            get(&client, api, kind, Some(&ns), name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn hand_edits_of_owned_fields_are_restored_and_others_kept() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-ssa").await.unwrap();
    // Suspended: the JobSet is re-rendered on every reconcile (not frozen).
    let tj = trainjob_object(&ns, "owned", "torch-distributed", json!({"suspend": true}));
    apply(&client, &tj).await;
    let js = eventually("JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "owned").await
    })
    .await;
    assert_eq!(js["spec"]["suspend"], true);
    // Someone flips a field the operator owns, and adds a label it does not own.
    let edit = json!({"apiVersion": JOBSET, "kind": "JobSet",
        "metadata": {"name": "owned", "namespace": ns, "labels": {"team": "blue"}},
        "spec": {"suspend": false}});
    let mut api_edit = edit.clone();
    api_edit["metadata"]["namespace"] = json!(ns);
    let api = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
        )),
    );
    api.patch(
        "owned",
        &kube::api::PatchParams::apply("someone-else").force(),
        &kube::api::Patch::Apply(&api_edit),
    )
    .await
    .unwrap();
    let restored = eventually("suspend restored by the operator", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), "owned").await?;
        (js["spec"]["suspend"] == true).then_some(js)
    })
    .await;
    assert_eq!(
        restored["metadata"]["labels"]["team"], "blue",
        "a field the operator does not own is left alone"
    );
}

#[tokio::test]
async fn trainjob_managed_by_another_controller_is_left_alone() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-managed").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "kueue",
        "torch-distributed",
        json!({"managedBy": "kueue.x-k8s.io/multikueue"}),
    );
    apply(&client, &tj).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), "kueue")
            .await
            .is_none()
    );
    assert!(
        get(
            &client,
            "v1",
            "ConfigMap",
            Some(&ns),
            "kueue-runtime-snapshot"
        )
        .await
        .is_none()
    );
    let t = trainjob(&client, &ns, "kueue").await.unwrap();
    assert!(
        t.pointer("/status/conditions").is_none(),
        "{:?}",
        t.get("status")
    );
}

#[tokio::test]
async fn missing_runtime_is_an_event_and_later_creation_recovers() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-missing").await.unwrap();
    // Admission refuses this TrainJob; what the controller does when it got
    // past admission anyway is under test, so the webhooks skip the namespace.
    bypass_admission(&client, &ns).await;
    let tj = trainjob_object(
        &ns,
        "orphan",
        "later",
        json!({"runtimeRef": {"name": "later", "kind": "TrainingRuntime"}, "suspend": true}),
    );
    apply(&client, &tj).await;
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let ev = eventually("TrainJobResourcesCreationFailed Event", TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("TrainJobResourcesCreationFailed"))
    })
    .await;
    let note = ev.note.unwrap_or_default();
    assert!(
        note.starts_with("TrainJob resources reconciliation failed: TrainingRuntime specified in TrainJob is not found"),
        "{note}"
    );
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    // Creating the runtime lets the retry succeed.
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "later", "namespace": ns});
    apply(&client, &runtime).await;
    eventually("JobSet after the runtime appeared", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "orphan").await
    })
    .await;
}

#[tokio::test]
async fn the_snapshot_keeps_a_running_job_on_its_original_runtime() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-snapshot").await.unwrap();
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "pinned", "namespace": ns});
    runtime["spec"]["template"]["metadata"] = json!({"labels": {"version": "one"}});
    apply(&client, &runtime).await;
    let tj = trainjob_object(
        &ns,
        "snap",
        "pinned",
        json!({"runtimeRef": {"name": "pinned", "kind": "TrainingRuntime"}, "suspend": true}),
    );
    apply(&client, &tj).await;
    let js = eventually("JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "snap").await
    })
    .await;
    assert_eq!(js["metadata"]["labels"]["version"], "one");
    runtime["spec"]["template"]["metadata"] = json!({"labels": {"version": "two"}});
    apply(&client, &runtime).await;
    let mut tj = tj;
    tj["spec"]["suspend"] = json!(false);
    apply(&client, &tj).await;
    eventually("JobSet resumed", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), "snap").await?;
        (js["spec"]["suspend"] == false).then_some(())
    })
    .await;
    let js = get(&client, JOBSET, "JobSet", Some(&ns), "snap")
        .await
        .unwrap();
    assert_eq!(
        js["metadata"]["labels"]["version"], "one",
        "the runtime edit did not reach the running job"
    );
}

#[tokio::test]
async fn unsupported_runtime_kind_fails_with_upstreams_condition() {
    let Some((env, _op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-kind").await.unwrap();
    // Admission refuses this TrainJob; what the controller does when it got
    // past admission anyway is under test, so the webhooks skip the namespace.
    bypass_admission(&client, &ns).await;
    let tj = trainjob_object(
        &ns,
        "odd",
        "torch-distributed",
        json!({"runtimeRef": {"name": "torch-distributed", "kind": "PyTorchJob", "apiGroup": "kubeflow.org"}}),
    );
    apply(&client, &tj).await;
    let failed = eventually("Failed/TrainingRuntimeNotSupported", TIMEOUT, || async {
        let t = trainjob(&client, &ns, "odd").await?;
        is_true(&t, "Failed").then_some(t)
    })
    .await;
    let c = condition(&failed, "Failed").unwrap();
    assert_eq!(c["reason"], "TrainingRuntimeNotSupported");
    assert_eq!(c["message"], "unsupported runtime: PyTorchJob.kubeflow.org");
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), "odd")
            .await
            .is_none()
    );
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let ev = eventually("TrainingRuntimeNotSupported Event", TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("TrainingRuntimeNotSupported"))
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
}

/// A client that knows only the newer API (as Kueue does): it reads the
/// TrainJob, keeps only the fields upstream v2.3 has, adds its own runtime
/// patch, unsuspends and writes the whole object back (retrying conflicts).
async fn rewrite_with_newer_types(client: &kube::Client, ns: &str, name: &str) {
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "trainer.kubeflow.org",
            "v1alpha1",
            "TrainJob",
        )),
    );
    for _ in 0..20 {
        let mut tj = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
        let spec = tj["spec"].as_object_mut().unwrap();
        spec.retain(|k, _| {
            [
                "runtimeRef",
                "initializer",
                "trainer",
                "runtimePatches",
                "suspend",
                "managedBy",
                "activeDeadlineSeconds",
            ]
            .contains(&k.as_str())
        });
        spec.insert("suspend".into(), json!(false));
        let patches = spec
            .entry("runtimePatches")
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap();
        patches.push(json!({"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"kueue-flavor": "f1"}}}}}}]}}}}));
        let obj: kube::api::DynamicObject = serde_json::from_value(tj).unwrap();
        match api
            .replace(name, &kube::api::PostParams::default(), &obj)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("rewriting {ns}/{name}: {e}"),
        }
    }
    panic!("rewriting {ns}/{name}: too many conflicts");
}

#[tokio::test]
async fn v21_fields_survive_a_client_with_only_the_newer_types() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-v21").await.unwrap();
    let patches = long_running();
    let spec = json!({
        "suspend": true,
        "trainer": {"numNodes": 1},
        "labels": {"team": "a"},
        "annotations": {"note": "from-v21"},
        "podTemplateOverrides": [{
            "targetJobs": [{"name": "node"}],
            "metadata": {"labels": {"pod-team": "a"}},
            "spec": {"nodeSelector": {"zone": "z1"},
                     "containers": [{"name": "node", "env": [{"name": "FROM_V21", "value": "1"}]}]}
        }],
        "runtimePatches": patches,
    });
    // Admission moves the fields into a runtime patch of its own, first,
    // before the TrainJob is stored, and says so.
    let created = create(
        &client,
        &trainjob_object(&ns, "old", "torch-distributed", spec),
        false,
    )
    .await;
    assert!(created.ok(), "{} {}", created.code, created.message);
    let converted = created.object;
    let s = &converted["spec"];
    for gone in ["labels", "annotations", "podTemplateOverrides"] {
        assert!(s.get(gone).is_none(), "{gone} stored: {s}");
    }
    let warning = created
        .warnings
        .iter()
        .find(|w| w.contains("moved into spec.runtimePatches"))
        .unwrap_or_else(|| panic!("no warning: {:?}", created.warnings));
    for f in [
        "spec.labels",
        "spec.annotations",
        "spec.podTemplateOverrides",
    ] {
        assert!(warning.contains(f), "{warning}");
    }
    let managers: Vec<&str> = converted["spec"]["runtimePatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["manager"].as_str())
        .collect();
    assert_eq!(
        managers,
        ["trainer.kubeflow.org/v2.1-fields", "e2e.example.com/test"],
        "{}",
        op.log_tail(20)
    );

    // Kueue-like rewrite and admission: what the user asked for still applies.
    rewrite_with_newer_types(&client, &ns, "old").await;
    let js = eventually("the JobSet, unsuspended", TIMEOUT, || async {
        let js = get(&client, JOBSET, "JobSet", Some(&ns), "old").await?;
        (js["spec"]["suspend"] != json!(true)).then_some(js)
    })
    .await;
    assert_eq!(js["metadata"]["labels"]["team"], "a", "{}", js["metadata"]);
    assert_eq!(js["metadata"]["annotations"]["note"], "from-v21");
    let pod = &js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["pod-team"], "a", "{pod}");
    assert_eq!(pod["spec"]["nodeSelector"]["zone"], "z1", "{pod}");
    assert_eq!(pod["spec"]["nodeSelector"]["kueue-flavor"], "f1", "{pod}");
    let env: Vec<&str> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(env.contains(&"FROM_V21"), "{env:?}");
    assert!(env.contains(&"PET_NNODES"), "{env:?}");
}

#[tokio::test]
async fn trainer_vars_set_by_the_user_are_accepted_and_win() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-trainer-vars").await.unwrap();
    let tj = trainjob_object(
        &ns,
        "mine",
        "torch-distributed",
        json!({"suspend": true, "trainer": {"numNodes": 2, "env": [
            {"name": "TRAINER_JOB_ID", "value": "my-id"},
            {"name": "TRAINER_NNODES", "value": "7"}
        ]}}),
    );
    apply(&client, &tj).await;
    let js = eventually("the JobSet", TIMEOUT, || async {
        get(&client, JOBSET, "JobSet", Some(&ns), "mine").await
    })
    .await;
    let env: Vec<(String, Value)> = js
        .pointer("/spec/replicatedJobs/0/template/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e["value"].clone()))
        .collect();
    let values = |n: &str| -> Vec<Value> {
        env.iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(values("TRAINER_JOB_ID"), [json!("my-id")], "{env:?}");
    assert_eq!(values("TRAINER_NNODES"), [json!("7")], "{env:?}");
    assert_eq!(
        values("TRAINER_NODE_0_HOSTNAME").len(),
        1,
        "ours stay: {env:?}"
    );
    assert_eq!(values("PET_NNODES"), [json!("2")], "{env:?}");
    let tj = trainjob(&client, &ns, "mine").await.unwrap();
    for c in ["Failed", "Blocked"] {
        assert!(
            !is_true(&tj, c),
            "{c}: {}\n{}",
            tj["status"],
            op.log_tail(20)
        );
    }
}

/// A namespaced TrainingRuntime of one `busybox` trainer node whose
/// `mlPolicy` also has `policy` (e.g. `{"paddle": {}}`).
fn one_node_runtime(ns: &str, name: &str, policy: Value) -> Value {
    let mut ml = json!({"numNodes": 1});
    if let (Some(m), Value::Object(p)) = (ml.as_object_mut(), policy) {
        m.extend(p);
    }
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"mlPolicy": ml, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}}}]}}}})
}

/// TrainJobs blocked by a runtime policy no plugin serves (here `paddle`, an
/// out-of-tree plugin's policy that is not installed) back off, each on its own, instead of being polled: 50 of
/// them cost fewer than 5 reconciles a second in all once the first minute
/// is over (before, every one was retried each 100 ms: 431 a second).
/// Counted from the operator's log, whose every failed reconcile names its
/// TrainJob, so that the other tests' TrainJobs do not count.
#[tokio::test]
async fn blocked_trainjobs_back_off_instead_of_polling() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-blocked").await.unwrap();
    apply(
        &client,
        &one_node_runtime(&ns, "paddle-unserved", json!({"paddle": {}})),
    )
    .await;
    const JOBS: usize = 50;
    for i in 0..JOBS {
        let mut tj = trainjob_object(&ns, &format!("blocked-{i}"), "paddle-unserved", json!({}));
        tj["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
        apply(&client, &tj).await;
    }
    let blocked = eventually(
        "every TrainJob Blocked (PolicyNotServed)",
        TIMEOUT,
        || async {
            let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
                client.clone(),
                &ns,
                &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                    "trainer.kubeflow.org",
                    "v1alpha1",
                    "TrainJob",
                )),
            );
            let list = api.list(&Default::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|t| {
                    let v = serde_json::to_value(t).unwrap();
                    condition(&v, "Blocked").is_some_and(|c| c["reason"] == "PolicyNotServed")
                })
                .count();
            (n == JOBS).then_some(n)
        },
    )
    .await;
    assert_eq!(blocked, JOBS);
    // Failed reconciles of this namespace's TrainJobs logged so far.
    let failures = || {
        std::fs::read_to_string(&op.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("reconcile failed") && l.contains(ns.as_str()))
            .count()
    };
    tokio::time::sleep(Duration::from_secs(45)).await;
    let before = failures();
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let per_second = (failures() - before) as f64 / window.as_secs_f64();
    report(&format!(
        "figure: {JOBS} blocked TrainJobs: {per_second:.1} reconciles/s in all, a minute in"
    ));
    assert!(
        per_second < 5.0,
        "{per_second:.1} reconciles/s for {JOBS} blocked TrainJobs\n{}",
        op.log_tail(10)
    );
    // Still blocked, and nothing built.
    let tj = trainjob(&client, &ns, "blocked-0").await.unwrap();
    assert!(is_true(&tj, "Blocked"), "{}", tj["status"]);
    assert!(
        get(&client, JOBSET, "JobSet", Some(&ns), "blocked-0")
            .await
            .is_none()
    );
}

/// A change of the plugin set reaches every unfinished TrainJob at once
/// (issue 31, item 2): 50 suspended TrainJobs built by a plugin's first
/// configuration all get the second's objects well inside one resync
/// period (30 s here), the swap is counted, and its completion shows on
/// the `ClusterTrainerPlugin` (`status.rollout`) and in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_swap_re_renders_every_unfinished_trainjob() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-swap").await.unwrap();
    let bytes = std::fs::read(crate::plugin_common::minimal_wasm()).unwrap();
    let sha = trainforge::plugin::sha256_hex(&bytes);
    let data = serde_json::to_value(k8s_openapi::ByteString(bytes)).unwrap();
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "swap-module", "namespace": ns},
            "binaryData": {"module.wasm": data}}),
    )
    .await;
    // `mlPolicy.minimal` routes the plugin to this runtime's TrainJobs only.
    let greeter = |greeting: &str| {
        json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "ClusterTrainerPlugin",
            "metadata": {"name": "e2e-swap-greeter"},
            "spec": {"source": {"configMap": {"namespace": ns, "name": "swap-module", "key": "module.wasm"}},
                "sha256": sha, "order": 50, "config": {"greeting": greeting}}})
    };
    apply(&client, &greeter("v1")).await;
    apply(
        &client,
        &one_node_runtime(&ns, "greet", json!({"minimal": {}})),
    )
    .await;
    const JOBS: usize = 50;
    for i in 0..JOBS {
        let mut tj = trainjob_object(&ns, &format!("swap-{i}"), "greet", json!({"suspend": true}));
        tj["spec"]["runtimeRef"]["kind"] = json!("TrainingRuntime");
        apply(&client, &tj).await;
    }
    let greetings = |want: &'static str| {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(client, &ns);
            let list = api.list(&Default::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|cm| {
                    cm.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.ends_with("-minimal"))
                        && cm
                            .data
                            .as_ref()
                            .and_then(|d| d.get("greeting"))
                            .map(String::as_str)
                            == Some(want)
                })
                .count();
            (n == JOBS).then_some(n)
        }
    };
    eventually("every TrainJob built by v1", TIMEOUT, || greetings("v1")).await;
    let swaps_before = metric(
        &op.scrape().await,
        "trainforge_plugin_swap_trainjobs_total",
        &[],
    );
    let edit = std::time::Instant::now();
    apply(&client, &greeter("v2")).await;
    eventually(
        "every TrainJob re-rendered by v2",
        Duration::from_secs(25),
        || greetings("v2"),
    )
    .await;
    report(&format!(
        "figure: plugin swap -> all {JOBS} suspended TrainJobs re-rendered: {} ms",
        edit.elapsed().as_millis()
    ));
    let swaps_after = metric(
        &op.scrape().await,
        "trainforge_plugin_swap_trainjobs_total",
        &[],
    );
    assert!(
        swaps_after - swaps_before >= JOBS as f64,
        "the swap queued every unfinished TrainJob: {swaps_before} -> {swaps_after}"
    );
    // The swap's completion is observable: on the ClusterTrainerPlugin
    // whose version it brought (`status.rollout`, written at most every
    // 2 s) and in the metrics. Other tests' TrainJobs may be part of it.
    let rollout = eventually("the rollout complete on the plugin", TIMEOUT, || async {
        let ctp = get(
            &client,
            "trainforge.dev/v1alpha1",
            "ClusterTrainerPlugin",
            None,
            "e2e-swap-greeter",
        )
        .await?;
        let r = ctp["status"]["rollout"].clone();
        (r["servingGeneration"] == ctp["status"]["servingGeneration"]
            && r["remaining"] == 0
            && r["completedAt"].is_string())
        .then_some(r)
    })
    .await;
    report(&format!("the plugin's status.rollout: {rollout}"));
    let count = |k: &str| rollout[k].as_i64().unwrap();
    assert!(count("trainJobs") >= JOBS as i64, "{rollout}");
    assert!(count("reRendered") >= JOBS as i64, "{rollout}");
    assert_eq!(
        count("reRendered") + count("failed") + count("skipped"),
        count("trainJobs"),
        "{rollout}"
    );
    // (Another test's swap may start a rollout meanwhile: eventually.)
    eventually("no TrainJob left to re-render", TIMEOUT, || async {
        let scraped = op.scrape().await;
        (metric(&scraped, "trainforge_plugin_swap_remaining_trainjobs", &[]) == 0.0).then_some(())
    })
    .await;
    let rerendered = metric(
        &op.scrape().await,
        "trainforge_plugin_swap_rerendered_trainjobs_total",
        &[],
    );
    assert!(rerendered >= JOBS as f64, "{rerendered}");
    delete(
        &client,
        "trainforge.dev/v1alpha1",
        "ClusterTrainerPlugin",
        None,
        "e2e-swap-greeter",
    )
    .await;
}

/// Pods the API server refuses (here a ValidatingAdmissionPolicy; the same
/// holds for a quota, a pod security level, a LimitRange or a webhook)
/// surface on their TrainJob: `Blocked=True/PodCreationFailed` with the API
/// server's message, shown in STATE, and a Warning Event. Once the policy
/// is gone and the Job controller's retry creates the pods, `Blocked` goes.
#[tokio::test]
async fn pods_that_cannot_be_created_surface_on_the_trainjob() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-refused").await.unwrap();
    let policy = format!("no-pods-{ns}");
    let vap = "admissionregistration.k8s.io/v1";
    apply(
        &client,
        &json!({"apiVersion": vap, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "validations": [{"expression": "false", "message": "no pods in this namespace"}]}}),
    )
    .await;
    apply(
        &client,
        &json!({"apiVersion": vap, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}}),
    )
    .await;
    // The policy is in force once a pod of the namespace is refused (the
    // API server loads policies asynchronously).
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns);
    let probe: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    eventually("the policy in force", TIMEOUT, || async {
        let dry = kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        };
        match pods.create(&dry, &probe).await {
            Err(kube::Error::Api(e)) if e.message.contains("no pods in this namespace") => Some(()),
            _ => None,
        }
    })
    .await;
    apply(
        &client,
        &trainjob_object(
            &ns,
            "refused",
            "torch-distributed",
            json!({"runtimePatches": long_running()}),
        ),
    )
    .await;
    let blocked = eventually("Blocked=True/PodCreationFailed", TIMEOUT, || async {
        let tj = trainjob(&client, &ns, "refused").await?;
        condition(&tj, "Blocked")
            .filter(|c| c["status"] == "True" && c["reason"] == "PodCreationFailed")
            .cloned()
    })
    .await;
    let message = blocked["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refused-node-0") && message.contains("no pods in this namespace"),
        "{blocked}\n{}",
        op.log_tail(30)
    );
    eventually("a PodCreationFailed Warning Event", TIMEOUT, || async {
        warnings(&client, &ns, "refused")
            .await
            .into_iter()
            .find(|w| w.contains("no pods in this namespace"))
    })
    .await;
    // The policy lifted: the Job controller's next try creates the pods.
    delete(
        &client,
        vap,
        "ValidatingAdmissionPolicyBinding",
        None,
        &policy,
    )
    .await;
    delete(&client, vap, "ValidatingAdmissionPolicy", None, &policy).await;
    eventually(
        "Blocked gone once the pods run",
        Duration::from_secs(300),
        || async {
            let tj = trainjob(&client, &ns, "refused").await?;
            condition(&tj, "Blocked").is_none().then_some(())
        },
    )
    .await;
}

/// A torch runtime of this namespace with `run_policy` as its `runPolicy`
/// whose trainer pods fail (kwok) with `exit`, or run as kwok runs them
/// with `None`.
async fn failing_runtime(
    client: &kube::Client,
    ns: &str,
    name: &str,
    run_policy: Value,
    exit: Option<u8>,
) {
    let mut runtime = docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    )
    .remove(0);
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": name, "namespace": ns});
    runtime["spec"]["runPolicy"] = run_policy;
    if let Some(exit) = exit {
        runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            ["metadata"] = json!({
            "labels": { FAIL_POD_LABEL: "true" },
            "annotations": { format!("{FAIL_POD_LABEL}/exit-code"): exit.to_string() }
        });
    }
    apply(client, &runtime).await;
}

/// Upstream's KEP-4162 e2e case "fails every time, `maxRestarts: 1`": the
/// TrainJob's own `maxRestarts` wins over the runtime's, the JobSet is
/// restarted once (a Warning per restart) and then the TrainJob is
/// `Failed/ReachedMaxRestarts` with `restarts: 1`.
#[tokio::test]
async fn a_failure_policy_restarts_a_failing_trainjob_up_to_max_restarts() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-restarts").await.unwrap();
    failing_runtime(
        &client,
        &ns,
        "restarts",
        json!({"failurePolicy": {"maxRestarts": 5}}),
        Some(1),
    )
    .await;
    let tj = trainjob_object(
        &ns,
        "flaky",
        "restarts",
        json!({"runtimeRef": {"name": "restarts", "kind": "TrainingRuntime"},
               "failurePolicy": {"maxRestarts": 1}}),
    );
    apply(&client, &tj).await;
    let failed = wait_condition(&client, &ns, "flaky", "Failed", op).await;
    let c = condition(&failed, "Failed").unwrap();
    assert_eq!(c["reason"], "ReachedMaxRestarts", "{c}");
    assert_eq!(
        failed["status"]["restarts"],
        json!(1),
        "{}",
        failed["status"]
    );
    assert_eq!(failed["status"]["restartsCountTowardsMax"], json!(1));
    let js = get(&client, JOBSET, "JobSet", Some(&ns), "flaky")
        .await
        .unwrap();
    assert_eq!(js["spec"]["failurePolicy"]["maxRestarts"], json!(1));
    assert_eq!(
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"],
        json!(0)
    );
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &ns);
    let restarted = eventually("a TrainJobRestarted Warning", TIMEOUT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("TrainJobRestarted"))
    })
    .await;
    assert_eq!(restarted.type_.as_deref(), Some("Warning"));
    assert!(
        restarted.note.unwrap_or_default().contains("restart 1"),
        "the note counts the restart"
    );
}

/// Upstream's KEP-4162 e2e case "exit-code fail rule matches": exit code 42
/// of the `node` container ends the TrainJob at once,
/// `Failed/FailJobSetFailurePolicyAction`, no restart although
/// `maxRestarts` allows three.
#[tokio::test]
async fn an_exit_code_rule_fails_the_trainjob_without_restarting_it() {
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-exit-rule").await.unwrap();
    let policy = json!({"failurePolicy": {"maxRestarts": 3, "rules": [
        {"action": "FailTrainJob",
         "onExitCodes": {"containerName": "node", "operator": "In", "values": [42]}}]}});
    failing_runtime(&client, &ns, "exit-rule", policy, Some(42)).await;
    let tj = trainjob_object(
        &ns,
        "fatal",
        "exit-rule",
        json!({"runtimeRef": {"name": "exit-rule", "kind": "TrainingRuntime"}}),
    );
    apply(&client, &tj).await;
    let failed = wait_condition(&client, &ns, "fatal", "Failed", op).await;
    let c = condition(&failed, "Failed").unwrap();
    assert_eq!(c["reason"], "FailJobSetFailurePolicyAction", "{c}");
    assert_eq!(
        failed["status"]
            .get("restarts")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        0,
        "{}",
        failed["status"]
    );
}

/// Upstream's KEP-4162 e2e case "eviction with a `DisruptionTarget` rule":
/// the restart is made but not counted (`restarts: 1`,
/// `restartsCountTowardsMax: 0`), so a TrainJob with `maxRestarts: 0` runs
/// on. kwok has no kubelet to evict with, so the test reports the trainer
/// pod `Failed` with `DisruptionTarget=True`, as the kubelet does for an
/// evicted or preempted pod.
#[tokio::test]
async fn a_disrupted_pod_restarts_the_trainjob_without_counting() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{ListParams, Patch, PatchParams};
    let Some((env, op, client)) = setup().await else {
        return;
    };
    let ns = env.create_namespace("e2e-disruption").await.unwrap();
    let policy = json!({"activeDeadlineSeconds": 3600, "failurePolicy": {"maxRestarts": 0, "rules": [
        {"action": "RestartTrainJobAndIgnoreMaxRestarts",
         "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
    failing_runtime(&client, &ns, "disruption", policy, None).await;
    let tj = trainjob_object(
        &ns,
        "evicted",
        "disruption",
        json!({"runtimeRef": {"name": "disruption", "kind": "TrainingRuntime"},
               "runtimePatches": long_running()}),
    );
    apply(&client, &tj).await;
    let pods = kube::Api::<Pod>::namespaced(client.clone(), &ns);
    let running = eventually("a running trainer pod", TIMEOUT, || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    let name = running.metadata.name.clone().unwrap();
    let evicted = json!({"status": {"phase": "Failed", "reason": "Evicted", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&evicted))
        .await
        .unwrap();
    let restarted = eventually("restarts: 1", TIMEOUT, || async {
        let tj = trainjob(&client, &ns, "evicted").await?;
        (tj["status"]["restarts"] == json!(1)).then_some(tj)
    })
    .await;
    assert_eq!(
        restarted["status"]
            .get("restartsCountTowardsMax")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        0,
        "{}",
        restarted["status"]
    );
    assert!(
        !is_true(&restarted, "Failed"),
        "maxRestarts 0, yet an uncounted restart does not fail it: {}\n{}",
        restarted["status"],
        op.log_tail(20)
    );
    // The restarted pods run again.
    eventually("a running pod of the restarted JobSet", TIMEOUT, || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|p| {
            p.metadata.name.as_deref() != Some(&name)
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
    })
    .await;
}
