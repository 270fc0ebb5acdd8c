//! Plugin-level tests of Torch: every rule (see the crate docs), the worked
//! example (torch-distributed, 2 nodes, 4 GPUs each), the product's examples, elastic training and the `TRAINER_*`
//! variables. Pure helpers have their own tests next to them.

use super::*;
use crate::env::tests::container_env;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, Outcome, RuntimeFixture};

const RANK: &str = "fieldRef:metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// A runtime with a trainer job `node` (container `node` given) and extra jobs.
fn runtime(ml_policy: Value, node: Value, extra_jobs: Vec<Value>) -> Value {
    let mut jobs = extra_jobs;
    jobs.push(
        json!({"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
        "spec": {"template": {"spec": {"containers": [node]}}}}}),
    );
    json!({"metadata": {"name": "rt"}, "spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": jobs}}}})
}

fn node(resources: Value) -> Value {
    json!({"name": "node", "image": "pytorch", "command": ["torchrun", "train.py"], "resources": resources})
}

/// The info the operator builds (the trainer count is `mlPolicy.numNodes`).
fn host_info(runtime: &Value) -> Info {
    RuntimeFixture::new(runtime.clone())
        .info()
        .expect("valid runtime")
}

fn trainjob(name: &str, runtime_name: &str, trainer: Option<Value>) -> Value {
    let mut tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": runtime_name}}});
    if let Some(t) = trainer {
        tj["spec"]["trainer"] = t;
    }
    tj
}

fn run(tj: Value, info: Info) -> Outcome {
    Harness::<Torch>::new(tj, info).run().expect("torch runs")
}

fn env_list(info: &Info, pod_set: &str, container: &str) -> Vec<(String, String)> {
    let c = info
        .pod_set(pod_set)
        .and_then(|p| p.container(container))
        .expect("container");
    c.env
        .iter()
        .map(|e| {
            let v = match (&e.value, &e.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(src)) => format!(
                    "fieldRef:{}",
                    src.field_ref
                        .as_ref()
                        .map(|f| f.field_path.as_str())
                        .unwrap_or("?")
                ),
                _ => String::new(),
            };
            (e.name.clone(), v)
        })
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

fn value_of(info: &Info, name: &str) -> Option<String> {
    env_list(info, "node", "node")
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

fn yaml(file: &str) -> Value {
    let path = format!("{}/testdata/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("test data");
    serde_saphyr::from_str(&text).expect("yaml")
}

// ---- worked example; the trainer count and PET_* variables ------------------------------

#[test]
fn worked_example_env_port_and_count() {
    let info = host_info(&runtime(
        json!({"numNodes": 1, "torch": {}}),
        node(json!({})),
        vec![],
    ));
    let out = run(
        trainjob(
            "demo",
            "torch-distributed",
            Some(json!({"numNodes": 2, "command": ["torchrun", "train.py"],
            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}})),
        ),
        info,
    );
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(2));
    assert_eq!(
        env_list(&out.info, "node", "node"),
        pairs(&[
            ("PET_NNODES", "2"),
            ("PET_NPROC_PER_NODE", "auto"),
            ("PET_NODE_RANK", RANK),
            ("PET_MASTER_ADDR", "demo-node-0-0.demo"),
            ("PET_MASTER_PORT", "29500"),
            ("TRAINER_NNODES", "2"),
            ("TRAINER_NPROC_PER_NODE", "auto"),
            ("TRAINER_NODE_0_HOSTNAME", "demo-node-0-0.demo"),
            ("TRAINER_JOB_ID", "demo"),
        ])
    );
    let ports = &out
        .info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node")
        .ports;
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].container_port, 29500);
    assert!(out.objects.is_empty(), "no HPA without elasticPolicy");
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"],
        json!(["torchrun", "train.py"]),
        "command untouched"
    );
}

