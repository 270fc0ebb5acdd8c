//! Plugin-level tests: the phases as the host runs them.

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::api::trainer::v1alpha1::constants::MANAGER_LEGACY_FIELDS;
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector, Volume, VolumeMount,
};
use trainforge_sdk::testing::{Harness, MockHost, RuntimeFixture};
use trainforge_sdk::{ANCESTOR_LABEL, Container, FieldErrorType, PodSet};

const INDEX_PATH: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// pre-build then build, with `host` serving existing objects.
fn run(trainjob: Value, info: Info, host: &MockHost) -> (Info, Vec<Value>) {
    let p = JobSetPlugin;
    let mut ctx = PhaseContext::new(trainjob, info, json!({}), host);
    p.pre_build(&mut ctx).expect("pre-build");
    let objects = p.build(&ctx).expect("build");
    (ctx.info().clone(), objects)
}

fn trainjob(spec: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "demo", "namespace": "team-a", "uid": "uid-1"}, "spec": spec})
}

/// The info the host and the Torch plugin hand to the JobSet plugin in the
/// worked example: runtime `torch-distributed`, numNodes 2,
/// `resourcesPerNode.limits: {nvidia.com/gpu: 4}` merged by the host.
fn worked_example_info() -> Info {
    let obj = json!({"replicatedJobs": [{
        "name": "node", "groupName": "default", "replicas": 1,
        "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{
                "name": "node",
                "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                "resources": {"limits": {"nvidia.com/gpu": "4"}}
            }]}}}
        }
    }]});
    let rank = EnvVar {
        name: "PET_NODE_RANK".into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: INDEX_PATH.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    };
    let node = Container {
        name: "node".into(),
        image: Some("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime".into()),
        env: vec![
            env("PET_NNODES", "2"),
            env("PET_NPROC_PER_NODE", "auto"),
            rank,
            env("PET_MASTER_ADDR", "demo-node-0-0.demo"),
            env("PET_MASTER_PORT", "29500"),
        ],
        ports: vec![ContainerPort {
            container_port: 29500,
            ..ContainerPort::default()
        }],
        ..Container::default()
    };
    let mut info = Info::default();
    info.runtime_policy.ml_policy = Some(json!({"numNodes": 1, "torch": {}}));
    info.template_spec.obj = obj;
    info.template_spec.pod_sets = vec![PodSet {
        name: "node".into(),
        ancestor: Some("trainer".into()),
        count: Some(2),
        containers: vec![node],
        ..PodSet::default()
    }];
    info
}

#[test]
fn worked_example_jobset_field_for_field() {
    let tj = trainjob(json!({
        "runtimeRef": {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
        "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"], "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
        "suspend": false
    }));
    let (info, objects) = run(tj, worked_example_info(), &MockHost::default());
    assert_eq!(
        info.template_spec.pod_sets[0].endpoints,
        vec!["demo-node-0-0.demo", "demo-node-0-1.demo"]
    );
    let expected = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "demo",
            "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "demo",
                                 "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "suspend": false,
            "replicatedJobs": [{
                "name": "node",
                "groupName": "default",
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                    "spec": {
                        "parallelism": 2,
                        "completions": 2,
                        "template": {"spec": {"containers": [{
                            "name": "node",
                            "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                            "command": ["torchrun", "train.py"],
                            "resources": {"limits": {"nvidia.com/gpu": "4"}},
                            "env": [
                                {"name": "PET_NNODES", "value": "2"},
                                {"name": "PET_NPROC_PER_NODE", "value": "auto"},
                                {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": INDEX_PATH}}},
                                {"name": "PET_MASTER_ADDR", "value": "demo-node-0-0.demo"},
                                {"name": "PET_MASTER_PORT", "value": "29500"}
                            ],
                            "ports": [{"containerPort": 29500}]
                        }]}}
                    }
                }
            }]
        }
    });
    assert_eq!(objects, vec![expected]);
}

#[test]
fn frozen_once_running() {
    let running = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                         "metadata": {"name": "demo", "namespace": "team-a"}, "spec": {"suspend": false}});
    let mut host = MockHost::default();
    host.insert(running.clone());
    // Exists, neither suspended → nothing.
    let (_, objs) = run(
        trainjob(json!({"suspend": false})),
        worked_example_info(),
        &host,
    );
    assert!(objs.is_empty());
    // TrainJob suspended → rebuilt (with suspend: true).
    let (_, objs) = run(
        trainjob(json!({"suspend": true})),
        worked_example_info(),
        &host,
    );
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0]["spec"]["suspend"], true);
    // JobSet suspended, TrainJob resumed → rebuilt (with suspend: false).
    let mut host = MockHost::default();
    let mut suspended = running;
    suspended["spec"]["suspend"] = json!(true);
    host.insert(suspended);
    let (_, objs) = run(
        trainjob(json!({"suspend": false})),
        worked_example_info(),
        &host,
    );
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0]["spec"]["suspend"], false);
}

