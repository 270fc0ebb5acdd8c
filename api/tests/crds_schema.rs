//! Offline checks of the generated CRDs: structural-schema rules the API
//! server enforces, the CEL rules and messages we promise, defaults, list
//! types, printer columns and size.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use serde_json::Value;
use trainforge_api::crds::{all_crds, file_name};
use trainforge_api::trainer::v1alpha1::cel;

fn crd_json(plural: &str) -> Value {
    let crd = all_crds()
        .unwrap()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap();
    serde_json::to_value(crd).unwrap()
}

fn schema(plural: &str) -> Value {
    crd_json(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Walk every schema node with its path.
fn walk<'a>(node: &'a Value, path: String, visit: &mut dyn FnMut(&str, &'a Value)) {
    visit(&path, node);
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            walk(v, format!("{path}.{k}"), visit);
        }
    }
    if let Some(items) = node.get("items") {
        walk(items, format!("{path}[]"), visit);
    }
    if let Some(ap) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(ap, format!("{path}{{}}"), visit);
    }
}

fn at<'a>(root: &'a Value, path: &str) -> &'a Value {
    let mut node = root;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        node = if let Some(p) = part.strip_suffix("[]") {
            &node["properties"][p]["items"]
        } else {
            &node["properties"][part]
        };
        assert!(!node.is_null(), "no schema at {path} ({part})");
    }
    node
}