#[test]
fn trainer_env_comes_first_then_pet_and_runtime_env_is_updated_in_place() {
    let mut n = node(json!({}));
    n["env"] = json!([{"name": "RUNTIME", "value": "r"}, {"name": "PET_NNODES", "value": "99"}]);
    let info = host_info(&runtime(json!({"torch": {}}), n, vec![]));
    let out = run(
        trainjob(
            "j",
            "rt",
            Some(json!({"env": [{"name": "USER", "value": "u"}], "numProcPerNode": 2})),
        ),
        info,
    );
    let names: Vec<String> = env_list(&out.info, "node", "node")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "RUNTIME",
            "PET_NNODES",
            "USER",
            "PET_NPROC_PER_NODE",
            "PET_NODE_RANK",
            "PET_MASTER_ADDR",
            "PET_MASTER_PORT",
            "TRAINER_NNODES",
            "TRAINER_NPROC_PER_NODE",
            "TRAINER_NODE_0_HOSTNAME",
            "TRAINER_JOB_ID",
        ]
    );
    assert_eq!(value_of(&out.info, "PET_NNODES").as_deref(), Some("1"));
}

#[test]
fn without_spec_trainer_no_pet_env_but_trainer_vars_and_no_port() {
    let info = host_info(&runtime(
        json!({"numNodes": 3, "torch": {}}),
        node(json!({"limits": {"cpu": "4"}})),
        vec![],
    ));
    let out = run(trainjob("j", "rt", None), info);
    assert_eq!(
        env_list(&out.info, "node", "node"),
        pairs(&[
            ("TRAINER_NNODES", "3"),
            ("TRAINER_NPROC_PER_NODE", "4"),
            ("TRAINER_NODE_0_HOSTNAME", "j-node-0-0.j"),
            ("TRAINER_JOB_ID", "j"),
        ])
    );
    assert!(
        out.info
            .pod_set("node")
            .and_then(|p| p.container("node"))
            .expect("node")
            .ports
            .is_empty()
    );
}

#[test]
fn other_policies_are_left_alone() {
    for policy in [
        json!({"mpi": {}}),
        json!({"jax": {}}),
        json!({}),
        Value::Null,
    ] {
        let info = host_info(&runtime(policy.clone(), node(json!({})), vec![]));
        let out = run(
            trainjob(
                "j",
                "rt",
                Some(json!({"numNodes": 4, "env": [{"name": "PET_NNODES", "value": "x"}]})),
            ),
            info.clone(),
        );
        assert_eq!(out.info, info, "{policy}");
        assert!(out.objects.is_empty());
        let v = Harness::<Torch>::new(
            trainjob(
                "j",
                "rt",
                Some(json!({"env": [{"name": "PET_NNODES", "value": "x"}]})),
            ),
            info,
        )
        .validate(None)
        .expect("validates");
        assert!(v.errors.is_empty(), "{policy}");
    }
}

// ---- numProcPerNode: `auto`/`cpu`/`gpu` and integer values --------------------------------

fn nproc(ml_policy: Value, runtime_resources: Value, trainer: Value) -> String {
    let info = host_info(&runtime(ml_policy, node(runtime_resources), vec![]));
    let out = run(trainjob("j", "rt", Some(trainer)), info);
    value_of(&out.info, "PET_NPROC_PER_NODE").expect("PET_NPROC_PER_NODE")
}

#[test]
fn num_proc_per_node_resolution() {
    let torch = json!({"torch": {}});
    // (name, policy, runtime resources, trainer) -> value
    let cases = [
        (
            "auto with fractional CPU limit",
            &torch,
            json!({"limits": {"cpu": "2.5"}}),
            json!({}),
            "3",
        ),
        (
            "auto with low CPU limit",
            &torch,
            json!({"limits": {"cpu": "0.7"}}),
            json!({}),
            "1",
        ),
        (
            "auto with no CPU resources",
            &torch,
            json!({}),
            json!({}),
            "1",
        ),
        (
            "auto with millicore CPU limit",
            &torch,
            json!({"limits": {"cpu": "2500m"}}),
            json!({}),
            "3",
        ),
        (
            "auto with CPU request but no limit",
            &torch,
            json!({"requests": {"cpu": "6"}}),
            json!({}),
            "6",
        ),
        (
            "auto with CPU request and limit",
            &torch,
            json!({"requests": {"cpu": "2"}, "limits": {"cpu": "8"}}),
            json!({}),
            "2",
        ),
        (
            "auto with GPU request stays auto",
            &torch,
            json!({"requests": {"cpu": "4", "nvidia.com/gpu": "1"}}),
            json!({}),
            "auto",
        ),
        (
            "explicit int preserved",
            &torch,
            json!({"limits": {"nvidia.com/gpu": "8"}}),
            json!({"numProcPerNode": 3}),
            "3",
        ),
        (
            "TrainJob resources taken alone",
            &torch,
            json!({"limits": {"nvidia.com/gpu": "8"}}),
            json!({"resourcesPerNode": {"limits": {"cpu": "5"}}}),
            "5",
        ),
        (
            "TrainJob GPUs as a YAML number",
            &torch,
            json!({"limits": {"cpu": "5"}}),
            json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}),
            "auto",
        ),
    ];
    for (name, policy, res, trainer, want) in cases {
        assert_eq!(nproc(policy.clone(), res, trainer), want, "{name}");
    }
}

