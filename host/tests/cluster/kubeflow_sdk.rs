//! The real Kubeflow Python SDK (`kubeflow` from PyPI, pinned with hashes in
//! `testenv/sdk/requirements.txt`) against the operator: full control plane,
//! the `trainforge operator` binary, the default plugin configuration and
//! the shipped runtimes (`manifests/runtimes`), then `python -m pytest
//! testenv/sdk` from the SDK venv with `KUBECONFIG` pointing at a kubeconfig
//! whose context namespace is a fresh namespace of this test. pytest's output
//! streams to the terminal; the test fails when pytest does.
//!
//! The venv is `$TRAINFORGE_SDK_VENV`, else `sdk-venv` in the target
//! directory; `testenv/sdk/venv.sh` creates it (`make test` runs it first).
//! Without a venv the test skips with the command to run, or fails under
//! `TRAINFORGE_TESTENV_REQUIRED=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::operator_common::*;
use serde_json::Value;
use trainforge_testenv::Mode;

/// Upper bound of the whole pytest run (its own waits are far shorter).
const PYTEST_TIMEOUT: Duration = Duration::from_secs(900);

/// The venv: `$TRAINFORGE_SDK_VENV`, else `<target>/sdk-venv`.
fn venv() -> PathBuf {
    if let Some(v) = std::env::var_os("TRAINFORGE_SDK_VENV").filter(|v| !v.is_empty()) {
        return PathBuf::from(v);
    }
    // <target>/debug/trainforge -> <target>
    Path::new(env!("CARGO_BIN_EXE_trainforge"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("sdk-venv")
}

/// The venv's python, or why it cannot be used.
fn python(venv: &Path) -> Result<PathBuf, String> {
    let py = venv.join("bin/python");
    if !py.is_file() {
        return Err(format!(
            "no SDK venv at {} (create it with `testenv/sdk/venv.sh {}`, or set TRAINFORGE_SDK_VENV)",
            venv.display(),
            venv.display()
        ));
    }
    let ok = std::process::Command::new(&py)
        .args(["-c", "import kubeflow.trainer, pytest"])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("{} does not run: {e}", py.display()))?;
    if !ok.success() {
        return Err(format!(
            "{} cannot import kubeflow.trainer and pytest (recreate it with `testenv/sdk/venv.sh {}`)",
            py.display(),
            venv.display()
        ));
    }
    Ok(py)
}

/// Every YAML file of `dir` except the kustomization, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    files
}

/// The admin kubeconfig with the context's namespace set to `ns`, so that
/// the SDK's default `TrainerClient()` targets it.
fn sdk_kubeconfig(admin: &Path, ns: &str, out: &Path) {
    let text = std::fs::read_to_string(admin).unwrap();
    let line = "    namespace: default\n";
    assert_eq!(
        text.matches(line).count(),
        1,
        "the admin kubeconfig has one context namespace:\n{text}"
    );
    std::fs::write(out, text.replace(line, &format!("    namespace: {ns}\n"))).unwrap();
}

#[tokio::test]
async fn kubeflow_python_sdk_suite() {
    // The venv first: a missing one is reported before minutes of start-up.
    let venv = venv();
    let python = match python(&venv) {
        Ok(p) => p,
        Err(why) => {
            assert!(!trainforge_testenv::required(), "{why}");
            report(&format!("kubeflow SDK suite: SKIPPING: {why}"));
            return;
        }
    };
    let setup = Instant::now();
    let Some(env) = trainforge_testenv::require!(Mode::Full) else {
        return;
    };
    let client = env.client().await.unwrap();
    apply_default_plugins(&client).await;
    let mut runtimes = Vec::new();
    for f in yaml_files(&root().join("manifests/runtimes")) {
        for d in docs(&f, None) {
            runtimes.push(d["metadata"]["name"].as_str().unwrap().to_owned());
            apply(&client, &d).await;
        }
    }
    assert!(
        runtimes.iter().any(|r| r == "torch-distributed"),
        "{runtimes:?}"
    );
    // The operator's install minus its Deployment (the operator runs as a
    // process here): namespaces, RBAC and any ConfigMap shipped with it,
    // such as the public one the SDK reads the control-plane version from.
    let mut install: Vec<Value> = yaml_files(&root().join("manifests/operator"))
        .iter()
        .flat_map(|f| docs(f, None))
        .filter(|d| d["kind"] != "Deployment")
        .collect();
    install.sort_by_key(|d| d["kind"] != "Namespace");
    for d in &install {
        apply(&client, d).await;
    }
    // The TrainJob status server on (upstream's `TrainJobStatus` gate), at
    // a URL the suite (playing the training pods) reaches.
    let status_port = trainforge_testenv::ports::free_port().unwrap();
    let status_url = format!("https://127.0.0.1:{status_port}");
    let op = Operator::start(
        env,
        "operator-sdk",
        &[
            "--resync-seconds",
            "30",
            &format!("--status-server-bind-address=127.0.0.1:{status_port}"),
            &format!("--status-server-url={status_url}"),
        ],
    );
    op.wait_ready().await;

    let ns = env.create_namespace("sdk").await.unwrap();
    let kubeconfig = env.dir().join("sdk.kubeconfig");
    sdk_kubeconfig(env.kubeconfig(), &ns, &kubeconfig);
    report(&format!(
        "kubeflow SDK suite: control plane, plugins, runtimes and operator ready in {:.1}s; \
         {} -m pytest testenv/sdk (namespace {ns}, KUBECONFIG={})",
        setup.elapsed().as_secs_f64(),
        python.display(),
        kubeconfig.display()
    ));

    let started = Instant::now();
    let mut pytest = tokio::process::Command::new(&python)
        .args([
            "-m",
            "pytest",
            "testenv/sdk",
            "-q",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            "--durations=5",
        ])
        .current_dir(root())
        .env("KUBECONFIG", &kubeconfig)
        .env("TRAINFORGE_SDK_NAMESPACE", &ns)
        .env("TRAINFORGE_STATUS_SERVER_URL", &status_url)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("KUBEFLOW_SYSTEM_NAMESPACE")
        // The apiserver is on 127.0.0.1; the Python client would send its
        // requests to a proxy from the environment (it ignores NO_PROXY).
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    let status = tokio::time::timeout(PYTEST_TIMEOUT, pytest.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "pytest did not finish in {PYTEST_TIMEOUT:?}; operator log:\n{}",
                op.log_tail(60)
            )
        })
        .unwrap();
    let took = started.elapsed();
    report(&format!(
        "kubeflow SDK suite: pytest {status} in {:.1}s",
        took.as_secs_f64()
    ));
    if !status.success() {
        let trainjobs = trainjob_summary(&client, &ns).await;
        panic!(
            "the Kubeflow SDK suite failed ({status}); TrainJobs in {ns}:\n{trainjobs}\noperator log:\n{}",
            op.log_tail(60)
        );
    }
}

/// `name: conditions` of every TrainJob in `ns`, for failure messages.
async fn trainjob_summary(client: &kube::Client, ns: &str) -> String {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    match api.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|o| {
                let v = serde_json::to_value(o).unwrap();
                format!(
                    "  {}: {}",
                    v["metadata"]["name"].as_str().unwrap_or("?"),
                    v.pointer("/status/conditions").unwrap_or(&Value::Null)
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("  (listing failed: {e})"),
    }
}
