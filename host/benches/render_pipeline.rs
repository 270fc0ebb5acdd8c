//! `render` pipeline benchmark (criterion), on the torch-distributed worked
//! example (runtime `api/tests/fixtures/upstream/torch-distributed.yaml`,
//! TrainJob `host/tests/golden/worked-example/trainjob.yaml`):
//!
//! - `render/full`: parse both YAML texts + CRD defaults + merge + info +
//!   plugin `validate` + every plugin phase + apply order, i.e. everything
//!   `trainforge render` does per TrainJob apart from reading files, building
//!   the CRD defaulter and loading the plugins (done once, outside the loop);
//! - `render/plugin_calls`: only the plugin calls of that pipeline on the same
//!   inputs (`PluginSet::validate` + `PluginSet::reconcile`: JSON in/out,
//!   a fresh store per call, the guest code, output checks);
//! - `setup/crd_defaulter` and `setup/load_builtins_disk_cache` (plus a
//!   one-shot timing of loading the builtins with an empty artifact cache):
//!   the one-off costs of a `render` invocation, for reference.
//!
//! At the end it prints
//! `render pipeline median X µs, of which Y µs (Z %) in plugin calls`, from
//! per-iteration timings recorded during the two `render/*` benchmarks.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use trainforge::cmd::render::{Input, builtin_plugins, builtin_plugins_in, render};
use trainforge::pipeline::info::runtime_info;
use trainforge::pipeline::merge::merge;

const RUNTIME: &str = "api/tests/fixtures/upstream/torch-distributed.yaml";
const TRAINJOB: &str = "host/tests/golden/worked-example/trainjob.yaml";

fn read(rel: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    std::fs::read_to_string(root.join(rel)).unwrap()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Time each iteration separately (criterion gets the batch total), so the
/// summary line can report medians of single runs.
fn timed<O>(samples: &RefCell<Vec<Duration>>, iters: u64, mut f: impl FnMut() -> O) -> Duration {
    let mut total = Duration::ZERO;
    let mut s = samples.borrow_mut();
    for _ in 0..iters {
        let t = Instant::now();
        black_box(f());
        let d = t.elapsed();
        s.push(d);
        total += d;
    }
    total
}

fn benches(c: &mut Criterion) {
    let runtime_yaml = read(RUNTIME);
    let trainjob_yaml = read(TRAINJOB);
    // Loaded once (the artifact cache makes this cheap after the first run).
    let plugins = builtin_plugins().unwrap();

    // Check the inputs render before timing anything.
    let mut input = Input::new().unwrap();
    input.add_yaml(RUNTIME, &runtime_yaml, "default").unwrap();
    input.add_yaml(TRAINJOB, &trainjob_yaml, "default").unwrap();
    let results = render(&input, &plugins).unwrap();
    let rendered = results[0].1.as_ref().unwrap();
    eprintln!(
        "torch-distributed example: {} objects",
        rendered.objects.len()
    );

    // Inputs of the plugin calls, as `pipeline::run` computes them.
    let job = input.trainjobs[0].clone();
    let info = runtime_info(&merge(&job, input.runtimes[0].spec()).unwrap()).unwrap();
    let trainjob = serde_json::to_value(&job).unwrap();

    let full = RefCell::new(Vec::new());
    let calls = RefCell::new(Vec::new());
    let mut g = c.benchmark_group("render");
    g.sample_size(30).measurement_time(Duration::from_secs(10));
    g.bench_function("full", |b| {
        b.iter_custom(|iters| {
            timed(&full, iters, || {
                input.trainjobs.clear();
                input.runtimes.clear();
                input.add_yaml(RUNTIME, &runtime_yaml, "default").unwrap();
                input.add_yaml(TRAINJOB, &trainjob_yaml, "default").unwrap();
                render(&input, &plugins).unwrap()
            })
        })
    });
    g.bench_function("plugin_calls", |b| {
        b.iter_custom(|iters| {
            timed(&calls, iters, || {
                let v = plugins.validate(&trainjob, None, &info).unwrap();
                assert!(v.errors.is_empty());
                plugins.reconcile(&trainjob, &info).unwrap()
            })
        })
    });
    g.finish();

    // One-off costs of a `render` invocation.
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    black_box(builtin_plugins_in(Some(dir.path().to_path_buf())).unwrap());
    eprintln!(
        "load builtins, compiling (empty artifact cache): {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let mut g = c.benchmark_group("setup");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    g.bench_function("crd_defaulter", |b| {
        b.iter(|| black_box(Input::new().unwrap()))
    });
    g.bench_function("load_builtins_disk_cache", |b| {
        b.iter(|| black_box(builtin_plugins_in(Some(dir.path().to_path_buf())).unwrap()))
    });
    g.finish();

    let (full_m, calls_m) = (
        median(&mut full.borrow_mut()),
        median(&mut calls.borrow_mut()),
    );
    let share = if full_m.is_zero() {
        0.0
    } else {
        100.0 * calls_m.as_secs_f64() / full_m.as_secs_f64()
    };
    println!(
        "render pipeline median {:.0} µs, of which {:.0} µs ({share:.0} %) in plugin calls",
        full_m.as_secs_f64() * 1e6,
        calls_m.as_secs_f64() * 1e6
    );
}

criterion_group!(render_pipeline, benches);
criterion_main!(render_pipeline);