#[test]
fn older_generation_policy_values() {
    let res = json!({"requests": {"cpu": "3.2"}, "limits": {"nvidia.com/gpu": "2"}});
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": "cpu"}}),
            res.clone(),
            json!({})
        ),
        "4"
    );
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": "gpu"}}),
            res.clone(),
            json!({})
        ),
        "gpu"
    );
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": "auto"}}),
            res.clone(),
            json!({})
        ),
        "auto"
    );
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": 6}}),
            res.clone(),
            json!({})
        ),
        "6"
    );
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": 6}}),
            res.clone(),
            json!({"numProcPerNode": "cpu"})
        ),
        "4",
        "TrainJob wins"
    );
    assert_eq!(
        nproc(
            json!({"torch": {"numProcPerNode": "cpu"}}),
            json!({}),
            json!({})
        ),
        "1"
    );
}

#[test]
fn invalid_num_proc_string_is_an_error_naming_the_field() {
    let info = host_info(&runtime(json!({"torch": {}}), node(json!({})), vec![]));
    let h = Harness::<Torch>::new(
        trainjob("j", "rt", Some(json!({"numProcPerNode": "many"}))),
        info,
    );
    let v = h.validate(None).expect("validates");
    assert_eq!(
        v.errors,
        vec![FieldError::invalid(
            "spec.trainer.numProcPerNode",
            "must have an int value or [auto cpu gpu]"
        )]
    );
    let err = h.run().expect_err("enforce fails");
    assert_eq!(
        err,
        PluginError::InvalidInput(
            "spec.trainer.numProcPerNode: must have an int value or [auto cpu gpu]".into()
        )
    );
}

#[test]
fn invalid_quantity_is_an_error_naming_the_field() {
    let info = host_info(&runtime(json!({"torch": {}}), node(json!({})), vec![]));
    let err = Harness::<Torch>::new(
        trainjob(
            "j",
            "rt",
            Some(json!({"resourcesPerNode": {"limits": {"cpu": "lots"}}})),
        ),
        info,
    )
    .run()
    .expect_err("rejected");
    assert_eq!(
        err,
        PluginError::InvalidInput(
            "spec.trainer.resourcesPerNode: resources.limits[cpu]: invalid quantity \"lots\""
                .into()
        )
    );
}

// ---- envInjection: the variables also reach the named target containers ------------------

fn injection_runtime(targets: Value) -> Info {
    let sidecar_job = json!({"name": "aux", "template": {"spec": {"template": {"spec": {
        "initContainers": [{"name": "prep", "image": "i"}],
        "containers": [{"name": "agent", "image": "a"}, {"name": "other", "image": "o"}]}}}}});
    host_info(&runtime(
        json!({"numNodes": 2, "torch": {"envInjection": {"targets": targets}}}),
        node(json!({})),
        vec![sidecar_job],
    ))
}

#[test]
fn env_injection_reaches_containers_and_init_containers_only_named() {
    let info = injection_runtime(json!([{"jobName": "aux", "containerNames": ["agent", "prep"]}]));
    let out = run(
        trainjob("j", "rt", Some(json!({"numProcPerNode": 2}))),
        info,
    );
    for c in ["agent", "prep"] {
        let names: Vec<String> = env_list(&out.info, "aux", c)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            &names[..5],
            [
                "PET_NNODES",
                "PET_NPROC_PER_NODE",
                "PET_NODE_RANK",
                "PET_MASTER_ADDR",
                "PET_MASTER_PORT"
            ],
            "{c}"
        );
        assert!(names.contains(&"TRAINER_JOB_ID".to_owned()));
    }
    assert!(
        env_list(&out.info, "aux", "other").is_empty(),
        "other containers untouched"
    );
    assert!(
        out.info
            .pod_set("aux")
            .and_then(|p| p.container("agent"))
            .expect("agent")
            .ports
            .is_empty()
    );
}

