//! Tenant plugins on the real control plane. `trainforge operator` runs with
//! the shipped RBAC (its ServiceAccount's token) behind admission, with the
//! shipped `TrainerPluginPolicy` (namespaces labelled
//! `trainforge.dev/tenant-plugins: enabled` may have tenant plugins).
//!
//! Two tenant namespaces each install their own `TrainerPlugin` (the
//! `guests/hostile` fixture, from a ConfigMap of their namespace, both
//! calling themselves `team-env`); a third namespace is not allowed any.
//! The test checks, in order:
//!
//! 0. the shipped tenant ClusterRole, bound in a team's namespace, allows
//!    TrainerPlugins and ConfigMaps there and nothing elsewhere;
//! 1. each TrainJob gets exactly the plugins that apply to it (its
//!    namespace's, narrowed by selector; never another namespace's);
//! 2. a hostile tenant plugin is contained — other namespaces, kinds outside
//!    the ceiling (Role, Pod, ClusterRole), objects it does not own,
//!    privileges beyond the restricted level, service account and image
//!    changes, Secret and cross-namespace reads, time and memory — nothing
//!    lands, its TrainJob gets a Warning Event naming the plugin and the
//!    reason, its `TrainerPlugin` gets a Warning Event, and the other
//!    tenant's TrainJobs still get their JobSets;
//! 3. a `TrainerPlugin` sourced from another namespace's ConfigMap is
//!    refused at admission; one asking for more than the ceiling is refused
//!    with `WithinPolicy=False` naming what;
//! 4. the ceiling tightened live takes plugins that no longer fit out of
//!    service, and restoring it brings them back;
//! 5. per-tenant metrics count each namespace's calls and failures, and a
//!    failing tenant plugin with `failurePolicy: Ignore` is skipped (5b);
//! 6. a figure: create → JobSet latency of tenant A's TrainJobs while
//!    tenant B's plugin spins to its time limit on every call, against the
//!    same without it;
//! 7. a TrainerPlugin whose new spec fails keeps its last good version
//!    serving, also after the operator restarts;
//! 8. an https plugin source pointing at the metadata address or loopback
//!    is refused (`AddressNotAllowed`);
//! 9. tenants' components crafted to be slow to compile queue for the
//!    tenants' own compile slot: a cluster plugin compiles meanwhile;
//!    deleting them cancels their compiles, queued or running (9b);
//! 10. a tenant plugin named as a cluster plugin is refused, and its
//!     namespace goes on;
//! 11. `maxPluginsPerNamespace` admits the first created: a newcomer whose
//!     name sorts first is refused and the plugins before it keep serving;
//! 12. with `trustedKeys` in the policy, a tenant trusting a key it made
//!     itself is refused, one trusting the policy's key is verified;
//! 13. after a restart, a TrainJob whose namespace's tenant plugins are
//!     still loading reads `PluginsReady=False` `TenantPluginsLoading`
//!     until it is built.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use crate::operator_common::*;
use crate::plugin_common::{hostile_declaring, slow_to_compile_component};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use trainforge::oci::cosign;
use trainforge::plugin::sha256_hex;
use trainforge_api::trainforge::v1alpha1::TrainerPlugin;
use trainforge_testenv::{Mode, TestEnv};

const TIMEOUT: Duration = Duration::from_secs(120);
const JOBSET: &str = "jobset.x-k8s.io/v1alpha2";
const TF: &str = "trainforge.dev/v1alpha1";
const TRAINJOB_API: &str = "trainer.kubeflow.org/v1alpha1";
const OPERATOR_NS: &str = "trainforge-system";
/// The label the shipped policy selects tenant namespaces by.
const TENANT_LABEL: &str = "trainforge.dev/tenant-plugins";
/// The name both tenants' plugins describe themselves with.
const PLUGIN: &str = "team-env";

struct Fx {
    env: &'static TestEnv,
    client: kube::Client,
    op: Operator,
}

fn step(text: &str) {
    report(&format!("tenants: {text}"));
}

async fn setup() -> Option<Fx> {
    let env = trainforge_testenv::require!(Mode::Full)?;
    let client = env.client().await.unwrap();
    let kubeconfig = operator_service_account(env, &client).await;
    for f in ["policy.yaml", "roles.yaml"] {
        for d in docs(&root().join("manifests/tenants").join(f), None) {
            apply(&client, &d).await;
        }
    }
    apply_default_plugins(&client).await;
    for d in docs(
        &root().join("api/tests/fixtures/upstream/torch-distributed.yaml"),
        None,
    ) {
        apply(&client, &d).await;
    }
    let op = Operator::start_as(
        env,
        "operator-tenants",
        &[
            "--leader-elect",
            "--lease-namespace",
            OPERATOR_NS,
            "--resync-seconds",
            "30",
        ],
        &kubeconfig,
    );
    op.wait_ready().await;
    wait_default_plugins_ready(&client).await;
    Some(Fx { env, client, op })
}

async fn tenant_namespace(fx: &Fx, prefix: &str, allowed: bool) -> String {
    let ns = fx.env.create_namespace(prefix).await.unwrap();
    if allowed {
        Api::<Namespace>::all(fx.client.clone())
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {TENANT_LABEL: "enabled"}}})),
            )
            .await
            .unwrap();
    }
    ns
}