/// A suspended JobSet created by an earlier render (e.g. before a plugin
/// upgrade) keeps its jobs; only the scheduling fields JobSet lets change
/// follow the new render, so the apply is never denied as immutable.
#[test]
fn a_rebuild_keeps_what_jobset_froze_at_creation() {
    let mut host = MockHost::default();
    let (_, first) = run(
        trainjob(json!({"suspend": true})),
        worked_example_info(),
        &host,
    );
    let mut stored = first[0].clone();
    stored["spec"]["network"] =
        json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true});
    host.insert(stored.clone());

    let mut info = worked_example_info();
    info.template_spec.pod_sets[0].containers[0]
        .env
        .push(env("ADDED_BY_V2", "1"));
    info.scheduler
        .pod_labels
        .insert("queue".into(), "gpu".into());
    let (_, objs) = run(trainjob(json!({"suspend": true})), info, &host);
    let pod = &objs[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    assert_eq!(
        pod["spec"]["containers"],
        stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    );
    assert_eq!(pod["metadata"]["labels"]["queue"], "gpu");
    assert_eq!(objs[0]["spec"]["network"], stored["spec"]["network"]);
}

#[test]
fn harness_runs_pre_build_build_and_status() {
    let mut h =
        Harness::<JobSetPlugin>::new(trainjob(json!({"suspend": true})), worked_example_info());
    h.host.insert(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "demo", "namespace": "team-a"}, "spec": {"suspend": true},
        "status": {"replicatedJobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 1}]}}));
    let out = h.run().expect("runs");
    assert_eq!(out.objects.len(), 1, "suspended: rebuilt");
    assert_eq!(
        out.status,
        Some(
            json!({"jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 1}]})
        )
    );
}

#[test]
fn status_not_found_rule() {
    let host = MockHost::default();
    let p = JobSetPlugin;
    let done = trainjob(json!({}));
    let mut done_tj = done.clone();
    done_tj["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]});
    let ctx = PhaseContext::new(done_tj, Info::default(), json!({}), &host);
    assert_eq!(p.status(&ctx).expect("finished: untouched"), None);
    let ctx = PhaseContext::new(done, Info::default(), json!({}), &host);
    assert!(matches!(p.status(&ctx), Err(PluginError::Unavailable(_))));
}

/// Runtime with initializers + trainer, as in the product example
/// `clustertrainingruntime-with-initializer.yaml`.
fn initializer_info() -> Info {
    let job = |name: &str, ancestor: &str, container: Value| {
        json!({"name": name, "replicas": 1, "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: ancestor}},
            "spec": {"template": {"spec": {"containers": [container]}}}}})
    };
    let runtime = json!({"spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        job("dataset-initializer", "dataset-initializer", json!({"name": "dataset-initializer", "image": "init",
            "env": [{"name": "STORAGE_TYPE", "value": "s3"}], "volumeMounts": [{"name": "dataset", "mountPath": "/mnt/dataset"}]})),
        job("model-initializer", "model-initializer", json!({"name": "model-initializer", "image": "init",
            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]})),
        job("node", "trainer", json!({"name": "node", "image": "torch", "command": ["torchrun"],
            "args": ["a"], "env": [{"name": "RUNTIME", "value": "1"}, {"name": "SHARED", "value": "runtime"}]}))
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("runtime")
}

#[test]
fn initializer_and_trainer_overrides() {
    let mut info = initializer_info();
    info.template_spec.pod_sets[2].count = Some(2);
    // What Torch does before the build: TrainJob env, then plugin env.
    let node = info.template_spec.pod_sets[2]
        .container_mut("node")
        .expect("node");
    node.set_env("SHARED", "trainjob");
    node.set_env("PET_NNODES", "2");
    let tj = trainjob(json!({
        "initializer": {
            "dataset": {"storageUri": "s3://b/d", "env": [{"name": "AWS_REGION", "value": "us-west-2"}], "secretRef": {"name": "s3"}},
            "model": {"storageUri": "hf://m", "env": [{"name": "HF", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}
        },
        "trainer": {"image": "mine", "command": ["python", "t.py"], "args": ["--x"], "env": [{"name": "SHARED", "value": "trainjob"}, {"name": "EXTRA", "value": "e"}]}
    }));
    let (_, objs) = run(tj, info, &MockHost::default());
    let jobs = &objs[0]["spec"]["replicatedJobs"];
    let c = |i: usize| &jobs[i]["template"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c(0)["env"],
        json!([
            {"name": "STORAGE_TYPE", "value": "s3"},
            {"name": "STORAGE_URI", "value": "s3://b/d"},
            {"name": "AWS_REGION", "value": "us-west-2"}
        ])
    );
    assert_eq!(c(0)["envFrom"], json!([{"secretRef": {"name": "s3"}}]));
    assert_eq!(
        c(1)["env"],
        json!([
            {"name": "STORAGE_URI", "value": "hf://m"},
            {"name": "HF", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
        ])
    );
    assert!(c(1).get("envFrom").is_none());
    for i in 0..3 {
        assert_eq!(jobs[i]["replicas"], 1);
    }
    assert_eq!(c(2)["image"], "mine");
    assert_eq!(c(2)["command"], json!(["python", "t.py"]));
    assert_eq!(c(2)["args"], json!(["--x"]));
    // runtime env, then TrainJob env, then plugin env.
    let names: Vec<&str> = c(2)["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, vec!["RUNTIME", "SHARED", "PET_NNODES", "EXTRA"]);
    assert_eq!(c(2)["env"][1]["value"], "trainjob");
    assert_eq!(jobs[2]["template"]["spec"]["parallelism"], 2);
    assert_eq!(jobs[0]["template"]["spec"]["parallelism"], 1);
}

#[test]
fn pod_set_state_scheduler_metadata_and_jobset_metadata() {
    let mut info = initializer_info();
    info.labels.insert("team".into(), "ml".into());
    info.annotations.insert("owner".into(), "me".into());
    info.scheduler
        .pod_labels
        .insert("scheduling.x-k8s.io/pod-group".into(), "demo".into());
    info.scheduler
        .pod_annotations
        .insert("scheduling.k8s.io/group-name".into(), "demo".into());
    let ps = &mut info.template_spec.pod_sets[2];
    ps.upsert_volume(Volume {
        name: "mpi-ssh-auth".into(),
        ..Volume::default()
    });
    ps.init_containers.push(Container {
        name: "flux-installer".into(),
        image: Some("flux".into()),
        command: vec!["sh".into()],
        ..Container::default()
    });
    let node = ps.container_mut("node").expect("node");
    node.upsert_volume_mount(VolumeMount {
        name: "mpi-ssh-auth".into(),
        mount_path: "/root/.ssh".into(),
        ..VolumeMount::default()
    });
    node.upsert_port(ContainerPort {
        container_port: 29500,
        ..ContainerPort::default()
    });
    let (_, objs) = run(trainjob(json!({})), info, &MockHost::default());
    let js = &objs[0];
    assert_eq!(js["metadata"]["labels"], json!({"team": "ml"}));
    assert_eq!(js["metadata"]["annotations"], json!({"owner": "me"}));
    for j in js["spec"]["replicatedJobs"].as_array().expect("jobs") {
        let meta = &j["template"]["spec"]["template"]["metadata"];
        assert_eq!(meta["labels"]["scheduling.x-k8s.io/pod-group"], "demo");
        assert_eq!(meta["annotations"]["scheduling.k8s.io/group-name"], "demo");
    }
    let pod = &js["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], json!([{"name": "mpi-ssh-auth"}]));
    assert_eq!(
        pod["initContainers"],
        json!([{"name": "flux-installer", "image": "flux", "command": ["sh"]}])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"}])
    );
    assert_eq!(
        pod["containers"][0]["ports"],
        json!([{"containerPort": 29500}])
    );
    // No trainer in the TrainJob: the runtime's command/image stay.
    assert_eq!(pod["containers"][0]["command"], json!(["torchrun"]));
    assert_eq!(pod["containers"][0]["image"], "torch");
}

#[test]
fn trainer_env_reaches_the_mpi_node_job_with_run_launcher_as_node() {
    let runtime = json!({"spec": {"mlPolicy": {"mpi": {"runLauncherAsNode": true}}, "template": {"spec": {"replicatedJobs": [
        {"name": "launcher", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpi"}]}}}}},
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpi"}]}}}}}
    ]}}}});
    let info = RuntimeFixture::new(runtime).info().expect("runtime");
    let (_, objs) = run(
        trainjob(json!({"trainer": {"env": [{"name": "A", "value": "1"}]}})),
        info,
        &MockHost::default(),
    );
    for j in objs[0]["spec"]["replicatedJobs"].as_array().expect("jobs") {
        assert_eq!(
            j["template"]["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}]),
            "job {}",
            j["name"]
        );
    }
}

fn chain_runtime(extra: Value) -> Info {
    let job = |name: &str, ancestor: &str| {
        json!({"name": name, "template": {"metadata": {"labels": {ANCESTOR_LABEL: ancestor}},
        "spec": {"template": {"spec": {"containers": [{"name": if ancestor == "trainer" { "node" } else { ancestor }, "image": "i"}]}}}}})
    };
    let mut spec = json!({"replicatedJobs": [
        job("dataset-initializer", "dataset-initializer"),
        job("model-initializer", "model-initializer"),
        job("node", "trainer"),
    ]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    RuntimeFixture::new(json!({"spec": {"template": {"spec": spec}}}))
        .info()
        .expect("runtime")
}

fn depends_on(objs: &[Value]) -> Vec<Value> {
    objs[0]["spec"]["replicatedJobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["dependsOn"].clone())
        .collect()
}

#[test]
fn trainer_starts_after_initializers_unless_the_runtime_orders_jobs() {
    let (_, objs) = run(
        trainjob(json!({})),
        chain_runtime(json!({})),
        &MockHost::default(),
    );
    assert_eq!(
        depends_on(&objs),
        [
            Value::Null,
            json!([{"name": "dataset-initializer", "status": "Complete"}]),
            json!([{"name": "model-initializer", "status": "Complete"}]),
        ]
    );
    let (_, objs) = run(
        trainjob(json!({})),
        chain_runtime(json!({"startupPolicy": {"startupPolicyOrder": "InOrder"}})),
        &MockHost::default(),
    );
    assert_eq!(
        depends_on(&objs),
        [Value::Null, Value::Null, Value::Null],
        "InOrder excludes dependsOn"
    );
    let mut info = chain_runtime(json!({}));
    info.template_spec.obj["replicatedJobs"][2]["dependsOn"] =
        json!([{"name": "dataset-initializer", "status": "Ready"}]);
    let (_, objs) = run(trainjob(json!({})), info, &MockHost::default());
    assert_eq!(
        depends_on(&objs),
        [
            Value::Null,
            Value::Null,
            json!([{"name": "dataset-initializer", "status": "Ready"}])
        ],
        "a runtime's own ordering is kept"
    );
}

#[test]
fn pod_set_env_order_is_kept_so_references_expand() {
    // A plugin put PET_NNODES before the runtime entry that references it.
    let runtime = json!({"spec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "torch",
                "env": [{"name": "A", "value": "1"}, {"name": "NODES", "value": "$(PET_NNODES)"}]}]}}}}}
    ]}}}});
    let mut info = RuntimeFixture::new(runtime).info().expect("runtime");
    let node = &mut info.template_spec.pod_sets[0].containers[0];
    node.env = vec![
        env("A", "1"),
        env("PET_NNODES", "2"),
        env("NODES", "$(PET_NNODES)"),
    ];
    let (_, objs) = run(trainjob(json!({})), info, &MockHost::default());
    let names: Vec<&str> =
        objs[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
            [0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
    assert_eq!(names, ["A", "PET_NNODES", "NODES"]);
}

#[test]
fn fewer_template_jobs_than_pod_sets_is_an_error() {
    let mut info = worked_example_info();
    info.template_spec.pod_sets.push(PodSet {
        name: "extra".into(),
        ..PodSet::default()
    });
    let host = MockHost::default();
    let ctx = PhaseContext::new(trainjob(json!({})), info, json!({}), &host);
    let err = JobSetPlugin.build(&ctx).expect_err("error");
    assert!(
        matches!(err, PluginError::InvalidInput(m) if m.contains("1 replicated jobs") && m.contains("2 pod sets"))
    );
}

#[test]
fn malformed_trainer_is_an_error_naming_the_field() {
    let host = MockHost::default();
    let ctx = PhaseContext::new(
        trainjob(json!({"trainer": {"command": "not-a-list"}})),
        worked_example_info(),
        json!({}),
        &host,
    );
    let err = JobSetPlugin.build(&ctx).expect_err("error");
    assert!(matches!(err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer")));
}

// ---- validation ----

fn validate_with(
    tj: Value,
    old: Option<Value>,
    info: Info,
    host_objects: Vec<Value>,
) -> Validation {
    let mut h = Harness::<JobSetPlugin>::new(tj, info);
    for o in host_objects {
        h.host.insert(o);
    }
    h.validate(old).expect("validates")
}

fn details(v: &Validation) -> Vec<String> {
    v.errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect()
}

/// The product example `clustertrainingruntime-multi-node.yaml` (no ancestor label).
fn multi_node_info() -> Info {
    let runtime = json!({"spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
        "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 300}},
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"parallelism": 1,
            "template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.0.0", "command": ["torchrun"]}]}}}}}]}}}});
    RuntimeFixture::new(runtime).info().expect("runtime")
}

