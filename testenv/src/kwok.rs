//! kwok (full mode): fake nodes; pods go Pending → Running → Succeeded, and a
//! pod labelled [`FAIL_POD_LABEL`]`=true` goes Running → Failed instead.
//!
//! Bare `kwok` has no built-in stages; we feed it upstream's "fast" node and
//! pod stages plus the chaos stage `pod-container-running-failed`, all taken
//! from the kwok module at build time. The fast `pod-complete` stage is
//! narrowed so that it leaves pods with the failure label alone.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::etcd::with_log;
use crate::manifests::load_yaml_docs;
use crate::process::{self, Proc};
use crate::{Error, crds, wait};

/// Label that makes kwok fail a running pod (exit code 1, reason
/// `containerFailed`; annotations `<label>/exit-code`, `/reason`, `/message`,
/// `/delay` tune it — see kwok's `pod-container-running-failed` stage).
pub const FAIL_POD_LABEL: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";

/// Names of the fake nodes created in full mode.
pub const NODE_NAMES: &[&str] = &["kwok-node-0", "kwok-node-1"];

const STAGES: &[&str] = &[
    "node-initialize",
    "pod-ready",
    "pod-complete",
    "pod-delete",
    "pod-container-running-failed",
];

fn config(data: &Path) -> Result<String, Error> {
    // No KwokConfiguration document: kwok applies its defaults (e.g. the
    // play-stage parallelism) only to the configuration it makes itself; one
    // from a file with empty options fails to start. Flags set the rest.
    let mut docs = Vec::new();
    for stage in STAGES {
        let file = data.join("kwok").join(format!("{stage}.yaml"));
        for mut doc in load_yaml_docs(&file)? {
            if *stage == "pod-complete" {
                let exprs = doc
                    .pointer_mut("/spec/selector/matchExpressions")
                    .and_then(Value::as_array_mut)
                    .ok_or_else(|| Error::manifest(&file, "no spec.selector.matchExpressions"))?;
                exprs.push(json!({
                    "key": format!(".metadata.labels[\"{FAIL_POD_LABEL}\"]"),
                    "operator": "DoesNotExist",
                }));
            }
            docs.push(doc);
        }
    }
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&d.to_string());
        out.push('\n');
    }
    Ok(out)
}

/// Start kwok, create the fake nodes and wait until they are Ready.
pub async fn start(
    bin: &Path,
    dir: &Path,
    logs: &Path,
    data: &Path,
    kubeconfig: &Path,
    client: &kube::Client,
) -> Result<Proc, Error> {
    let cfg = dir.join("kwok.yaml");
    std::fs::write(&cfg, config(data)?)
        .map_err(|e| Error::io(format!("writing {}", cfg.display()), e))?;
    let args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--config={}", cfg.display()),
        "--manage-all-nodes=true".into(),
        "--cidr=10.244.0.0/16".into(),
        "--node-ip=10.243.0.1".into(),
    ];
    let mut proc = process::spawn("kwok", bin, &args, logs, &[])?;
    let log = proc.log.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in NODE_NAMES {
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": { "type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64" },
                "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" }
            },
            "status": {
                "allocatable": { "cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": "8" },
                "capacity": { "cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": "8" }
            }
        });
        nodes
            .patch(
                name,
                &PatchParams::apply(crds::FIELD_MANAGER).force(),
                &Patch::Apply(&node),
            )
            .await?;
    }
    wait::poll_until(
        "kwok nodes Ready",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || proc.check_running(),
        || {
            let nodes = nodes.clone();
            async move {
                for name in NODE_NAMES {
                    let n = nodes.get(name).await.ok()?;
                    let ready = n
                        .status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    if !ready {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    Ok(proc)
}
