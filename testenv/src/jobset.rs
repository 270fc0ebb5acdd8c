//! JobSet controller (full mode) with its webhooks registered by URL.
//!
//! JobSet cannot run without its mutating webhook (the controller dereferences
//! defaults only the webhook fills in), and Service-based webhook client
//! configs cannot work without kube-proxy, so the upstream webhook manifests
//! are rewritten to `url: https://127.0.0.1:<port><path>` with our CA.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::etcd::with_log;
use crate::manifests::load_yaml_docs;
use crate::pki::{Pki, base64_encode};
use crate::process::{self, Proc};
use crate::{Error, crds, ports, wait};

/// Name of our MutatingWebhookConfiguration for JobSet.
pub const MUTATING_NAME: &str = "trainforge-testenv-jobset-mutating";
/// Name of our ValidatingWebhookConfiguration for JobSet.
pub const VALIDATING_NAME: &str = "trainforge-testenv-jobset-validating";

/// Start JobSet, wait for `/readyz`, then register its webhooks.
pub async fn start(
    bin: &Path,
    dir: &Path,
    logs: &Path,
    data: &Path,
    pki: &Pki,
    kubeconfig: &Path,
    client: &kube::Client,
) -> Result<Proc, Error> {
    let webhook_port = ports::free_port()?;
    let health_port = ports::free_port()?;
    let config = dir.join("jobset.yaml");
    let text = format!(
        "apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 500
  burst: 500
webhook:
  host: 127.0.0.1
  port: {webhook_port}
  certDir: {certs}
metrics:
  bindAddress: \"0\"
health:
  healthProbeBindAddress: \"127.0.0.1:{health_port}\"
",
        certs = pki.webhook_cert_dir.display()
    );
    std::fs::write(&config, text)
        .map_err(|e| Error::io(format!("writing {}", config.display()), e))?;
    let args = vec![
        format!("--config={}", config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
    ];
    let mut proc = process::spawn(
        "jobset",
        bin,
        &args,
        logs,
        &[("KUBECONFIG", &kubeconfig.display().to_string())],
    )?;
    let log = proc.log.clone();
    wait::poll_until(
        "jobset /readyz",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || proc.check_running(),
        || async move {
            tokio::task::spawn_blocking(move || wait::http_get(health_port, "/readyz"))
                .await
                .ok()
                .flatten()
                .filter(|(c, _)| *c == 200)
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    register_webhooks(client, data, pki, webhook_port).await?;
    Ok(proc)
}

/// The upstream webhook configurations with the kustomize patches applied and
/// the client configs rewritten to URLs.
fn webhook_configs(data: &Path, ca_pem: &str, port: u16) -> Result<(Value, Value), Error> {
    let dir = data.join("jobset");
    let docs = load_yaml_docs(&dir.join("manifests.yaml"))?;
    let find = |kind: &str| {
        docs.iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
            .cloned()
            .ok_or_else(|| Error::manifest(dir.join("manifests.yaml"), format!("no {kind}")))
    };
    let mut mutating = find("MutatingWebhookConfiguration")?;
    let mut validating = find("ValidatingWebhookConfiguration")?;
    apply_patch(&mut mutating, &dir.join("mutating-patch.yaml"))?;
    apply_patch(&mut validating, &dir.join("validating-patch.yaml"))?;
    let ca_bundle = base64_encode(ca_pem.as_bytes());
    for (cfg, name, kind) in [
        (&mut mutating, MUTATING_NAME, "MutatingWebhookConfiguration"),
        (
            &mut validating,
            VALIDATING_NAME,
            "ValidatingWebhookConfiguration",
        ),
    ] {
        cfg["apiVersion"] = json!("admissionregistration.k8s.io/v1");
        cfg["kind"] = json!(kind);
        cfg["metadata"] = json!({ "name": name });
        let hooks = cfg
            .get_mut("webhooks")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| {
                Error::manifest(
                    dir.join("manifests.yaml"),
                    format!("{kind} without webhooks"),
                )
            })?;
        for hook in hooks {
            let path = hook
                .pointer("/clientConfig/service/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string();
            hook["clientConfig"] =
                json!({ "url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_bundle });
            hook["timeoutSeconds"] = json!(10);
        }
    }
    Ok((mutating, validating))
}

/// Apply the `op: replace, path: /webhooks/N` JSON patches of JobSet's kustomization.
fn apply_patch(doc: &mut Value, patch_file: &Path) -> Result<(), Error> {
    for patch in load_yaml_docs(patch_file)? {
        for op in patch.as_array().into_iter().flatten() {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            let value = op.get("value").cloned().unwrap_or(Value::Null);
            match (op.get("op").and_then(Value::as_str), doc.pointer_mut(path)) {
                (Some("replace"), Some(target)) => *target = value,
                _ => {
                    return Err(Error::manifest(
                        patch_file,
                        format!("unsupported patch op at {path}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

async fn register_webhooks(
    client: &kube::Client,
    data: &Path,
    pki: &Pki,
    port: u16,
) -> Result<(), Error> {
    let (mutating, validating) = webhook_configs(data, &pki.ca_pem, port)?;
    let pp = PatchParams::apply(crds::FIELD_MANAGER).force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(MUTATING_NAME, &pp, &Patch::Apply(&mutating))
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(VALIDATING_NAME, &pp, &Patch::Apply(&validating))
        .await?;
    Ok(())
}

/// Delete our webhook configurations (before JobSet stops, so that a
/// `failurePolicy: Fail` webhook with no server does not block anything).
pub async fn unregister_webhooks(client: &kube::Client) {
    let dp = DeleteParams::default();
    if let Err(e) = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(MUTATING_NAME, &dp)
        .await
    {
        tracing::debug!("deleting {MUTATING_NAME}: {e}");
    }
    if let Err(e) = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(VALIDATING_NAME, &dp)
        .await
    {
        tracing::debug!("deleting {VALIDATING_NAME}: {e}");
    }
}