fn rules(node: &Value) -> Vec<(String, String)> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap().to_string(),
                        r["message"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn has_rule(node: &Value, rule: cel::CelRule) -> bool {
    rules(node).contains(&(rule.rule.to_string(), rule.message.to_string()))
}

#[test]
fn six_crds_with_controller_gen_file_names() {
    let names: Vec<String> = all_crds().unwrap().iter().map(file_name).collect();
    assert_eq!(
        names,
        [
            "trainer.kubeflow.org_trainjobs.yaml",
            "trainer.kubeflow.org_trainingruntimes.yaml",
            "trainer.kubeflow.org_clustertrainingruntimes.yaml",
            "trainforge.dev_clustertrainerplugins.yaml",
            "trainforge.dev_trainerplugins.yaml",
            "trainforge.dev_trainerpluginpolicies.yaml"
        ]
    );
    let ctr = crd_json("clustertrainingruntimes");
    assert_eq!(ctr["spec"]["scope"], "Cluster");
    assert_eq!(ctr["spec"]["names"]["kind"], "ClusterTrainingRuntime");
    assert_eq!(crd_json("trainingruntimes")["spec"]["scope"], "Namespaced");
    // Tenant plugins are namespaced, with a status; their ceiling is one
    // cluster-scoped object named default.
    let tp = crd_json("trainerplugins");
    assert_eq!(tp["spec"]["scope"], "Namespaced");
    assert_eq!(
        tp["spec"]["versions"][0]["subresources"]["status"],
        serde_json::json!({})
    );
    let tp_spec = &tp["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert!(tp_spec["properties"]["selector"].is_object(), "{tp_spec}");
    assert!(
        has_rule(
            tp_spec,
            trainforge_api::trainforge::v1alpha1::cel::SHA256_UNLESS_BUILTIN
        ),
        "the ClusterTrainerPlugin rules come along: {tp_spec}"
    );
    let policy = crd_json("trainerpluginpolicies");
    assert_eq!(policy["spec"]["scope"], "Cluster");
    assert!(has_rule(
        &policy["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        trainforge_api::trainforge::v1alpha1::cel::POLICY_NAMED_DEFAULT
    ));
    assert_eq!(
        crd_json("trainjobs")["spec"]["versions"][0]["subresources"]["status"],
        serde_json::json!({})
    );
}

#[test]
fn crds_are_well_below_the_etcd_request_limit() {
    for crd in all_crds().unwrap() {
        let size = serde_json::to_vec(&crd).unwrap().len();
        eprintln!("{}: {size} bytes of JSON", crd.spec.names.plural);
        assert!(
            size < 1024 * 1024,
            "{} is {size} bytes",
            crd.spec.names.plural
        );
    }
}

#[test]
fn schemas_are_structural() {
    for plural in ["trainjobs", "trainingruntimes", "clustertrainingruntimes"] {
        let root = schema(plural);
        let text = root.to_string();
        assert!(!text.contains("\"$ref\""), "{plural}: $ref left");
        assert!(!text.contains("\"nullable\""), "{plural}: nullable left");
        walk(&root, String::new(), &mut |path, node| {
            let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
            let preserve =
                node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            assert!(
                node.get("type").is_some_and(Value::is_string) || int_or_string || preserve,
                "{plural}{path}: no type: {node}"
            );
            assert!(
                !(node.get("properties").is_some() && node.get("additionalProperties").is_some()),
                "{plural}{path}: properties and additionalProperties"
            );
            if node.get("anyOf").is_some() {
                assert!(int_or_string, "{plural}{path}: anyOf outside int-or-string");
            }
            for key in ["oneOf", "allOf", "$schema", "title", "definitions"] {
                assert!(node.get(key).is_none(), "{plural}{path}: {key}");
            }
        });
    }
}

#[test]
fn trainjob_cel_rules_defaults_and_bounds() {
    let root = schema("trainjobs");
    assert!(has_rule(&root, cel::TRAINJOB_NAME_RFC1035));
    assert!(has_rule(&root, cel::TRAINJOB_NAME_LENGTH));
    for path in [
        "spec.runtimeRef",
        "spec.initializer",
        "spec.trainer",
        "spec.activeDeadlineSeconds",
        "spec.managedBy",
    ] {
        assert!(
            has_rule(at(&root, path), cel::IMMUTABLE),
            "{path} not immutable"
        );
    }
    assert!(has_rule(
        at(&root, "spec.managedBy"),
        cel::MANAGED_BY_VALUES
    ));
    assert_eq!(
        at(&root, "spec.managedBy")["default"],
        "trainer.kubeflow.org/trainjob-controller"
    );
    assert_eq!(at(&root, "spec.suspend")["default"], false);
    assert_eq!(
        at(&root, "spec.runtimeRef.apiGroup")["default"],
        "trainer.kubeflow.org"
    );
    assert_eq!(
        at(&root, "spec.runtimeRef.kind")["default"],
        "ClusterTrainingRuntime"
    );
    assert_eq!(at(&root, "spec.runtimeRef.name")["minLength"], 1);
    assert_eq!(at(&root, "spec.runtimeRef.name")["maxLength"], 253);
    assert_eq!(
        at(&root, "spec.activeDeadlineSeconds")["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(
        at(&root, "spec.trainer.numNodes")["minimum"].as_f64(),
        Some(0.0)
    );
    let node = at(&root, "spec.trainer.numProcPerNode");
    assert_eq!(node["x-kubernetes-int-or-string"], true);
    // No minimum: Kubeflow Trainer v2.3 accepts 0 and negative values
    // (admission warns instead).
    assert!(!has_rule(node, cel::NUM_PROC_PER_NODE_MIN));
    assert!(has_rule(node, cel::NUM_PROC_PER_NODE_STRING));
    for path in [
        "spec.initializer.dataset.storageUri",
        "spec.initializer.model.storageUri",
    ] {
        assert!(has_rule(at(&root, path), cel::STORAGE_URI));
        assert_eq!(at(&root, path)["maxLength"], 2048);
    }
    assert_eq!(
        at(&root, "spec.trainer.command")["x-kubernetes-list-type"],
        "atomic"
    );
    assert_eq!(at(&root, "spec.trainer.command")["maxItems"], 128);
    assert_eq!(at(&root, "spec.trainer.command[]")["maxLength"], 1_048_576);
    assert_eq!(
        at(&root, "spec.trainer.env")["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    assert_eq!(
        at(&root, "spec.runtimePatches")["x-kubernetes-list-map-keys"],
        serde_json::json!(["manager"])
    );
    assert_eq!(at(&root, "spec.runtimePatches")["maxItems"], 16);
    assert!(has_rule(
        at(&root, "spec.runtimePatches[].manager"),
        cel::IMMUTABLE
    ));
    let pod = "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template.spec";
    for field in [
        "serviceAccountName",
        "volumes",
        "initContainers",
        "containers",
        "imagePullSecrets",
        "securityContext",
        "terminationGracePeriodSeconds",
    ] {
        assert!(
            has_rule(at(&root, &format!("{pod}.{field}")), cel::IMMUTABLE),
            "{field}"
        );
    }
    for field in ["nodeSelector", "affinity", "tolerations", "schedulingGates"] {
        assert!(
            rules(at(&root, &format!("{pod}.{field}"))).is_empty(),
            "{field} must stay mutable"
        );
    }
    assert_eq!(
        at(&root, "spec.podTemplateOverrides")["x-kubernetes-list-type"],
        "atomic"
    );
    // Embedded ObjectMeta keeps labels and annotations (not pruned).
    assert_eq!(
        at(&root, "spec.podTemplateOverrides[].metadata.labels")["type"],
        "object"
    );
    assert_eq!(
        at(&root, "spec.labels")["additionalProperties"]["type"],
        "string"
    );
    assert_eq!(at(&root, "status")["minProperties"], 1);
    assert_eq!(at(&root, "status.conditions")["maxItems"], 8);
    assert_eq!(
        at(&root, "status.jobsStatus[].ready")["minimum"].as_f64(),
        Some(0.0)
    );
    assert!(has_rule(
        at(&root, "status.trainerStatus"),
        cel::TRAINER_STATUS_LAST_UPDATED
    ));
    assert_eq!(
        at(&root, "status.trainerStatus.progressPercentage")["maximum"].as_f64(),
        Some(100.0)
    );
    // Quantities use controller-gen's compact schema.
    let limits = &at(&root, "spec.trainer.resourcesPerNode.limits")["additionalProperties"];
    assert_eq!(limits["x-kubernetes-int-or-string"], true);
    assert!(limits.get("description").is_none());
}

#[test]
fn trainjob_state_column_shows_a_true_condition() {
    let crd = crd_json("trainjobs");
    let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap();
    let state = columns.iter().find(|c| c["name"] == "State").unwrap();
    assert_eq!(
        state["jsonPath"],
        ".status.conditions[?(@.status==\"True\")].type"
    );
    assert!(
        columns
            .iter()
            .any(|c| c["name"] == "Age" && c["type"] == "date")
    );
}

#[test]
fn runtime_cel_rules_defaults_and_unknown_policies() {
    for plural in ["trainingruntimes", "clustertrainingruntimes"] {
        let root = schema(plural);
        assert_eq!(at(&root, "spec")["minProperties"], 1);
        let ml = at(&root, "spec.mlPolicy");
        assert!(has_rule(ml, cel::ONE_ML_POLICY));
        assert!(has_rule(ml, cel::NUM_NODES_WITH_ELASTIC));
        assert_eq!(ml["x-kubernetes-preserve-unknown-fields"], true);
        for known in ["numNodes", "torch", "mpi", "jax", "xgboost", "flux"] {
            assert!(ml["properties"].get(known).is_some(), "mlPolicy.{known}");
        }
        let pg = at(&root, "spec.podGroupPolicy");
        assert_eq!(pg["x-kubernetes-preserve-unknown-fields"], true);
        assert!(has_rule(pg, cel::ONE_POD_GROUP_POLICY));
        assert_eq!(
            at(
                &root,
                "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds"
            )["default"],
            60
        );
        let nt = at(&root, "spec.podGroupPolicy.volcano.networkTopology");
        assert_eq!(nt["properties"]["mode"]["default"], "hard");
        assert_eq!(nt["properties"]["highestTierAllowed"]["default"], 1);
        assert!(nt["properties"].get("topologyKey").is_some());
        assert!(nt["properties"].get("networkPolicy").is_some());
        let torch = at(&root, "spec.mlPolicy.torch");
        assert!(has_rule(
            &torch["properties"]["numProcPerNode"],
            cel::NUM_PROC_PER_NODE_MIN
        ));
        assert!(has_rule(
            at(
                &root,
                "spec.mlPolicy.torch.envInjection.targets[].containerNames"
            ),
            cel::ENV_INJECTION_NOT_NODE
        ));
        assert_eq!(
            at(
                &root,
                "spec.mlPolicy.torch.envInjection.targets[].containerNames"
            )["x-kubernetes-list-type"],
            "set"
        );
        assert!(
            at(&root, "spec.mlPolicy.torch.elasticPolicy.metrics[]")["properties"]
                .get("resource")
                .is_some()
        );
        let mpi = at(&root, "spec.mlPolicy.mpi");
        assert!(has_rule(
            &mpi["properties"]["numProcPerNode"],
            cel::MPI_NUM_PROC_PER_NODE
        ));
        assert_eq!(mpi["properties"]["numProcPerNode"]["default"], 1);
        assert_eq!(mpi["properties"]["mpiImplementation"]["default"], "OpenMPI");
        assert_eq!(
            mpi["properties"]["sshAuthMountPath"]["default"],
            "/root/.ssh"
        );
        assert_eq!(mpi["properties"]["runLauncherAsNode"]["default"], false);
        assert!(has_rule(
            &at(&root, "spec.mlPolicy.flux")["properties"]["numProcPerNode"],
            cel::FLUX_NUM_PROC_PER_NODE
        ));
        assert_eq!(at(&root, "spec.mlPolicy.jax")["type"], "object");
        // The JobSet blueprint with JobSet's own defaults and rules.
        let js = at(&root, "spec.template.spec");
        assert_eq!(
            rules(js)[0].1,
            "StartupPolicy and DependsOn APIs are mutually exclusive"
        );
        assert_eq!(
            at(&root, "spec.template.spec.replicatedJobs[].replicas")["default"],
            1
        );
        assert_eq!(
            at(&root, "spec.template.spec.replicatedJobs[].groupName")["default"],
            "default"
        );
        assert_eq!(
            at(&root, "spec.template.spec.failurePolicy.restartStrategy")["default"],
            "Recreate"
        );
        assert_eq!(
            rules(at(&root, "spec.template.spec.network"))[0].1,
            "Value is immutable"
        );
        assert_eq!(
            at(&root, "spec.template.spec.network")["properties"]["enableDNSHostnames"]["type"],
            "boolean"
        );
        let pod_meta = at(
            &root,
            "spec.template.spec.replicatedJobs[].template.metadata",
        );
        assert_eq!(pod_meta["properties"]["labels"]["type"], "object");
        assert!(pod_meta["properties"].get("managedFields").is_none());
        assert!(
            at(
                &root,
                "spec.template.spec.replicatedJobs[].template.spec.template.spec.containers[]"
            )["properties"]
                .get("image")
                .is_some()
        );
    }
}
