//! Unit tests of Flux, by rule (see the crate docs); the classes of
//! upstream's `flux_test.go` (TestFlux, TestValidate, TestDeterministicCurve,
//! TestGenerateRange, TestGenerateHostlist, TestEncodeZ85,
//! TestBuildCurveSecret, TestGetOriginalCommand) are each covered here.

use super::*;
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, Outcome, RuntimeFixture};

const UID: &str = "00000000-0000-4000-8000-000000000023";

/// A runtime with `mlPolicy` = `ml_policy` whose trainer job `node` has a
/// container `node` (`node` fields merged in) and `init` init containers.
fn info(ml_policy: Value, node: Value, init: Value) -> Info {
    let mut container = json!({"name": "node", "image": "ubuntu:jammy"});
    if let (Some(c), Value::Object(extra)) = (container.as_object_mut(), node) {
        c.extend(extra);
    }
    let runtime = json!({"spec": {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"initContainers": init, "containers": [container]}}}}}
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("valid runtime")
}

fn flux_info() -> Info {
    info(
        json!({"numNodes": 1, "flux": {"numProcPerNode": 1}}),
        json!({}),
        json!([]),
    )
}

fn trainjob(trainer: Option<Value>) -> Value {
    let mut tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "lammps", "namespace": "ns", "uid": UID},
        "spec": {"runtimeRef": {"name": "flux-runtime"}}});
    if let Some(t) = trainer {
        tj["spec"]["trainer"] = t;
    }
    tj
}

fn run(trainer: Value, info: Info) -> Outcome {
    Harness::<Flux>::new(trainjob(Some(trainer)), info)
        .run()
        .expect("runs")
}

fn object<'a>(out: &'a Outcome, kind: &str) -> &'a Value {
    out.objects
        .iter()
        .find(|o| o["kind"] == kind)
        .expect("an object of that kind")
}

fn script(out: &Outcome, key: &str) -> String {
    object(out, "ConfigMap")["data"][key]
        .as_str()
        .expect("script")
        .to_owned()
}

fn cert(out: &Outcome) -> String {
    let data = object(out, "Secret")["data"][CURVE_KEY]
        .as_str()
        .expect("curve.cert");
    String::from_utf8(Base64::decode_vec(data).expect("base64")).expect("utf-8")
}

// ------------------------------------------------------------ TestFlux

#[test]
fn enforce_wraps_the_command_and_adds_volumes_installer_and_mounts() {
    let out = run(
        json!({"numNodes": 2, "image": "test:trainjob", "command": ["trainjob"], "args": ["trainjob"]}),
        flux_info(),
    );
    assert_eq!(
        out.trainjob["spec"]["trainer"],
        json!({"numNodes": 2, "image": "test:trainjob",
            "command": ["/bin/bash", "/etc/flux-config/entrypoint.sh", "trainjob trainjob"]}),
        "command wrapped, args cleared"
    );
    let ps = out.info.pod_set("node").expect("node");
    assert_eq!(
        trainforge_sdk::serde_json::to_value(&ps.volumes).expect("json"),
        json!([
            {"name": "spack-install", "emptyDir": {}},
            {"name": "flux-install", "emptyDir": {}},
            {"name": "lammps-flux-entrypoint", "configMap": {"name": "lammps-flux-entrypoint", "defaultMode": 0o755}},
            {"name": "shared-memory", "emptyDir": {"medium": "Memory"}},
            {"name": "flux-curve", "secret": {"secretName": "lammps-flux-curve", "defaultMode": 0o400}},
        ])
    );
    assert_eq!(
        trainforge_sdk::serde_json::to_value(&ps.init_containers).expect("json"),
        json!([{
            "name": "flux-installer",
            "image": "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy",
            "command": ["/bin/bash", "/etc/flux-config/init.sh"],
            "env": [], "ports": [],
            "volumeMounts": [
                {"name": "flux-install", "mountPath": "/mnt/flux"},
                {"name": "lammps-flux-entrypoint", "mountPath": "/etc/flux-config", "readOnly": true},
            ],
        }])
    );
    let node = ps.container("node").expect("node container");
    assert_eq!(
        trainforge_sdk::serde_json::to_value(&node.volume_mounts).expect("json"),
        json!([
            {"name": "flux-install", "mountPath": "/mnt/flux"},
            {"name": "spack-install", "mountPath": "/opt/software"},
            {"name": "lammps-flux-entrypoint", "mountPath": "/etc/flux-config", "readOnly": true},
            {"name": "flux-curve", "mountPath": "/curve", "readOnly": true},
            {"name": "shared-memory", "mountPath": "/dev/shm", "readOnly": true},
        ])
    );
}

