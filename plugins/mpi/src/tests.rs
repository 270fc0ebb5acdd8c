//! Plugin-level tests.

use super::*;
use crate::enforce::{ENV_DEFAULT_SLOTS, ENV_HOSTFILE, ENV_KEEP_FQDN, ENV_RSH_ARGS};
use pretty_assertions::assert_eq;
use trainforge_sdk::ANCESTOR_LABEL;
use trainforge_sdk::testing::{Harness, RuntimeFixture};

/// An MPI runtime shaped like upstream's `mpi-distributed`/`deepspeed`:
/// a `launcher` job (trainer label) and a `node` job.
fn info(mpi: Value, node_resources: Value) -> Info {
    let runtime = json!({"spec": {"mlPolicy": {"numNodes": 1, "mpi": mpi}, "template": {"spec": {"replicatedJobs": [
        {"name": "launcher", "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "mpi"}]}}}}},
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
            {"name": "node", "image": "mpi", "resources": node_resources}]}}}}}
    ]}}}});
    RuntimeFixture::new(runtime).info().expect("runtime")
}

fn trainjob(trainer: Value) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "alpha", "namespace": "ns", "uid": "u"}, "spec": {"trainer": trainer}})
}

fn policy_defaults() -> Value {
    json!({"numProcPerNode": 1, "mpiImplementation": "OpenMPI", "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": false})
}

#[test]
fn hostfile_and_counts_upstream_integration_example() {
    let out = Harness::<Mpi>::new(
        trainjob(json!({"numNodes": 2, "numProcPerNode": 8})),
        info(policy_defaults(), json!({})),
    )
    .run()
    .expect("runs");
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(2));
    assert_eq!(out.info.pod_set("launcher").and_then(|p| p.count), Some(1));
    assert_eq!(
        out.info.policy("mlPolicy.mpi.numProcPerNode"),
        Some(&json!(8))
    );
    let cm = out
        .objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("hostfile");
    assert_eq!(cm["metadata"]["name"], "alpha-mpi-hostfile");
    assert_eq!(
        cm["data"]["hostfile"],
        "alpha-node-0-0.alpha slots=8\nalpha-node-0-1.alpha slots=8\n"
    );
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], "u");
}

#[test]
fn launcher_and_node_get_volumes_mounts_and_openmpi_env() {
    let mut pol = policy_defaults();
    pol["sshAuthMountPath"] = json!("/home/mpiuser/.ssh");
    let out = Harness::<Mpi>::new(trainjob(json!({"numProcPerNode": 4})), info(pol, json!({})))
        .run()
        .expect("runs");
    let launcher = out.info.pod_set("launcher").expect("launcher");
    let node = out.info.pod_set("node").expect("node");
    let vol_names = |p: &PodSet| p.volumes.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
    assert_eq!(vol_names(launcher), vec!["mpi-ssh-auth", "mpi-hostfile"]);
    assert_eq!(vol_names(node), vec!["mpi-ssh-auth"]);
    assert_eq!(
        serde_json::to_value(&node.volumes[0]).expect("json"),
        json!({"name": "mpi-ssh-auth", "secret": {"secretName": "alpha-mpi-ssh-auth", "defaultMode": 256, "items": [
            {"key": "ssh-privatekey", "path": "id_rsa", "mode": 416},
            {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 420},
            {"key": "ssh-publickey", "path": "authorized_keys", "mode": 420}]}})
    );
    assert_eq!(
        serde_json::to_value(&launcher.volumes[1]).expect("json"),
        json!({"name": "mpi-hostfile", "configMap": {"name": "alpha-mpi-hostfile", "items": [{"key": "hostfile", "path": "hostfile", "mode": 292}]}})
    );
    let lc = launcher.container("node").expect("launcher node container");
    let mounts: Vec<(&str, &str)> = lc
        .volume_mounts
        .iter()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        vec![
            ("mpi-ssh-auth", "/home/mpiuser/.ssh"),
            ("mpi-hostfile", "/etc/mpi")
        ]
    );
    let env: Vec<(&str, &str)> = lc
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(
        env,
        vec![
            (ENV_HOSTFILE, "/etc/mpi/hostfile"),
            (ENV_KEEP_FQDN, "true"),
            (ENV_DEFAULT_SLOTS, "4"),
            (ENV_RSH_ARGS, "-o ConnectionAttempts=10"),
        ]
    );
    let nc = node.container("node").expect("node container");
    assert!(nc.env.is_empty());
    assert_eq!(nc.volume_mounts.len(), 1);
}

