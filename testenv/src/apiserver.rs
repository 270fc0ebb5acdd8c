//! kube-apiserver (v1.36.3, built from `k8s.io/kubernetes/cmd/kube-apiserver`).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

use crate::etcd::with_log;
use crate::pki::Pki;
use crate::process::{self, Proc};
use crate::{Error, Mode, kubeconfig, ports, wait};

/// A started kube-apiserver.
#[derive(Debug)]
pub struct ApiServer {
    /// The process.
    pub proc: Proc,
    /// Secure port on 127.0.0.1.
    pub port: u16,
}

/// The audit log's file name in the environment's directory.
pub const AUDIT_LOG: &str = "audit.log";

/// An audit policy that records every request of `users` once, when its
/// response is complete, at `Metadata` level (verb, resource, user, code;
/// no bodies), and nothing else.
fn audit_policy(users: &[String]) -> String {
    let users: Vec<String> = users.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n  users: [{}]\n- level: None\n",
        users.join(", ")
    )
}

/// Start kube-apiserver against etcd on `etcd_port`, write the admin kubeconfig
/// to `kubeconfig`, and wait for `/readyz` and namespace `default`. With
/// `audit_users`, the requests of those users are written to
/// [`AUDIT_LOG`] in `dir`, one JSON line each.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    bin: &Path,
    dir: &Path,
    logs: &Path,
    pki: &Pki,
    etcd_port: u16,
    mode: Mode,
    kubeconfig: &Path,
    audit_users: &[String],
) -> Result<ApiServer, Error> {
    let port = ports::free_port()?;
    let p = |p: &Path| p.display().to_string();
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", p(&pki.serving_crt)),
        format!("--tls-private-key-file={}", p(&pki.serving_key)),
        format!("--client-ca-file={}", p(&pki.ca_crt)),
        format!("--token-auth-file={}", p(&pki.tokens_csv)),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(&pki.sa_pub)),
        format!("--service-account-signing-key-file={}", p(&pki.sa_key)),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--authorization-mode=RBAC".into(),
        "--endpoint-reconciler-type=none".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        "--v=1".into(),
    ];
    if !audit_users.is_empty() {
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(&policy, audit_policy(audit_users))
            .map_err(|e| Error::io("writing the audit policy", e))?;
        args.push(format!("--audit-policy-file={}", p(&policy)));
        args.push(format!("--audit-log-path={}", p(&dir.join(AUDIT_LOG))));
        args.push("--audit-log-format=json".into());
        // One file however long the run: no rotation, no batching delay.
        args.push("--audit-log-maxsize=0".into());
        args.push("--audit-log-mode=blocking".into());
    }
    if mode == Mode::Api {
        // Nothing garbage-collects in api mode: do not leave objects waiting
        // for a collector that never runs.
        args.push("--enable-garbage-collector=false".into());
        // No service-account controller creates `default` service accounts
        // in api mode: pods could not be admitted.
        args.push("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into());
    } else {
        // As in a real cluster, pods get `serviceAccountName: default` and
        // may then project service-account tokens (the TrainJob status
        // server's); the controller-manager creates the accounts.
        args.push("--disable-admission-plugins=TaintNodesByCondition".into());
    }
    let mut proc = process::spawn("kube-apiserver", bin, &args, logs, &[])?;
    let log = proc.log.clone();
    kubeconfig::write(
        kubeconfig,
        &format!("https://127.0.0.1:{port}"),
        &pki.ca_crt,
        &pki.admin_token,
    )?;
    let client = kubeconfig::client(kubeconfig).await?;
    let c = client.clone();
    wait::poll_until(
        "kube-apiserver /readyz",
        Duration::from_secs(90),
        Duration::from_millis(200),
        || proc.check_running(),
        || {
            let c = c.clone();
            async move {
                let req = http::Request::get("/readyz").body(Vec::new()).ok()?;
                c.request_text(req).await.ok().filter(|b| b.trim() == "ok")
            }
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    let namespaces: Api<Namespace> = Api::all(client);
    wait::poll_until(
        "namespace default",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || proc.check_running(),
        || {
            let n = namespaces.clone();
            async move { n.get_opt("default").await.ok().flatten() }
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    Ok(ApiServer { proc, port })
}