#[test]
fn env_injection_missing_target_fails_reconcile_and_admission() {
    for (target, job, c) in [
        (
            json!([{"jobName": "aux", "containerNames": ["ghost"]}]),
            "aux",
            "ghost",
        ),
        (
            json!([{"jobName": "nope", "containerNames": ["agent"]}]),
            "nope",
            "agent",
        ),
    ] {
        let h = Harness::<Torch>::new(
            trainjob("j", "rt", Some(json!({}))),
            injection_runtime(target),
        );
        let msg = format!(
            "envInjection target podSet \"{job}\" container \"{c}\" not found in runtime template"
        );
        assert_eq!(
            h.validate(None).expect("validates").errors,
            vec![FieldError::invalid("spec.runtimeRef", msg.clone())]
        );
        assert_eq!(
            h.run().expect_err("fails"),
            PluginError::InvalidInput(format!("spec.runtimeRef: {msg}"))
        );
    }
}

#[test]
fn env_injection_with_empty_targets_is_a_no_op() {
    let out = run(
        trainjob("j", "rt", Some(json!({}))),
        injection_runtime(json!([])),
    );
    assert!(env_list(&out.info, "aux", "agent").is_empty());
}

// ---- torchtune ----------------------------------------------------------------------------

fn torchtune_info(name_gpus: &str, num_nodes: i64) -> Info {
    let mut n = node(json!({"limits": {"nvidia.com/gpu": name_gpus}}));
    n["command"] = json!([
        "tune",
        "run",
        "--rdzv_endpoint=localhost:29500",
        "full_finetune_distributed",
        "--config",
        "llama3_2/1B_full",
        "dataset=torchtune.datasets.instruct_dataset",
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model"
    ]);
    host_info(&runtime(
        json!({"numNodes": num_nodes, "torch": {
        "envInjection": {"targets": [{"jobName": "node", "containerNames": ["tracker"]}]}}}),
        n,
        vec![],
    ))
    .tap_add_container("node", "tracker")
}

trait TapInfo {
    fn tap_add_container(self, pod_set: &str, name: &str) -> Self;
}

impl TapInfo for Info {
    fn tap_add_container(mut self, pod_set: &str, name: &str) -> Self {
        if let Some(ps) = self.pod_set_mut(pod_set) {
            ps.containers.push(Container {
                name: name.into(),
                ..Container::default()
            });
        }
        self
    }
}

#[test]
fn torchtune_multi_device_rewrites_command_without_master_env() {
    let out = run(
        trainjob(
            "ft",
            "torchtune-llama3.2-1b",
            Some(json!({"command": ["tune", "run"], "args": ["batch_size=2"]})),
        ),
        torchtune_info("2", 1),
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"],
        json!([
            "tune",
            "run",
            "--rdzv_endpoint=ft-node-0-0.ft:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model",
        ])
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["args"],
        json!(["batch_size=2"]),
        "args kept"
    );
    let names: Vec<String> = env_list(&out.info, "node", "node")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        !names.contains(&"PET_MASTER_ADDR".to_owned())
            && !names.contains(&"PET_MASTER_PORT".to_owned())
    );
    assert!(names.contains(&"PET_NODE_RANK".to_owned()));
    let tracker: Vec<String> = env_list(&out.info, "node", "tracker")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        tracker.contains(&"PET_MASTER_ADDR".to_owned()),
        "targets get master env even for torchtune"
    );
}

#[test]
fn torchtune_single_device_and_multi_node() {
    let out = run(
        trainjob(
            "ft",
            "torchtune-llama3.2-1b",
            Some(json!({"command": ["tune", "run"]})),
        ),
        torchtune_info("1", 1),
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"][2],
        "full_finetune_single_device"
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"][4],
        "llama3_2/1B_full_single_device"
    );
    let out = run(
        trainjob(
            "ft",
            "torchtune-llama3.3-70b",
            Some(json!({"command": ["tune", "run"], "numNodes": 2})),
        ),
        torchtune_info("8", 1),
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"][2],
        "--rdzv_endpoint=ft-node-0-0.ft:29500"
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"][5],
        "llama3_3/70B_full_multinode"
    );
}

