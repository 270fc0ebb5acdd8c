//! kube-scheduler (full mode), so that pods get bound to kwok's nodes.

use std::path::Path;
use std::time::Duration;

use crate::etcd::with_log;
use crate::pki::Pki;
use crate::process::{self, Proc};
use crate::{Error, ports, wait};

/// Start kube-scheduler and wait for its `/healthz`.
pub async fn start(
    bin: &Path,
    dir: &Path,
    logs: &Path,
    pki: &Pki,
    kubeconfig: &Path,
) -> Result<Proc, Error> {
    let port = ports::free_port()?;
    let config = dir.join("scheduler.yaml");
    let text = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {}
  qps: 100
  burst: 200
leaderElection:
  leaderElect: false
",
        kubeconfig.display()
    );
    std::fs::write(&config, text)
        .map_err(|e| Error::io(format!("writing {}", config.display()), e))?;
    let p = |p: &Path| p.display().to_string();
    let args = vec![
        format!("--config={}", p(&config)),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", p(&pki.serving_crt)),
        format!("--tls-private-key-file={}", p(&pki.serving_key)),
        "--v=1".into(),
    ];
    let mut proc = process::spawn("kube-scheduler", bin, &args, logs, &[])?;
    let log = proc.log.clone();
    let ca = pki.ca_pem.clone();
    wait::poll_until(
        "kube-scheduler /healthz",
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
