//! Golden tests of `trainforge render`: for every case directory under
//! `host/tests/golden/`, render its inputs with the builtin plugins and compare
//! with the reviewed expected output.
//!
//! A case directory holds:
//! - `inputs` — one path per line, relative to the repository root (YAML files
//!   with TrainJobs and runtimes; `#` starts a comment);
//! - `expected.yaml` — the rendered objects (apply order), when rendering succeeds;
//! - `warnings.txt` — the warnings, one per line (absent = none);
//! - `error.txt` — the error, when rendering must fail;
//! - `feature-gates` — the gates to render with, as `--feature-gates` takes
//!   them (absent = all off, as the operator's default).
//!
//! After a reviewed behaviour change, regenerate with
//! `TRAINFORGE_UPDATE_GOLDEN=1 cargo test -p trainforge --test render_golden`
//! and review the diff before committing it.

#![allow(clippy::expect_used, clippy::panic)] // test helpers: a failure is the report

use std::path::{Path, PathBuf};

use trainforge::cmd::render::{Input, builtin_plugins, builtin_plugins_in, render, to_yaml_stream};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Random material (MPI SSH keys from host randomness) differs on every run:
/// keep the keys of such Secrets but replace their values with a marker. The
/// MPI plugin's unit tests check the keys themselves.
fn redact_random(objects: &mut [serde_json::Value]) {
    for o in objects
        .iter_mut()
        .filter(|o| o["kind"] == "Secret" && o["type"] == "kubernetes.io/ssh-auth")
    {
        if let Some(data) = o.get_mut("data").and_then(serde_json::Value::as_object_mut) {
            for v in data.values_mut() {
                *v = serde_json::Value::String("<random>".into());
            }
        }
    }
}

/// What rendering a case produced, as the three golden files.
struct Outcome {
    expected: Option<String>,
    warnings: Option<String>,
    error: Option<String>,
}

fn render_case(dir: &Path, plugins: &trainforge::plugin::PluginSet) -> Outcome {
    let mut input = Input::new().expect("CRD defaults");
    if let Ok(gates) = std::fs::read_to_string(dir.join("feature-gates")) {
        input.features = gates
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let list = std::fs::read_to_string(dir.join("inputs")).expect("inputs file");
    for line in list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let path = repo_root().join(line);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(e) = input.add_yaml(line, &text, "default") {
            return Outcome {
                expected: None,
                warnings: None,
                error: Some(format!("{e}\n")),
            };
        }
    }
    let results = match render(&input, plugins) {
        Ok(r) => r,
        Err(e) => {
            return Outcome {
                expected: None,
                warnings: None,
                error: Some(format!("{e}\n")),
            };
        }
    };
    let (mut yaml, mut warnings, mut errors) = (String::new(), String::new(), String::new());
    let mut first = true;
    for (job, result) in results {
        let name = job.metadata.name.clone().unwrap_or_default();
        match result {
            Ok(mut r) => {
                redact_random(&mut r.objects);
                yaml.push_str(&to_yaml_stream(&r.objects, &mut first).expect("yaml"));
                for w in r.warnings {
                    warnings.push_str(&format!("{name}: {w}\n"));
                }
            }
            Err(e) => errors.push_str(&format!("{name}: {e}\n")),
        }
    }
    let some = |s: String| (!s.is_empty()).then_some(s);
    Outcome {
        expected: some(yaml),
        warnings: some(warnings),
        error: some(errors),
    }
}

fn check_file(path: &Path, actual: Option<&str>, update: bool, failures: &mut Vec<String>) {
    if update {
        match actual {
            Some(text) => std::fs::write(path, text).expect("write golden"),
            None => {
                let _ = std::fs::remove_file(path);
            }
        }
        return;
    }
    let expected = std::fs::read_to_string(path).ok();
    if expected.as_deref() != actual {
        failures.push(format!(
            "{}:\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            expected.as_deref().unwrap_or("<absent>"),
            actual.unwrap_or("<absent>")
        ));
    }
}

#[test]
fn render_matches_golden_files() {
    let update = std::env::var("TRAINFORGE_UPDATE_GOLDEN").as_deref() == Ok("1");
    let plugins = builtin_plugins().expect("builtin plugins load");
    let golden = repo_root().join("host/tests/golden");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&golden)
        .expect("host/tests/golden exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("inputs").is_file())
        .collect();
    cases.sort();
    assert!(
        !cases.is_empty(),
        "no golden cases under {}",
        golden.display()
    );
    let mut failures = Vec::new();
    for dir in &cases {
        let out = render_case(dir, &plugins);
        check_file(
            &dir.join("expected.yaml"),
            out.expected.as_deref(),
            update,
            &mut failures,
        );
        check_file(
            &dir.join("warnings.txt"),
            out.warnings.as_deref(),
            update,
            &mut failures,
        );
        check_file(
            &dir.join("error.txt"),
            out.error.as_deref(),
            update,
            &mut failures,
        );
    }
    assert!(
        failures.is_empty(),
        "{} golden mismatch(es) (regenerate with TRAINFORGE_UPDATE_GOLDEN=1 and review):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Size and modification time of every precompiled artifact in `dir`.
fn artifacts(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("artifact dir")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .map(|e| {
            let m = e.metadata().expect("metadata");
            (
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.modified().expect("mtime"),
            )
        })
        .collect();
    out.sort();
    out
}

/// `render` compiles the builtins once: the first load stores one artifact
/// per builtin, a later load (a new plugin runtime, as a new `render`
/// process has) reuses them without rewriting, and plugins loaded from the
/// artifacts render the reviewed output.
#[test]
fn builtin_plugins_reuse_the_artifact_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("artifacts");
    builtin_plugins_in(Some(dir.clone())).expect("compile and store the builtins");
    let stored = artifacts(&dir);
    assert_eq!(
        stored.len(),
        trainforge::plugin::builtin::all().len(),
        "one artifact per builtin: {stored:?}"
    );
    let cached =
        builtin_plugins_in(Some(dir.clone())).expect("load the builtins from the artifact cache");
    assert_eq!(
        artifacts(&dir),
        stored,
        "artifacts were rewritten, i.e. recompiled"
    );
    let case = repo_root().join("host/tests/golden/worked-example");
    let expected = std::fs::read_to_string(case.join("expected.yaml")).expect("expected.yaml");
    assert_eq!(
        render_case(&case, &cached).expected.as_deref(),
        Some(expected.as_str())
    );
}