fn tune_errors(runtime_name: &str, gpus: &str, trainer: Value) -> Vec<FieldError> {
    Harness::<Torch>::new(
        trainjob("ft", runtime_name, Some(trainer)),
        torchtune_info(gpus, 1),
    )
    .validate(None)
    .expect("validates")
    .errors
}

#[test]
fn torchtune_validation_messages() {
    let tune = |extra: Value| {
        let mut t = json!({"command": ["tune", "run"]});
        if let (Some(t), Some(e)) = (t.as_object_mut(), extra.as_object()) {
            t.extend(e.clone());
        }
        t
    };
    assert_eq!(
        tune_errors("torchtune-mistral-7b", "2", tune(json!({}))),
        vec![FieldError::invalid(
            "spec.runtimeRef.name",
            "must have a supported pretrained model, invalid model configured: mistral/7B"
        )]
    );
    assert_eq!(
        tune_errors("torchtune-llama3.2-1b", "2", tune(json!({"numNodes": 2}))),
        vec![FieldError::invalid(
            "spec.trainer.numNodes",
            "must be 1 for llama3_2/1B model"
        )]
    );
    assert_eq!(
        tune_errors(
            "torchtune-qwen2.5-1.5b",
            "1",
            tune(json!({"args": ["model.quantize_base=True"]}))
        ),
        vec![FieldError::invalid(
            "spec.runtimeRef.name",
            "QLoRA is not supported for qwen2_5/1.5B model"
        )]
    );
    assert_eq!(
        tune_errors(
            "torchtune-llama3.2-1b",
            "2",
            tune(json!({"args": ["model.lora_attn_modules=[q]", "model.quantize_base=true"]}))
        ),
        vec![
            FieldError::invalid(
                "spec.trainer.numProcPerNode",
                "must be auto or 1 for llama3_2/1B model when using QLoRA"
            ),
            FieldError::invalid(
                "spec.trainer.resourcesPerNode",
                "must have gpu resource with value 1 for llama3_2/1B model when using QLoRA"
            ),
        ]
    );
    assert_eq!(
        tune_errors(
            "torchtune-llama3.3-70b",
            "8",
            tune(json!({"numNodes": 2, "args": ["model.lora_attn_modules=[q]"]}))
        ),
        vec![FieldError::invalid(
            "spec.trainer.numNodes",
            "LoRA fine-tuning is not supported for multi-node training in TorchTune"
        )]
    );
    assert_eq!(
        tune_errors(
            "torchtune-llama3.2-1b",
            "2",
            tune(json!({"args": ["epochs=1", "output_dir=/tmp"]}))
        ),
        vec![FieldError::invalid(
            "spec.trainer.args[1]",
            "must not set immutable config \"output_dir\" in trainer args; it is managed by the runtime"
        )]
    );
    assert!(
        tune_errors(
            "torchtune-llama3.2-1b",
            "1",
            tune(json!({"args": ["model.quantize_base=true"]}))
        )
        .is_empty(),
        "single-device QLoRA ok"
    );
    assert!(
        tune_errors(
            "torchtune-llama3.2-1b",
            "2",
            json!({"command": ["python"], "args": ["output_dir=/x"]})
        )
        .is_empty(),
        "not torchtune"
    );
}

// ---- reserved env ---------------------------------------------------------------------------

#[test]
fn reserved_env_message_lists_sorted_names() {
    let info = host_info(&runtime(json!({"torch": {}}), node(json!({})), vec![]));
    let tj = trainjob(
        "j",
        "rt",
        Some(json!({"env": [
            {"name": "PET_NODE_RANK", "value": "1"}, {"name": "OK", "value": "1"},
            {"name": "PET_MASTER_ADDR", "value": "x"}, {"name": "TRAINER_JOB_ID", "value": "x"},
            {"name": "PET_MAX_RESTARTS", "value": "1"}
        ]})),
    );
    let v = Harness::<Torch>::new(tj, info)
        .validate(None)
        .expect("validates");
    assert_eq!(
        v.errors,
        vec![FieldError::invalid(
            "spec.trainer.env",
            "must not have reserved envs, invalid envs configured: [PET_MASTER_ADDR PET_NODE_RANK]",
        )],
        "PET_MAX_RESTARTS is only reserved with an elastic policy; TRAINER_* is never reserved"
    );
}