#[test]
fn warns_when_trainer_settings_cannot_apply() {
    // The product example trainjob-minimal.yaml.
    let tj = json!({"metadata": {"name": "pytorch-distributed", "namespace": "default"}, "spec": {
        "runtimeRef": {"name": "torch-distributed-multi-node", "kind": "ClusterTrainingRuntime"},
        "trainer": {"image": "pytorch/pytorch:2.0.0", "numNodes": 4, "numProcPerNode": "auto",
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}});
    let v = validate_with(tj.clone(), None, multi_node_info(), vec![]);
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert_eq!(v.warnings.len(), 1);
    let w = &v.warnings[0];
    assert!(
        w.contains("trainer.kubeflow.org/trainjob-ancestor-step: trainer"),
        "{w}"
    );
    assert!(w.contains("cannot apply"), "{w}");
    assert!(w.contains("\"torch-distributed-multi-node\""), "{w}");
    assert!(w.contains("replicated job \"node\""), "{w}");
    // With the label added: no warning.
    let mut info = multi_node_info();
    info.template_spec.pod_sets[0].ancestor = Some("trainer".into());
    assert!(validate_with(tj, None, info, vec![]).warnings.is_empty());
    // Without spec.trainer: no warning.
    assert!(
        validate_with(trainjob(json!({})), None, multi_node_info(), vec![])
            .warnings
            .is_empty()
    );
}

#[test]
fn trainjob_full_initializers_without_initializer_jobs() {
    // The product example trainjob-full.yaml against torch-distributed (no initializer jobs):
    // one error per initializer.
    let runtime = json!({"spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "t"}]}}}}}]}}}});
    let info = RuntimeFixture::new(runtime).info().expect("runtime");
    let tj = trainjob(
        json!({"initializer": {"dataset": {"storageUri": "s3://a"}, "model": {"storageUri": "s3://b"}},
                             "trainer": {"numNodes": 4}}),
    );
    let v = validate_with(tj, None, info, vec![]);
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimeRef: must have dataset-initializer job when trainJob is configured with input datasetConfig",
            "spec.runtimeRef: must have model-initializer job when trainJob is configured with input modelConfig",
        ]
    );
    assert!(v.warnings.is_empty());
}

#[test]
fn initializer_container_and_volume_mount_rules() {
    let tj = trainjob(json!({"initializer": {"dataset": {}, "model": {}}}));
    // dataset-initializer mounts `dataset`, not `initializer` (the product example's runtime): warning by default.
    let v = validate_with(tj.clone(), None, initializer_info(), vec![]);
    assert!(v.errors.is_empty());
    assert_eq!(v.warnings.len(), 1);
    assert!(v.warnings[0].starts_with(
        "spec.runtimeRef: container dataset-initializer of the dataset-initializer job has no volumeMount named initializer;"
    ), "{}", v.warnings[0]);
    assert!(v.warnings[0].contains(
        "must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job"
    ));
    // Strict config: an error, as upstream.
    let v = Harness::<JobSetPlugin>::new(tj.clone(), initializer_info())
        .with_config(json!({"strictInitializerVolumeMount": true}))
        .validate(None)
        .expect("validates");
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimeRef: must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job"
        ]
    );
    // Missing container.
    let mut info = initializer_info();
    info.template_spec.pod_sets[1].containers[0].name = "other".into();
    let v = validate_with(
        trainjob(json!({"initializer": {"model": {}}})),
        None,
        info,
        vec![],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimeRef: must have container with name - model-initializer in the model-initializer job"
        ]
    );
}

