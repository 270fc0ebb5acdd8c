//! Adversarial suite: hostile plugins are stopped or refused with the right
//! reason in bounded time, and a well-behaved plugin called right after
//! still answers correctly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod plugin_common;

use plugin_common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trainforge::plugin::{
    Error, Limits, LoadedPlugin, PhaseInput, PluginRuntime, PluginSet, PluginSource, StaticObjects,
    sha256_hex,
};
use trainforge_api::plugin::{Info, Phase};

fn hostile(rt: &PluginRuntime, attack: &str, limits: Option<Limits>) -> LoadedPlugin {
    let bytes = std::fs::read(hostile_wasm()).unwrap();
    let mut src = PluginSource::new("hostile.wasm", bytes);
    src.config = json!({"attack": attack}).to_string();
    src.limits = limits;
    let mut objects = StaticObjects::default();
    objects.insert(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "team"}, "data": {"k": "c2VjcmV0"}}));
    src.objects = Arc::new(objects);
    rt.load(src).unwrap()
}

fn input() -> PhaseInput {
    let info = Info::from_runtime_template(&plugin_common::runtime(), &trainjob()).unwrap();
    PhaseInput {
        trainjob: trainjob().to_string(),
        info: serde_json::to_string(&info).unwrap(),
    }
}

/// The well-behaved plugin, run through the full pipeline after an attack.
fn assert_good_plugin_still_works(rt: &PluginRuntime) {
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let good = rt.load(PluginSource::new("minimal.wasm", bytes)).unwrap();
    let info = Info::from_runtime_template(&plugin_common::runtime(), &trainjob()).unwrap();
    let out = PluginSet::new(vec![good])
        .unwrap()
        .reconcile(&trainjob(), &info)
        .unwrap();
    assert_eq!(out.objects.len(), 1);
    assert_eq!(out.objects[0]["metadata"]["name"], "job-minimal");
    let env = &out
        .info
        .pod_set("node")
        .unwrap()
        .container("node")
        .unwrap()
        .env;
    assert_eq!(env[0].name, "MINIMAL_GREETING");
}

/// Run one build attack; return the error and how long it took.
fn attack(rt: &PluginRuntime, name: &str, limits: Option<Limits>) -> (Error, Duration) {
    let p = hostile(rt, name, limits);
    let start = Instant::now();
    let err = p
        .build(&input())
        .expect_err(&format!("attack {name} must fail"));
    let took = start.elapsed();
    assert!(
        err.to_string().contains("hostile"),
        "error names the plugin: {err}"
    );
    (err, took)
}

#[test]
fn infinite_loop_times_out() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "loop", None);
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(took < Duration::from_secs(3), "stopped in {took:?}");
    assert!(
        took >= Duration::from_millis(250),
        "not before the deadline: {took:?}"
    );
    assert_good_plugin_still_works(&rt);
}

