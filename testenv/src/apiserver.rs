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

/// Start kube-apiserver against etcd on `etcd_port`, write the admin kubeconfig
/// to `kubeconfig`, and wait for `/readyz` and namespace `default`.
pub async fn start(
    bin: &Path,
    dir: &Path,
    logs: &Path,
    pki: &Pki,
    etcd_port: u16,
    mode: Mode,
    kubeconfig: &Path,
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
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
        "--endpoint-reconciler-type=none".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        "--v=1".into(),
    ];
    if mode == Mode::Api {
        // Nothing garbage-collects in api mode: do not leave objects waiting
        // for a collector that never runs.
        args.push("--enable-garbage-collector=false".into());
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