fn patches(p: Value) -> Value {
    trainjob(json!({"runtimePatches": p}))
}

#[test]
fn runtime_patch_rules() {
    let p = json!([{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "missing"},
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [{"name": "sidecar"}, {"name": "node", "env": [{"name": "X", "value": "1"}]}]
        }}}}}
    ]}}}}]);
    let v = validate_with(patches(p.clone()), None, initializer_info(), vec![]);
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimePatches: must not have replicated job that doesn't exist in the runtime job template",
            "spec.runtimePatches: must not have initContainer that doesn't exist in the runtime job node",
            "spec.runtimePatches: must not have container that doesn't exist in the runtime job node",
            "spec.runtimePatches: must not have envs for the dataset-initializer, model-initializer, node containers",
        ]
    );
    assert_eq!(
        v.errors[0].bad_value.as_deref(),
        Some(p.to_string().as_str())
    );
    // A valid patch passes.
    let ok = json!([{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "volumeMounts": []}]}}}}}]}}}}]);
    assert!(
        validate_with(patches(ok), None, initializer_info(), vec![])
            .errors
            .is_empty()
    );
}

#[test]
fn only_the_converted_v21_fields_may_set_env_on_reserved_containers() {
    let with_manager = |m: &str| {
        json!([{"manager": m, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]
            }}}}}
        ]}}}}])
    };
    let legacy = validate_with(
        patches(with_manager(MANAGER_LEGACY_FIELDS)),
        None,
        initializer_info(),
        vec![],
    );
    assert!(legacy.errors.is_empty(), "{:?}", details(&legacy));
    let other = validate_with(
        patches(with_manager("acme.io/manager")),
        None,
        initializer_info(),
        vec![],
    );
    assert_eq!(
        details(&other),
        vec![
            "spec.runtimePatches: must not have envs for the dataset-initializer, model-initializer, node containers"
        ]
    );
}