/// A `TrainerPlugin` `name` in `ns` loading `bytes` from ConfigMap
/// `ns/<cm>`, with `extra` merged into its spec.
fn trainer_plugin(ns: &str, name: &str, cm: &str, bytes: &[u8], extra: Value) -> Value {
    let mut spec = json!({
        "source": {"configMap": {"namespace": ns, "name": cm, "key": "plugin.wasm"}},
        "sha256": sha256_hex(bytes),
        "failurePolicy": "Fail",
    });
    if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        s.extend(extra);
    }
    json!({"apiVersion": TF, "kind": "TrainerPlugin",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// `(status, reason, message)` of condition `t`.
fn cond(o: &Value, t: &str) -> (String, String, String) {
    let c = condition(o, t).unwrap_or_else(|| panic!("no condition {t}: {o}"));
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (s("status"), s("reason"), s("message"))
}

/// Until `TrainerPlugin` `ns/name` reports `Ready` as `ready` for its
/// current generation.
async fn wait_tp(fx: &Fx, ns: &str, name: &str, ready: bool) -> Value {
    let want = if ready { "True" } else { "False" };
    eventually(
        &format!("TrainerPlugin {ns}/{name} Ready={want}"),
        TIMEOUT,
        || async {
            let o = get(&fx.client, TF, "TrainerPlugin", Some(ns), name).await?;
            let c = condition(&o, "Ready")?;
            (c["status"] == want
                && o["status"]["observedGeneration"] == o["metadata"]["generation"])
                .then_some(o)
        },
    )
    .await
}

/// A benign TrainJob; `labels` go on it.
fn plain(ns: &str, name: &str, labels: Value) -> Value {
    let mut tj = attacked(ns, name, PLUGIN, json!({}));
    tj["metadata"]["labels"] = labels;
    tj
}

/// Install `ClusterTrainerPlugin` `name` (its component in ConfigMap `cm`
/// of the operator's namespace) and wait until it is `Ready`.
async fn install_ready_cluster_plugin(fx: &Fx, cm: &str, name: &str, bytes: &[u8]) {
    install_cluster_plugin(&fx.client, OPERATOR_NS, cm, name, bytes, json!({})).await;
    eventually(
        &format!("ClusterTrainerPlugin {name} Ready"),
        TIMEOUT,
        || async {
            let o = get(&fx.client, TF, "ClusterTrainerPlugin", None, name).await?;
            (condition(&o, "Ready")?["status"] == "True").then_some(())
        },
    )
    .await;
}

async fn wait_jobset(fx: &Fx, ns: &str, name: &str) -> Value {
    eventually(&format!("JobSet {ns}/{name}"), TIMEOUT, || {
        get(&fx.client, JOBSET, "JobSet", Some(ns), name)
    })
    .await
}

/// Names of the ConfigMaps of `ns` owned by a TrainJob, sorted.
async fn owned_configmaps(fx: &Fx, ns: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(fx.client.clone(), ns);
    let mut out: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .owner_references
                .as_ref()
                .is_some_and(|r| r.iter().any(|r| r.kind == "TrainJob"))
        })
        .filter_map(|c| c.metadata.name)
        .filter(|n| !n.ends_with("-runtime-snapshot"))
        .collect();
    out.sort();
    out
}

/// Create `n` TrainJobs in `ns` one after the other; the create → JobSet
/// time of each.
async fn jobset_latencies(fx: &Fx, ns: &str, prefix: &str, n: usize) -> Vec<Duration> {
    let mut out = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let start = Instant::now();
        apply(&fx.client, &plain(ns, &name, json!({}))).await;
        wait_jobset(fx, ns, &name).await;
        out.push(start.elapsed());
    }
    out
}

fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s[i.min(s.len() - 1)]
}

/// Whether `user` may `verb` `resource` (`group`, `subresource`) in `ns`
/// (cluster scope when `None`), as the API server's authorizer decides.
async fn may(
    client: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: &str,
    ns: Option<&str>,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource: (!subresource.is_empty()).then(|| subresource.to_owned()),
                namespace: ns.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The shipped tenant role, bound in one namespace, reaches nothing outside
/// it: no other namespace, no cluster plugin, no ceiling, no status.
async fn tenant_role_stays_in_its_namespace(fx: &Fx, a: &str, b: &str) {
    let user = "team-a-admin";
    apply(
        &fx.client,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "team-a-plugins", "namespace": a},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "trainforge-trainerplugin-editor"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await;
    let tf = "trainforge.dev";
    eventually("the tenant role binding is in effect", TIMEOUT, || async {
        may(
            &fx.client,
            user,
            "create",
            tf,
            "trainerplugins",
            "",
            Some(a),
        )
        .await
        .then_some(())
    })
    .await;
    let allowed: &[(&str, &str, &str, &str)] = &[
        ("create", tf, "trainerplugins", ""),
        ("update", tf, "trainerplugins", ""),
        ("delete", tf, "trainerplugins", ""),
        ("get", tf, "trainerplugins", "status"),
        ("create", "", "configmaps", ""),
    ];
    for &(verb, group, resource, sub) in allowed {
        assert!(
            may(&fx.client, user, verb, group, resource, sub, Some(a)).await,
            "{verb} {resource}/{sub} in {a}"
        );
    }
    let denied: &[(&str, &str, &str, &str, Option<&str>)] = &[
        ("create", tf, "trainerplugins", "", Some(b)),
        ("create", "", "configmaps", "", Some(b)),
        ("patch", tf, "trainerplugins", "status", Some(a)),
        ("create", tf, "clustertrainerplugins", "", None),
        ("update", tf, "trainerpluginpolicies", "", None),
        ("list", tf, "trainerplugins", "", None),
        ("get", "", "secrets", "", Some(a)),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            "",
            Some(a),
        ),
    ];
    for &(verb, group, resource, sub, ns) in denied {
        assert!(
            !may(&fx.client, user, verb, group, resource, sub, ns).await,
            "{verb} {resource}/{sub} in {ns:?} must be denied"
        );
    }
}