#[test]
fn run_launcher_as_node_counts_and_hostfile() {
    let mut pol = policy_defaults();
    pol["runLauncherAsNode"] = json!(true);
    let out = Harness::<Mpi>::new(
        trainjob(json!({"numNodes": 3})),
        info(pol.clone(), json!({})),
    )
    .run()
    .expect("runs");
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(2));
    let cm = out
        .objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("hostfile");
    assert_eq!(
        cm["data"]["hostfile"],
        "alpha-launcher-0-0.alpha slots=1\nalpha-node-0-0.alpha slots=1\nalpha-node-0-1.alpha slots=1\n"
    );
    // numNodes 1 with the launcher as node: still one node pod (max(n-1, 1)).
    let out = Harness::<Mpi>::new(trainjob(json!({"numNodes": 1})), info(pol, json!({})))
        .run()
        .expect("runs");
    assert_eq!(out.info.pod_set("node").and_then(|p| p.count), Some(1));
}

#[test]
fn slots_from_gpus_when_policy_is_one() {
    // Runtime node container with 4 GPUs.
    let out = Harness::<Mpi>::new(
        trainjob(json!({})),
        info(
            policy_defaults(),
            json!({"limits": {"nvidia.com/gpu": "4"}}),
        ),
    )
    .run()
    .expect("runs");
    assert_eq!(
        out.info.policy("mlPolicy.mpi.numProcPerNode"),
        Some(&json!(4))
    );
    // TrainJob resources win over the runtime's.
    let out = Harness::<Mpi>::new(
        trainjob(json!({"resourcesPerNode": {"requests": {"nvidia.com/gpu": "2"}}})),
        info(
            policy_defaults(),
            json!({"limits": {"nvidia.com/gpu": "4"}}),
        ),
    )
    .run()
    .expect("runs");
    assert_eq!(
        out.info.policy("mlPolicy.mpi.numProcPerNode"),
        Some(&json!(2))
    );
    // A policy value other than 1 is kept.
    let mut pol = policy_defaults();
    pol["numProcPerNode"] = json!(3);
    let out = Harness::<Mpi>::new(
        trainjob(json!({})),
        info(pol, json!({"limits": {"nvidia.com/gpu": "4"}})),
    )
    .run()
    .expect("runs");
    assert_eq!(
        out.info.policy("mlPolicy.mpi.numProcPerNode"),
        Some(&json!(3))
    );
}

#[test]
fn zero_slots_per_node_are_kept() {
    // Kubeflow Trainer v2.3 accepts `numProcPerNode: 0` and only replaces a
    // policy value of 1 by the GPU count: 0 stays 0 even on GPU nodes.
    let mut pol = policy_defaults();
    pol["numProcPerNode"] = json!(0);
    let out = Harness::<Mpi>::new(
        trainjob(json!({"numNodes": 2})),
        info(pol, json!({"limits": {"nvidia.com/gpu": "4"}})),
    )
    .run()
    .expect("runs");
    assert_eq!(
        out.info.policy("mlPolicy.mpi.numProcPerNode"),
        Some(&json!(0))
    );
    let cm = out
        .objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("hostfile");
    assert_eq!(
        cm["data"]["hostfile"],
        "alpha-node-0-0.alpha slots=0\nalpha-node-0-1.alpha slots=0\n"
    );
    let launcher = out.info.pod_set("launcher").expect("launcher");
    let slots = launcher
        .container("node")
        .expect("launcher node container")
        .env
        .iter()
        .find(|e| e.name == ENV_DEFAULT_SLOTS)
        .and_then(|e| e.value.clone());
    assert_eq!(slots.as_deref(), Some("0"));
}

