//! The upstream Kubeflow Trainer controller manager (v2.3.0) in a test
//! control plane, for `trainforge-bench --upstream` only.
//!
//! `testenv/upstream.sh` builds it from its Go module and extracts its data
//! files into `<cache>/upstream/{bin,data}` (see [`data_dir_for`]): its CRDs
//! (installed instead of ours, see [`crate::TestEnv::start_audited_with`]),
//! its webhook configurations and their kustomize patches, its RBAC, its
//! shipped controller-manager configuration. Here they are rendered the way
//! its kustomization would, with what a test control plane without
//! kube-proxy needs instead of a Service: webhooks by URL through a
//! [`crate::webhooks::Front`], with the environment's CA (the controller's
//! own certificate management is off; it serves the environment's webhook
//! certificate, see [`cert_tmpdir`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::Error;
use crate::manifests::load_yaml_docs;
use crate::pki::base64_encode;

/// The namespace upstream's kustomization installs into.
pub const NAMESPACE: &str = "kubeflow-system";
/// Upstream's ServiceAccount (`manifests/base/rbac/service_account.yaml`).
pub const SERVICE_ACCOUNT: &str = "kubeflow-trainer-controller-manager";
/// The ServiceAccount as the API server names it (for the audit policy).
pub const USER: &str = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager";
/// The data files [`check`] requires, relative to the data directory.
pub const DATA_FILES: &[&str] = &[
    "crds/trainer.kubeflow.org_trainjobs.yaml",
    "crds/trainer.kubeflow.org_trainingruntimes.yaml",
    "crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "webhook/manifests.yaml",
    "webhook/patch_mutating.yaml",
    "webhook/patch_validating.yaml",
    "rbac/service_account.yaml",
    "rbac/role.yaml",
    "rbac/role_binding.yaml",
    "config/controller_manager_config.yaml",
    "runtimes/torch_distributed.yaml",
];

/// Field manager of what is applied here.
const FIELD_MANAGER: &str = "trainforge-testenv";

/// `data/` next to the `bin/` holding `binary` (the layout
/// `testenv/upstream.sh` writes).
pub fn data_dir_for(binary: &Path) -> PathBuf {
    binary
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .join("data")
}

/// The directory of upstream's CRDs in `data`.
pub fn crds_dir(data: &Path) -> PathBuf {
    data.join("crds")
}

/// Check that every file of [`DATA_FILES`] is in `data`.
pub fn check(data: &Path) -> Result<(), Error> {
    let missing: Vec<String> = DATA_FILES
        .iter()
        .filter(|f| !data.join(f).is_file())
        .map(|f| f.to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::NotBuilt {
            dir: data.to_path_buf(),
            missing,
        })
    }
}

/// Upstream's ServiceAccount, ClusterRole and ClusterRoleBinding, with the
/// namespace kustomize would set ([`NAMESPACE`]) on the ServiceAccount and
/// on the binding's ServiceAccount subjects.
pub fn rbac_objects(data: &Path) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for f in ["service_account.yaml", "role.yaml", "role_binding.yaml"] {
        let file = data.join("rbac").join(f);
        for mut doc in load_yaml_docs(&file)? {
            let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
            if kind == "ServiceAccount" {
                doc["metadata"]["namespace"] = json!(NAMESPACE);
            }
            if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects
                    .iter_mut()
                    .filter(|s| s.get("kind").and_then(Value::as_str) == Some("ServiceAccount"))
                {
                    s["namespace"] = json!(NAMESPACE);
                }
            }
            out.push(doc);
        }
    }
    Ok(out)
}

/// Apply the `add`/`replace` operations of a JSON patch file (the form of
/// upstream's kustomize patches) to `doc`.
fn apply_json_patch(doc: &mut Value, patch_file: &Path) -> Result<(), Error> {
    for patch in load_yaml_docs(patch_file)? {
        for op in patch.as_array().into_iter().flatten() {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            let value = op.get("value").cloned().unwrap_or(Value::Null);
            let unsupported =
                || Error::manifest(patch_file, format!("unsupported patch at {path}"));
            match op.get("op").and_then(Value::as_str) {
                Some("replace") => *doc.pointer_mut(path).ok_or_else(unsupported)? = value,
                Some("add") => {
                    let (parent, key) = path.rsplit_once('/').ok_or_else(unsupported)?;
                    let target = doc
                        .pointer_mut(parent)
                        .and_then(Value::as_object_mut)
                        .ok_or_else(unsupported)?;
                    target.insert(key.replace("~1", "/").replace("~0", "~"), value);
                }
                _ => return Err(unsupported()),
            }
        }
    }
    Ok(())
}

