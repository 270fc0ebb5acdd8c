//! A hostile plugin. The attack is chosen by the plugin config:
//! `{"attack": "<name>"}`. It implements the raw WIT bindings (not the SDK
//! trait) so it can return anything at all.

use std::hint::black_box;
use trainforge_sdk::bindings::exports::trainforge::plugin::guest::Guest;
use trainforge_sdk::bindings::trainforge::plugin::host;
use trainforge_sdk::bindings::trainforge::plugin::types::*;

struct Hostile;

fn attack(config: &str) -> String {
    serde_json::from_str::<serde_json::Value>(config)
        .ok()
        .and_then(|v| v.get("attack").and_then(|a| a.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

fn kind(api_version: &str, kind: &str) -> KindRef {
    KindRef { api_version: api_version.into(), kind: kind.into() }
}

fn leak(what: &str, data: String) -> Result<Vec<String>, PluginError> {
    Ok(vec![serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "leak"},
        "data": {"what": what, "leaked": data},
    })
    .to_string()])
}

impl Guest for Hostile {
    fn describe() -> Descriptor {
        Descriptor {
            name: "hostile".into(),
            version: "0.0.0".into(),
            wit_version: "0.1.0".into(),
            policy_keys: vec![],
            phases: vec!["enforce-ml-policy".into(), "build".into(), "status".into()],
            emits: vec![
                kind("v1", "ConfigMap"),
                kind("v1", "Secret"),
                // Declared, yet the host must still refuse it.
                kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ],
            reads: vec![kind("v1", "ConfigMap")],
            watches: vec![],
            capabilities: vec![],
        }
    }

    fn enforce_ml_policy(input: PhaseInput) -> Result<Mutation, PluginError> {
        match attack(&input.config).as_str() {
            "bad-info" => Ok(Mutation { info: Some("{\"labels\": ".into()), trainjob: None }),
            "loop-enforce" => loop {
                black_box(());
            },
            _ => Ok(Mutation { info: None, trainjob: None }),
        }
    }

    fn enforce_pod_group_policy(_: PhaseInput) -> Result<Mutation, PluginError> {
        Ok(Mutation { info: None, trainjob: None })
    }

    fn enforce_pod_spec(_: PhaseInput) -> Result<Mutation, PluginError> {
        Ok(Mutation { info: None, trainjob: None })
    }

    fn pre_build(_: PhaseInput) -> Result<Mutation, PluginError> {
        Ok(Mutation { info: None, trainjob: None })
    }

    fn build(input: PhaseInput) -> Result<Vec<String>, PluginError> {
        let obj = |v: serde_json::Value| Ok(vec![v.to_string()]);
        match attack(&input.config).as_str() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    black_box(&hoard);
                }
            }
            "panic" => panic!("hostile plugin panicked on purpose"),
            "huge-output" => Ok(vec!["x".repeat(100 << 20)]),
            "invalid-json" => Ok(vec!["{\"apiVersion\": \"v1\", \"kind\": ".into()]),
            "cluster-role-binding" => obj(serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "pwn"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "team"}],
            })),
            "secret-other-namespace" => obj(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "stolen", "namespace": "kube-system"},
            })),
            "foreign-owner" => obj(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "ownerReferences": [{
                    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                    "name": "someone-elses-job", "uid": "other-uid", "controller": true}]},
            })),
            "file" => match std::fs::read_to_string("/etc/passwd") {
                Ok(s) => leak("file", s),
                Err(e) => Err(PluginError::Internal(format!("blocked: file: {e}"))),
            },
            "env" => {
                let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                match std::env::var("PATH") {
                    Ok(p) => leak("env", p),
                    Err(_) if vars.is_empty() => Err(PluginError::Internal("blocked: env: no variables".into())),
                    Err(_) => leak("env", vars.join(",")),
                }
            }
            "socket" => match std::net::TcpStream::connect("127.0.0.1:6443") {
                Ok(_) => leak("socket", "connected".into()),
                Err(e) => Err(PluginError::Internal(format!("blocked: socket: {e}"))),
            },
            "clock" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                if now == 0 {
                    Err(PluginError::Internal("blocked: clock: frozen at epoch".into()))
                } else {
                    leak("clock", now.to_string())
                }
            }
            "random" => match host::random_bytes(16) {
                Ok(b) => leak("random", format!("{b:?}")),
                Err(HostError::Denied(m)) => Err(PluginError::Internal(format!("blocked: random: {m}"))),
                Err(HostError::Unavailable(m)) => Err(PluginError::Internal(format!("random unavailable: {m}"))),
            },
            "read-secret" => match host::get_object(&kind("v1", "Secret"), "team", "creds") {
                Ok(v) => leak("secret", format!("{v:?}")),
                Err(HostError::Denied(m)) => Err(PluginError::Internal(format!("blocked: get-object: {m}"))),
                Err(HostError::Unavailable(m)) => Err(PluginError::Internal(format!("get-object unavailable: {m}"))),
            },
            "log-flood" => {
                for _ in 0..10_000 {
                    host::log(LogLevel::Info, &"spam ".repeat(1000));
                }
                Ok(vec![])
            }
            _ => Ok(vec![]),
        }
    }

    fn validate(_: ValidateInput) -> Result<Validation, PluginError> {
        Ok(Validation { warnings: vec![], errors: vec![] })
    }

    fn status(input: PhaseInput) -> Result<Option<String>, PluginError> {
        match attack(&input.config).as_str() {
            "bad-status" => Ok(Some("not json".into())),
            _ => Ok(None),
        }
    }
}

trainforge_sdk::bindings::export!(Hostile with_types_in trainforge_sdk::bindings);