#[test]
fn build_emits_the_scripts_config_map_and_the_curve_secret() {
    let out = run(
        json!({"numNodes": 2, "command": ["lmp"], "args": ["-in", "in.reaxff"]}),
        flux_info(),
    );
    assert_eq!(out.objects.len(), 2);
    let cm = object(&out, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "lammps-flux-entrypoint");
    assert_eq!(cm["metadata"]["namespace"], "ns");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], UID);
    assert_eq!(cm["metadata"]["ownerReferences"][0]["controller"], true);
    let keys: Vec<&String> = cm["data"].as_object().expect("data").keys().collect();
    assert_eq!(keys, ["entrypoint.sh", "init.sh"]);

    let init = script(&out, INIT_KEY);
    assert!(init.contains("echo \"lammps-node-0-[0-1]\" > "), "{init}");
    for line in [
        "default_port = 8050",
        "default_bind = \"tcp://eth0:%p\"",
        "default_connect = \"tcp://%h.lammps.ns.svc.cluster.local:%p\"",
        "{ host=\"lammps-node-0-[0-1]\"},",
        "queue-policy = \"fcfs\"",
        "curve_cert = \"/mnt/flux/config/etc/curve/curve.cert\"",
        "path = \"/mnt/flux/config/etc/flux/system/R\"",
    ] {
        assert!(init.lines().any(|l| l == line), "{line:?} in\n{init}");
    }
    assert!(!init.contains("{{"), "every placeholder filled:\n{init}");

    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("lead=\"lammps-node-0-0\""), "{entry}");
    assert!(entry.contains("flags=\"-N 2 -n 2\""), "{entry}");
    assert!(entry.contains(" --cores=0 > /tmp/R"), "{entry}");
    assert!(!entry.contains("{{"), "every placeholder filled:\n{entry}");

    let secret = object(&out, "Secret");
    assert_eq!(secret["metadata"]["name"], "lammps-flux-curve");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], UID);
    assert!(cert(&out).contains("public-key = "));
}

#[test]
fn scripts_are_valid_bash() {
    let out = run(json!({"numNodes": 3}), flux_info());
    for key in [INIT_KEY, ENTRYPOINT_KEY] {
        let text = script(&out, key);
        let Ok(status) = std::process::Command::new("bash")
            .args(["-n", "-c", &text])
            .status()
        else {
            return; // no bash here: nothing to check
        };
        assert!(status.success(), "{key} does not parse:\n{text}");
    }
}

#[test]
fn tasks_come_from_the_trainjob_else_the_policy() {
    let policy4 = info(json!({"flux": {"numProcPerNode": 4}}), json!({}), json!([]));
    let out = run(json!({"numNodes": 2}), policy4.clone());
    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("flags=\"-N 2 -n 8\""), "{entry}");
    assert!(entry.contains(" --cores=0-3 > /tmp/R"), "{entry}");
    let out = run(json!({"numNodes": 3, "numProcPerNode": 2}), policy4);
    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("flags=\"-N 3 -n 6\""), "{entry}");
    assert!(entry.contains(" --cores=0-1 > /tmp/R"), "{entry}");
}

#[test]
fn gpus_add_the_gpu_flag_and_resource_spec() {
    // The runtime node's GPUs.
    let gpu_runtime = info(
        json!({"flux": {"numProcPerNode": 1}}),
        json!({"resources": {"limits": {"nvidia.com/gpu": "2"}}}),
        json!([]),
    );
    let out = run(json!({"numNodes": 2}), gpu_runtime.clone());
    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("flags=\"-N 2 -n 2 -g 2\""), "{entry}");
    assert!(entry.contains(" --cores=0 --gpu=0-1 > /tmp/R"), "{entry}");
    // The TrainJob's resources win, alone.
    let out = run(
        json!({"numNodes": 1, "resourcesPerNode": {"requests": {"nvidia.com/gpu": 1}}}),
        gpu_runtime.clone(),
    );
    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("flags=\"-N 1 -n 1 -g 1\""), "{entry}");
    assert!(entry.contains(" --cores=0 --gpu=0 > /tmp/R"), "{entry}");
    let out = run(
        json!({"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": "2"}}}),
        gpu_runtime,
    );
    let entry = script(&out, ENTRYPOINT_KEY);
    assert!(entry.contains("flags=\"-N 1 -n 1\""), "{entry}");
    assert!(entry.contains(" --cores=0 > /tmp/R"), "{entry}");
}