#[test]
fn manager_must_be_a_domain_prefixed_path() {
    for (m, ok) in [
        ("kueue.x-k8s.io/manager", true),
        ("acme.io/a/b", true),
        ("kueue.k8s.io/", false),
        ("manager", false),
        ("", false),
        ("Bad_Host/x", false),
        ("a.io/sp ace", false),
    ] {
        let v = validate_with(
            patches(json!([{"manager": m}])),
            None,
            initializer_info(),
            vec![],
        );
        assert_eq!(v.errors.is_empty(), ok, "{m}: {:?}", v.errors);
        if !ok {
            assert_eq!(v.errors[0].field, "spec.runtimePatches.manager");
        }
    }
    let v = validate_with(
        patches(json!([{"manager": "kueue.k8s.io/"}])),
        None,
        initializer_info(),
        vec![],
    );
    assert_eq!(
        v.errors[0].detail,
        "must be a domain-prefixed path (such as \"acme.io/foo\")"
    );
    let v = validate_with(
        patches(json!([{"manager": ""}])),
        None,
        initializer_info(),
        vec![],
    );
    assert_eq!(v.errors[0].error_type, FieldErrorType::Required);
}

fn jobset_obj(active: i64) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "demo", "namespace": "team-a"},
           "status": {"replicatedJobsStatus": [{"name": "node", "active": active}]}})
}

