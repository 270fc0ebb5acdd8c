//! A builtin plugin's compiled code is mapped only while it is used: not
//! after load, mapped by a call, released when idle, mapped again by the
//! next call (from its artifact, or compiled again when the artifact is
//! gone). Other plugins keep their code mapped while loaded.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(target_os = "linux")]

use crate::plugin_common;

use std::path::{Path, PathBuf};
use std::time::Duration;
use trainforge::pipeline::sample;
use trainforge::plugin::{
    LoadedPlugin, PluginRuntime, PluginSet, PluginSource, RuntimeConfig, builtin,
};

/// The artifacts (`*.cwasm`) in `dir`.
fn artifacts(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

/// Whether this process maps a file under `dir` (from `/proc/self/maps`).
fn maps_from(dir: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let dir = dir.to_string_lossy();
    maps.lines().any(|l| l.contains(dir.as_ref()))
}

fn torch() -> PluginSource {
    builtin::all()
        .iter()
        .find(|b| b.crate_name == "plugin-torch")
        .expect("the torch builtin is embedded")
        .trusted_source()
}

fn runtime(cache: &Path) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// One reconcile pass and one validation of a TrainJob whose runtime has
/// the `policy` of `mlPolicy` (the plugin is routed by it).
fn call_with(plugin: &LoadedPlugin, policy: &str) {
    let (trainjob, info) = sample::inputs(&[policy]).unwrap();
    let set = PluginSet::new(vec![plugin.clone()]).unwrap();
    let out = set.reconcile(&trainjob, &info).unwrap();
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let v = set.validate(&trainjob, None, &info).unwrap();
    assert!(v.errors.is_empty(), "{v:?}");
}

fn call(torch: &LoadedPlugin) {
    call_with(torch, "torch");
}

#[test]
fn a_builtins_code_is_mapped_only_while_it_is_used() {
    let cache = tempfile::tempdir().unwrap();
    let rt = runtime(cache.path());
    let torch = rt.load(torch()).unwrap();
    assert_eq!(artifacts(cache.path()).len(), 1, "compiled into the cache");
    assert!(!torch.code_mapped(), "described, then let go");
    assert!(!maps_from(cache.path()), "no artifact mapped after load");

    call(&torch);
    assert!(torch.code_mapped(), "mapped by the call");
    assert!(maps_from(cache.path()), "the artifact is mapped");
    assert_eq!(
        rt.release_idle(Duration::from_secs(3600)),
        0,
        "used just now: kept"
    );
    assert!(torch.code_mapped());

    assert_eq!(rt.release_idle(Duration::ZERO), 1);
    assert!(!torch.code_mapped());
    assert!(!maps_from(cache.path()), "released: unmapped");

    // Mapped again by the next call, for every phase.
    call(&torch);
    assert!(torch.code_mapped());
    assert_eq!(rt.release_idle(Duration::ZERO), 1);

    // The artifact is gone (a cleaned cache): the builtin is compiled again
    // from its embedded bytes, and the artifact written back.
    for a in artifacts(cache.path()) {
        std::fs::remove_file(a).unwrap();
    }
    call(&torch);
    assert!(torch.code_mapped());
    assert_eq!(artifacts(cache.path()).len(), 1, "written back");

    // A plugin dropped from service takes its slot with it.
    drop(torch);
    assert_eq!(rt.release_idle(Duration::ZERO), 0);
    assert!(!maps_from(cache.path()), "nothing of it stays mapped");
}

#[test]
fn a_damaged_or_missing_artifact_is_compiled_again() {
    let cache = tempfile::tempdir().unwrap();
    let rt = runtime(cache.path());
    let torch = rt.load(torch()).unwrap();
    // The artifact is replaced by garbage under the same name, its
    // checksum sidecar too: it is refused, and the builtin compiled again.
    let artifact = artifacts(cache.path()).pop().unwrap();
    std::fs::write(&artifact, b"not an artifact").unwrap();
    call(&torch);
    assert!(torch.code_mapped());
    assert_eq!(rt.release_idle(Duration::ZERO), 1);

    // The cache directory itself is gone and cannot be written: the
    // compiled component is still served (kept by the caller), and calls
    // keep working.
    drop(cache);
    call(&torch);
    assert!(torch.code_mapped());
}

#[test]
fn other_plugins_keep_their_code_mapped() {
    let cache = tempfile::tempdir().unwrap();
    let rt = runtime(cache.path());
    // A component that is not one of the builtins (e.g. fetched).
    let bytes = std::fs::read(plugin_common::minimal_wasm()).unwrap();
    let fetched = rt.load(PluginSource::new("minimal.wasm", bytes)).unwrap();
    assert!(fetched.code_mapped());
    assert_eq!(rt.release_idle(Duration::ZERO), 0);
    assert!(fetched.code_mapped());
    call_with(&fetched, "minimal");

    // A builtin without a disk cache: nothing to map it again from.
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let torch = rt.load(torch()).unwrap();
    assert!(torch.code_mapped());
    assert_eq!(rt.release_idle(Duration::ZERO), 0);
    call(&torch);
}

#[test]
fn concurrent_first_calls_map_the_code_once() {
    let cache = tempfile::tempdir().unwrap();
    let rt = runtime(cache.path());
    let torch = rt.load(torch()).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| call(&torch));
        }
    });
    assert!(torch.code_mapped());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let artifact = artifacts(cache.path()).pop().unwrap();
    // The whole path: tests running beside this one cache the same
    // artifact (same name) in directories of their own.
    let path = artifact.to_string_lossy().into_owned();
    // One executable mapping of the artifact (pool slots map its data
    // image too, writable, one per slot).
    let text = maps
        .lines()
        .filter(|l| l.ends_with(&path) && l.split_whitespace().nth(1) == Some("r-xp"))
        .count();
    assert_eq!(text, 1, "{maps}");
}
