//! The SDK example plugin, built to Wasm and loaded by the host, gives the
//! same answers as its native harness; caching and builtin embedding work.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::plugin_common::*;
use serde_json::json;
use trainforge::plugin::{
    CacheOutcome, PluginRuntime, PluginSet, PluginSource, RuntimeConfig, builtin,
};
use trainforge_api::plugin::{Phase, WIT_VERSION};
use trainforge_sdk::testing::Harness;

fn load(rt: &PluginRuntime, config: serde_json::Value) -> trainforge::plugin::LoadedPlugin {
    let mut src = PluginSource::new("minimal.wasm", std::fs::read(minimal_wasm()).unwrap());
    src.config = config.to_string();
    rt.load(src).unwrap()
}

#[test]
fn describe_is_read_at_load() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let p = load(&rt, json!({}));
    let d = p.descriptor();
    assert_eq!(d.name, "minimal");
    assert_eq!(d.wit_version, WIT_VERSION);
    assert_eq!(d.policy_keys, vec!["mlPolicy.minimal"]);
    assert_eq!(
        d.known_phases(),
        vec![Phase::EnforceMlPolicy, Phase::Build, Phase::Validate]
    );
    assert_eq!(d.emits.len(), 1);
    assert_eq!(p.sha256().len(), 64);
    assert_eq!(p.describe_fresh().unwrap(), *d);
}

#[test]
fn wasm_matches_native_harness() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let config = json!({"greeting": "servus"});
    let p = load(&rt, config.clone());
    let info = info();
    let wasm = PluginSet::new(vec![p])
        .unwrap()
        .reconcile(&trainjob(), &info)
        .unwrap();
    let native = Harness::<plugin_minimal::Minimal>::new(trainjob(), info.clone())
        .with_config(config)
        .run()
        .unwrap();
    assert_eq!(wasm.info, native.info);
    assert_eq!(wasm.objects, native.objects);
    assert_eq!(wasm.trainjob, native.trainjob);
    assert_eq!(wasm.objects[0]["data"]["greeting"], "servus");
    assert_eq!(wasm.objects[0]["metadata"]["namespace"], "team");
}

#[test]
fn validate_and_plugin_errors_cross_the_boundary() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let set = PluginSet::new(vec![load(&rt, json!({}))]).unwrap();
    let info = info();
    let mut tj = trainjob();
    tj["spec"]["trainer"]["env"] = json!([{"name": "MINIMAL_GREETING", "value": "x"}]);
    let v = set.validate(&tj, None, &info).unwrap();
    assert_eq!(v.errors.len(), 1);
    assert_eq!(v.errors[0].error.field, "spec.trainer.env");
    assert_eq!(v.errors[0].plugin, "minimal");
    assert!(
        set.validate(&trainjob(), None, &info)
            .unwrap()
            .errors
            .is_empty()
    );

    let bad = PluginSet::new(vec![load(&rt, json!({"greeting": 5}))]).unwrap();
    let e = bad.reconcile(&trainjob(), &info).unwrap_err();
    assert_eq!(e.reason(), "PluginError", "{e}");
    assert!(e.to_string().contains("invalid config"), "{e}");
}

#[test]
fn artifacts_are_cached_on_disk_and_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let bytes = std::fs::read(minimal_wasm()).unwrap();
    let rt = PluginRuntime::new(config()).unwrap();
    let (_, o) = rt
        .load_traced(PluginSource::new("m", bytes.clone()))
        .unwrap();
    assert_eq!(o, CacheOutcome::Compiled);
    let (_, o) = rt
        .load_traced(PluginSource::new("m", bytes.clone()))
        .unwrap();
    assert_eq!(o, CacheOutcome::Memory);
    drop(rt);
    let rt = PluginRuntime::new(config()).unwrap();
    let (p, o) = rt
        .load_traced(PluginSource::new("m", bytes.clone()))
        .unwrap();
    assert_eq!(o, CacheOutcome::Disk);
    assert_eq!(p.name(), "minimal");
    // A corrupted artifact is ignored (recompiled), never loaded.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "cwasm") {
            let mut b = std::fs::read(&path).unwrap();
            let n = b.len() / 2;
            b[n] ^= 0xff;
            std::fs::write(&path, b).unwrap();
        }
    }
    drop(rt);
    let rt = PluginRuntime::new(config()).unwrap();
    let (p, o) = rt.load_traced(PluginSource::new("m", bytes)).unwrap();
    assert_eq!(o, CacheOutcome::Compiled);
    assert_eq!(p.name(), "minimal");
}

#[test]
fn builtin_plugins_are_embedded_and_load() {
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    let loaded = rt.load_trusted_builtins(None).unwrap();
    assert_eq!(loaded.len(), builtin::all().len());
    // CI builds this test once with
    // TRAINFORGE_EXTRA_BUILTIN_PLUGINS=examples/plugin-minimal to prove the
    // embedding path end to end.
    if option_env!("TRAINFORGE_EXTRA_BUILTIN_PLUGINS").is_some_and(|v| v.contains("plugin-minimal"))
    {
        let b = builtin::all()
            .iter()
            .find(|b| b.crate_name == "plugin-minimal")
            .expect("embedded");
        assert_eq!(rt.load(b.source()).unwrap().name(), "minimal");
    }
    // Every plugin crate on disk is embedded: a build that cannot embed one
    // fails, unless the builtins were explicitly skipped.
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("plugins"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("Cargo.toml")).ok())
        .map(|manifest| {
            let name = manifest
                .lines()
                .find_map(|l| l.trim().strip_prefix("name"))
                .and_then(|rest| rest.trim_start().strip_prefix('='))
                .unwrap();
            name.trim().trim_matches('"').to_owned()
        })
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = builtin::all()
        .iter()
        .map(|b| b.crate_name.to_owned())
        .filter(|name| on_disk.contains(name))
        .collect();
    embedded.sort();
    if option_env!("TRAINFORGE_SKIP_BUILTIN_PLUGINS").is_some_and(|v| !v.is_empty() && v != "0") {
        assert!(embedded.is_empty(), "skipped, yet embedded: {embedded:?}");
    } else {
        assert!(!on_disk.is_empty(), "no plugin crates under plugins/");
        assert_eq!(embedded, on_disk, "plugin crates not embedded");
    }
}