#[test]
fn runtime_patches_immutability() {
    let old_p = json!([{"manager": "a.io/m"}]);
    let new_p = json!([{"manager": "a.io/m", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"x": "y"}}}}}]);
    let mk = |p: &Value, suspend: bool| trainjob(json!({"runtimePatches": p, "suspend": suspend}));
    // Neither suspended.
    let v = validate_with(
        mk(&new_p, false),
        Some(mk(&old_p, false)),
        initializer_info(),
        vec![],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimePatches: RuntimePatches can only be modified when the TrainJob is suspended before or after the update"
        ]
    );
    assert_eq!(v.errors[0].error_type, FieldErrorType::Forbidden);
    // Suspended before (resume with new patches), JobSet still active.
    let v = validate_with(
        mk(&new_p, false),
        Some(mk(&old_p, true)),
        initializer_info(),
        vec![jobset_obj(2)],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimePatches: RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"
        ]
    );
    // Suspended and nothing active: fine.
    assert!(
        validate_with(
            mk(&new_p, true),
            Some(mk(&old_p, false)),
            initializer_info(),
            vec![jobset_obj(0)]
        )
        .errors
        .is_empty()
    );
    // Unchanged patches never trip the rule.
    assert!(
        validate_with(
            mk(&old_p, false),
            Some(mk(&old_p, false)),
            initializer_info(),
            vec![]
        )
        .errors
        .is_empty()
    );
}

