//! What the Wasm boundary costs: the same plugin code (the builtin `torch`
//! and `jobset` plugins, the two a torch TrainJob runs) called per phase
//! through the sandbox (embedded component, fresh instance per call, output
//! checks) and natively (the SDK's context over the same JSON, the way the
//! guest glue runs it, without Wasm). Prints the median time of each and
//! the ratio; asserts nothing about either.
//!
//! `cargo bench -p trainforge --bench wasm_native` (`make bench` runs it).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use std::sync::Arc;

use serde_json::Value;
use trainforge::pipeline::sample;
use trainforge::plugin::{
    CallScope, LoadedPlugin, Owner, PhaseInput, PluginRuntime, RuntimeConfig, StaticObjects,
    ValidateInput, builtin,
};
use trainforge_api::plugin::Phase;
use trainforge_sdk::testing::MockHost;
use trainforge_sdk::{PhaseContext, Plugin, ValidateContext};

/// How long each measurement runs (after a short warm-up).
const MEASURE: Duration = Duration::from_millis(1500);

/// Median time of one `f()`, over as many runs as fit in [`MEASURE`].
fn median(mut f: impl FnMut()) -> Duration {
    for _ in 0..5 {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while start.elapsed() < MEASURE || times.len() < 10 {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// One phase natively, as the guest glue runs it: parse the JSON lazily,
/// call the plugin, write back what changed. `objects` are what
/// `get-object` finds (the TrainJob's JobSet, for `status`).
fn native<P: Plugin>(phase: Phase, input: &PhaseInput, old: Option<&str>, objects: &[Value]) {
    let mut host = MockHost::default();
    for o in objects {
        host.insert(o.clone());
    }
    let plugin = P::default();
    match phase {
        Phase::Validate => {
            let ctx =
                ValidateContext::from_json(&input.trainjob, old, &input.info, "{}", &host).unwrap();
            black_box(plugin.validate(&ctx).unwrap());
        }
        Phase::Build => {
            let ctx =
                PhaseContext::from_json_lazy(&input.trainjob, &input.info, "{}", &host).unwrap();
            let objects = plugin.build(&ctx).unwrap();
            let json: Vec<String> = objects.iter().map(|o| o.to_string()).collect();
            black_box(json);
        }
        Phase::Status => {
            let ctx =
                PhaseContext::from_json_lazy(&input.trainjob, &input.info, "{}", &host).unwrap();
            black_box(plugin.status(&ctx).unwrap().map(|s| s.to_string()));
        }
        enforce => {
            let mut ctx =
                PhaseContext::from_json_lazy(&input.trainjob, &input.info, "{}", &host).unwrap();
            match enforce {
                Phase::EnforceMlPolicy => plugin.enforce_ml_policy(&mut ctx),
                Phase::EnforcePodGroupPolicy => plugin.enforce_pod_group_policy(&mut ctx),
                Phase::EnforcePodSpec => plugin.enforce_pod_spec(&mut ctx),
                _ => plugin.pre_build(&mut ctx),
            }
            .unwrap();
            black_box(ctx.changed_json().unwrap());
        }
    }
}

/// One phase through the sandbox.
fn wasm(p: &LoadedPlugin, phase: Phase, input: &PhaseInput, owner: &Owner, scope: &CallScope) {
    match phase {
        Phase::Validate => {
            let v = ValidateInput {
                trainjob: input.trainjob.clone(),
                old_trainjob: None,
                info: input.info.clone(),
            };
            black_box(p.validate(&v, scope).unwrap());
        }
        Phase::Build => {
            black_box(p.build(input, owner).unwrap());
        }
        Phase::Status => {
            black_box(p.status(input, scope).unwrap());
        }
        enforce => {
            black_box(p.enforce(enforce, input, scope).unwrap());
        }
    }
}

fn compare<P: Plugin>(
    rt: &PluginRuntime,
    crate_name: &str,
    input: &PhaseInput,
    owner: &Owner,
    scope: &CallScope,
    objects: &[Value],
) {
    let b = builtin::all()
        .iter()
        .find(|b| b.crate_name == crate_name)
        .unwrap_or_else(|| panic!("{crate_name} is not embedded"));
    let mut src = b.trusted_source();
    let mut served = StaticObjects::default();
    for o in objects {
        served.insert(o);
    }
    src.objects = Arc::new(served);
    let p = rt.load(src).unwrap();
    for phase in P::default().describe().known_phases() {
        let w = median(|| wasm(&p, phase, input, owner, scope));
        let n = median(|| native::<P>(phase, input, None, objects));
        println!(
            "WASM/NATIVE {:<8} {:<18} wasm {:>8.1} µs  native {:>8.1} µs  ratio {:>5.1}x",
            builtin::plugin_name(crate_name),
            phase.as_str(),
            w.as_secs_f64() * 1e6,
            n.as_secs_f64() * 1e6,
            w.as_secs_f64() / n.as_secs_f64().max(1e-9)
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once
    // as a smoke test with nothing else: both take the same path.
    let (trainjob, info) = sample::inputs(&["torch"]).unwrap();
    let input = PhaseInput {
        trainjob: trainjob.to_string(),
        info: serde_json::to_string(&info).unwrap(),
    };
    let owner = Owner::from_stored(&trainjob).unwrap();
    let scope = CallScope::of(&owner);
    let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
    println!(
        "WASM/NATIVE inputs: TrainJob {} B, info {} B (4 replicated jobs); median per call",
        input.trainjob.len(),
        input.info.len()
    );
    // The JobSet the jobset plugin builds, with a running status, for its
    // `status` phase to read.
    let mut jobset: Value = {
        let host = MockHost::default();
        let ctx = PhaseContext::from_json_lazy(&input.trainjob, &input.info, "{}", &host).unwrap();
        plugin_jobset::JobSetPlugin.build(&ctx).unwrap().remove(0)
    };
    jobset["status"] = serde_json::json!({"replicatedJobsStatus": [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]});
    let objects = [jobset];
    compare::<plugin_torch::Torch>(&rt, "plugin-torch", &input, &owner, &scope, &objects);
    compare::<plugin_jobset::JobSetPlugin>(&rt, "plugin-jobset", &input, &owner, &scope, &objects);
}
