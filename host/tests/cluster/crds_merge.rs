//! Merge semantics, defaults and printer columns of our CRDs on a real
//! kube-apiserver: list-maps keep the entries of several server-side-apply
//! managers, sets refuse duplicates, core-type defaults are filled in,
//! LocalObjectReference-like names may be omitted, MPI `numProcPerNode: 0` is
//! accepted, and `-o wide` shows the extra TrainJob columns.
//!
//! The Kubernetes list types and defaults come from `api/src/k8s_markers.json`;
//! the first test checks that file against the API server's own OpenAPI
//! documents (`TRAINFORGE_UPDATE_K8S_MARKERS=1` rewrites it from them).
//!
//! Skips (passes with a note on stderr) when the control plane is not built;
//! `TRAINFORGE_TESTENV_REQUIRED=1` makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use trainforge_api::k8s_markers;
use trainforge_testenv::{Mode, TestEnv};

fn env() -> Option<&'static TestEnv> {
    trainforge_testenv::require!(Mode::Api)
}

fn api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "TrainJob" => "trainjobs",
        "TrainingRuntime" => "trainingruntimes",
        other => panic!("unexpected kind {other}"),
    };
    let gvk = GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec})
}

/// A runtime spec with one replicated job `node` whose pod spec is `pod`.
fn runtime_spec(pod: Value) -> Value {
    json!({"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}}})
}

async fn apply(api: &Api<DynamicObject>, manager: &str, obj: &Value) -> Result<Value, kube::Error> {
    let name = obj["metadata"]["name"].as_str().unwrap();
    let out = api
        .patch(name, &PatchParams::apply(manager), &Patch::Apply(obj))
        .await?;
    Ok(serde_json::to_value(out).unwrap())
}

async fn create(api: &Api<DynamicObject>, obj: &Value) -> Result<Value, kube::Error> {
    let dynobj: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    let out = api.create(&PostParams::default(), &dynobj).await?;
    Ok(serde_json::to_value(out).unwrap())
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|e| {
            e.get("name")
                .or_else(|| e.get("manager"))
                .and_then(Value::as_str)
                .unwrap()
        })
        .collect()
}

/// GET `{prefix}/{last}` (the request builder appends a name to a path).
async fn get_json(client: &kube::Client, prefix: &str, last: &str) -> Value {
    let req = kube::core::Request::new(prefix)
        .get(last, &Default::default())
        .unwrap();
    client.request(req).await.unwrap()
}

#[tokio::test]
async fn k8s_markers_match_the_api_server() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let mut docs = Vec::new();
    for (prefix, last) in [
        ("/openapi/v3/api", "v1"),
        ("/openapi/v3/apis/batch", "v1"),
        ("/openapi/v3/apis/autoscaling", "v2"),
    ] {
        docs.push(get_json(&client, prefix, last).await);
    }
    let served = k8s_markers::extract(&docs).unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src/k8s_markers.json");
    if std::env::var_os("TRAINFORGE_UPDATE_K8S_MARKERS").is_some() {
        let text = serde_json::to_string_pretty(&served).unwrap();
        std::fs::write(&file, format!("{text}\n")).unwrap();
        return;
    }
    let checked_in = k8s_markers::embedded().unwrap();
    let stale: Vec<&String> = served
        .keys()
        .chain(checked_in.keys())
        .filter(|k| served.get(*k) != checked_in.get(*k))
        .collect();
    assert!(
        stale.is_empty(),
        "api/src/k8s_markers.json differs from the API server for {stale:?}; \
         regenerate with TRAINFORGE_UPDATE_K8S_MARKERS=1 and then the CRDs"
    );
    // The markers cover what the merge tests below rely on.
    assert_eq!(
        served["io.k8s.api.core.v1.Container"].properties["env"]["x-kubernetes-list-type"],
        "map"
    );
}

