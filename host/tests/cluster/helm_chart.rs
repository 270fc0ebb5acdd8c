//! The Helm chart (`manifests/chart/`) with the real `helm` (v4, built by
//! `testenv/build.sh` from its Go module, as a platform team runs it):
//!
//! - `helm lint --strict` is clean, with the defaults and with every
//!   optional part on;
//! - it renders what `kubectl kustomize manifests` renders (the chart and
//!   the kustomize install must not drift): with the defaults, and with the
//!   cert-manager and monitoring values against the kustomize components;
//!   the only difference allowed is Helm's release labels and the release
//!   namespace itself (`helm install --create-namespace` makes it);
//! - the release namespace reaches every reference, each value reaches the
//!   objects it names, and bad values are refused naming the value;
//! - on the test control plane, `helm install` into a namespace of its own,
//!   then the operator run as the chart's ServiceAccount with the chart's
//!   arguments runs a TrainJob through admission to Complete; `helm
//!   upgrade` changes the runtime set and keeps the webhooks' CA bundle
//!   (admission still answers); `helm uninstall` removes the release and
//!   keeps the CRDs and the TrainJobs; a render with every value set is
//!   accepted by the API server (dry run).
//!
//! `helm` is `$HELM`, else the testenv binary cache, else `PATH`; `kubectl`
//! as in `manifests.rs`. Without them the tests skip with a note on stderr
//! (a failure under `TRAINFORGE_TESTENV_REQUIRED=1`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use trainforge_testenv::{Mode, TestEnv};

use crate::manifests::{find_kubectl, find_tool, kustomize};
use crate::operator_common::{
    Operator, apply, eventually, get, is_true, root, trainjob, trainjob_object, wait_admission,
    webhook_front,
};

/// The release name the tests install and render.
const RELEASE: &str = "trainforge";
/// The namespace the kustomize install uses (and the chart by default).
const DEFAULT_NS: &str = "trainforge-system";
/// The release namespace of the install test: not the default, so every
/// reference to the namespace must follow the release.
const INSTALL_NS: &str = "ml-platform";
/// The labels Helm's conventions add to every object of a release.
const RELEASE_LABELS: [&str; 3] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
];

fn chart() -> PathBuf {
    root().join("manifests/chart")
}

fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "helm chart test: {msg}");
}

/// `helm` and `kubectl`, or `None` (skip; a failure when the testenv is
/// required).
fn tools() -> Option<(PathBuf, PathBuf)> {
    match (find_tool("HELM", "helm"), find_kubectl()) {
        (Some(h), Some(k)) => Some((h, k)),
        (h, k) => {
            let missing = [("helm", h.is_none()), ("kubectl", k.is_none())]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(" and ");
            assert!(
                !trainforge_testenv::required(),
                "no {missing} (testenv/build.sh builds helm; kubectl is on PATH)"
            );
            note(&format!("SKIPPING: no {missing}"));
            None
        }
    }
}

/// Run `helm args…`; `Ok(stdout)` or `Err(stderr)`.
fn helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm)
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            root().join("target/helm-chart-test/cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            root().join("target/helm-chart-test/config"),
        )
        .env("HELM_DATA_HOME", root().join("target/helm-chart-test/data"))
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stderr}{stdout}"))
    }
}

fn helm_ok(h: &Path, args: &[&str]) -> String {
    helm(h, args).unwrap_or_else(|e| panic!("helm {} failed:\n{e}", args.join(" ")))
}

/// `helm template` of the chart in `ns` with `extra` arguments, CRDs
/// included, as JSON objects.
fn render(h: &Path, ns: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        ns,
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    let text = helm_ok(h, &args);
    trainforge_testenv::manifests::parse_yaml_docs(&text).unwrap()
}

type Key = (String, String, String);

fn key(obj: &Value) -> Key {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
}

fn by_key(objs: Vec<Value>, what: &str) -> BTreeMap<Key, Value> {
    let mut out = BTreeMap::new();
    for o in objs {
        let k = key(&o);
        assert!(out.insert(k.clone(), o).is_none(), "{what}: {k:?} twice");
    }
    out
}

