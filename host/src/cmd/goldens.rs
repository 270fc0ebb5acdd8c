//! `trainforge plugin test`: a plugin against the golden cases its author
//! keeps beside it. This module finds the cases and keeps their goldens;
//! the plugin CLI (`super::plugin`) gives each case's output.
//!
//! Rules:
//! - every subdirectory of the cases directory is one case, named by its
//!   directory: `trainjob.yaml` and `runtime.yaml` (YAML or JSON), and
//!   optionally `config.json` (the plugin's configuration) and either
//!   `objects/` (every YAML or JSON file in it is served to
//!   `host.get-object`) or `recording.json` (a `plugin run --record`
//!   recording, replayed);
//! - a case's output is what `trainforge plugin run` prints for it without
//!   the plugin's own digest and version (a rebuild that changes nothing
//!   else passes), or `{"error": …}` when the plugin fails: a failure can be
//!   a golden too;
//! - `expected.json` is compared as JSON, not as text; a case passes only
//!   when they are equal, and a difference is reported by its JSON pointer
//!   (the first [`SHOWN_DIFFERENCES`]);
//! - with `--update` the outputs are written as the new `expected.json`
//!   and nothing is compared; a case without `expected.json` fails, saying
//!   to run with `--update`.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Differences reported per failing case.
pub const SHOWN_DIFFERENCES: usize = 8;

/// Why `plugin test` did not pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cases directory or a golden could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A golden is not JSON.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The golden.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A golden could not be written (`--update`).
    #[error("writing {path}: {message}")]
    Write {
        /// The golden.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The directory holds no case.
    #[error("{0}: no case directories (each holds trainjob.yaml, runtime.yaml and expected.json)")]
    NoCases(PathBuf),
    /// A case's inputs could not be read (not a plugin failure, which is a
    /// golden of its own).
    #[error("case {case}: {message}")]
    Case {
        /// The case.
        case: String,
        /// Why.
        message: String,
    },
    /// These cases' outputs differ from their goldens.
    #[error("golden cases failed: {}", .0.join(", "))]
    Failed(Vec<String>),
}

/// One case's result.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Its output equals `expected.json`.
    Passed,
    /// `expected.json` was written.
    Updated,
    /// It differs (the differences, as `op /json/pointer`), or there is no
    /// `expected.json` to compare with.
    Failed(Vec<String>),
}

/// Every case under `cases` (see the module rules), its output given by
/// `output` (the case's directory → the plugin's output, or why its inputs
/// could not be read); prints one line per case and a summary.
pub fn run(
    cases: &Path,
    update: bool,
    output: impl Fn(&Path) -> Result<Value, String>,
) -> Result<(), Error> {
    let read_err = |source| Error::Read {
        path: cases.to_owned(),
        source,
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(Error::NoCases(cases.to_owned()));
    }
    let mut failed = Vec::new();
    for dir in &dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let actual = output(dir).map_err(|message| Error::Case {
            case: name.clone(),
            message,
        })?;
        match settle(dir, &actual, update)? {
            Outcome::Passed => println!("ok      {name}"),
            Outcome::Updated => println!("updated {name}"),
            Outcome::Failed(differences) => {
                println!("FAILED  {name}");
                for d in &differences {
                    println!("        {d}");
                }
                failed.push(name);
            }
        }
    }
    println!(
        "{} case(s): {} passed or updated, {} failed",
        dirs.len(),
        dirs.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Failed(failed))
    }
}

/// Write `actual` as the case's golden (`update`), or compare it with it.
fn settle(dir: &Path, actual: &Value, update: bool) -> Result<Outcome, Error> {
    let path = dir.join("expected.json");
    if update {
        let text = serde_json::to_string_pretty(actual).map_err(|e| Error::Write {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::Write {
            path: path.clone(),
            message: e.to_string(),
        })?;
        return Ok(Outcome::Updated);
    }
    if !path.is_file() {
        return Ok(Outcome::Failed(vec![format!(
            "no {} (run with --update to write it)",
            path.display()
        )]));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    let expected: Value =
        serde_json::from_str(&text).map_err(|source| Error::Parse { path, source })?;
    Ok(compare(&expected, actual))
}

/// [`Outcome::Passed`] when equal, else the differences from `expected` to
/// `actual` as `op /pointer` lines (at most [`SHOWN_DIFFERENCES`], then a
/// count of the rest).
pub fn compare(expected: &Value, actual: &Value) -> Outcome {
    let patch = json_patch::diff(expected, actual);
    if patch.0.is_empty() {
        return Outcome::Passed;
    }
    let mut lines: Vec<String> = patch
        .0
        .iter()
        .take(SHOWN_DIFFERENCES)
        .map(|op| match op {
            json_patch::PatchOperation::Add(a) => {
                format!("added    {}: {}", a.path, short(&a.value))
            }
            json_patch::PatchOperation::Remove(r) => format!("missing  {}", r.path),
            json_patch::PatchOperation::Replace(r) => {
                format!("changed  {}: now {}", r.path, short(&r.value))
            }
            other => format!("{other}"),
        })
        .collect();
    if patch.0.len() > SHOWN_DIFFERENCES {
        lines.push(format!("… and {} more", patch.0.len() - SHOWN_DIFFERENCES));
    }
    Outcome::Failed(lines)
}

/// `v` as JSON, cut to 80 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use serde_json::json;

    #[test]
    fn equal_json_passes_whatever_its_order() {
        let a = json!({"objects": [{"kind": "ConfigMap", "data": {"a": "1", "b": "2"}}]});
        let b: Value =
            serde_json::from_str(r#"{"objects":[{"data":{"b":"2","a":"1"},"kind":"ConfigMap"}]}"#)
                .unwrap();
        assert_eq!(compare(&a, &b), Outcome::Passed);
    }

    #[test]
    fn differences_are_named_by_their_pointer() {
        let expected = json!({"objects": [{"replicas": 1}], "status": null, "gone": true});
        let actual = json!({"objects": [{"replicas": 2}], "status": {"x": 1}});
        let Outcome::Failed(lines) = compare(&expected, &actual) else {
            panic!("equal?")
        };
        assert!(
            lines
                .iter()
                .any(|l| l == "changed  /objects/0/replicas: now 2"),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l == "missing  /gone"), "{lines:?}");
        assert!(
            lines.iter().any(|l| l.starts_with("changed  /status")),
            "{lines:?}"
        );
    }

    #[test]
    fn many_differences_are_cut_with_a_count() {
        let expected = json!({"list": (0..20).collect::<Vec<_>>()});
        let actual = json!({"list": (100..120).collect::<Vec<_>>()});
        let Outcome::Failed(lines) = compare(&expected, &actual) else {
            panic!("equal?")
        };
        assert_eq!(lines.len(), SHOWN_DIFFERENCES + 1);
        assert_eq!(lines.last().unwrap(), "… and 12 more");
    }
}