#[tokio::test]
async fn two_managers_keep_their_env_entries_in_a_runtime_pod_template() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("crds-merge-env").await.unwrap();
    let runtimes = api(&client, "TrainingRuntime", &ns);
    let gitops = object(
        "TrainingRuntime",
        "rt",
        runtime_spec(json!({"containers": [{"name": "node", "image": "busybox",
            "env": [{"name": "FROM_GITOPS", "value": "1"}]}]})),
    );
    apply(&runtimes, "gitops", &gitops).await.unwrap();
    // A second manager adds one env entry and one container; with atomic
    // lists this would conflict with (or replace) the first manager's.
    let tuner = object(
        "TrainingRuntime",
        "rt",
        runtime_spec(json!({"containers": [
            {"name": "node", "env": [{"name": "FROM_TUNER", "value": "2"}]},
            {"name": "sidecar", "image": "busybox"}]})),
    );
    apply(&runtimes, "tuner", &tuner).await.unwrap();
    // The first manager applies its configuration again (a GitOps resync).
    let out = apply(&runtimes, "gitops", &gitops).await.unwrap();
    let pod = &out["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        ["spec"];
    assert_eq!(names(&pod["containers"]), ["node", "sidecar"], "{pod}");
    assert_eq!(
        names(&pod["containers"][0]["env"]),
        ["FROM_GITOPS", "FROM_TUNER"],
        "{pod}"
    );
    assert_eq!(pod["containers"][0]["image"], "busybox");
    // The tuner owns exactly its entry.
    let managed = out["metadata"]["managedFields"].as_array().unwrap();
    let tuner_fields = managed
        .iter()
        .find(|m| m["manager"] == "tuner")
        .expect("tuner manages fields")
        .to_string();
    assert!(
        tuner_fields.contains(r#"k:{\"name\":\"FROM_TUNER\"}"#),
        "{tuner_fields}"
    );
    assert!(!tuner_fields.contains("FROM_GITOPS"), "{tuner_fields}");

    // Dropping its entry from its configuration removes only that entry.
    let tuner_without_env = object(
        "TrainingRuntime",
        "rt",
        runtime_spec(json!({"containers": [{"name": "sidecar", "image": "busybox"}]})),
    );
    let out = apply(&runtimes, "tuner", &tuner_without_env).await.unwrap();
    let pod = &out["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        ["spec"];
    assert_eq!(
        names(&pod["containers"][0]["env"]),
        ["FROM_GITOPS"],
        "{pod}"
    );
}

#[tokio::test]
async fn two_managers_keep_their_runtime_patches_and_volumes() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("crds-merge-patches").await.unwrap();
    let jobs = api(&client, "TrainJob", &ns);
    let patch = |manager: &str, volume: &str| {
        json!({"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"pool": volume},
                "volumes": [{"name": volume, "emptyDir": {}}]}}}}}]}}}})
    };
    let sdk = object(
        "TrainJob",
        "tj",
        json!({"runtimeRef": {"name": "torch"}, "suspend": true,
            "trainer": {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            "runtimePatches": [patch("trainer.kubeflow.org/sdk", "data")]}),
    );
    apply(&jobs, "sdk", &sdk).await.unwrap();
    let kueue = object(
        "TrainJob",
        "tj",
        json!({"runtimePatches": [patch("kueue.x-k8s.io/manager", "cache")]}),
    );
    let out = apply(&jobs, "kueue", &kueue).await.unwrap();
    assert_eq!(
        names(&out["spec"]["runtimePatches"]),
        ["trainer.kubeflow.org/sdk", "kueue.x-k8s.io/manager"]
    );
    assert_eq!(names(&out["spec"]["trainer"]["env"]), ["A", "B"]);
    // `trainer.env` is a map keyed by name: a repeated name is refused.
    let dup = object(
        "TrainJob",
        "dup",
        json!({"runtimeRef": {"name": "torch"},
            "trainer": {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}}),
    );
    let err = create(&jobs, &dup).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("Duplicate value")),
        "{err}"
    );
}