/// `obj` without Helm's release labels, which every templated object
/// must carry (the CRDs of `crds/` are not templated and carry none).
fn without_release_labels(mut obj: Value) -> Value {
    if obj["kind"] == "CustomResourceDefinition" {
        return obj;
    }
    let k = key(&obj);
    let labels = obj
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{k:?} has no labels"));
    for l in RELEASE_LABELS {
        assert!(labels.remove(l).is_some(), "{k:?} lacks the label {l}");
    }
    if labels.is_empty() {
        obj["metadata"].as_object_mut().unwrap().remove("labels");
    }
    obj
}

/// The first JSON pointer where `a` and `b` differ, with both values.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{at}/{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}/{i}"))),
        // `1.0` and `1` are one number (YAML parsers differ in which they keep).
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(format!("{at}: chart {a} / kustomize {b}")),
    }
}

/// The chart's objects are the kustomize install's, but for the release
/// labels and the release namespace's own Namespace.
fn assert_same_install(chart: Vec<Value>, kustomized: Vec<Value>) {
    let chart = by_key(
        chart.into_iter().map(without_release_labels).collect(),
        "chart",
    );
    let kustomized = by_key(kustomized, "kustomize");
    let only_chart: Vec<&Key> = chart
        .keys()
        .filter(|k| !kustomized.contains_key(*k))
        .collect();
    assert!(only_chart.is_empty(), "only in the chart: {only_chart:?}");
    let only_kustomize: Vec<&Key> = kustomized
        .keys()
        .filter(|k| !chart.contains_key(*k))
        .collect();
    assert_eq!(
        only_kustomize,
        vec![&("Namespace".to_owned(), String::new(), DEFAULT_NS.to_owned())],
        "only in the kustomize install"
    );
    let differences: Vec<String> = chart
        .iter()
        .filter_map(|(k, c)| first_difference(c, &kustomized[k], "").map(|d| format!("{k:?} {d}")))
        .collect();
    assert!(
        differences.is_empty(),
        "the chart drifted from manifests/:\n{}",
        differences.join("\n")
    );
    assert!(chart.len() > 40, "{} objects", chart.len());
}

/// A kustomization in `target/` (kustomize refuses absolute roots) over
/// `manifests/` with `resources` and `components` added.
fn scratch_kustomization(name: &str, resources: &[&str], components: &[&str]) -> PathBuf {
    let dir = root().join("target").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let list = |items: &[&str]| {
        items
            .iter()
            .map(|i| format!("  - ../../manifests/{i}\n"))
            .collect::<String>()
    };
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - ../../manifests\n{}components:\n{}",
            list(resources),
            list(components)
        ),
    )
    .unwrap();
    dir
}

const OPTIONAL_PARTS: &[&str] = &[
    "--set",
    "webhook.certManager.enabled=true",
    "--set",
    "metrics.serviceMonitor.enabled=true",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "metrics.dashboard.enabled=true",
];