#[test]
fn settings_default_then_runtime_literal_env_then_trainjob_env() {
    let runtime = info(
        json!({"flux": {}}),
        json!({"env": [
            {"name": "FLUX_VIEW_IMAGE", "value": "ghcr.io/converged-computing/flux-view-rocky:tag-9"},
            {"name": "FLUX_NETWORK_DEVICE", "value": "eth1"},
            {"name": "FLUX_QUEUE_POLICY", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "OTHER", "value": "x"},
        ]}),
        json!([]),
    );
    // Runtime literals override the defaults; a valueFrom does not.
    let out = run(json!({"numNodes": 1}), runtime.clone());
    let ps = out.info.pod_set("node").expect("node");
    assert_eq!(
        ps.init_containers[0].image.as_deref(),
        Some("ghcr.io/converged-computing/flux-view-rocky:tag-9")
    );
    let init = script(&out, INIT_KEY);
    assert!(init.contains("default_bind = \"tcp://eth1:%p\""), "{init}");
    assert!(init.contains("queue-policy = \"fcfs\""), "{init}");
    // The TrainJob's env wins.
    let out = run(
        json!({"numNodes": 1, "env": [
            {"name": "FLUX_VIEW_IMAGE", "value": "ghcr.io/converged-computing/flux-view-ubuntu:tag-noble"},
            {"name": "FLUX_QUEUE_POLICY", "value": "easy"},
        ]}),
        runtime,
    );
    let ps = out.info.pod_set("node").expect("node");
    assert_eq!(
        ps.init_containers[0].image.as_deref(),
        Some("ghcr.io/converged-computing/flux-view-ubuntu:tag-noble")
    );
    let init = script(&out, INIT_KEY);
    assert!(init.contains("default_bind = \"tcp://eth1:%p\""), "{init}");
    assert!(init.contains("queue-policy = \"easy\""), "{init}");
}

#[test]
fn settings_function_precedence() {
    let node = Container {
        name: "node".into(),
        env: vec![trainforge_sdk::k8s_openapi::api::core::v1::EnvVar {
            name: FLUX_NETWORK_DEVICE.into(),
            value: Some("ib0".into()),
            value_from: None,
        }],
        ..Container::default()
    };
    assert_eq!(settings(None, &[]), Settings::default());
    let s = settings(Some(&node), &[]);
    assert_eq!(s.network_device, "ib0");
    let s = settings(
        Some(&node),
        &[
            (FLUX_NETWORK_DEVICE.into(), "eth2".into()),
            ("X".into(), "y".into()),
        ],
    );
    assert_eq!(
        s,
        Settings {
            network_device: "eth2".into(),
            ..Settings::default()
        }
    );
}

#[test]
fn a_setting_cannot_break_out_of_the_broker_config() {
    let out = run(
        json!({"numNodes": 1, "env": [{"name": "FLUX_QUEUE_POLICY", "value": "x\"\n[evil]\\"}]}),
        flux_info(),
    );
    let init = script(&out, INIT_KEY);
    assert!(
        init.contains("queue-policy = \"x\\\"\\u000A[evil]\\\\\""),
        "{init}"
    );
}

#[test]
fn the_runtime_command_is_used_without_a_trainjob_command() {
    let runtime = info(
        json!({"flux": {}}),
        json!({"command": ["python", "train.py"], "args": ["--runtime-arg"]}),
        json!([]),
    );
    let out = run(json!({"numNodes": 1, "args": ["--epochs", "10"]}), runtime);
    assert_eq!(
        out.trainjob["spec"]["trainer"]["command"],
        json!([
            "/bin/bash",
            "/etc/flux-config/entrypoint.sh",
            "python train.py --epochs 10"
        ])
    );
    assert!(out.trainjob["spec"]["trainer"].get("args").is_none());
}

