//! `trainforge render` as a user runs it: each warning of a TrainJob is
//! printed once on stderr, and with stderr not a terminal (here a pipe) the
//! output has no ANSI escapes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

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