#[test]
fn chart_lints_clean_with_defaults_and_every_optional_part() {
    let Some((h, _)) = tools() else {
        return;
    };
    let chart = chart();
    for extra in [&[][..], OPTIONAL_PARTS] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = helm_ok(&h, &args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}

#[test]
fn default_values_render_what_kustomize_installs() {
    let Some((h, k)) = tools() else {
        return;
    };
    assert_same_install(
        render(&h, DEFAULT_NS, &[]),
        kustomize(&k, &root().join("manifests")),
    );
}

#[test]
fn optional_values_render_what_the_kustomize_components_add() {
    let Some((h, k)) = tools() else {
        return;
    };
    let dir = scratch_kustomization(
        "helm-chart-test-optional",
        &["monitoring"],
        &["webhook/cert-manager"],
    );
    assert_same_install(render(&h, DEFAULT_NS, OPTIONAL_PARTS), kustomize(&k, &dir));
}

/// Namespaced objects and every reference to the operator's namespace
/// (RBAC subjects, the webhooks' Service, certificate names, the
/// ServiceMonitor's selector, cert-manager's CA injection) follow the
/// release namespace; the public ConfigMap stays where the SDK reads it.
#[test]
fn the_release_namespace_reaches_every_reference() {
    let Some((h, _)) = tools() else {
        return;
    };
    let objs = render(&h, INSTALL_NS, OPTIONAL_PARTS);
    for o in &objs {
        let text = o.to_string();
        assert!(
            !text.contains(DEFAULT_NS),
            "{:?} names {DEFAULT_NS}: {text}",
            key(o)
        );
        let ns = o.pointer("/metadata/namespace").and_then(Value::as_str);
        if let Some(ns) = ns {
            assert!(
                ns == INSTALL_NS || ns == "kubeflow-system",
                "{:?} in namespace {ns}",
                key(o)
            );
        }
    }
    let find = |kind: &str, name: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    assert_eq!(
        find("ClusterRoleBinding", "trainforge-operator")["subjects"][0]["namespace"],
        INSTALL_NS
    );
    for hook in find(
        "ValidatingWebhookConfiguration",
        "validator.trainer.kubeflow.org",
    )["webhooks"]
        .as_array()
        .unwrap()
    {
        assert_eq!(
            hook["clientConfig"]["service"]["namespace"], INSTALL_NS,
            "{hook}"
        );
    }
    assert_eq!(
        find("Certificate", "trainforge-webhook-cert")["spec"]["dnsNames"][0],
        format!("trainforge-webhook-service.{INSTALL_NS}.svc")
    );
    assert_eq!(
        find("ServiceMonitor", "trainforge-operator")["spec"]["namespaceSelector"]["matchNames"],
        json!([INSTALL_NS])
    );
    assert_eq!(
        find(
            "MutatingWebhookConfiguration",
            "defaulter.trainer.kubeflow.org"
        )["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{INSTALL_NS}/trainforge-webhook-cert")
    );
    assert_eq!(
        find("ConfigMap", "kubeflow-trainer-public")["metadata"]["namespace"],
        "kubeflow-system"
    );
}

/// Every value a platform team sets, at once.
const EVERY_VALUE: &str = r#"
image: {repository: registry.example.com/ml/trainforge, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
replicaCount: 3
leaderElection: {enabled: false}
resources:
  requests: {cpu: 250m, memory: 256Mi}
  limits: {cpu: null, memory: 2Gi}
nodeSelector: {node-role.kubernetes.io/infra: ""}
tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
priorityClassName: system-cluster-critical
podAnnotations: {example.com/scrape: "false"}
podLabels: {team: ml-platform}
logLevel: trainforge=debug,info
extraArgs: ["--concurrency=10", "--resync-seconds=300"]
pluginCache: {sizeLimit: 1Gi}
metrics: {port: 8444}
webhook: {port: 9444}
runtimes: [torch-distributed, xgboost-distributed]
plugins:
  builtin: [jobset, torch, xgboost]
  overrides:
    torch:
      source: {url: "oci://registry.example.com/plugins/torch@sha256:6d7e2c4f0a1b3c5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"}
      order: 610
  extra:
    - name: vendor-gang
      spec:
        source: {url: "oci://registry.example.com/plugins/gang@sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"}
        order: 700
tenants:
  roles: false
  policy: {enabled: false}
public: {enabled: false}
"#;

fn every_value_file() -> PathBuf {
    let dir = root().join("target/helm-chart-test");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("every-value.yaml");
    std::fs::write(&path, EVERY_VALUE).unwrap();
    path
}

#[test]
fn each_value_reaches_the_objects_it_names() {
    let Some((h, _)) = tools() else {
        return;
    };
    let values = every_value_file();
    let objs = render(&h, INSTALL_NS, &["--values", values.to_str().unwrap()]);
    let of = |kind: &str| -> Vec<&Value> { objs.iter().filter(|o| o["kind"] == kind).collect() };
    let names = |kind: &str| -> BTreeSet<String> {
        of(kind)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let d = of("Deployment");
    assert_eq!(d.len(), 1);
    let d = d[0];
    let pod = &d["spec"]["template"];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(c["image"], "registry.example.com/ml/trainforge:v1.2.3");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        pod["spec"]["imagePullSecrets"],
        json!([{"name": "regcred"}])
    );
    // Helm merges maps of values with the defaults: the CPU limit set to
    // null is dropped, the memory limit replaced, the requests kept whole.
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}})
    );
    assert_eq!(
        pod["spec"]["nodeSelector"],
        json!({"node-role.kubernetes.io/infra": ""})
    );
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert!(pod["spec"]["affinity"]["nodeAffinity"].is_object(), "{pod}");
    assert!(
        pod["spec"]["affinity"]["podAntiAffinity"].is_null(),
        "affinity replaces the default"
    );
    assert_eq!(pod["spec"]["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({"example.com/scrape": "false"})
    );
    assert_eq!(pod["metadata"]["labels"]["team"], "ml-platform");
    assert_eq!(
        d["spec"]["selector"],
        json!({"matchLabels": {"app.kubernetes.io/name": "trainforge-operator"}}),
        "pod labels stay out of the selector (it cannot change on upgrade)"
    );
    let env: BTreeMap<&str, &Value> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), &e["value"]))
        .collect();
    assert_eq!(env["RUST_LOG"], "trainforge=debug,info");
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--leader-elect") || a.starts_with("--lease-")),
        "{args:?}"
    );
    for want in [
        "--metrics-bind-address=:8444",
        "--webhook-bind-address=:9444",
        "--concurrency=10",
        "--resync-seconds=300",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    let ports: BTreeMap<&str, &Value> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), &p["containerPort"]))
        .collect();
    assert_eq!(
        (ports["metrics"], ports["webhook-server"]),
        (&json!(8444), &json!(9444))
    );
    let cache = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "plugin-cache")
        .unwrap();
    assert_eq!(cache["emptyDir"]["sizeLimit"], "1Gi");

    assert_eq!(
        names("ClusterTrainingRuntime"),
        ["torch-distributed", "xgboost-distributed"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        names("ClusterTrainerPlugin"),
        ["jobset", "torch", "vendor-gang", "xgboost"]
            .map(String::from)
            .into()
    );
    let plugin = |n: &str| {
        *of("ClusterTrainerPlugin")
            .iter()
            .find(|o| o["metadata"]["name"] == n)
            .unwrap()
    };
    let torch = plugin("torch");
    assert_eq!(
        torch["spec"]["source"]["url"],
        "oci://registry.example.com/plugins/torch@sha256:6d7e2c4f0a1b3c5d7e9f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"
    );
    assert!(torch["spec"]["source"].get("builtin").is_none(), "{torch}");
    assert_eq!(torch["spec"]["order"], 610);
    assert_eq!(
        torch["spec"]["allowedKinds"][0]["kind"], "HorizontalPodAutoscaler",
        "an override replaces only the fields it names"
    );
    let gang = plugin("vendor-gang");
    assert_eq!(gang["spec"]["order"], 700);
    assert_eq!(
        gang["metadata"]["labels"]["trainforge.dev/webhook-validation"],
        "disabled"
    );
    assert!(names("TrainerPluginPolicy").is_empty());
    assert!(!names("ClusterRole").contains("trainforge-trainerplugin-editor"));
    assert!(
        objs.iter()
            .all(|o| o["metadata"]["namespace"] != "kubeflow-system"
                && !(o["kind"] == "Namespace" && o["metadata"]["name"] == "kubeflow-system")),
        "public.enabled=false installs nothing in kubeflow-system"
    );
    // The public ConfigMap without its namespace (one that exists already).
    let objs = render(&h, INSTALL_NS, &["--set", "public.createNamespace=false"]);
    assert!(objs.iter().any(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "kubeflow-trainer-public"));
    assert!(!objs.iter().any(|o| o["kind"] == "Namespace"));
}