#[tokio::test]
async fn tenant_plugins_serve_their_namespace_within_the_ceiling() {
    let Some(fx) = setup().await else { return };
    let a = tenant_namespace(&fx, "tenant-a", true).await;
    let b = tenant_namespace(&fx, "tenant-b", true).await;
    let c = tenant_namespace(&fx, "no-tenants", false).await;

    // Both tenants ship the same component; it may emit ConfigMaps only.
    let bytes = hostile_declaring(&json!({"name": PLUGIN, "emits": [["v1", "ConfigMap"]]}));
    let marker = |who: &str| {
        json!({"emit": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{{trainjob}}-{who}-marker")}, "data": {"by": who}}]})
    };
    for (ns, who) in [(&a, "team-a"), (&b, "team-b"), (&c, "team-c")] {
        store_component(&fx.client, ns, "env-module", &bytes).await;
        apply(
            &fx.client,
            &trainer_plugin(
                ns,
                "env",
                "env-module",
                &bytes,
                json!({"config": marker(who)}),
            ),
        )
        .await;
    }

    step("0 the tenant role stays in its namespace");
    tenant_role_stays_in_its_namespace(&fx, &a, &b).await;

    step("1 each TrainJob gets exactly the plugins that apply to it");
    for ns in [&a, &b] {
        let o = wait_tp(&fx, ns, "env", true).await;
        assert_eq!(cond(&o, "WithinPolicy").0, "True", "{o}");
        assert_eq!(o["status"]["plugin"]["name"], PLUGIN);
    }
    let refused = wait_tp(&fx, &c, "env", false).await;
    let (status, reason, message) = cond(&refused, "WithinPolicy");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NamespaceNotAllowed"),
        "{message}"
    );
    assert!(
        message.contains(&c) && message.contains(TENANT_LABEL),
        "{message}"
    );
    // A selective plugin in B serves only TrainJobs labelled for it.
    let selective =
        hostile_declaring(&json!({"name": "team-extra", "emits": [["v1", "ConfigMap"]]}));
    store_component(&fx.client, &b, "extra-module", &selective).await;
    apply(
        &fx.client,
        &trainer_plugin(
            &b,
            "extra",
            "extra-module",
            &selective,
            json!({"order": 5, "config": marker("extra"), "failurePolicy": "Ignore",
                "selector": {"matchLabels": {"example.com/extra": "yes"}}}),
        ),
    )
    .await;
    wait_tp(&fx, &b, "extra", true).await;
    let mut ok_a = plain(&a, "ok", json!({}));
    ok_a["metadata"]["annotations"] = json!({});
    apply(&fx.client, &ok_a).await;
    let mut ok_b = plain(&b, "ok", json!({}));
    ok_b["metadata"]["annotations"] = json!({});
    apply(&fx.client, &ok_b).await;
    let mut picked = plain(&b, "picked", json!({"example.com/extra": "yes"}));
    picked["metadata"]["annotations"] = json!({"hostile.trainforge.dev/team-env": "{}"});
    apply(&fx.client, &picked).await;
    let mut ok_c = plain(&c, "ok", json!({}));
    ok_c["metadata"]["annotations"] = json!({});
    apply(&fx.client, &ok_c).await;
    for (ns, name) in [(&a, "ok"), (&b, "ok"), (&b, "picked"), (&c, "ok")] {
        wait_jobset(&fx, ns, name).await;
    }
    eventually("tenant markers", TIMEOUT, || async {
        (owned_configmaps(&fx, &a).await == ["ok-team-a-marker"]
            && owned_configmaps(&fx, &b).await == ["ok-team-b-marker", "picked-extra-marker"])
        .then_some(())
    })
    .await;
    assert!(
        owned_configmaps(&fx, &c).await.is_empty(),
        "no tenant plugin serves {c}"
    );
    let marker_owner = get(
        &fx.client,
        "v1",
        "ConfigMap",
        Some(&b),
        "picked-extra-marker",
    )
    .await
    .unwrap();
    assert_eq!(
        marker_owner["metadata"]["ownerReferences"][0]["name"], "picked",
        "the selective plugin served only the labelled TrainJob"
    );

    step("2 a hostile tenant plugin is contained");
    let users: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(fx.client.clone(), &a);
    users
        .patch(
            "unrelated-data",
            &PatchParams::apply("a-user"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "unrelated-data"}, "data": {"k": "precious"}})),
        )
        .await
        .unwrap();
    let b_before = owned_configmaps(&fx, &b).await;
    let pod = "/templateSpec/obj/replicatedJobs/0/template/spec/template/spec";
    let set = |pointer: String, value: Value| json!({"set": [{"phase": "enforce-pod-spec", "target": "info", "pointer": pointer, "value": value}]});
    let emit = |o: Value| json!({"emit": [o]});
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "other-namespace",
            emit(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "planted", "namespace": b.clone()}})),
            vec![PLUGIN, "ForbiddenObject"],
        ),
        (
            "role",
            emit(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "r"}, "rules": []}),
            ),
            vec![PLUGIN, "ForbiddenObject"],
        ),
        (
            "pod",
            emit(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]}}),
            ),
            vec![PLUGIN, "ForbiddenObject"],
        ),
        (
            "cluster-role",
            emit(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "tenant-escalation"}, "rules": []}),
            ),
            vec![PLUGIN, "ForbiddenObject"],
        ),
        (
            "unrelated",
            emit(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "unrelated-data"}, "data": {"k": "pwned"}})),
            vec!["already exists", "not controlled by this TrainJob"],
        ),
        (
            "other-job",
            emit(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "ok-team-a-marker"}, "data": {"by": "thief"}})),
            vec![PLUGIN, "ForbiddenObject", "not derived from the TrainJob's"],
        ),
        (
            // The hostfile the MPI builtin (a cluster plugin) declares for
            // TrainJob `declared-b`, taken before it exists.
            "declared",
            emit(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "{trainjob}-b-mpi-hostfile"}})),
            vec![
                PLUGIN,
                "ForbiddenObject",
                "plugin mpi's naming rule",
                "declared-b",
            ],
        ),
        (
            "privileged",
            set(
                format!("{pod}/containers/0/securityContext/privileged"),
                json!(true),
            ),
            vec![PLUGIN, "PodSecurity", "privileged"],
        ),
        (
            "escalation",
            set(
                format!("{pod}/containers/0/securityContext/allowPrivilegeEscalation"),
                json!(true),
            ),
            vec![PLUGIN, "PodSecurity", "restricted"],
        ),
        (
            "host-path",
            set(
                format!("{pod}/volumes"),
                json!([{"name": "root", "hostPath": {"path": "/"}}]),
            ),
            vec![PLUGIN, "PodSecurity", "hostPath"],
        ),
        (
            "service-account",
            set(format!("{pod}/serviceAccountName"), json!("cluster-admin")),
            vec![PLUGIN, "PodSecurity", "serviceAccountName"],
        ),
        (
            "image",
            set(
                format!("{pod}/containers/0/image"),
                json!("evil.example/miner:1"),
            ),
            vec![PLUGIN, "PodSecurity", "evil.example/miner"],
        ),
        (
            "secret-env",
            set(
                format!("{pod}/containers/0/envFrom"),
                json!([{"secretRef": {"name": "a-secret"}}]),
            ),
            vec![PLUGIN, "PodSecurity", "grants.pod.secretNames"],
        ),
        (
            "gpu-hoard",
            set(
                format!("{pod}/containers/0/resources"),
                json!({"limits": {"nvidia.com/gpu": 64}}),
            ),
            vec![PLUGIN, "PodSecurity", "grants.pod.resources"],
        ),
        (
            "config-env",
            set(
                format!("{pod}/containers/0/envFrom"),
                json!([{"configMapRef": {"name": "a-config"}}]),
            ),
            vec![PLUGIN, "PodSecurity", "grants.pod.configMapNames"],
        ),
        (
            "control-plane",
            set(
                format!("{pod}/tolerations"),
                json!([{"operator": "Exists"}]),
            ),
            vec![PLUGIN, "PodSecurity", "grants.pod.nodePlacement"],
        ),
        (
            "dns-hijack",
            set(format!("{pod}/dnsPolicy"), json!("None")),
            vec![PLUGIN, "PodSecurity", "grants.pod.dns"],
        ),
        ("spin", json!({"attack": "loop"}), vec![PLUGIN, "Timeout"]),
        (
            "hoard",
            json!({"attack": "alloc"}),
            vec![PLUGIN, "MemoryLimit"],
        ),
    ];
    for (name, attack, _) in &cases {
        apply(&fx.client, &attacked(&a, name, PLUGIN, attack.clone())).await;
    }
    for (name, _, words) in &cases {
        let note = wait_warning(&fx.client, &a, name, words).await;
        assert!(note.len() <= 1024, "{note}");
    }
    // The other tenant is served meanwhile.
    apply(&fx.client, &plain(&b, "during-attacks", json!({}))).await;
    wait_jobset(&fx, &b, "during-attacks").await;
    for (name, _, _) in &cases {
        assert!(
            get(&fx.client, JOBSET, "JobSet", Some(&a), name)
                .await
                .is_none(),
            "nothing built for {name}"
        );
    }
    assert!(
        get(&fx.client, "v1", "ConfigMap", Some(&b), "planted")
            .await
            .is_none()
    );
    assert!(
        get(
            &fx.client,
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "tenant-escalation"
        )
        .await
        .is_none()
    );
    let user = get(&fx.client, "v1", "ConfigMap", Some(&a), "unrelated-data")
        .await
        .unwrap();
    assert_eq!(user["data"]["k"], "precious");
    let stolen = get(&fx.client, "v1", "ConfigMap", Some(&a), "ok-team-a-marker")
        .await
        .unwrap();
    assert_eq!(stolen["data"]["by"], "team-a");
    assert_eq!(
        owned_configmaps(&fx, &b).await,
        b_before,
        "nothing landed in {b}"
    );
    // Reads: Secrets are never served to a tenant plugin, other namespaces
    // neither.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(fx.client.clone(), &a);
    secrets
        .patch(
            "a-secret",
            &PatchParams::apply("a-user"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "a-secret"}, "stringData": {"token": "TOP-SECRET"}})),
        )
        .await
        .unwrap();
    for (name, kind, ns) in [
        ("steal-secret", "Secret", a.as_str()),
        ("peek-b", "ConfigMap", b.as_str()),
    ] {
        let target = if kind == "Secret" {
            "a-secret"
        } else {
            "ok-team-b-marker"
        };
        let read =
            json!({"read": {"apiVersion": "v1", "kind": kind, "namespace": ns, "name": target}});
        apply(&fx.client, &attacked(&a, name, PLUGIN, read)).await;
        let result = eventually(&format!("read-result of {name}"), TIMEOUT, || async {
            let cm = get(
                &fx.client,
                "v1",
                "ConfigMap",
                Some(&a),
                &format!("{name}-read-result"),
            )
            .await?;
            (cm["metadata"]["ownerReferences"][0]["name"] == name).then_some(cm)
        })
        .await;
        let text = result["data"]["result"].as_str().unwrap();
        assert!(text.starts_with("denied"), "{name}: {text}");
        assert!(!text.contains("TOP-SECRET"), "{name}: {text}");
        delete(&fx.client, TRAINJOB_API, "TrainJob", Some(&a), name).await;
        delete(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&a),
            &format!("{name}-read-result"),
        )
        .await;
    }
    // The tenant sees its plugin's failures on its TrainerPlugin.
    let on_plugin = wait_warning(&fx.client, &a, "env", &["Timeout"]).await;
    assert!(on_plugin.contains("TrainJob spin"), "{on_plugin}");
    for (name, _, _) in &cases {
        delete(&fx.client, TRAINJOB_API, "TrainJob", Some(&a), name).await;
    }

    step("3 foreign sources and requests beyond the ceiling are refused");
    let mut foreign = trainer_plugin(&a, "foreign", "env-module", &bytes, json!({}));
    foreign["spec"]["source"]["configMap"]["namespace"] = json!(b.clone());
    let out = create(&fx.client, &foreign, false).await;
    assert_eq!(out.code, 403, "{out:?}");
    assert!(
        out.message
            .contains("spec.source.configMap.namespace: Forbidden"),
        "{}",
        out.message
    );
    assert!(
        get(&fx.client, TF, "TrainerPlugin", Some(&a), "foreign")
            .await
            .is_none()
    );
    for (name, extra, want) in [
        (
            "slow",
            json!({"limits": {"timeout": "5s"}}),
            "spec.limits.timeout",
        ),
        (
            "roles",
            json!({"allowedKinds": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}]}),
            "spec.allowedKinds",
        ),
        (
            "root",
            json!({"grants": {"pod": {"privileged": true}}}),
            "pod.privileged",
        ),
        (
            "secrets",
            json!({"allowedReads": [{"apiVersion": "v1", "kind": "Secret"}]}),
            "spec.allowedReads",
        ),
    ] {
        apply(
            &fx.client,
            &trainer_plugin(&a, name, "env-module", &bytes, extra),
        )
        .await;
        let o = wait_tp(&fx, &a, name, false).await;
        let (status, reason, message) = cond(&o, "WithinPolicy");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ExceedsPolicy"),
            "{name}: {message}"
        );
        assert!(message.contains(want), "{name}: {message}");
        delete(&fx.client, TF, "TrainerPlugin", Some(&a), name).await;
    }

    step("4 the ceiling tightened live");
    let policy = |kinds: Value| {
        json!({"apiVersion": TF, "kind": "TrainerPluginPolicy", "metadata": {"name": "default"},
            "spec": {"namespaceSelector": {"matchLabels": {TENANT_LABEL: "enabled"}}, "allowedKinds": kinds}})
    };
    apply(
        &fx.client,
        &policy(json!([{"apiVersion": "v1", "kind": "Secret"}])),
    )
    .await;
    for ns in [&a, &b] {
        let o = wait_tp(&fx, ns, "env", false).await;
        let (_, reason, message) = cond(&o, "WithinPolicy");
        assert_eq!(reason, "ExceedsPolicy", "{message}");
        assert!(message.contains("v1/ConfigMap"), "{message}");
        assert!(
            o["status"]["servingDigest"].is_null(),
            "out of service: {o}"
        );
    }
    let mut after = plain(&a, "after-tightening", json!({}));
    after["metadata"]["annotations"] =
        json!({"hostile.trainforge.dev/team-env": marker("late").to_string()});
    apply(&fx.client, &after).await;
    wait_jobset(&fx, &a, "after-tightening").await;
    assert!(
        get(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&a),
            "after-tightening-late-marker"
        )
        .await
        .is_none()
    );
    for d in docs(&root().join("manifests/tenants/policy.yaml"), None) {
        apply(&fx.client, &d).await;
    }
    for ns in [&a, &b] {
        wait_tp(&fx, ns, "env", true).await;
    }

    step("5 per-tenant metrics");
    let text = fx.op.scrape().await;
    let calls = |ns: &str| {
        metric(
            &text,
            "trainforge_tenant_plugin_calls_total",
            &[("namespace", ns), ("plugin", PLUGIN)],
        )
    };
    assert!(calls(&a) > 0.0 && calls(&b) > 0.0, "{text}");
    assert_eq!(calls(&c), 0.0);
    assert!(
        metric(
            &text,
            "trainforge_tenant_plugin_failures_total",
            &[("namespace", &a), ("plugin", PLUGIN), ("reason", "Timeout")]
        ) > 0.0
    );
    assert_eq!(
        metric(
            &text,
            "trainforge_tenant_plugin_failures_total",
            &[("namespace", &b)]
        ),
        0.0,
        "tenant B failed nothing"
    );

    step("5b a failing tenant plugin with failurePolicy Ignore is skipped");
    let mut tolerated = plain(&b, "tolerated", json!({"example.com/extra": "yes"}));
    tolerated["metadata"]["annotations"] = json!({
        "hostile.trainforge.dev/team-env": "{}",
        "hostile.trainforge.dev/team-extra": json!({"attack": "loop"}).to_string(),
    });
    apply(&fx.client, &tolerated).await;
    wait_jobset(&fx, &b, "tolerated").await;
    let text = fx.op.scrape().await;
    assert!(
        metric(
            &text,
            "trainforge_tenant_plugin_failures_total",
            &[
                ("namespace", &b),
                ("plugin", "team-extra"),
                ("reason", "Timeout")
            ]
        ) > 0.0,
        "the ignored failure is counted"
    );

    step("6 figure: tenant A's latency while tenant B's plugin spins");
    const N: usize = 8;
    let quiet = jobset_latencies(&fx, &a, "quiet", N).await;
    apply(
        &fx.client,
        &trainer_plugin(
            &b,
            "env",
            "env-module",
            &bytes,
            json!({"config": {"attack": "loop"}}),
        ),
    )
    .await;
    wait_tp(&fx, &b, "env", true).await;
    for i in 0..6 {
        let mut spinner = plain(&b, &format!("spinner-{i}"), json!({}));
        spinner["metadata"]["annotations"] = json!({});
        apply(&fx.client, &spinner).await;
    }
    wait_warning(&fx.client, &b, "spinner-0", &[PLUGIN, "Timeout"]).await;
    let busy = jobset_latencies(&fx, &a, "busy", N).await;
    let (q50, q90, b50, b90) = (
        percentile(&quiet, 0.5),
        percentile(&quiet, 0.9),
        percentile(&busy, 0.5),
        percentile(&busy, 0.9),
    );
    step(&format!(
        "create -> JobSet in {a} (n={N}): alone p50 {:.0} ms p90 {:.0} ms; while {b}'s plugin spins to its 1 s limit on 6 TrainJobs p50 {:.0} ms p90 {:.0} ms (ratio p50 {:.2}, p90 {:.2})",
        q50.as_secs_f64() * 1e3,
        q90.as_secs_f64() * 1e3,
        b50.as_secs_f64() * 1e3,
        b90.as_secs_f64() * 1e3,
        b50.as_secs_f64() / q50.as_secs_f64().max(1e-9),
        b90.as_secs_f64() / q90.as_secs_f64().max(1e-9),
    ));
    let text = fx.op.scrape().await;
    assert!(
        metric(
            &text,
            "trainforge_tenant_plugin_failures_total",
            &[("namespace", &b), ("reason", "Timeout")]
        ) > 0.0
    );
    for i in 0..6 {
        delete(
            &fx.client,
            TRAINJOB_API,
            "TrainJob",
            Some(&b),
            &format!("spinner-{i}"),
        )
        .await;
    }

    step("7 a failing new spec keeps the last good version serving, across a restart");
    let mut broken = trainer_plugin(
        &a,
        "env",
        "gone",
        &bytes,
        json!({"config": marker("team-a")}),
    );
    broken["spec"]["source"]["configMap"]["name"] = json!("gone");
    apply(&fx.client, &broken).await;
    let o = eventually("env Degraded", TIMEOUT, || async {
        let o = get(&fx.client, TF, "TrainerPlugin", Some(&a), "env").await?;
        (condition(&o, "Degraded")?["status"] == "True"
            && o["status"]["observedGeneration"] == o["metadata"]["generation"])
            .then_some(o)
    })
    .await;
    assert_eq!(cond(&o, "Ready").1, "ServingLastKnownGood", "{o}");
    let digest = o["status"]["servingDigest"].clone();
    fx.op.kill();
    fx.op.restart("operator-tenants-2");
    fx.op.wait_ready().await;
    let mut after = plain(&a, "after-restart", json!({}));
    after["metadata"]["annotations"] =
        json!({"hostile.trainforge.dev/team-env": marker("restored").to_string()});
    apply(&fx.client, &after).await;
    wait_jobset(&fx, &a, "after-restart").await;
    let restored = eventually("the restored plugin's marker", TIMEOUT, || {
        get(
            &fx.client,
            "v1",
            "ConfigMap",
            Some(&a),
            "after-restart-restored-marker",
        )
    })
    .await;
    assert_eq!(
        restored["metadata"]["ownerReferences"][0]["name"],
        "after-restart"
    );
    let o = get(&fx.client, TF, "TrainerPlugin", Some(&a), "env")
        .await
        .unwrap();
    assert_eq!(o["status"]["servingDigest"], digest);

    step("8 an https source cannot reach the cluster's network or the metadata address");
    for (name, url) in [
        (
            "metadata-probe",
            "https://169.254.169.254/latest/meta-data/plugin.wasm",
        ),
        ("apiserver-probe", "https://127.0.0.1:6443/plugin.wasm"),
    ] {
        apply(
            &fx.client,
            &json!({"apiVersion": TF, "kind": "ClusterTrainerPlugin", "metadata": {"name": name},
                "spec": {"source": {"url": url}, "sha256": "0".repeat(64)}}),
        )
        .await;
        let o = eventually(&format!("{name} refused"), TIMEOUT, || async {
            let o = get(&fx.client, TF, "ClusterTrainerPlugin", None, name).await?;
            (condition(&o, "Fetched")?["status"] == "False").then_some(o)
        })
        .await;
        let (_, reason, message) = cond(&o, "Fetched");
        assert_eq!(reason, "AddressNotAllowed", "{message}");
        delete(&fx.client, TF, "ClusterTrainerPlugin", None, name).await;
    }

    step("9 tenants' slow compiles never hold up a cluster plugin's");
    let queued = Instant::now();
    // Both are fetched and queued to compile (one at a time for tenants).
    queue_slow_compiles(&fx, &a, "slow", 3000).await;
    let slow = async |i: usize| {
        get(
            &fx.client,
            TF,
            "TrainerPlugin",
            Some(&a),
            &format!("slow-{i}"),
        )
        .await
    };
    // While they compile one at a time, their statuses say where each
    // stands: one compiling, the other queued behind it.
    let places = eventually(
        "the slow plugins' statuses showing their places in the compile slot",
        TIMEOUT,
        || async {
            let mut places = Vec::new();
            for i in 0..2 {
                let o = slow(i).await?;
                let c = condition(&o, "Compiled")?;
                (c["status"] == "Unknown" && c["reason"] == "Compiling").then_some(())?;
                places.push(c["message"].as_str()?.to_owned());
                (condition(&o, "Ready")?["reason"] == "Compiling").then_some(())?;
            }
            places.sort();
            (places[0] == "compiling in the tenants' compile slot"
                && places[1].ends_with(": 1 compile goes first"))
            .then_some(places)
        },
    )
    .await;
    step(&format!("  while queued: {places:?}"));
    let fresh =
        hostile_declaring(&json!({"name": "cluster-fresh", "emits": [["v1", "ConfigMap"]]}));
    let started = Instant::now();
    install_ready_cluster_plugin(&fx, "fresh-module", "fresh", &fresh).await;
    let fresh_ready = started.elapsed();
    let mut attempted = 0;
    for i in 0..2 {
        let o = slow(i).await.unwrap();
        attempted +=
            usize::from(condition(&o, "Compiled").is_some_and(|c| c["status"] != "Unknown"));
    }
    assert!(
        attempted < 2,
        "the cluster plugin waited for both tenants' slow compiles ({fresh_ready:?})"
    );
    step(&format!(
        "a cluster plugin compiled and served in {:.1}s while two tenants' crafted components queued for the tenants' compile slot",
        fresh_ready.as_secs_f64()
    ));
    delete(&fx.client, TF, "ClusterTrainerPlugin", None, "fresh").await;
    // They were real: each is refused for its compile, one after the other.
    for i in 0..2 {
        let name = format!("slow-{i}");
        let o = wait_tp(&fx, &a, &name, false).await;
        assert_eq!(cond(&o, "Compiled").1, "CompileLimit", "{o}");
        delete(&fx.client, TF, "TrainerPlugin", Some(&a), &name).await;
    }
    // Both compiles, one after the other.
    let both_slow = queued.elapsed();

    step("9b deleting tenant plugins cancels their compiles, queued or running");
    // One compiles, the other waits for the tenants' slot.
    queue_slow_compiles(&fx, &a, "slower", 3100).await;
    for i in 0..2 {
        delete(
            &fx.client,
            TF,
            "TrainerPlugin",
            Some(&a),
            &format!("slower-{i}"),
        )
        .await;
    }
    let next = hostile_declaring(&json!({"name": "after-cancel", "emits": [["v1", "ConfigMap"]]}));
    store_component(&fx.client, &a, "after-cancel-module", &next).await;
    let started = Instant::now();
    apply(
        &fx.client,
        &trainer_plugin(&a, "after-cancel", "after-cancel-module", &next, json!({})),
    )
    .await;
    wait_tp(&fx, &a, "after-cancel", true).await;
    let next_ready = started.elapsed();
    step(&format!(
        "the namespace's next plugin served {:.1}s after two slow compiles were deleted (the two took {:.1}s when left to run)",
        next_ready.as_secs_f64(),
        both_slow.as_secs_f64()
    ));
    assert!(
        next_ready * 3 < both_slow,
        "the deleted plugins' compiles still ran: {next_ready:?}, against {both_slow:?} for both"
    );
    delete(&fx.client, TF, "TrainerPlugin", Some(&a), "after-cancel").await;

    step("10 a tenant plugin named as a cluster plugin is refused, and its namespace goes on");
    let shared = hostile_declaring(&json!({"name": "shared-name", "emits": [["v1", "ConfigMap"]]}));
    install_ready_cluster_plugin(&fx, "shared-module", "shared", &shared).await;
    store_component(&fx.client, &a, "shadow-module", &shared).await;
    apply(
        &fx.client,
        &trainer_plugin(&a, "shadow", "shadow-module", &shared, json!({})),
    )
    .await;
    let o = wait_tp(&fx, &a, "shadow", false).await;
    let (_, reason, message) = cond(&o, "Compiled");
    assert_eq!(reason, "DuplicateName", "{message}");
    assert!(
        message.contains("also served by a ClusterTrainerPlugin"),
        "{message}"
    );
    // Not a namespace blocked behind a TrainerPlugin that reads Ready.
    apply(&fx.client, &plain(&a, "after-clash", json!({}))).await;
    wait_jobset(&fx, &a, "after-clash").await;
    // The cluster plugin goes: the tenant's is decided again and serves.
    delete(&fx.client, TF, "ClusterTrainerPlugin", None, "shared").await;
    wait_tp(&fx, &a, "shadow", true).await;
    step("  refused as DuplicateName while the cluster served the name; serving once it did not");
    delete(&fx.client, TF, "TrainerPlugin", Some(&a), "shadow").await;

    step("11 maxPluginsPerNamespace holds when a newcomer's name sorts first");
    let present = Api::<TrainerPlugin>::namespaced(fx.client.clone(), &a)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    let shipped = docs(&root().join("manifests/tenants/policy.yaml"), None)
        .into_iter()
        .find(|d| d["kind"] == "TrainerPluginPolicy")
        .unwrap();
    let mut capped = shipped.clone();
    capped["spec"]["maxPluginsPerNamespace"] = json!(present + 2);
    apply(&fx.client, &capped).await;
    // Two plugins fill the cap; the third is created last with the name
    // that sorts first (a second later: creation times have seconds, and
    // within one second names decide).
    for name in ["cap-y", "cap-z", "cap-a"] {
        if name == "cap-a" {
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let component = hostile_declaring(&json!({"name": name, "emits": [["v1", "ConfigMap"]]}));
        store_component(&fx.client, &a, &format!("{name}-module"), &component).await;
        apply(
            &fx.client,
            &trainer_plugin(&a, name, &format!("{name}-module"), &component, json!({})),
        )
        .await;
        if name != "cap-a" {
            wait_tp(&fx, &a, name, true).await;
        }
    }
    let o = wait_tp(&fx, &a, "cap-a", false).await;
    let (_, reason, message) = cond(&o, "WithinPolicy");
    assert_eq!(reason, "ExceedsPolicy", "{message}");
    assert!(
        message.contains(&format!("maxPluginsPerNamespace ({})", present + 2)),
        "{message}"
    );
    for name in ["cap-y", "cap-z"] {
        let o = wait_tp(&fx, &a, name, true).await;
        assert!(
            !o["status"]["servingDigest"].is_null(),
            "{name} keeps serving: {o}"
        );
    }
    // A place frees up: the newcomer is decided again and serves.
    delete(&fx.client, TF, "TrainerPlugin", Some(&a), "cap-y").await;
    wait_tp(&fx, &a, "cap-a", true).await;
    step("  the newcomer refused, the two before it serving; it serves once one is deleted");
    for name in ["cap-z", "cap-a"] {
        delete(&fx.client, TF, "TrainerPlugin", Some(&a), name).await;
    }

    step("12 tenants trust only the keys the policy lists");
    let (vendor_private, vendor_public) = cosign::generate().unwrap();
    let (own_private, own_public) = cosign::generate().unwrap();
    let mut trusting = shipped.clone();
    trusting["spec"]["trustedKeys"] = json!([{"name": "vendor", "publicKey": vendor_public}]);
    apply(&fx.client, &trusting).await;
    for (name, private, public) in [
        ("self-signed", &own_private, &own_public),
        ("vendor-signed", &vendor_private, &vendor_public),
    ] {
        let component = hostile_declaring(&json!({"name": name, "emits": [["v1", "ConfigMap"]]}));
        let signature = cosign::SigningKey::from_pem(private.as_bytes())
            .unwrap()
            .sign(&component)
            .unwrap();
        let module = format!("{name}-module");
        store_signed_component(&fx.client, &a, &module, &component, &signature).await;
        // The tenant calls its key "mine" either way: keys are compared by
        // key, not by name.
        let verification =
            json!({"verification": {"keys": [{"name": "mine", "publicKey": public}]}});
        apply(
            &fx.client,
            &trainer_plugin(&a, name, &module, &component, verification),
        )
        .await;
    }
    let o = wait_tp(&fx, &a, "self-signed", false).await;
    let (_, reason, message) = cond(&o, "WithinPolicy");
    assert_eq!(reason, "ExceedsPolicy", "{message}");
    assert!(
        message.contains("spec.verification.keys[mine]") && message.contains("trustedKeys"),
        "{message}"
    );
    let o = wait_tp(&fx, &a, "vendor-signed", true).await;
    let (_, reason, message) = cond(&o, "Verified");
    assert_eq!(reason, "SignatureVerified", "{message}");
    step("  a key the tenant made itself refused; the policy's key, under another name, verified");
    for name in ["self-signed", "vendor-signed"] {
        delete(&fx.client, TF, "TrainerPlugin", Some(&a), name).await;
    }
    apply(&fx.client, &shipped).await;

    step("13 after a restart, a TrainJob waiting for its namespace's tenant plugins says so");
    // A TrainerPlugin that takes long to compile (and fails), applied just
    // before the operator is killed, is new to the restarted operator: its
    // namespace's TrainJobs wait for it.
    let slow = slow_to_compile_component(3300, 600);
    store_component(&fx.client, &b, "slow-at-start", &slow).await;
    apply(
        &fx.client,
        &trainer_plugin(&b, "slow-at-start", "slow-at-start", &slow, json!({})),
    )
    .await;
    fx.op.kill();
    fx.op.restart("operator-tenants-3");
    fx.op.wait_ready().await;
    apply(&fx.client, &plain(&b, "waits-for-tenants", json!({}))).await;
    let trainjob = || {
        get(
            &fx.client,
            TRAINJOB_API,
            "TrainJob",
            Some(&b),
            "waits-for-tenants",
        )
    };
    let waiting = eventually(
        "PluginsReady=False TenantPluginsLoading",
        TIMEOUT,
        || async {
            let o = trainjob().await?;
            let c = condition(&o, "PluginsReady")?.clone();
            (c["reason"] == "TenantPluginsLoading").then_some(c)
        },
    )
    .await;
    assert_eq!(waiting["status"], "False", "{waiting}");
    let message = waiting["message"].as_str().unwrap();
    assert!(message.contains(&format!("namespace {b}")), "{message}");
    assert!(
        get(&fx.client, JOBSET, "JobSet", Some(&b), "waits-for-tenants")
            .await
            .is_none(),
        "built before the namespace's tenant plugins were loaded"
    );
    // The compile ends (refused): the TrainJob is built and the condition goes.
    wait_jobset(&fx, &b, "waits-for-tenants").await;
    eventually("PluginsReady removed", TIMEOUT, || async {
        let o = trainjob().await?;
        condition(&o, "PluginsReady").is_none().then_some(())
    })
    .await;
    step(
        "  PluginsReady=False TenantPluginsLoading while it waited; built, and the condition gone, once loaded",
    );
    delete(&fx.client, TF, "TrainerPlugin", Some(&b), "slow-at-start").await;
    fx.op.wait_ready().await;
}

/// Two `TrainerPlugin`s `<prefix>-0` and `<prefix>-1` in `ns` whose
/// components are crafted to be slow to compile (`seed` makes them differ
/// from other steps'), given 2 s to be fetched and queued.
async fn queue_slow_compiles(fx: &Fx, ns: &str, prefix: &str, seed: usize) {
    for i in 0..2 {
        let slow = slow_to_compile_component(seed + i, 600);
        let name = format!("{prefix}-{i}");
        store_component(&fx.client, ns, &name, &slow).await;
        apply(
            &fx.client,
            &trainer_plugin(ns, &name, &name, &slow, json!({})),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// [`store_component`] with a blob signature beside it (`plugin.wasm.sig`,
/// in `data` as `kubectl create configmap --from-file` puts it).
async fn store_signed_component(
    client: &kube::Client,
    ns: &str,
    name: &str,
    bytes: &[u8],
    sig: &str,
) {
    store_component(client, ns, name, bytes).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    cms.patch(
        name,
        &PatchParams::apply("trainforge-tests-signature"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"plugin.wasm.sig": sig}})),
    )
    .await
    .unwrap();
}