#[test]
fn every_trainer_var_set_by_the_user_is_accepted_and_wins_everywhere() {
    let mut rt = runtime(json!({"numNodes": 2, "torch": {}}), node(json!({})), vec![]);
    // A second container the runtime injects into.
    rt["spec"]["mlPolicy"]["torch"]["envInjection"] =
        json!({"targets": [{"jobName": "node", "containerNames": ["sidecar"]}]});
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"]
        .as_array_mut()
        .expect("containers")
        .push(json!({"name": "sidecar", "image": "busybox"}));
    for name in crate::env::TRAINER_VARS {
        let user = format!("user-{name}");
        let tj = trainjob(
            "j",
            "rt",
            Some(json!({"env": [{"name": name, "value": user}]})),
        );
        let v = Harness::<Torch>::new(tj.clone(), host_info(&rt))
            .validate(None)
            .expect("validates");
        assert!(v.errors.is_empty(), "{name} refused: {:?}", v.errors);
        let out = run(tj, host_info(&rt));
        for container in ["node", "sidecar"] {
            let env = env_list(&out.info, "node", container);
            let values: Vec<&str> = env
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(
                values,
                vec![user.as_str()],
                "{name} in {container}: {env:?}"
            );
        }
        // The other TRAINER_* names keep our values.
        let ours = env_list(&out.info, "node", "node");
        assert!(
            ours.iter()
                .any(|(n, v)| n == "TRAINER_JOB_ID" && (name == "TRAINER_JOB_ID" || v == "j")),
            "{ours:?}"
        );
    }
}

// ---- TRAINER_* and env order ---------------------------------------------------------------

#[test]
fn trainer_node0_hostname_follows_trainer_job_and_subdomain() {
    let mut rt = runtime(json!({"torch": {}}), node(json!({})), vec![]);
    rt["spec"]["template"]["spec"]["network"] = json!({"subdomain": "svc"});
    let out = run(trainjob("j", "rt", Some(json!({}))), host_info(&rt));
    assert_eq!(
        value_of(&out.info, "TRAINER_NODE_0_HOSTNAME").as_deref(),
        Some("j-node-0-0.svc")
    );
    assert_eq!(
        value_of(&out.info, "PET_MASTER_ADDR").as_deref(),
        Some("j-node-0-0.j"),
        "upstream's hard-coded form"
    );
}

#[test]
fn injected_vars_are_defined_before_env_that_references_them() {
    let mut n = node(json!({}));
    n["env"] = json!([
        {"name": "FIRST", "value": "plain"},
        {"name": "RDZV", "value": "$(TRAINER_NODE_0_HOSTNAME):29400"},
        {"name": "WORLD", "value": "$(PET_NNODES)x$(TRAINER_NPROC_PER_NODE)"},
        {"name": "RANK_COPY", "value": "$(PET_NODE_RANK)"},
        {"name": "ESCAPED", "value": "$$(TRAINER_JOB_ID)"}
    ]);
    let info = host_info(&runtime(
        json!({"numNodes": 2, "torch": {"numProcPerNode": 4}}),
        n,
        vec![],
    ));
    let out = run(
        trainjob(
            "job",
            "rt",
            Some(json!({"env": [{"name": "USER_ID", "value": "run-$(TRAINER_JOB_ID)"}]})),
        ),
        info,
    );
    let env = &out
        .info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node")
        .env;
    let vars = container_env(env, "1");
    assert_eq!(vars["RDZV"], "job-node-0-0.job:29400");
    assert_eq!(vars["WORLD"], "2x4");
    assert_eq!(vars["RANK_COPY"], "1");
    assert_eq!(vars["USER_ID"], "run-job");
    assert_eq!(
        vars["ESCAPED"], "$(TRAINER_JOB_ID)",
        "escaped references are not uses"
    );
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        &names[..2],
        ["FIRST", "TRAINER_NODE_0_HOSTNAME"],
        "unreferenced order unchanged"
    );
    let pos = |n: &str| names.iter().position(|x| *x == n).expect("present");
    assert!(
        pos("TRAINER_JOB_ID") > pos("ESCAPED"),
        "not moved for an escaped reference"
    );
}