#[tokio::test]
async fn sets_refuse_duplicates() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("crds-merge-sets").await.unwrap();
    let runtimes = api(&client, "TrainingRuntime", &ns);
    // Torch envInjection container names (our type) and a container's
    // restart-rule exit codes (a Kubernetes set).
    let cases = [
        (
            "names",
            json!({"mlPolicy": {"torch": {"envInjection": {"targets": [
                {"jobName": "node", "containerNames": ["side", "side"]}]}}},
                "template": runtime_spec(json!({"containers": [{"name": "node", "image": "x"}]}))["template"]}),
        ),
        (
            "codes",
            runtime_spec(json!({"containers": [{"name": "node", "image": "x",
                "restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart",
                    "exitCodes": {"operator": "In", "values": [42, 42]}}]}]})),
        ),
    ];
    for (name, spec) in cases {
        let err = create(&runtimes, &object("TrainingRuntime", name, spec))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("Duplicate value")),
            "{name}: {err}"
        );
    }
}

#[tokio::test]
async fn core_type_defaults_are_filled_and_reference_names_may_be_omitted() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("crds-merge-defaults").await.unwrap();
    let runtimes = api(&client, "TrainingRuntime", &ns);
    let pod = json!({
        "imagePullSecrets": [{}],
        "volumes": [{"name": "s", "secret": {}}, {"name": "c", "configMap": {}}],
        "containers": [{"name": "node", "image": "x",
            "ports": [{"containerPort": 8080}],
            "envFrom": [{"configMapRef": {}}, {"secretRef": {}}],
            "env": [
                {"name": "C", "valueFrom": {"configMapKeyRef": {"key": "k"}}},
                {"name": "S", "valueFrom": {"secretKeyRef": {"key": "k"}}}
            ]}]
    });
    let out = create(
        &runtimes,
        &object(
            "TrainingRuntime",
            "defaults",
            json!({"mlPolicy": {"mpi": {"numProcPerNode": 0}},
                "template": runtime_spec(pod)["template"]}),
        ),
    )
    .await
    .unwrap();
    let spec = &out["spec"];
    let pod =
        &spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["ports"][0]["protocol"], "TCP", "{c}");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": ""}]));
    assert_eq!(pod["volumes"][1]["configMap"]["name"], "");
    assert_eq!(c["envFrom"][0]["configMapRef"], json!({"name": ""}));
    assert_eq!(c["envFrom"][1]["secretRef"], json!({"name": ""}));
    assert_eq!(c["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "");
    assert_eq!(c["env"][1]["valueFrom"]["secretKeyRef"]["name"], "");
    // MPI accepts 0 slots per node; the other MPI defaults are filled in.
    assert_eq!(
        spec["mlPolicy"]["mpi"],
        json!({"numProcPerNode": 0, "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": false})
    );

    // The initializers' `secretRef` of a TrainJob may omit the name too.
    let jobs = api(&client, "TrainJob", &ns);
    let out = create(
        &jobs,
        &object(
            "TrainJob",
            "init",
            json!({"runtimeRef": {"name": "torch"},
                "initializer": {"dataset": {"secretRef": {}}, "model": {"secretRef": {}}}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        out["spec"]["initializer"]["dataset"]["secretRef"],
        json!({"name": ""})
    );
    assert_eq!(
        out["spec"]["initializer"]["model"]["secretRef"],
        json!({"name": ""})
    );
}

/// The TrainJob as a server-side Table: column definitions and the first
/// row's cells by column name.
async fn table(client: &kube::Client, ns: &str, name: &str) -> (Vec<(String, i64)>, Value) {
    let url = format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs");
    let mut req = kube::core::Request::new(url)
        .get(name, &Default::default())
        .unwrap();
    req.headers_mut().insert(
        "accept",
        "application/json;as=Table;g=meta.k8s.io;v=v1"
            .parse()
            .unwrap(),
    );
    let table: Value = client.request(req).await.unwrap();
    let columns: Vec<(String, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    let row: BTreeMap<String, Value> = columns
        .iter()
        .map(|(n, _)| n.clone())
        .zip(cells.iter().cloned())
        .collect();
    (columns, json!(row))
}

#[tokio::test]
async fn wide_columns_show_runtime_nodes_suspend_and_manager() {
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let ns = env.create_namespace("crds-merge-wide").await.unwrap();
    let jobs = api(&client, "TrainJob", &ns);
    create(
        &jobs,
        &object(
            "TrainJob",
            "wide",
            json!({"runtimeRef": {"name": "torch-distributed"}, "suspend": true,
                "trainer": {"numNodes": 3}}),
        ),
    )
    .await
    .unwrap();
    let (columns, row) = table(&client, &ns, "wide").await;
    // Upstream's default columns first and unchanged; the rest only in -o wide.
    let expected: Vec<(String, i64)> = [
        ("Name", 0),
        ("State", 0),
        ("Age", 0),
        ("Runtime", 1),
        ("Runtime Kind", 1),
        ("Nodes", 1),
        ("Suspended", 1),
        ("Managed By", 1),
    ]
    .into_iter()
    .map(|(n, p)| (n.to_string(), p))
    .collect();
    assert_eq!(columns, expected);
    assert_eq!(row["Runtime"], "torch-distributed");
    assert_eq!(row["Runtime Kind"], "ClusterTrainingRuntime");
    assert_eq!(row["Nodes"], 3);
    assert_eq!(row["Suspended"], true);
    assert_eq!(
        row["Managed By"],
        "trainer.kubeflow.org/trainjob-controller"
    );
}

/// Schema keywords that decide merging, defaulting and validation.
const COMPARED: &[&str] = &[
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "default",
    "enum",
    "required",
    "minLength",
    "maxLength",
    "pattern",
    "maxItems",
    "minItems",
];

/// `(path, keyword) -> value` for every [`COMPARED`] keyword under `schema`.
fn keywords(schema: &Value, path: &str, out: &mut BTreeMap<(String, String), Value>) {
    let Value::Object(obj) = schema else { return };
    for k in COMPARED {
        if let Some(v) = obj.get(*k) {
            let v = match (k, v) {
                (&"required", Value::Array(a)) => {
                    let mut a = a.clone();
                    a.sort_by_key(Value::to_string);
                    Value::Array(a)
                }
                _ => v.clone(),
            };
            out.insert((path.to_string(), (*k).to_string()), v);
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (p, v) in props {
            keywords(v, &format!("{path}.{p}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        keywords(items, &format!("{path}[]"), out);
    }
    if let Some(add) = obj.get("additionalProperties") {
        keywords(add, &format!("{path}{{}}"), out);
    }
}

fn crd_spec_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
}

#[tokio::test]
async fn runtime_jobset_template_merges_like_the_jobset_crd() {
    // The JobSet CRD the control plane installs is generated by
    // controller-gen from the JobSet and Kubernetes Go types, as Kubeflow
    // Trainer's CRDs are: our runtime's `spec.template.spec` must carry the
    // same list types, defaults and constraints wherever both have a field.
    let Some(env) = env() else { return };
    let client = env.client().await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client);
    let jobset = serde_json::to_value(crds.get("jobsets.jobset.x-k8s.io").await.unwrap()).unwrap();
    let ours = serde_json::to_value(
        crds.get("trainingruntimes.trainer.kubeflow.org")
            .await
            .unwrap(),
    )
    .unwrap();
    let mut theirs = BTreeMap::new();
    keywords(crd_spec_schema(&jobset), "", &mut theirs);
    let mut mine = BTreeMap::new();
    keywords(
        &crd_spec_schema(&ours)["properties"]["template"]["properties"]["spec"],
        "",
        &mut mine,
    );
    // Paths present in both schemas (each side may have fields the other's
    // Go/Rust types lack).
    let paths = |m: &BTreeMap<(String, String), Value>| -> std::collections::BTreeSet<String> {
        m.keys().map(|(p, _)| p.clone()).collect()
    };
    let (pt, pm) = (paths(&theirs), paths(&mine));
    let list_maps = theirs
        .iter()
        .filter(|((p, k), v)| pm.contains(p) && k == "x-kubernetes-list-type" && *v == "map")
        .count();
    assert!(list_maps >= 25, "only {list_maps} list-maps compared");
    let differ: Vec<String> = theirs
        .keys()
        .chain(mine.keys())
        .filter(|(p, _)| pt.contains(p) && pm.contains(p))
        .filter(|k| theirs.get(*k) != mine.get(*k))
        .map(|(p, k)| {
            format!(
                "{p} {k}: jobset {:?}, ours {:?}",
                theirs.get(&(p.clone(), k.clone())),
                mine.get(&(p.clone(), k.clone()))
            )
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