#[test]
fn other_policies_are_left_alone() {
    for policy in [json!({"torch": {}}), json!({"numNodes": 2}), Value::Null] {
        let before = info(policy.clone(), json!({}), json!([]));
        let out = run(json!({"numNodes": 2, "command": ["x"]}), before.clone());
        assert_eq!(out.info, before, "{policy}");
        assert_eq!(
            out.trainjob,
            trainjob(Some(json!({"numNodes": 2, "command": ["x"]})))
        );
        assert!(out.objects.is_empty());
    }
}

#[test]
fn missing_inputs_are_errors_naming_the_field() {
    let err = Harness::<Flux>::new(trainjob(None), flux_info())
        .run()
        .expect_err("no spec.trainer");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer: required")),
        "{err:?}"
    );
    let err = Harness::<Flux>::new(trainjob(Some(json!({"image": "x"}))), flux_info())
        .run()
        .expect_err("no numNodes");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer.numNodes: required")),
        "{err:?}"
    );
    let no_node = RuntimeFixture::new(json!({"spec": {"mlPolicy": {"flux": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "worker", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}
    ]}}}}))
    .info()
    .expect("valid runtime");
    let err = Harness::<Flux>::new(trainjob(Some(json!({"numNodes": 1}))), no_node)
        .run()
        .expect_err("no node job");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.contains("no replicated job \"node\"")),
        "{err:?}"
    );
    let err = Harness::<Flux>::new(
        trainjob(Some(json!({"numNodes": 1, "numProcPerNode": "auto"}))),
        flux_info(),
    )
    .run()
    .expect_err("string numProcPerNode");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer.numProcPerNode:")),
        "{err:?}"
    );
    let reserved = info(
        json!({"flux": {}}),
        json!({}),
        json!([{"name": "flux-installer", "image": "x"}]),
    );
    let err = Harness::<Flux>::new(trainjob(Some(json!({"numNodes": 1}))), reserved)
        .run()
        .expect_err("reserved init container");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.starts_with("spec.trainer.initContainers: InitContainer 'flux-installer' is reserved")),
        "{err:?}"
    );
}

#[test]
fn describes_itself() {
    let d = Flux.describe();
    assert_eq!(d.name, "flux");
    assert_eq!(d.policy_keys, vec![POLICY.to_owned()]);
    assert_eq!(
        d.known_phases(),
        vec![Phase::EnforceMlPolicy, Phase::Build, Phase::Validate]
    );
}

// ------------------------------------------------------------ TestValidate

#[test]
fn validate_refuses_a_reserved_init_container() {
    let v = |init: Value, policy: Value| {
        Harness::<Flux>::new(
            trainjob(Some(json!({"numNodes": 1}))),
            info(policy, json!({}), init),
        )
        .validate(None)
        .expect("validates")
    };
    let mut want = FieldError::invalid(
        "spec.trainer.initContainers",
        "InitContainer 'flux-installer' is reserved",
    );
    want.bad_value = Some("\"flux-installer\"".into());
    assert_eq!(
        v(
            json!([{"name": "setup", "image": "x"}, {"name": "flux-installer", "image": "x"}]),
            json!({"flux": {}})
        )
        .errors,
        vec![want]
    );
    assert!(
        v(
            json!([{"name": "setup", "image": "x"}]),
            json!({"flux": {}})
        )
        .errors
        .is_empty()
    );
    assert!(
        v(
            json!([{"name": "flux-installer", "image": "x"}]),
            json!({"torch": {}})
        )
        .errors
        .is_empty(),
        "only for Flux runtimes"
    );
}

// ------------------------------------------------------------ TestDeterministicCurve / TestBuildCurveSecret

#[test]
fn curve_certificate_is_derived_from_the_uid() {
    let a = run(json!({"numNodes": 1}), flux_info());
    let b = run(json!({"numNodes": 2}), flux_info());
    assert_eq!(cert(&a), cert(&b), "same uid, same certificate");
    let mut other = trainjob(Some(json!({"numNodes": 1})));
    other["metadata"]["uid"] = json!("another-uid");
    let c = Harness::<Flux>::new(other, flux_info())
        .run()
        .expect("runs");
    assert_ne!(cert(&a), cert(&c), "another uid, another certificate");
}

