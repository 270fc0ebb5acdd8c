//! Shared helpers of the `plugin_*` integration tests: build the Wasm test
//! guests (hostile fixtures and the SDK example) once per test binary, with
//! their own `CARGO_TARGET_DIR` so the nested cargo never waits on the
//! outer build's lock.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    root().join("target/plugin-test-guests")
}

fn cargo_build(args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--profile=plugin", "--target=wasm32-wasip2"])
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building test guest {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wasm(name: &str) -> PathBuf {
    target_dir()
        .join("wasm32-wasip2/plugin")
        .join(format!("{name}.wasm"))
}

/// The SDK example plugin (`examples/plugin-minimal`) built to Wasm.
pub fn minimal_wasm() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        cargo_build(&[
            "--manifest-path",
            root().join("Cargo.toml").to_str().unwrap(),
            "-p",
            "plugin-minimal",
        ]);
        wasm("plugin_minimal")
    })
}

/// The hostile fixture (`host/tests/guests/hostile`).
pub fn hostile_wasm() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let m = root().join("host/tests/guests/hostile/Cargo.toml");
        cargo_build(&["--manifest-path", m.to_str().unwrap()]);
        wasm("hostile_plugin")
    })
}

/// A component exporting an incompatible WIT major (`guests/incompatible`).
pub fn incompatible_wasm() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let m = root().join("host/tests/guests/incompatible/Cargo.toml");
        cargo_build(&["--manifest-path", m.to_str().unwrap()]);
        wasm("incompatible_plugin")
    })
}

/// A TrainJob for the tests.
pub fn trainjob() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "job", "namespace": "team", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": "minimal"}, "trainer": {"numNodes": 2}},
    })
}

/// A runtime serving the minimal plugin's policy.
pub fn runtime() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "minimal"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "minimal": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}}
                }
            }]}}
        }
    })
}

/// A plugin runtime with a 300 ms call deadline (hostile loops end fast).
pub fn short_deadline_runtime() -> trainforge::plugin::PluginRuntime {
    use trainforge::plugin::{Limits, PluginRuntime, RuntimeConfig};
    let limits = Limits {
        timeout: std::time::Duration::from_millis(300),
        ..Limits::default()
    };
    PluginRuntime::new(RuntimeConfig {
        limits,
        ..RuntimeConfig::default()
    })
    .unwrap()
}
