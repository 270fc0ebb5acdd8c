//! `trainforge plugin inspect|run|bench` end to end, through the binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod plugin_common;

use plugin_common::*;
use serde_json::Value;
use std::process::Command;

fn trainforge(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trainforge"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_prints_metadata_and_digest() {
    let wasm = minimal_wasm().to_str().unwrap();
    let digest = trainforge::plugin::sha256_hex(&std::fs::read(wasm).unwrap());
    let (ok, out, err) = trainforge(&["plugin", "inspect", wasm]);
    assert!(ok, "{err}");
    for want in [
        "name:          minimal",
        "wit-version:   0.1.0",
        "mlPolicy.minimal",
        "enforce-ml-policy, build, validate",
        "v1/ConfigMap",
        &digest,
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let (ok, out, err) = trainforge(&["plugin", "inspect", "--json", wasm]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["descriptor"]["name"], "minimal");
    assert_eq!(v["sha256"], digest);
    // A wrong pin is refused with the reason.
    let (ok, _, err) = trainforge(&["plugin", "inspect", "--sha256", &"0".repeat(64), wasm]);
    assert!(!ok);
    assert!(err.contains("DigestMismatch"), "{err}");
}

#[test]
fn run_prints_objects_info_and_validation() {
    let dir = tempfile::tempdir().unwrap();
    let tj = dir.path().join("trainjob.yaml");
    let rt = dir.path().join("runtime.yaml");
    let cfg = dir.path().join("config.json");
    std::fs::write(&tj, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: demo\n  namespace: team\nspec:\n  runtimeRef:\n    name: minimal\n").unwrap();
    // JSON is YAML too; the runtime comes from the shared fixture.
    std::fs::write(&rt, serde_json::to_string_pretty(&runtime()).unwrap()).unwrap();
    std::fs::write(&cfg, r#"{"greeting": "from-cli"}"#).unwrap();
    let wasm = minimal_wasm().to_str().unwrap();
    let (ok, out, err) = trainforge(&[
        "plugin",
        "run",
        wasm,
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["plugin"]["name"], "minimal");
    assert_eq!(v["objects"][0]["kind"], "ConfigMap");
    assert_eq!(v["objects"][0]["metadata"]["name"], "demo-minimal");
    assert_eq!(v["objects"][0]["data"]["greeting"], "from-cli");
    let env = &v["info"]["templateSpec"]["podSets"][0]["containers"][0]["env"][0];
    assert_eq!(env["name"], "MINIMAL_GREETING");
    assert_eq!(v["validation"]["errors"].as_array().unwrap().len(), 0);
    assert!(v["status"].is_null());
}

#[test]
fn run_reports_hostile_plugin_reason() {
    let dir = tempfile::tempdir().unwrap();
    let tj = dir.path().join("t.json");
    let rt = dir.path().join("r.json");
    let cfg = dir.path().join("c.json");
    std::fs::write(&tj, trainjob().to_string()).unwrap();
    std::fs::write(&rt, runtime().to_string()).unwrap();
    std::fs::write(&cfg, r#"{"attack": "cluster-role-binding"}"#).unwrap();
    let (ok, _, err) = trainforge(&[
        "plugin",
        "run",
        hostile_wasm().to_str().unwrap(),
        "--trainjob",
        tj.to_str().unwrap(),
        "--runtime",
        rt.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("ForbiddenObject") && err.contains("hostile"),
        "{err}"
    );
}

#[test]
fn bench_prints_percentiles() {
    let (ok, out, err) = trainforge(&[
        "plugin",
        "bench",
        "--iterations",
        "5",
        minimal_wasm().to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    for want in [
        "p50",
        "p99",
        "enforce-ml-policy",
        "build",
        "validate",
        "reconcile",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn corrupt_file_is_load_failed() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.wasm");
    std::fs::write(&f, b"\0asmnot really").unwrap();
    let (ok, _, err) = trainforge(&["plugin", "inspect", f.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("LoadFailed") && err.contains("bad.wasm"),
        "{err}"
    );
}