/// The whole file, with the keys upstream's derivation (Go `crypto/ecdh`
/// X25519 on SHA-256 of the uid, Z85) gives for this uid.
#[test]
fn curve_certificate_text() {
    assert_eq!(
        curve::certificate("lammps", UID),
        "#  ZeroMQ CURVE Secret Certificate\n\
         #  Generated by Kubeflow Trainer\n\
         \n\
         metadata\n\
         \x20   name = \"lammps\"\n\
         curve\n\
         \x20   public-key = \"k{dPS:oCm5])-nK?0mt>iE9.j[P^@hSi<6.49mKT\"\n\
         \x20   secret-key = \"1MFE#<@tKMNsxpWgoWsL{+rh@[pBTh:hf=9Y9u]k\"\n"
    );
    let out = run(json!({"numNodes": 1}), flux_info());
    assert_eq!(cert(&out), curve::certificate("lammps", UID));
    for (uid, public, secret) in [
        (
            "test-uid-12345",
            "B($P96fW4hK8eU3fsH5)4<Ldq.aa{z<tl&uG=OVR",
            "^d^6NvwLn})DFdW>PERA+W#Wv1<bjCZrNq]C]YRX",
        ),
        (
            "",
            "7?EGW/m>&Y9HQagaISXu)D$eAd5[-hYZ)hT8q:j&",
            "<flD*Nev{rN!#-#NqYRYc:2+@wsF=RQ)mt!CV84K",
        ),
    ] {
        let k = curve::key_pair(uid);
        assert_eq!(curve::encode_z85(&k.public), public, "{uid:?}");
        assert_eq!(curve::encode_z85(&k.secret), secret, "{uid:?}");
    }
}

/// RFC 7748 §6.1: Alice's key pair.
#[test]
fn x25519_matches_rfc_7748() {
    let hex = |s: &str| -> [u8; 32] {
        let v: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect();
        v.try_into().expect("32 bytes")
    };
    let secret = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    let public = hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
    assert_eq!(curve::public_key(secret), public);
}

// ------------------------------------------------------------ TestGenerateRange / TestGenerateHostlist

#[test]
fn ranges() {
    assert_eq!(scripts::range(1, 0), "0");
    assert_eq!(scripts::range(4, 0), "0-3");
    assert_eq!(scripts::range(3, 10), "10-12");
    assert_eq!(scripts::range(0, 0), "0--1", "upstream's form, kept");
}

#[test]
fn hostlists() {
    assert_eq!(scripts::hostlist("lammps-job", 1), "lammps-job-node-0-[0]");
    assert_eq!(
        scripts::hostlist("flux-cluster", 4),
        "flux-cluster-node-0-[0-3]"
    );
    assert_eq!(scripts::hostlist("", 2), "-node-0-[0-1]");
    assert_eq!(scripts::lead_host("alpha"), "alpha-node-0-0");
}

// ------------------------------------------------------------ TestEncodeZ85

#[test]
fn z85() {
    // ZeroMQ RFC 32's test vector.
    assert_eq!(
        curve::encode_z85(&[0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B]),
        "HelloWorld"
    );
    assert_eq!(curve::encode_z85(&[0; 4]), "00000");
    assert_eq!(curve::encode_z85(&[0xFF; 4]), "%nSc0");
    assert_eq!(curve::encode_z85(&[]), "");
    assert_eq!(curve::encode_z85(&[1, 2, 3]), "", "not a multiple of 4");
    assert_eq!(curve::encode_z85(&[7; 32]).len(), 40);
}

// ------------------------------------------------------------ TestGetOriginalCommand

#[test]
fn original_commands() {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        original_command(
            &s(&["ignored"]),
            Some(&s(&["python", "train.py"])),
            Some(&s(&["--epochs", "10"]))
        ),
        "python train.py --epochs 10"
    );
    assert_eq!(
        original_command(&s(&["python", "", "", "script.py"]), None, None),
        "python   script.py",
        "joined as they are, only the ends trimmed"
    );
    assert_eq!(
        original_command(&s(&["python"]), Some(&[]), Some(&s(&["a"]))),
        "a",
        "an empty TrainJob command still replaces the runtime's"
    );
    assert_eq!(original_command(&[], None, None), "");
}

// ------------------------------------------------------------ rendering

#[test]
fn render_fills_known_placeholders_once() {
    let p = scripts::Params {
        job: "j",
        namespace: "n",
        nodes: 1,
        tasks: 1,
        gpus: 0,
        network_device: "eth0",
        queue_policy: "{{hosts}}",
    };
    let init = p.init_script();
    assert!(init.contains("queue-policy = \"{{hosts}}\""), "{init}");
    assert!(init.contains("echo \"j-node-0-[0]\""), "{init}");
}
