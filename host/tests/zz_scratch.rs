#![allow(clippy::unwrap_used, missing_docs)]
use std::path::Path;
use trainforge::render::{Input, builtin_plugins_in, render};
#[test]
fn loop_pipeline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut input = Input::new().unwrap();
    for f in [
        "api/tests/fixtures/upstream/torch-distributed.yaml",
        "host/tests/golden/worked-example/trainjob.yaml",
    ] {
        input
            .add_yaml(
                f,
                &std::fs::read_to_string(root.join(f)).unwrap(),
                "default",
            )
            .unwrap();
    }
    let plugins = builtin_plugins_in(None).unwrap();
    let n = 100;
    let start = std::time::Instant::now();
    for _ in 0..n {
        render(&input, &plugins).unwrap();
    }
    eprintln!(
        "PIPELINE debug: {:.2} ms per render",
        start.elapsed().as_secs_f64() * 1e3 / n as f64
    );
}