/// Upstream's webhook configurations as its kustomization renders them
/// (`defaulter.trainer.kubeflow.org`, `validator.trainer.kubeflow.org`, the
/// runtime validators skipping objects labelled
/// `trainer.kubeflow.org/webhook-validation: disabled`), each webhook
/// calling `https://<front><path>` with `ca_pem` as its CA bundle.
pub fn webhook_configurations(
    data: &Path,
    front: SocketAddr,
    ca_pem: &str,
) -> Result<Vec<Value>, Error> {
    let dir = data.join("webhook");
    let file = dir.join("manifests.yaml");
    let ca_bundle = base64_encode(ca_pem.as_bytes());
    let mut out = Vec::new();
    for mut doc in load_yaml_docs(&file)? {
        let patch = match doc.get("kind").and_then(Value::as_str) {
            Some("MutatingWebhookConfiguration") => "patch_mutating.yaml",
            Some("ValidatingWebhookConfiguration") => "patch_validating.yaml",
            _ => continue,
        };
        apply_json_patch(&mut doc, &dir.join(patch))?;
        let hooks = doc
            .get_mut("webhooks")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| Error::manifest(&file, "a webhook configuration without webhooks"))?;
        for hook in hooks {
            crate::webhooks::call_through(hook, front, Some(&ca_bundle));
        }
        out.push(doc);
    }
    if out.len() != 2 {
        return Err(Error::manifest(
            &file,
            format!("{} webhook configurations, expected 2", out.len()),
        ));
    }
    Ok(out)
}

/// Apply [`webhook_configurations`] (server-side).
pub async fn register(client: &kube::Client, configurations: &[Value]) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for doc in configurations {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if doc["kind"] == "MutatingWebhookConfiguration" {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(name, &pp, &Patch::Apply(doc))
                .await?;
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(name, &pp, &Patch::Apply(doc))
                .await?;
        }
    }
    Ok(())
}

/// Delete what [`register`] applied (gone already is fine).
pub async fn unregister(client: &kube::Client, configurations: &[Value]) -> Result<(), Error> {
    crate::webhooks::delete_configurations(client, configurations).await
}

/// Where the controller listens (all on `127.0.0.1`).
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// `/healthz` and `/readyz`.
    pub health: u16,
    /// `/metrics` (served as shipped: HTTPS with authentication).
    pub metrics: u16,
    /// The admission webhooks (HTTPS).
    pub webhook: u16,
    /// The status server (only with the `TrainJobStatus` feature gate).
    pub status: u16,
}

/// Upstream's shipped `controller_manager_config.yaml` with what a process
/// on a test control plane needs instead: loopback addresses on free
/// ports, the leader-election Lease in [`NAMESPACE`] (found from the pod's
/// namespace in a cluster), and certificate management off (its rotator
/// issues a certificate for the Service's DNS name, which a webhook called
/// by URL on `127.0.0.1` cannot present). Everything else as shipped: leader
/// election on, client QPS/burst, TrainJob reconcile concurrency. JSON, which
/// its YAML loader reads.
pub fn config(data: &Path, ports: Ports) -> Result<String, Error> {
    let file = data.join("config/controller_manager_config.yaml");
    let mut cfg = load_yaml_docs(&file)?
        .pop()
        .ok_or_else(|| Error::manifest(&file, "empty"))?;
    let Some(obj) = cfg.as_object_mut() else {
        return Err(Error::manifest(&file, "not a mapping"));
    };
    let mut set = |section: &str, key: &str, value: Value| {
        let s = obj
            .entry(section)
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(s) = s.as_object_mut() {
            s.insert(key.to_owned(), value);
        }
    };
    set(
        "health",
        "healthProbeBindAddress",
        json!(format!("127.0.0.1:{}", ports.health)),
    );
    set(
        "metrics",
        "bindAddress",
        json!(format!("127.0.0.1:{}", ports.metrics)),
    );
    set("webhook", "host", json!("127.0.0.1"));
    set("webhook", "port", json!(ports.webhook));
    set("leaderElection", "resourceNamespace", json!(NAMESPACE));
    set("certManagement", "enable", json!(false));
    set("statusServer", "port", json!(ports.status));
    serde_json::to_string_pretty(&cfg).map_err(|e| Error::manifest(&file, e.to_string()))
}

/// A directory to run the controller with as `TMPDIR`: its webhook server
/// reads `tls.crt`/`tls.key` from `$TMPDIR/k8s-webhook-server/serving-certs`
/// (controller-runtime's default; upstream's configuration has no cert
/// directory). The files are copied from `webhook_cert_dir`.
pub fn cert_tmpdir(dir: &Path, webhook_cert_dir: &Path) -> Result<PathBuf, Error> {
    let certs = dir.join("k8s-webhook-server").join("serving-certs");
    std::fs::create_dir_all(&certs)
        .map_err(|e| Error::io(format!("creating {}", certs.display()), e))?;
    for f in ["tls.crt", "tls.key"] {
        let from = webhook_cert_dir.join(f);
        std::fs::copy(&from, certs.join(f))
            .map_err(|e| Error::io(format!("copying {}", from.display()), e))?;
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data dir shaped like upstream v2.3.0's (the parts used here).
    fn data_dir() -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("testenv-upstream-data-{}", std::process::id()));
        let w = |f: &str, text: &str| {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "webhook/manifests.yaml",
            "---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-trainjob}
  name: defaulter.trainjob.trainer.kubeflow.org
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-ctr}
  name: validator.clustertrainingruntime.trainer.kubeflow.org
- clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-trainjob}
  name: validator.trainjob.trainer.kubeflow.org