#[test]
fn ssh_secret_shape_and_keys_parse_back() {
    let out = Harness::<Mpi>::new(trainjob(json!({})), info(policy_defaults(), json!({})))
        .run()
        .expect("runs");
    assert_eq!(
        out.objects[0]["kind"], "Secret",
        "secret first, then the hostfile"
    );
    let s = &out.objects[0];
    assert_eq!(s["metadata"]["name"], "alpha-mpi-ssh-auth");
    assert_eq!(s["metadata"]["namespace"], "ns");
    assert_eq!(s["type"], "kubernetes.io/ssh-auth");
    assert_eq!(s["immutable"], true);
    let decode = |k: &str| {
        let b64 = s["data"][k].as_str().expect("base64 string");
        String::from_utf8(Base64::decode_vec(b64).expect("base64")).expect("utf-8")
    };
    let pem = decode("ssh-privatekey");
    let pubkey = decode("ssh-publickey");
    let sk = p521::SecretKey::from_sec1_pem(&pem).expect("EC PRIVATE KEY parses");
    let pk = ssh_key::PublicKey::from_openssh(pubkey.trim_end()).expect("authorized key parses");
    let ecdsa = pk.key_data().ecdsa().expect("ECDSA key");
    use p521::elliptic_curve::sec1::ToEncodedPoint;
    assert_eq!(
        ecdsa.as_sec1_bytes(),
        sk.public_key().to_encoded_point(false).as_bytes()
    );
}

#[test]
fn existing_secret_is_not_regenerated() {
    let mut h = Harness::<Mpi>::new(trainjob(json!({})), info(policy_defaults(), json!({})));
    h.host.insert(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alpha-mpi-ssh-auth", "namespace": "ns"}}));
    let out = h.run().expect("runs");
    assert_eq!(out.objects.len(), 1);
    assert_eq!(out.objects[0]["kind"], "ConfigMap");
}

#[test]
fn nothing_without_the_policy() {
    let runtime = json!({"spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]}}}});
    let i = RuntimeFixture::new(runtime).info().expect("runtime");
    let out = Harness::<Mpi>::new(trainjob(json!({"numNodes": 4})), i.clone())
        .run()
        .expect("runs");
    assert!(out.objects.is_empty());
    assert_eq!(out.info, i);
}

#[test]
fn unsupported_implementation_is_an_error() {
    let mut pol = policy_defaults();
    pol["mpiImplementation"] = json!("Intel");
    let err = Harness::<Mpi>::new(trainjob(json!({})), info(pol, json!({})))
        .run()
        .expect_err("rejected");
    assert!(
        matches!(&err, PluginError::InvalidInput(m) if m.contains("MPI implementation for Intel doesn't supported")),
        "{err}"
    );
}

fn errors(trainer: Value, pol: Value, drop_launcher: bool) -> Vec<(String, String)> {
    let mut i = info(pol, json!({}));
    if drop_launcher {
        i.template_spec.pod_sets.retain(|p| p.name != "launcher");
    }
    Harness::<Mpi>::new(trainjob(trainer), i)
        .validate(None)
        .expect("validates")
        .errors
        .into_iter()
        .map(|e| (e.field, e.detail))
        .collect()
}

#[test]
fn validation_messages() {
    let mut pol = policy_defaults();
    pol["runLauncherAsNode"] = json!(true);
    assert_eq!(errors(json!({"numNodes": 2}), pol.clone(), true), vec![(
        "spec.trainer.numNodes".to_string(),
        "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node".to_string()
    )]);
    assert!(errors(json!({"numNodes": 2}), pol.clone(), false).is_empty());
    assert!(errors(json!({"numNodes": 1}), pol, true).is_empty());
    assert_eq!(
        errors(json!({"env": [{"name": "OMPI_MCA_plm_rsh_args", "value": "x"}, {"name": "OK", "value": "1"},
                              {"name": "OMPI_MCA_orte_default_hostfile", "value": "y"}]}), policy_defaults(), false),
        vec![("spec.trainer.env".to_string(),
              "must not have reserved envs, invalid envs configured: [OMPI_MCA_orte_default_hostfile OMPI_MCA_plm_rsh_args]".to_string())]
    );
    assert_eq!(
        errors(json!({"numProcPerNode": "auto"}), policy_defaults(), false),
        vec![(
            "spec.trainer.numProcPerNode".to_string(),
            "must have an int value for MPI TrainJob".to_string()
        )]
    );
    assert!(errors(json!({"numProcPerNode": 4}), policy_defaults(), false).is_empty());
}

#[test]
fn describe_requests_randomness_and_reads_secrets() {
    let d = Mpi.describe();
    assert_eq!(d.capabilities, vec!["random"]);
    assert!(d.reads.contains(&KindRef::new("v1", "Secret")));
    assert_eq!(
        d.emits,
        vec![
            KindRef::new("v1", "Secret"),
            KindRef::new("v1", "ConfigMap")
        ]
    );
}