/// Values the chart cannot install are refused before anything reaches
/// the cluster, naming the value (the schema's JSON pointer, or the
/// template's message).
#[test]
fn bad_values_are_refused_naming_the_value() {
    let Some((h, _)) = tools() else {
        return;
    };
    let chart = chart();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--set", "replicaCount=two"],
            &["/replicaCount", "integer"],
        ),
        (&["--set", "replicas=3"], &["replicas", "not allowed"]),
        (
            &["--set", "image.pullPolicy=Sometimes"],
            &["/image/pullPolicy"],
        ),
        (
            &["--set", "plugins.builtin={torch,pytorch}"],
            &["/plugins/builtin/1"],
        ),
        (
            &["--set", "runtimes={torch-distributed,torch-distributed}"],
            &["/runtimes"],
        ),
        (
            &["--set", "runtimes={pytorch-distributed}"],
            &["/runtimes/0"],
        ),
        (
            &["--set", "plugins.overrides.pytorch.order=1"],
            &["/plugins/overrides", "pytorch"],
        ),
        (
            &[
                "--set",
                "plugins.builtin={torch}",
                "--set",
                "plugins.overrides.mpi.order=1",
            ],
            &["plugins.overrides", "\"mpi\" is not in plugins.builtin"],
        ),
        (
            &[
                "--set",
                "plugins.extra[0].name=torch",
                "--set",
                "plugins.extra[0].spec.source.builtin=torch",
            ],
            &["plugins.extra[0]", "\"torch\" is already a builtin plugin"],
        ),
        (
            &[
                "--set",
                "plugins.extra[0].name=Vendor_Gang",
                "--set",
                "plugins.extra[0].spec.source.url=x",
            ],
            &["/plugins/extra/0/name"],
        ),
        (
            &["--set", "plugins.extra[0].name=gang"],
            &["/plugins/extra/0", "spec"],
        ),
        (
            &["--set", "webhook.url=http://127.0.0.1:9443"],
            &["/webhook/url"],
        ),
        (&["--set", "metrics.port=70000"], &["/metrics/port"]),
        (
            &["--set", "resources.limits.memory=lots"],
            &["/resources/limits/memory"],
        ),
        (
            &["--set-json", r#"extraArgs=["concurrency=10"]"#],
            &["/extraArgs/0"],
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["template", RELEASE, chart.to_str().unwrap()];
        all.extend_from_slice(args);
        let err = match helm(&h, &all) {
            Ok(out) => panic!("{args:?} rendered:\n{}", &out[..out.len().min(400)]),
            Err(e) => e,
        };
        for w in *want {
            assert!(err.contains(w), "{args:?}: {w:?} not in:\n{err}");
        }
    }
}