",
        );
        w(
            "webhook/patch_mutating.yaml",
            "- op: replace
  path: /webhooks/0/clientConfig/service/name
  value: kubeflow-trainer-controller-manager
- op: replace
  path: /metadata/name
  value: defaulter.trainer.kubeflow.org
",
        );
        w(
            "webhook/patch_validating.yaml",
            "- op: replace
  path: /metadata/name
  value: validator.trainer.kubeflow.org
- op: add
  path: /webhooks/0/objectSelector
  value:
    matchExpressions:
      - {key: trainer.kubeflow.org/webhook-validation, operator: NotIn, values: [disabled]}
",
        );
        w(
            "rbac/service_account.yaml",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: kubeflow-trainer-controller-manager\n",
        );
        w(
            "rbac/role.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\nrules: []\n",
        );
        w(
            "rbac/role_binding.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: b
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}
subjects:
  - kind: ServiceAccount
    name: kubeflow-trainer-controller-manager
",
        );
        w(
            "config/controller_manager_config.yaml",
            "apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: :8081
webhook:
  port: 9443
  host: \"\"
leaderElection:
  leaderElect: true
  resourceNamespace: \"\"
certManagement:
  enable: true
  webhookServiceName: kubeflow-trainer-controller-manager
clientConnection:
  qps: 50
",
        );
        dir
    }

    #[test]
    fn renders_upstream_data_as_its_kustomization_would_with_urls() {
        let dir = data_dir();
        let front: SocketAddr = ([127, 0, 0, 1], 4443).into();
        let cfgs = webhook_configurations(&dir, front, "CA").unwrap();
        let rbac = rbac_objects(&dir).unwrap();
        let cfg: Value = serde_json::from_str(
            &config(
                &dir,
                Ports {
                    health: 1,
                    metrics: 2,
                    webhook: 3,
                    status: 4,
                },
            )
            .unwrap(),
        )
        .unwrap();
        let missing = check(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();

        assert_eq!(
            cfgs[0]["metadata"]["name"],
            "defaulter.trainer.kubeflow.org"
        );
        assert_eq!(
            cfgs[0]["webhooks"][0]["clientConfig"],
            json!({"url": "https://127.0.0.1:4443/mutate-trainjob", "caBundle": "Q0E="})
        );
        assert_eq!(
            cfgs[1]["metadata"]["name"],
            "validator.trainer.kubeflow.org"
        );
        assert_eq!(
            cfgs[1]["webhooks"][0]["objectSelector"]["matchExpressions"][0]["values"],
            json!(["disabled"])
        );
        assert!(cfgs[1]["webhooks"][1].get("objectSelector").is_none());
        assert_eq!(
            cfgs[1]["webhooks"][1]["clientConfig"]["url"],
            "https://127.0.0.1:4443/validate-trainjob"
        );

        assert_eq!(rbac[0]["metadata"]["namespace"], NAMESPACE);
        assert!(rbac[1]["metadata"].get("namespace").is_none());
        assert_eq!(rbac[2]["subjects"][0]["namespace"], NAMESPACE);

        assert_eq!(cfg["health"]["healthProbeBindAddress"], "127.0.0.1:1");
        assert_eq!(cfg["metrics"]["bindAddress"], "127.0.0.1:2");
        assert_eq!(cfg["webhook"], json!({"host": "127.0.0.1", "port": 3}));
        assert_eq!(cfg["leaderElection"]["leaderElect"], true);
        assert_eq!(cfg["leaderElection"]["resourceNamespace"], NAMESPACE);
        assert_eq!(cfg["certManagement"]["enable"], false);
        assert_eq!(cfg["clientConnection"]["qps"], 50);
        assert_eq!(cfg["statusServer"]["port"], 4);

        assert!(missing.contains("crds/trainer.kubeflow.org_trainjobs.yaml"));
        assert!(!missing.contains("webhook/manifests.yaml"));
    }

    #[test]
    fn the_data_dir_is_next_to_bin() {
        assert_eq!(
            data_dir_for(Path::new("/c/upstream/bin/trainer-controller-manager")),
            Path::new("/c/upstream/data")
        );
    }
}
