//! The demo binary: starts full mode and the operator, shows the example
//! TrainJob reach `Complete`, prints its kubeconfig, `kubectl` works against
//! it (and lists the TrainJob), and it stops cleanly on SIGTERM leaving
//! nothing behind.
//!
//! The operator is the `trainforge` binary next to the demo binary (in
//! `target/debug` after `cargo build -p trainforge`; `cargo test --workspace`
//! builds it before running any test). Missing, the test skips unless
//! `TRAINFORGE_TESTENV_REQUIRED=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::path::{Path, PathBuf};
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
    // Where the demo looks for the operator by default.
    let operator = Path::new(env!("CARGO_BIN_EXE_trainforge-demo")).with_file_name("trainforge");
    if !operator.is_file() {
        let why = format!(
            "the operator binary {} is not built (run `cargo build -p trainforge`)",
            operator.display()
        );
        assert!(!trainforge_testenv::required(), "{why}");
        common::report(&format!("demo test: SKIPPING: {why}"));
        return;
    }
    let started = std::time::Instant::now();
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
    // Control plane start + operator ready + the TrainJob (the demo's own
    // bounds are 180 s each for the last two).
    tokio::time::timeout(Duration::from_secs(540), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            transcript.push_str(&line);
            transcript.push('\n');
            if let Some(p) = line.strip_prefix("demo: kubeconfig: ") {
                kubeconfig = Some(PathBuf::from(p));
            }
            if let Some(p) = line.strip_prefix("demo: component logs in ") {
                logs = Some(PathBuf::from(p));
            }
            if line.starts_with("demo: exiting after") || line.starts_with("demo: FAILED") {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("demo did not come up in time:\n{transcript}"));
    let kubeconfig = kubeconfig.unwrap_or_else(|| panic!("no kubeconfig line:\n{transcript}"));
    for applied in [
        "ClusterTrainerPlugins from",
        "applied ClusterTrainingRuntime torch-distributed from",
        "applied ClusterTrainingRuntime torch-distributed-multi-node",
        "applied TrainJob demo from",
    ] {
        assert!(transcript.contains(applied), "{applied}:\n{transcript}");
    }
    assert!(!transcript.contains("REJECTED"), "{transcript}");
    assert!(
        transcript.contains("demo: operator ready in"),
        "{transcript}"
    );
    // The live view saw the job finish.
    assert!(
        transcript.contains("] TrainJob default/demo: Complete | JobSet: "),
        "{transcript}"
    );
    assert!(
        transcript.contains("demo: TrainJob default/demo Complete "),
        "{transcript}"
    );
    let jobs_status = transcript
        .lines()
        .skip_while(|l| !l.starts_with("demo: status.jobsStatus of default/demo"))
        .nth(1)
        .unwrap_or_else(|| panic!("no jobsStatus:\n{transcript}"));
    assert!(
        jobs_status.contains(r#""name":"node""#) && jobs_status.contains(r#""succeeded":1"#),
        "{jobs_status}"
    );
    common::report(&format!(
        "demo transcript up to the wait ({:.1}s):\n{transcript}",
        started.elapsed().as_secs_f64()
    ));

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

    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "trainjobs", "--namespace", "default"])
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
    let row = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("demo"))
        .unwrap_or_else(|| panic!("no TrainJob demo listed:\n{stdout}"));
    assert!(row.contains("Complete"), "{stdout}");
    common::report(&format!("kubectl get trainjobs:\n{stdout}"));

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
