//! kube-controller-manager (full mode): garbage collector, Job, namespace,
//! service-account and root-CA publisher controllers only.

use std::path::Path;
use std::time::Duration;

use crate::etcd::with_log;
use crate::pki::Pki;
use crate::process::{self, Proc};
use crate::{Error, ports, wait};

/// Controllers we run (canonical names, `cmd/kube-controller-manager/names`).
/// The persistent volume binder binds claims to volumes a test creates
/// (no provisioner runs): JobSet's `volumeClaimPolicies` claims, as the
/// shipped torchtune runtimes make.
pub const CONTROLLERS: &str = "garbage-collector-controller,job-controller,namespace-controller,\
serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,\
persistentvolume-binder-controller";

/// Start kube-controller-manager and wait for its `/healthz`.
pub async fn start(bin: &Path, logs: &Path, pki: &Pki, kubeconfig: &Path) -> Result<Proc, Error> {
    let port = ports::free_port()?;
    let p = |p: &Path| p.display().to_string();
    let args = vec![
        format!("--kubeconfig={}", p(kubeconfig)),
        "--leader-elect=false".into(),
        format!("--controllers={CONTROLLERS}"),
        "--use-service-account-credentials=false".into(),
        format!("--service-account-private-key-file={}", p(&pki.sa_key)),
        format!("--root-ca-file={}", p(&pki.ca_crt)),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", p(&pki.serving_crt)),
        format!("--tls-private-key-file={}", p(&pki.serving_key)),
        "--kube-api-qps=100".into(),
        "--kube-api-burst=200".into(),
        "--concurrent-gc-syncs=5".into(),
        "--v=1".into(),
    ];
    let mut proc = process::spawn("kube-controller-manager", bin, &args, logs, &[])?;
    let log = proc.log.clone();
    let ca = pki.ca_pem.clone();
    wait::poll_until(
        "kube-controller-manager /healthz",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || proc.check_running(),
        || {
            let ca = ca.clone();
            async move {
                wait::https_get(port, "/healthz", &ca)
                    .await
                    .filter(|(c, _)| *c == 200)
            }
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    Ok(proc)
}