#[test]
fn pod_template_overrides_immutability_v2_1() {
    let o1 = json!([{"targetJobs": [{"name": "node"}], "metadata": {"labels": {"a": "1"}}}]);
    let o2 = json!([{"targetJobs": [{"name": "node"}], "metadata": {"labels": {"a": "2"}}}]);
    let mk =
        |o: &Value, suspend: bool| trainjob(json!({"podTemplateOverrides": o, "suspend": suspend}));
    // v2.1 only looks at the new suspend value.
    let v = validate_with(
        mk(&o2, false),
        Some(mk(&o1, true)),
        initializer_info(),
        vec![],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.podTemplateOverrides: PodTemplateOverrides can only be modified when the TrainJob is suspended"
        ]
    );
    let v = validate_with(
        mk(&o2, true),
        Some(mk(&o1, true)),
        initializer_info(),
        vec![jobset_obj(1)],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.podTemplateOverrides: PodTemplateOverrides cannot be modified when the JobSet's ReplicatedJob node is still active"
        ]
    );
}

#[test]
fn describe_declares_everything_used() {
    let d = JobSetPlugin.describe();
    assert_eq!(d.name, "jobset");
    assert_eq!(
        d.known_phases(),
        vec![
            Phase::PreBuild,
            Phase::Build,
            Phase::Validate,
            Phase::Status
        ]
    );
    assert_eq!(d.emits, vec![jobset_kind()]);
    assert_eq!(d.reads, vec![jobset_kind()]);
    assert_eq!(d.watches, vec![jobset_kind()]);
}

/// Kueue's flavor labels and annotations on a running JobSet's pods, then
/// removed while the TrainJob is suspended (preemption): the rebuilt pod
/// template leaves `metadata` out rather than sending it empty, which the
/// API server's server-side apply would store as `null` and JobSet refuse.
#[test]
fn labels_removed_while_suspended_leave_no_empty_metadata() {
    let mut host = MockHost::default();
    let (_, first) = run(
        trainjob(json!({"suspend": false})),
        worked_example_info(),
        &host,
    );
    let mut stored = first[0].clone();
    let pod = &mut stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    pod["metadata"] = json!({"labels": {"flavor": "f1"}, "annotations": {"a": "b"}});
    stored["spec"]["replicatedJobs"][0]["template"]["metadata"] = json!({"labels": {}});
    host.insert(stored);
    let (_, objs) = run(
        trainjob(json!({"suspend": true})),
        worked_example_info(),
        &host,
    );
    let rjob = &objs[0]["spec"]["replicatedJobs"][0];
    assert!(
        rjob["template"]["spec"]["template"]
            .get("metadata")
            .is_none(),
        "{rjob}"
    );
    assert!(rjob["template"].get("metadata").is_none(), "{rjob}");
    assert_eq!(objs[0]["spec"]["suspend"], true);
}

