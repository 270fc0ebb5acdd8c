//! Plugin runtime benchmarks (criterion):
//! - `load/*`: cold compile vs cached artifact load (disk, memory) of a plugin;
//! - `call/*`: one fresh-store call per phase with a ~20 KB JobSet-sized info;
//! - `pipeline/6_calls`: six threaded calls (3× enforce-ml-policy, 2× build,
//!   1× validate) as one reconcile would do.
//!
//! The plugin is the SDK example (`examples/plugin-minimal`), built here with
//! a nested cargo (own target dir) unless `TRAINFORGE_BENCH_PLUGIN` names a
//! `.wasm`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trainforge::pipeline::sample;
use trainforge::plugin::{
    CacheOutcome, CallScope, Owner, PhaseInput, PluginRuntime, PluginSource, RuntimeConfig,
    ValidateInput,
};
use trainforge_api::plugin::Phase;

fn plugin_wasm() -> Vec<u8> {
    if let Ok(p) = std::env::var("TRAINFORGE_BENCH_PLUGIN") {
        return std::fs::read(p).unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let target: PathBuf = root.join("target/plugin-test-guests");
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--profile=plugin",
                "--target=wasm32-wasip2",
                "-p",
                "plugin-minimal",
                "--manifest-path",
            ])
            .arg(root.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .status()
            .unwrap();
    assert!(status.success());
    std::fs::read(target.join("wasm32-wasip2/plugin/plugin_minimal.wasm")).unwrap()
}

fn benches(c: &mut Criterion) {
    let wasm = plugin_wasm();
    let config = r#"{"greeting": "bench"}"#;
    let src = || {
        let mut s = PluginSource::new("plugin_minimal.wasm", wasm.clone());
        s.config = config.into();
        s
    };

    // Load: cold compile vs cached artifact.
    let mut g = c.benchmark_group("load");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    g.bench_function("cold_compile", |b| {
        b.iter(|| {
            rt.clear_memory_cache();
            let (p, o) = rt.load_traced(src()).unwrap();
            assert_eq!(o, CacheOutcome::Compiled);
            black_box(p)
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let rt_disk = PluginRuntime::new(RuntimeConfig {
        cache_dir: Some(dir.path().into()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    rt_disk.load(src()).unwrap();
    g.sample_size(50);
    g.bench_function("cached_disk_artifact", |b| {
        b.iter(|| {
            rt_disk.clear_memory_cache();
            let (p, o) = rt_disk.load_traced(src()).unwrap();
            assert_eq!(o, CacheOutcome::Disk);
            black_box(p)
        })
    });
    // Where a disk load goes: the artifact alone (read, sha256 check,
    // deserialize), without interface checks, linking or `describe`.
    let key = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".cwasm"))
                .map(str::to_owned)
        })
        .unwrap();
    eprintln!(
        "artifact: {} bytes",
        std::fs::metadata(dir.path().join(format!("{key}.cwasm")))
            .map(|m| m.len())
            .unwrap_or(0)
    );
    g.bench_function("disk_artifact_only", |b| {
        b.iter(|| {
            black_box(trainforge_precompiled::load(rt_disk.engine(), dir.path(), &key).unwrap())
        })
    });
    g.bench_function("cached_memory", |b| {
        b.iter(|| {
            let (p, o) = rt_disk.load_traced(src()).unwrap();
            assert_eq!(o, CacheOutcome::Memory);
            black_box(p)
        })
    });
    g.finish();

    // Calls: fresh store per call, ~20 KB info.
    let p = rt.load(src()).unwrap();
    let (trainjob, info) = sample::inputs(&["minimal"]).unwrap();
    let input = PhaseInput {
        trainjob: trainjob.to_string(),
        info: serde_json::to_string(&info).unwrap(),
    };
    eprintln!("info payload: {} bytes", input.info.len());
    let vinput = ValidateInput {
        trainjob: input.trainjob.clone(),
        old_trainjob: None,
        info: input.info.clone(),
    };
    let owner = Owner::from_stored(&trainjob).unwrap();
    let scope = CallScope::of(&owner);
    let mut g = c.benchmark_group("call");
    g.sample_size(100).measurement_time(Duration::from_secs(5));
    g.bench_function("describe", |b| {
        b.iter(|| black_box(p.describe_fresh().unwrap()))
    });
    g.bench_function("enforce_ml_policy", |b| {
        b.iter(|| black_box(p.enforce(Phase::EnforceMlPolicy, &input, &scope).unwrap()))
    });
    g.bench_function("build", |b| {
        b.iter(|| black_box(p.build(&input, &owner).unwrap()))
    });
    g.bench_function("validate", |b| {
        b.iter(|| black_box(p.validate(&vinput, &scope).unwrap()))
    });
    g.finish();

    // Pipeline of 6 calls, threading the info.
    let mut g = c.benchmark_group("pipeline");
    g.sample_size(50).measurement_time(Duration::from_secs(8));
    g.bench_function("6_calls", |b| {
        b.iter(|| {
            let mut cur = input.clone();
            for _ in 0..3 {
                let m = p.enforce(Phase::EnforceMlPolicy, &cur, &scope).unwrap();
                if let Some(i) = m.info {
                    cur.info = i;
                }
            }
            let mut objects = p.build(&cur, &owner).unwrap();
            objects.extend(p.build(&cur, &owner).unwrap());
            let v = p
                .validate(
                    &ValidateInput {
                        trainjob: cur.trainjob.clone(),
                        old_trainjob: None,
                        info: cur.info.clone(),
                    },
                    &scope,
                )
                .unwrap();
            black_box((objects, v))
        })
    });
    g.finish();
}

criterion_group!(plugin_runtime, benches);
criterion_main!(plugin_runtime);
