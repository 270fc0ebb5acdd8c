//! `trainforge render` as a user runs it: each warning of a TrainJob is
//! printed once on stderr, and with stderr not a terminal (here a pipe) the
//! output has no ANSI escapes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plugin_common;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The input files of a golden case (`inputs` lists them, one a line,
/// relative to the workspace root).
fn inputs(case: &str) -> Vec<PathBuf> {
    let list = root().join("host/tests/golden").join(case).join("inputs");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| panic!("{}: {e}", list.display()));
    let files: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| root().join(l))
        .collect();
    assert!(!files.is_empty(), "{} lists no inputs", list.display());
    files
}

#[test]
fn render_prints_each_warning_once_without_ansi_escapes() {
    for (case, trainjob, expected) in [
        ("brief-deprecated", "legacy", 1),
        ("brief-initializers", "fine-tune-with-initializers", 2),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .arg("render")
            .args(
                inputs(case)
                    .iter()
                    .flat_map(|f| [Path::new("-f"), f.as_path()]),
            )
            // The default log level, whatever the caller's environment.
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {stderr}");
        assert!(
            !stderr.contains('\u{1b}') && !out.stdout.contains(&0x1b),
            "{case}: ANSI escapes with stderr not a terminal:\n{stderr:?}"
        );
        let golden = root()
            .join("host/tests/golden")
            .join(case)
            .join("warnings.txt");
        let golden = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
        let warnings: Vec<&str> = golden.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(warnings.len(), expected, "{case}: golden warnings");
        for w in warnings {
            let text = w
                .strip_prefix(&format!("{trainjob}: "))
                .unwrap_or_else(|| panic!("{case}: golden warning {w:?}"));
            assert_eq!(
                stderr.matches(text).count(),
                1,
                "{case}: warning {text:?} not printed exactly once:\n{stderr}"
            );
            assert!(
                stderr.contains(&format!("warning: TrainJob {trainjob:?}: {text}")),
                "{case}: {stderr}"
            );
        }
    }
}

/// A TrainJob delegated to another controller (`spec.managedBy`) gets
/// nothing rendered, as the operator builds nothing for it, and the command
/// says so; the other TrainJobs of the input are rendered as usual.
#[test]
fn render_builds_nothing_for_a_trainjob_managed_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let job = |name: &str, managed_by: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: {name}\n  namespace: team\nspec:\n  runtimeRef:\n    name: torch-distributed\n{managed_by}"
        )
    };
    let path = dir.path().join("jobs.yaml");
    std::fs::write(
        &path,
        format!(
            "{}---\n{}",
            job("remote", "  managedBy: kueue.x-k8s.io/multikueue\n"),
            job("local", "")
        ),
    )
    .unwrap();
    let runtime = root().join("api/tests/fixtures/upstream/torch-distributed.yaml");
    let render = |files: &[&Path]| {
        Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .arg("render")
            .args(files.iter().flat_map(|f| [Path::new("-f"), f]))
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let out = render(&[runtime.as_path(), path.as_path()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("TrainJob \"remote\" is managed by kueue.x-k8s.io/multikueue"),
        "{stderr}"
    );
    assert!(stdout.contains("name: local"), "{stdout}");
    assert!(!stdout.contains("name: remote"), "{stdout}");

    // Only delegated TrainJobs: nothing on stdout, and success.
    let only = dir.path().join("remote.yaml");
    std::fs::write(
        &only,
        job("remote", "  managedBy: kueue.x-k8s.io/multikueue\n"),
    )
    .unwrap();
    let out = render(&[runtime.as_path(), only.as_path()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `render --trainer-plugin`: a tenant plugin joins the set of the
/// TrainJobs of its namespace (after the builtin plugins) and of no other,
/// and one asking for more than the ceiling is refused naming what.
#[test]
fn render_with_a_tenant_plugin_serves_only_its_namespace() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_common::hostile_declaring(
        &json!({"name": "team-env", "emits": [["v1", "ConfigMap"]]}),
    );
    let wasm = dir.path().join("team.wasm");
    std::fs::write(&wasm, &bytes).unwrap();
    let jobs = dir.path().join("jobs.yaml");
    let job = |ns: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: job-{ns}\n  namespace: {ns}\nspec:\n  runtimeRef:\n    name: torch-distributed\n"
        )
    };
    std::fs::write(&jobs, format!("{}---\n{}", job("team"), job("other"))).unwrap();
    let tp = |extra: serde_json::Value| {
        let mut spec = json!({
            "source": {"configMap": {"namespace": "team", "name": "m", "key": "plugin.wasm"}},
            "sha256": trainforge::plugin::sha256_hex(&bytes),
            "config": {"emit": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job-team-marker"}}]},
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let path = dir.path().join("tp.json");
        std::fs::write(
            &path,
            json!({"apiVersion": "trainforge.dev/v1alpha1", "kind": "TrainerPlugin",
                "metadata": {"name": "env", "namespace": "team"}, "spec": spec})
            .to_string(),
        )
        .unwrap();
        format!("{}={}", path.display(), wasm.display())
    };
    let render = |tenant: String| {
        Command::new(env!("CARGO_BIN_EXE_trainforge"))
            .arg("render")
            .arg("-f")
            .arg(&jobs)
            .arg("-f")
            .arg(root().join("api/tests/fixtures/upstream/torch-distributed.yaml"))
            .arg("--trainer-plugin")
            .arg(tenant)
            .output()
            .unwrap()
    };
    let out = render(tp(json!({})));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let markers: Vec<(String, String)> = stdout
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
        .filter(|o| o["metadata"]["name"] == "job-team-marker")
        .map(|o| {
            (
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        markers,
        [("team".to_owned(), "job-team".to_owned())],
        "{stdout}"
    );
    assert!(
        stdout.contains("job-other"),
        "the other TrainJob is rendered too"
    );
    let out = render(tp(json!({"grants": {"pod": {"privileged": true}}})));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ExceedsPolicy") && stderr.contains("pod.privileged"),
        "{stderr}"
    );
}
