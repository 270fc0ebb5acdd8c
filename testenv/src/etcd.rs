//! etcd (v3.6.8, built from `go.etcd.io/etcd/server/v3`).

use std::path::Path;
use std::time::Duration;

use crate::process::{self, Proc};
use crate::{Error, ports, wait};

/// A started etcd.
#[derive(Debug)]
pub struct Etcd {
    /// The process.
    pub proc: Proc,
    /// Client port on 127.0.0.1.
    pub client_port: u16,
}

/// Start etcd with its data in `<dir>/etcd` and wait until `/health` says true.
pub async fn start(bin: &Path, dir: &Path, logs: &Path) -> Result<Etcd, Error> {
    let cp = ports::free_port()?;
    let pp = ports::free_port()?;
    let client = format!("http://127.0.0.1:{cp}");
    let peer = format!("http://127.0.0.1:{pp}");
    let args = vec![
        "--name=default".to_string(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=default={peer}"),
        "--unsafe-no-fsync=true".to_string(),
        "--log-level=warn".to_string(),
    ];
    let mut proc = process::spawn("etcd", bin, &args, logs, &[])?;
    let log = proc.log.clone();
    wait::poll_until(
        "etcd /health",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || proc.check_running(),
        || async move {
            tokio::task::spawn_blocking(move || wait::http_get(cp, "/health"))
                .await
                .ok()
                .flatten()
                .filter(|(code, body)| *code == 200 && body.contains("\"health\":\"true\""))
        },
    )
    .await
    .map_err(|e| with_log(e, &log))?;
    Ok(Etcd {
        proc,
        client_port: cp,
    })
}

/// Attach a log tail to a timeout error.
pub(crate) fn with_log(e: Error, log: &Path) -> Error {
    match e {
        Error::Timeout {
            what,
            after,
            log_tail: None,
        } => Error::Timeout {
            what,
            after,
            log_tail: Some(process::log_tail(log, 40)),
        },
        other => other,
    }
}