// ---------------------------------------------------------------- on a cluster

fn env() -> Option<&'static TestEnv> {
    tools()?;
    trainforge_testenv::require!(Mode::Full)
}

/// The flags the chart's Deployment gives the operator that the test
/// harness does not set itself (it picks the addresses, the cache
/// directory and plain-HTTP metrics on a free port), with `$(POD_NAMESPACE)`
/// resolved and `--lease-namespace` as two words (the harness reads it as
/// the pod's namespace).
fn chart_operator_args(manifest: &[Value], ns: &str) -> Vec<String> {
    let d = manifest
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the release has a Deployment");
    let args = d
        .pointer("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array)
        .unwrap();
    let set_by_harness = [
        "--metrics-bind-address",
        "--metrics-secure",
        "--metrics-auth",
        "--health-probe-bind-address",
        "--plugin-cache-dir",
        "--webhook-bind-address",
    ];
    let mut out = Vec::new();
    for a in args.iter().skip(1) {
        let a = a.as_str().unwrap().replace("$(POD_NAMESPACE)", ns);
        let flag = a.split('=').next().unwrap_or_default();
        if set_by_harness.contains(&flag) {
            continue;
        }
        match a.split_once('=') {
            Some(("--lease-namespace", v)) => {
                out.push("--lease-namespace".to_owned());
                out.push(v.to_owned());
            }
            _ => out.push(a),
        }
    }
    out
}

async fn cluster_runtimes(client: &kube::Client) -> BTreeSet<String> {
    use trainforge_api::trainer::v1alpha1::ClusterTrainingRuntime;
    kube::Api::<ClusterTrainingRuntime>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter_map(|o| o.metadata.name)
        .collect()
}

#[tokio::test]
async fn helm_install_runs_a_trainjob_then_upgrade_and_uninstall_keep_what_they_should() {
    let Some(env) = env() else {
        return;
    };
    let (h, _) = tools().unwrap();
    let client = env.client().await.unwrap();
    let kc = env.kubeconfig().to_str().unwrap().to_owned();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    // No kube-proxy here: the API server reaches the operator through the
    // env's front at a URL (`webhook.url`), not through the Service. The
    // harness's own registrations of the configurations go: the release
    // owns them.
    let front = webhook_front(env);
    trainforge_testenv::webhooks::unregister(&client, &root())
        .await
        .unwrap();
    // A cluster without Trainforge: the env's own copy of the public
    // ConfigMap and its namespace go first (the chart installs them).
    crate::operator_common::delete(&client, "v1", "Namespace", None, "kubeflow-system").await;
    eventually(
        "namespace kubeflow-system deleted",
        Duration::from_secs(60),
        || async {
            get(&client, "v1", "Namespace", None, "kubeflow-system")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    let url = format!("webhook.url=https://{}", front.addr());
    let base = ["--namespace", INSTALL_NS, "--kubeconfig", kc.as_str()];

    let mut install = vec![
        "install",
        RELEASE,
        chart,
        "--create-namespace",
        "--set",
        &url,
    ];
    install.extend_from_slice(&base);
    let out = helm_ok(&h, &install);
    assert!(out.contains("STATUS: deployed"), "{out}");
    let mut get_manifest = vec!["get", "manifest", RELEASE];
    get_manifest.extend_from_slice(&base);
    let manifest =
        trainforge_testenv::manifests::parse_yaml_docs(&helm_ok(&h, &get_manifest)).unwrap();
    let args = chart_operator_args(&manifest, INSTALL_NS);
    assert_eq!(
        args,
        [
            "--leader-elect",
            "--lease-namespace",
            INSTALL_NS,
            "--webhook-cert-secret=trainforge-webhook-cert",
            "--webhook-service=trainforge-webhook-service"
        ]
    );

    // The operator with exactly the chart's permissions: its ServiceAccount's token.
    let sa = env.dir().join("helm-operator-sa.kubeconfig");
    trainforge_testenv::kubeconfig::write_service_account(
        env.kubeconfig(),
        INSTALL_NS,
        "trainforge-operator",
        3600,
        &sa,
    )
    .await
    .unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let op = Operator::start_as(env, "operator-helm", &args, &sa);
    op.wait_ready().await;
    let plugins: Vec<String> = manifest
        .iter()
        .filter(|o| o["kind"] == "ClusterTrainerPlugin")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(plugins.len(), 10, "{plugins:?}");
    for name in &plugins {
        eventually(
            &format!("ClusterTrainerPlugin {name} Ready"),
            Duration::from_secs(180),
            || async {
                let o = get(
                    &client,
                    "trainforge.dev/v1alpha1",
                    "ClusterTrainerPlugin",
                    None,
                    name,
                )
                .await?;
                is_true(&o, "Ready").then_some(())
            },
        )
        .await;
    }
    let lease = get(
        &client,
        "coordination.k8s.io/v1",
        "Lease",
        Some(INSTALL_NS),
        "trainforge-operator",
    )
    .await;
    assert!(lease.is_some(), "leader election in the release namespace");

    // The chart's webhook configurations reach the operator (a refusal
    // only the TrainJob webhook gives), then a TrainJob through them to
    // Complete, on the chart's runtime and plugins.
    let ns = env.create_namespace("helm-e2e").await.unwrap();
    wait_admission(&client, &ns).await;
    apply(
        &client,
        &trainjob_object(
            &ns,
            "llm",
            "torch-distributed",
            json!({"trainer": {"numNodes": 2}}),
        ),
    )
    .await;
    eventually(
        "TrainJob llm Complete",
        Duration::from_secs(180),
        || async {
            let t = trainjob(&client, &ns, "llm").await?;
            is_true(&t, "Complete").then_some(())
        },
    )
    .await;

    // Upgrade: fewer runtimes; the operator's CA bundle in the webhook
    // configurations survives (admission still answers), and so does the
    // certificate Secret the operator keeps.
    let mut upgrade = vec![
        "upgrade",
        RELEASE,
        chart,
        "--set",
        &url,
        "--set",
        "runtimes={torch-distributed}",
    ];
    upgrade.extend_from_slice(&base);
    helm_ok(&h, &upgrade);
    eventually(
        "runtimes pruned by the upgrade",
        Duration::from_secs(30),
        || async {
            (cluster_runtimes(&client).await == BTreeSet::from(["torch-distributed".to_owned()]))
                .then_some(())
        },
    )
    .await;
    for (kind, name) in [
        (
            "MutatingWebhookConfiguration",
            "defaulter.trainer.kubeflow.org",
        ),
        (
            "ValidatingWebhookConfiguration",
            "validator.trainer.kubeflow.org",
        ),
    ] {
        let c = get(&client, "admissionregistration.k8s.io/v1", kind, None, name)
            .await
            .unwrap();
        for hook in c["webhooks"].as_array().unwrap() {
            assert!(
                hook["clientConfig"]["caBundle"]
                    .as_str()
                    .is_some_and(|b| !b.is_empty()),
                "{kind} {name} lost its CA bundle in the upgrade: {hook}"
            );
        }
    }
    let refused = wait_admission(&client, &ns).await;
    assert!(refused.contains("absent-runtime"), "{refused}");
    apply(
        &client,
        &trainjob_object(&ns, "after-upgrade", "torch-distributed", json!({})),
    )
    .await;

    // Uninstall: the release's objects go; the CRDs (crds/ is never
    // deleted by Helm) and so the users' TrainJobs stay.
    op.kill();
    let mut uninstall = vec!["uninstall", RELEASE];
    uninstall.extend_from_slice(&base);
    helm_ok(&h, &uninstall);
    for (api, kind, ns, name) in [
        (
            "apps/v1",
            "Deployment",
            Some(INSTALL_NS),
            "trainforge-operator",
        ),
        (
            "trainforge.dev/v1alpha1",
            "ClusterTrainerPlugin",
            None,
            "torch",
        ),
        (
            "trainforge.dev/v1alpha1",
            "TrainerPluginPolicy",
            None,
            "default",
        ),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            None,
            "validator.trainer.kubeflow.org",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "trainforge-operator",
        ),
    ] {
        eventually(
            &format!("{kind} {name} uninstalled"),
            Duration::from_secs(30),
            || async {
                get(&client, api, kind, ns, name)
                    .await
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
    for crd in [
        "trainjobs.trainer.kubeflow.org",
        "clustertrainerplugins.trainforge.dev",
    ] {
        assert!(
            get(
                &client,
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                None,
                crd
            )
            .await
            .is_some(),
            "CRD {crd} kept"
        );
    }
    assert!(
        trainjob(&client, &ns, "llm").await.is_some(),
        "TrainJobs kept"
    );
}

/// What `each_value_reaches_the_objects_it_names` renders is accepted by
/// the API server (server-side apply, dry run): the values produce objects
/// the schemas (ours included) take.
#[tokio::test]
async fn a_render_with_every_value_is_accepted_by_the_api_server() {
    let Some(env) = env() else {
        return;
    };
    let (h, k) = tools().unwrap();
    let ns = env.create_namespace("helm-dry-run").await.unwrap();
    let values = every_value_file();
    let objs = render(&h, &ns, &["--values", values.to_str().unwrap()]);
    // The release's objects but the CRDs (installed in the env already).
    let docs: Vec<String> = objs
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
        .map(|o| o.to_string())
        .collect();
    assert!(docs.len() > 15, "{} objects", docs.len());
    let file = root().join("target/helm-chart-test/every-value-render.json");
    std::fs::write(
        &file,
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{}]}}",
            docs.join(",")
        ),
    )
    .unwrap();
    let out = Command::new(&k)
        .args([
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
        ])
        .args(["--field-manager", "helm-chart-test", "--kubeconfig"])
        .arg(env.kubeconfig())
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the API server refused the render:\n{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}