fn args_of(rt: &Value) -> Vec<String> {
    let c = &rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0];
    c["command"]
        .as_array()
        .into_iter()
        .chain(c["args"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[test]
fn brief_torch_distributed_runtime_args_resolve() {
    let rt = yaml("clustertrainingruntime-torch-distributed.yaml");
    let out = run(
        trainjob("train", "torch-distributed", Some(json!({"numNodes": 3}))),
        host_info(&rt),
    );
    let env = &out
        .info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node")
        .env;
    let mut vars = container_env(env, "0");
    vars.insert("JOB_COMPLETION_INDEX".into(), "0".into()); // set by the Job controller (Indexed Jobs)
    let args: Vec<String> = args_of(&rt)
        .iter()
        .map(|a| crate::env::tests::expand(a, &vars))
        .collect();
    assert_eq!(
        args,
        [
            "torchrun",
            "--nnodes=3",
            "--nproc_per_node=4",
            "--node_rank=0",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=train-node-0-0.train:29400",
            "--rdzv_id=train",
        ],
        "auto without GPUs: ceil(requests.cpu) = 4 (request 4, limit 8)"
    );
}

#[test]
fn brief_pet_command_runtime_resolves() {
    let rt = yaml("clustertrainingruntime-pet-command.yaml");
    let out = run(
        trainjob("pj", "torch-pet-command", Some(json!({}))),
        host_info(&rt),
    );
    let env = &out
        .info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node")
        .env;
    let vars = container_env(env, "RANK");
    let args: Vec<String> = args_of(&rt)
        .iter()
        .map(|a| crate::env::tests::expand(a, &vars))
        .collect();
    assert_eq!(
        args,
        [
            "torchrun",
            "--nproc_per_node=4",
            "--nnodes=2",
            "--node_rank=RANK",
            "--master_addr=pj-node-0-0.pj",
            "--master_port=29500",
            "/workspace/train.py",
        ]
    );
}

#[test]
fn brief_multi_node_with_gpus_stays_auto() {
    let mut rt = yaml("clustertrainingruntime-multi-node.yaml");
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"] =
        json!({"labels": {ANCESTOR_LABEL: "trainer"}});
    let mut tj = yaml("trainjob-minimal.yaml");
    tj["metadata"]["namespace"] = json!("default");
    let out = run(tj, host_info(&rt));
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(4));
    assert_eq!(
        value_of(&out.info, "PET_NPROC_PER_NODE").as_deref(),
        Some("auto")
    );
    assert_eq!(value_of(&out.info, "PET_NNODES").as_deref(), Some("4"));
}

// ---- elastic ---------------------------------------------------------------------------------

fn elastic_runtime() -> Value {
    let mut rt = yaml("trainingruntime-pytorch-elastic.yaml");
    // As accepted by the API: without mlPolicy.numNodes.
    if let Some(p) = rt["spec"]["mlPolicy"].as_object_mut() {
        p.remove("numNodes");
    }
    rt
}

#[test]
fn brief_elastic_runtime_gets_torchrun_elastic_settings_and_an_hpa() {
    let rt = elastic_runtime();
    let out = run(
        trainjob("el", "pytorch-distributed", Some(json!({}))),
        host_info(&rt),
    );
    assert_eq!(
        out.info.pod_set("node").and_then(|p| p.count),
        Some(1),
        "starts at minNodes"
    );
    for (name, want) in [
        ("PET_NNODES", "1:4"),
        ("TRAINER_NNODES", "1:4"),
        ("PET_MAX_RESTARTS", "3"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_RDZV_ENDPOINT", "el-node-0-0.el:29500"),
        ("PET_RDZV_ID", "el"),
    ] {
        assert_eq!(value_of(&out.info, name).as_deref(), Some(want), "{name}");
    }
    let env = &out
        .info
        .pod_set("node")
        .and_then(|p| p.container("node"))
        .expect("node")
        .env;
    let mut vars = container_env(env, "0");
    vars.insert("JOB_COMPLETION_INDEX".into(), "0".into());
    let args: Vec<String> = args_of(&rt)
        .iter()
        .map(|a| crate::env::tests::expand(a, &vars))
        .collect();
    assert_eq!(args[1], "--nnodes=1:4");
    assert_eq!(
        args[2], "--nproc_per_node=2",
        "auto without GPUs: ceil(requests.cpu)"
    );
    assert_eq!(
        out.objects,
        vec![json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "el", "namespace": "team-a", "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "el", "uid": "uid-1",
                "controller": true, "blockOwnerDeletion": true}]},
            "spec": {
                "scaleTargetRef": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "el"},
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
            }
        })]
    );
}

