//! Shared helpers of the `plugin_*` integration tests: build the Wasm test
//! guests (hostile fixtures and the SDK example) once per test binary, in
//! target directories of their own (`target/plugin-test-guests`; the
//! example in the builtins' `target/plugin-target`) so the nested cargo
//! never waits on the outer build's lock.

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

/// Where the builtins are built (`host/build.rs`) and `make demo` builds
/// the example plugin: the same workspace and profile, so the example built
/// there is not built again here.
fn workspace_plugin_dir() -> PathBuf {
    root().join("target/plugin-target")
}

fn cargo_build(args: &[&str]) {
    cargo_build_in(&target_dir(), args)
}

fn cargo_build_in(dir: &Path, args: &[&str]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--profile=plugin", "--target=wasm32-wasip2"])
        .args(args)
        .env("CARGO_TARGET_DIR", dir)
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
        cargo_build_in(
            &workspace_plugin_dir(),
            &[
                "--manifest-path",
                root().join("Cargo.toml").to_str().unwrap(),
                "-p",
                "plugin-minimal",
            ],
        );
        workspace_plugin_dir().join("wasm32-wasip2/plugin/plugin_minimal.wasm")
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

/// A component of world `plugin` only (no `naming` export), as built
/// before the optional interfaces (`guests/incompatible`, example
/// `legacy`); with `announce`, its `describe` lists `object-names` anyway.
pub fn legacy_bytes(announce: bool) -> Vec<u8> {
    static P: OnceLock<PathBuf> = OnceLock::new();
    let path = P.get_or_init(|| {
        let m = root().join("host/tests/guests/incompatible/Cargo.toml");
        cargo_build(&[
            "--manifest-path",
            m.to_str().unwrap(),
            "--example",
            "legacy",
        ]);
        target_dir().join("wasm32-wasip2/plugin/examples/legacy.wasm")
    });
    let mut bytes = std::fs::read(path).expect("the legacy guest was built");
    const MARKER: &[u8] = b"TRAINFORGE-LEGACY-ANNOUNCE:";
    let at: Vec<usize> = bytes
        .windows(MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == MARKER)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the legacy guest carries its marker once");
    if announce {
        bytes[at[0] + MARKER.len()] = b'1';
    }
    bytes
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

/// The info the operator builds for [`trainjob`] on [`runtime`] (the SDK's
/// fixture, which calls the operator's builder).
pub fn info() -> trainforge_api::plugin::Info {
    trainforge_sdk::testing::RuntimeFixture::new(runtime())
        .info_for(&trainjob())
        .unwrap()
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

/// The marker the hostile guest puts before its patchable descriptor block
/// (see `guests/hostile/src/lib.rs`), and the block's size.
const DESCRIPTOR_MARKER: &[u8] = b"TRAINFORGE-HOSTILE-DESCRIPTOR:";
const DESCRIPTOR_BLOCK: usize = 4096;

/// The hostile guest's bytes.
pub fn hostile_bytes() -> Vec<u8> {
    std::fs::read(hostile_wasm()).unwrap()
}

/// The hostile guest declaring `descriptor` (JSON; fields `name`,
/// `version`, `wit_version`, `phases`, `emits`/`reads`/`watches` as
/// `[[apiVersion, kind], ...]`, `capabilities`, `policy_keys`,
/// `generate_reads`, `name_repeat`, `describe`: `loop|sleep|trap|alloc`).
/// Each descriptor yields a different component (and sha256).
pub fn hostile_declaring(descriptor: &serde_json::Value) -> Vec<u8> {
    let mut bytes = hostile_bytes();
    let at = bytes
        .windows(DESCRIPTOR_MARKER.len())
        .position(|w| w == DESCRIPTOR_MARKER)
        .expect("the hostile guest carries its descriptor marker");
    assert_eq!(
        bytes[at + 1..]
            .windows(DESCRIPTOR_MARKER.len())
            .filter(|w| *w == DESCRIPTOR_MARKER)
            .count(),
        0,
        "the marker occurs once"
    );
    let text = descriptor.to_string();
    let room = DESCRIPTOR_BLOCK - DESCRIPTOR_MARKER.len();
    assert!(text.len() <= room, "descriptor too long for the block");
    let start = at + DESCRIPTOR_MARKER.len();
    bytes[start..start + room].fill(b' ');
    bytes[start..start + text.len()].copy_from_slice(text.as_bytes());
    bytes
}

/// A component whose one core function is crafted to be expensive to
/// compile: `targets` nested blocks left by one `br_table`, with `locals`
/// locals live across every edge (the SSA builder gives each of the
/// `targets` merge points a parameter per live local). Small on disk.
pub fn slow_to_compile_component(targets: usize, locals: usize) -> Vec<u8> {
    let mut f = String::new();
    f.push_str(&format!(
        "(func (param i32) (result i64) (local i64 {})\n",
        "i64 ".repeat(locals)
    ));
    for i in 0..locals {
        f.push_str(&format!(
            "(local.set {} (i64.extend_i32_u (local.get 0)))\n",
            i + 1
        ));
    }
    for _ in 0..targets {
        f.push_str("(block\n");
    }
    f.push_str("(br_table ");
    for i in 0..targets {
        f.push_str(&format!("{i} "));
    }
    f.push_str("0 (local.get 0))\n");
    for i in 0..targets {
        f.push_str(&format!(
            ")(local.set {} (i64.add (local.get {}) (i64.const 1)))\n",
            (i % locals) + 1,
            (i % locals) + 1
        ));
    }
    f.push_str("(i64.const 0)");
    for i in 0..locals {
        f.push_str(&format!(" (local.get {}) i64.add", i + 1));
    }
    f.push_str(")\n");
    let text = format!("(component (core module {f}))");
    wat::parse_str(&text).expect("valid component text")
}