#[test]
fn empty_metadata_is_pruned_and_the_rest_kept() {
    let mut js = json!({"spec": {"replicatedJobs": [
        {"name": "a", "template": {"metadata": {"labels": {}, "annotations": null, "name": "x"},
            "spec": {"template": {"metadata": {"labels": {}, "annotations": {}}, "spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}}}},
        {"name": "b", "template": {"metadata": {"labels": {"k": "v"}},
            "spec": {"template": {"metadata": {}, "spec": {}}}}}
    ]}});
    builder::prune_empty_metadata(&mut js);
    assert_eq!(
        js,
        json!({"spec": {"replicatedJobs": [
            {"name": "a", "template": {"metadata": {"name": "x"},
                "spec": {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}}}},
            {"name": "b", "template": {"metadata": {"labels": {"k": "v"}},
                "spec": {"template": {"spec": {}}}}}
        ]}})
    );
}

// ---- failure policy ----

fn failure_policy_info(run_policy: Value, job_spec_extra: Value, jobset_extra: Value) -> Info {
    let mut job_spec =
        json!({"template": {"spec": {"containers": [{"name": "node", "image": "t"}]}}});
    if let (Value::Object(m), Value::Object(extra)) = (&mut job_spec, job_spec_extra) {
        m.extend(extra);
    }
    let mut spec = json!({"replicatedJobs": [{"name": "node",
        "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}}, "spec": job_spec}}]});
    if let (Value::Object(m), Value::Object(extra)) = (&mut spec, jobset_extra) {
        m.extend(extra);
    }
    let runtime = json!({"spec": {"mlPolicy": {"torch": {}}, "runPolicy": run_policy,
        "template": {"spec": spec}}});
    RuntimeFixture::new(runtime).info().expect("runtime")
}

#[test]
fn a_failure_policy_is_not_combined_with_the_runtimes_own_job_failure_handling() {
    let policy = json!({"failurePolicy": {"maxRestarts": 1}});
    let clean = failure_policy_info(policy.clone(), json!({}), json!({}));
    assert!(
        validate_with(trainjob(json!({})), None, clean, vec![])
            .errors
            .is_empty()
    );

    let both = failure_policy_info(
        policy,
        json!({"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}}),
        json!({"failurePolicy": {"maxRestarts": 3}}),
    );
    let v = validate_with(trainjob(json!({})), None, both.clone(), vec![]);
    assert_eq!(
        details(&v),
        vec![
            "spec.runtimeRef: the runtime's runPolicy.failurePolicy cannot be combined with the JobSet failurePolicy and the podFailurePolicy of replicated job \"node\" of the runtime"
        ]
    );
    // A TrainJob's own maxRestarts on a runtime that handles failures itself.
    let own = failure_policy_info(
        json!({}),
        json!({}),
        json!({"failurePolicy": {"maxRestarts": 3}}),
    );
    let v = validate_with(
        trainjob(json!({"failurePolicy": {"maxRestarts": 2}})),
        None,
        own.clone(),
        vec![],
    );
    assert_eq!(
        details(&v),
        vec![
            "spec.failurePolicy: a TrainJob failurePolicy cannot be combined with the JobSet failurePolicy of the runtime"
        ]
    );
    // Without a policy on either side the runtime's own handling is fine.
    assert!(
        validate_with(trainjob(json!({})), None, own, vec![])
            .errors
            .is_empty()
    );
    // Malformed: named, not a panic.
    let v = validate_with(
        trainjob(json!({"failurePolicy": {"maxRestarts": "x"}})),
        None,
        failure_policy_info(json!({}), json!({}), json!({})),
        vec![],
    );
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].field, "spec.failurePolicy");
}

#[test]
fn restarting_without_counting_and_without_a_deadline_is_admitted_with_a_warning() {
    let uncounted = json!({"failurePolicy": {"rules": [{"action": "RestartTrainJobAndIgnoreMaxRestarts",
        "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
    let info = failure_policy_info(uncounted.clone(), json!({}), json!({}));
    let v = validate_with(trainjob(json!({})), None, info.clone(), vec![]);
    assert!(v.errors.is_empty(), "{:?}", v.errors);
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(
        v.warnings[0].contains("RestartTrainJobAndIgnoreMaxRestarts"),
        "{:?}",
        v.warnings
    );
    // A deadline on the TrainJob or the runtime ends it: no warning.
    let v = validate_with(
        trainjob(json!({"activeDeadlineSeconds": 600})),
        None,
        info,
        vec![],
    );
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let mut with_deadline = uncounted;
    with_deadline["activeDeadlineSeconds"] = json!(600);
    let info = failure_policy_info(with_deadline, json!({}), json!({}));
    assert!(
        validate_with(trainjob(json!({})), None, info, vec![])
            .warnings
            .is_empty()
    );
}

#[test]
fn the_built_jobset_carries_the_failure_policy() {
    let policy = json!({"failurePolicy": {"maxRestarts": 4, "rules": [{"action": "FailTrainJob",
        "onExitCodes": {"operator": "In", "values": [42]}}]}});
    let info = failure_policy_info(policy, json!({}), json!({}));
    let (_, objects) = run(
        trainjob(json!({"failurePolicy": {"maxRestarts": 1}})),
        info.clone(),
        &MockHost::default(),
    );
    let spec = &objects[0]["spec"];
    assert_eq!(
        spec["failurePolicy"]["maxRestarts"],
        json!(1),
        "the TrainJob's wins"
    );
    assert_eq!(
        spec["failurePolicy"]["rules"][0]["action"],
        json!("FailJobSet")
    );
    let job = &spec["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(job["backoffLimit"], json!(0));
    assert_eq!(
        job["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"],
        json!([42])
    );
    // Without a policy, the JobSet is as before.
    let plain = failure_policy_info(json!({}), json!({}), json!({}));
    let (_, objects) = run(trainjob(json!({})), plain, &MockHost::default());
    assert_eq!(objects[0]["spec"].get("failurePolicy"), None);
    assert_eq!(
        objects[0]["spec"]["replicatedJobs"][0]["template"]["spec"].get("backoffLimit"),
        None
    );
}