#[test]
fn elastic_with_num_nodes_in_runtime_is_refused_with_the_cel_message() {
    let rt = yaml("trainingruntime-pytorch-elastic.yaml");
    let h = Harness::<Torch>::new(
        trainjob("el", "pytorch-distributed", Some(json!({}))),
        host_info(&rt),
    );
    assert_eq!(
        h.validate(None).expect("validates").errors,
        vec![FieldError::invalid(
            "spec.runtimeRef",
            "numNodes should not be set if torch.elasticPolicy is configured"
        )]
    );
    assert_eq!(
        h.run().expect_err("refused"),
        PluginError::InvalidInput(
            "spec.runtimeRef: numNodes should not be set if torch.elasticPolicy is configured"
                .into()
        )
    );
}

#[test]
fn elastic_trainjob_num_nodes_must_be_within_bounds() {
    let h = Harness::<Torch>::new(
        trainjob("el", "pytorch-distributed", Some(json!({"numNodes": 6}))),
        host_info(&elastic_runtime()),
    );
    assert_eq!(
        h.validate(None).expect("validates").errors,
        vec![FieldError::invalid(
            "spec.trainer.numNodes",
            "must be between minNodes (1) and maxNodes (4) of the runtime's torch elasticPolicy"
        )]
    );
    let out = run(
        trainjob("el", "pytorch-distributed", Some(json!({"numNodes": 3}))),
        host_info(&elastic_runtime()),
    );
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(3));
    assert_eq!(value_of(&out.info, "PET_NNODES").as_deref(), Some("1:4"));
}

#[test]
fn elastic_without_metrics_has_no_hpa() {
    let mut rt = elastic_runtime();
    if let Some(e) = rt["spec"]["mlPolicy"]["torch"]["elasticPolicy"].as_object_mut() {
        e.remove("metrics");
    }
    let out = run(
        trainjob("el", "pytorch-distributed", Some(json!({}))),
        host_info(&rt),
    );
    assert!(out.objects.is_empty());
    assert_eq!(value_of(&out.info, "PET_NNODES").as_deref(), Some("1:4"));
}

#[test]
fn describes_itself() {
    let d = Torch.describe();
    assert_eq!(d.name, "torch");
    assert_eq!(
        d.known_phases(),
        vec![Phase::EnforceMlPolicy, Phase::Build, Phase::Validate]
    );
    assert_eq!(
        d.emits,
        vec![KindRef::new("autoscaling/v2", "HorizontalPodAutoscaler")]
    );
    assert_eq!(d.policy_keys, vec!["mlPolicy.torch".to_owned()]);
}

#[test]
fn elastic_settings_and_trainer_vars_reach_env_injection_targets() {
    let mut rt = elastic_runtime();
    rt["spec"]["mlPolicy"]["torch"]["envInjection"] =
        json!({"targets": [{"jobName": "node", "containerNames": ["agent"]}]});
    if let Some(cs) =
        rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            ["containers"]
            .as_array_mut()
    {
        cs.push(json!({"name": "agent", "image": "a"}));
    }
    let out = run(
        trainjob("el", "pytorch-distributed", Some(json!({}))),
        host_info(&rt),
    );
    let agent: Vec<(String, String)> = env_list(&out.info, "node", "agent");
    assert_eq!(
        agent,
        pairs(&[
            ("PET_NNODES", "1:4"),
            ("PET_NPROC_PER_NODE", "2"),
            ("PET_NODE_RANK", RANK),
            ("PET_MASTER_ADDR", "el-node-0-0.el"),
            ("PET_MASTER_PORT", "29500"),
            ("PET_MAX_RESTARTS", "3"),
            ("PET_RDZV_BACKEND", "c10d"),
            ("PET_RDZV_ENDPOINT", "el-node-0-0.el:29500"),
            ("PET_RDZV_ID", "el"),
            ("TRAINER_NNODES", "1:4"),
            ("TRAINER_NPROC_PER_NODE", "2"),
            ("TRAINER_NODE_0_HOSTNAME", "el-node-0-0.el"),
            ("TRAINER_JOB_ID", "el"),
        ])
    );
}
