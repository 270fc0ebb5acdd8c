//! The demo binary: starts full mode, prints its kubeconfig, `kubectl` works
//! against it, and it stops cleanly on SIGTERM leaving nothing behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn demo_serves_kubectl_and_exits_cleanly() {
    if trainforge_testenv::paths::Paths::from_env()
        .check(trainforge_testenv::Mode::Full)
        .is_err()
        && !trainforge_testenv::required()
    {
        // Same skip rule as require!: not built and not required.
        let _ = trainforge_testenv::shared(trainforge_testenv::Mode::Full);
        return;
    }
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainforge-demo"))
        .args(["--exit-after", "300"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut transcript = String::new();
    let (mut kubeconfig, mut logs) = (None, None);
    tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            transcript.push_str(&line);
            transcript.push('\n');
            if let Some(p) = line.strip_prefix("demo: kubeconfig: ") {
                kubeconfig = Some(PathBuf::from(p));
            }
            if let Some(p) = line.strip_prefix("demo: component logs in ") {
                logs = Some(PathBuf::from(p));
            }
            if line.starts_with("demo: exiting after") {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("demo did not come up in time:\n{transcript}"));
    let kubeconfig = kubeconfig.unwrap_or_else(|| panic!("no kubeconfig line:\n{transcript}"));
    assert!(
        transcript.contains("ClusterTrainingRuntime torch-distributed-multi-node"),
        "{transcript}"
    );

    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "nodes"])
            .output(),
    )
    .await
    .expect("kubectl timed out")
    .expect("kubectl not runnable");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("kwok-node-0") && stdout.contains("Ready"),
        "{stdout}"
    );
    common::report(&format!(
        "kubectl --kubeconfig {} get nodes:\n{stdout}",
        kubeconfig.display()
    ));

    kill(Pid::from_raw(demo.id().unwrap() as i32), Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), demo.wait())
        .await
        .expect("demo did not stop")
        .unwrap();
    while let Some(line) = lines.next_line().await.unwrap() {
        transcript.push_str(&line);
        transcript.push('\n');
    }
    assert!(status.success(), "demo exit {status}:\n{transcript}");
    assert!(transcript.contains("demo: stopped"), "{transcript}");
    let dir = logs.unwrap().parent().unwrap().to_path_buf();
    assert!(!dir.exists(), "{} left behind", dir.display());
}