#[test]
fn infinite_loop_in_enforce_times_out() {
    let rt = short_deadline_runtime();
    let p = hostile(&rt, "loop-enforce", None);
    let e = p.enforce(Phase::EnforceMlPolicy, &input()).unwrap_err();
    assert_eq!(e.reason(), "Timeout", "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn unbounded_allocation_hits_memory_limit() {
    let rt = short_deadline_runtime();
    let (e, took) = attack(&rt, "alloc", None);
    assert!(matches!(e, Error::MemoryLimit { .. }), "{e}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn panic_is_a_trap_with_message() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "panic", None);
    assert!(matches!(e, Error::Trap { .. }), "{e}");
    assert!(
        e.to_string().contains("panicked on purpose"),
        "panic message captured: {e}"
    );
    assert_good_plugin_still_works(&rt);
}

#[test]
fn hundred_megabytes_of_output_is_refused() {
    let rt = short_deadline_runtime();
    // With the default 64 MiB cap the guest cannot even build the string.
    let (e, _) = attack(&rt, "huge-output", None);
    assert_eq!(e.reason(), "MemoryLimit", "{e}");
    // With room to build it, the output bound refuses it.
    let roomy = Limits {
        memory_bytes: 512 << 20,
        timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let (e, took) = attack(&rt, "huge-output", Some(roomy));
    assert!(matches!(e, Error::InvalidOutput { .. }), "{e}");
    assert!(e.to_string().contains("exceeds"), "{e}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn invalid_json_is_invalid_output() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "invalid-json", None);
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let p = hostile(&rt, "bad-info", None);
    let e = p.enforce(Phase::EnforceMlPolicy, &input()).unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    let p = hostile(&rt, "bad-status", None);
    let e = p.status(&input()).unwrap_err();
    assert_eq!(e.reason(), "InvalidOutput", "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn cluster_role_binding_is_forbidden_even_if_declared() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "cluster-role-binding", None);
    assert!(matches!(e, Error::ForbiddenObject { .. }), "{e}");
    assert!(e.to_string().contains("ClusterRoleBinding"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn secret_in_another_namespace_is_forbidden() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "secret-other-namespace", None);
    assert!(matches!(e, Error::ForbiddenObject { .. }), "{e}");
    assert!(e.to_string().contains("kube-system"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn object_owned_by_another_trainjob_is_forbidden() {
    let rt = short_deadline_runtime();
    let (e, _) = attack(&rt, "foreign-owner", None);
    assert!(matches!(e, Error::ForbiddenObject { .. }), "{e}");
    assert!(e.to_string().contains("someone-elses-job"), "{e}");
    assert_good_plugin_still_works(&rt);
}

/// The guest reports what happened; "blocked" means the host denied it.
fn assert_blocked(rt: &PluginRuntime, name: &str) {
    let (e, _) = attack(rt, name, None);
    match &e {
        Error::Plugin { error, .. } => {
            assert!(error.to_string().contains("blocked"), "{name}: {e}")
        }
        other => panic!("{name}: expected the guest to report a denial, got {other}"),
    }
}

#[test]
fn file_env_socket_clock_are_denied() {
    let rt = short_deadline_runtime();
    for a in ["file", "env", "socket", "clock"] {
        assert_blocked(&rt, a);
    }
    assert_good_plugin_still_works(&rt);
}

#[test]
fn host_imports_are_limited_to_declarations() {
    let rt = short_deadline_runtime();
    // random-bytes without declaring and being granted `random`.
    assert_blocked(&rt, "random");
    // get-object of a kind not declared in `reads` (Secret), though it exists.
    assert_blocked(&rt, "read-secret");
    // A log flood is truncated, not fatal.
    let p = hostile(&rt, "log-flood", None);
    assert_eq!(p.build(&input()).unwrap(), Vec::<Value>::new());
    assert_good_plugin_still_works(&rt);
}

#[test]
fn corrupt_module_is_load_failed() {
    let rt = short_deadline_runtime();
    let mut bytes = std::fs::read(minimal_wasm()).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b = 0xff;
    }
    let e = rt
        .load(PluginSource::new("corrupt.wasm", bytes))
        .unwrap_err();
    assert_eq!(e.reason(), "LoadFailed", "{e}");
    assert!(e.to_string().contains("corrupt.wasm"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn wrong_sha256_is_digest_mismatch() {
    let rt = short_deadline_runtime();
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let mut src = PluginSource::new("minimal.wasm", bytes.clone());
    src.sha256 = Some(sha256_hex(b"something else"));
    let e = rt.load(src).unwrap_err();
    assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
    let mut src = PluginSource::new("minimal.wasm", bytes.clone());
    src.sha256 = Some(format!("sha256:{}", sha256_hex(&bytes)));
    rt.load(src).expect("the right digest loads");
}

#[test]
fn incompatible_interface_version_is_refused() {
    let rt = short_deadline_runtime();
    let bytes = std::fs::read(incompatible_wasm()).unwrap();
    let e = rt
        .load(PluginSource::new("future.wasm", bytes))
        .unwrap_err();
    assert!(matches!(e, Error::IncompatibleInterface { .. }), "{e}");
    assert!(e.to_string().contains("9.0.0"), "{e}");
    assert_good_plugin_still_works(&rt);
}

#[test]
fn concurrent_calls_are_isolated() {
    let rt = Arc::new(short_deadline_runtime());
    let looping = hostile(&rt, "loop", None);
    let t = std::thread::spawn(move || looping.build(&input()).unwrap_err().reason());
    assert_good_plugin_still_works(&rt);
    assert_eq!(t.join().unwrap(), "Timeout");
}
