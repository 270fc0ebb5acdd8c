//! The house rules, read from the repository's files:
//!
//! - `host/src` sits on floors (commands → admission and controllers → the
//!   pure pipeline and OCI → shared operations → the plugin runtime); no file
//!   imports a floor above its own, and no imports form a cycle, between
//!   files or between modules ([`layers`]).
//! - Every relative link and every repository path the docs name exists,
//!   and the README stays short ([`docs`]).
//! - Every file of a test binary made of modules (`tests/<name>/main.rs`) is
//!   one of its modules: a file no `mod` names would never run.
//!
//! Each rule is also run on a small made-up tree that breaks it, so that a
//! checker that sees nothing fails.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod docs;
mod layers;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use layers::{Crate, Import};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

fn imports_of(src: &Path) -> Vec<Import> {
    Crate::read(src)
        .unwrap_or_else(|e| panic!("reading {}: {e}", src.display()))
        .imports()
}

/// Upward imports, one line each naming both files and the path written.
fn upward(imports: &[Import]) -> Vec<String> {
    imports
        .iter()
        .filter_map(|i| {
            let (from, to) = (layers::floor(&i.from)?, layers::floor(&i.to)?);
            (from.0 < to.0).then(|| {
                format!(
                    "{} ({}) imports {} ({}) through `{}`{}",
                    i.from,
                    from.1,
                    i.to,
                    to.1,
                    i.written,
                    if i.test { " in test code" } else { "" }
                )
            })
        })
        .collect()
}

/// Cycles between files and between modules (directories), from production
/// code (a test module may use a test helper that uses the code under test).
fn cycles(imports: &[Import]) -> Vec<String> {
    let prod: Vec<&Import> = imports.iter().filter(|i| !i.test).collect();
    let mut out = Vec::new();
    let files: Vec<(String, String)> = prod
        .iter()
        .map(|i| (i.from.clone(), i.to.clone()))
        .collect();
    let written: Vec<(String, String, String)> = prod
        .iter()
        .map(|i| (i.from.clone(), i.to.clone(), i.written.clone()))
        .collect();
    for c in layers::cycles(&files) {
        out.push(format!(
            "files {}:\n{}",
            c.join(", "),
            layers::describe_cycle(&c, &written)
        ));
    }
    let across: Vec<&&Import> = prod
        .iter()
        .filter(|i| layers::unit(&i.from) != layers::unit(&i.to))
        .collect();
    let units: Vec<(String, String)> = across
        .iter()
        .map(|i| (unit_name(&i.from), unit_name(&i.to)))
        .collect();
    let unit_written: Vec<(String, String, String)> = across
        .iter()
        .map(|i| {
            (
                unit_name(&i.from),
                unit_name(&i.to),
                format!("{} → {} (`{}`)", i.from, i.to, i.written),
            )
        })
        .collect();
    for c in layers::cycles(&units) {
        out.push(format!(
            "modules {}:\n{}",
            c.join(", "),
            layers::describe_cycle(&c, &unit_written)
        ));
    }
    out
}

fn unit_name(rel: &str) -> String {
    match layers::unit(rel) {
        "" => "(crate root)".to_owned(),
        u => format!("{u}/"),
    }
}

#[test]
fn every_file_of_host_src_is_on_a_floor() {
    let src = repo().join("host/src");
    let krate = Crate::read(&src).unwrap();
    let lost: Vec<String> = krate
        .files()
        .filter(|f| layers::floor(f).is_none())
        .map(str::to_owned)
        .collect();
    assert!(
        lost.is_empty(),
        "files on no floor (add them to layers::FLOORS or move them): {lost:?}"
    );
    assert!(
        krate.files().count() > 50,
        "host/src was not read: {} files",
        krate.files().count()
    );
}

#[test]
fn no_file_of_host_src_imports_a_floor_above_its_own() {
    let imports = imports_of(&repo().join("host/src"));
    assert!(
        imports.len() > 200,
        "too few imports found ({}): the reader is broken",
        imports.len()
    );
    let up = upward(&imports);
    assert!(up.is_empty(), "upward imports:\n  {}", up.join("\n  "));
}

#[test]
fn no_imports_of_host_src_form_a_cycle() {
    let imports = imports_of(&repo().join("host/src"));
    let found = cycles(&imports);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// Write `files` (path under `src`, text) into a fresh directory.
fn made_up(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_floor_check_names_both_files_of_an_upward_import() {
    let dir = made_up(&[
        ("lib.rs", "pub mod cmd;\npub mod plugin;\npub mod ops;\n"),
        ("cmd/mod.rs", "pub mod render;\n"),
        ("cmd/render.rs", "pub struct Input;\n"),
        (
            "ops/mod.rs",
            "pub mod metrics;\npub use metrics::Metrics;\n",
        ),
        ("ops/metrics.rs", "pub struct Metrics;\n"),
        ("plugin/mod.rs", "mod load;\npub use load::Runtime;\n"),
        // Through a re-export, inside a function, inside a macro: all found.
        (
            "plugin/load.rs",
            "pub struct Runtime;\nfn f() { let _ = crate::ops::Metrics; }\n\
             fn g() { println!(\"{:?}\", crate::cmd::render::Input); }\n",
        ),
    ]);
    let up = upward(&imports_of(dir.path()));
    assert_eq!(up.len(), 2, "{up:#?}");
    assert!(
        up.iter()
            .any(|l| l.starts_with("plugin/load.rs (the plugin runtime) imports ops/metrics.rs")),
        "{up:#?}"
    );
    assert!(
        up.iter()
            .any(|l| l.starts_with("plugin/load.rs (the plugin runtime) imports cmd/render.rs")),
        "{up:#?}"
    );
}

#[test]
fn the_cycle_check_finds_file_and_module_cycles_but_not_test_helpers() {
    let dir = made_up(&[
        ("lib.rs", "pub mod plugin;\npub mod controller;\n"),
        (
            "plugin/mod.rs",
            "mod load;\nmod descriptor;\n#[cfg(test)]\nmod support;\npub use load::Runtime;\n",
        ),
        (
            "plugin/load.rs",
            "use super::descriptor::check;\npub struct Runtime;\npub fn compatible() {}\n",
        ),
        (
            "plugin/descriptor.rs",
            "pub fn check() { super::load::compatible() }\n\
             #[cfg(test)]\nmod tests { use super::super::support::Fixture; }\n",
        ),
        // A test helper using the code it helps test: not a cycle.
        (
            "plugin/support.rs",
            "use super::descriptor::check;\npub struct Fixture;\n",
        ),
        ("controller/mod.rs", "pub mod trainjob;\npub mod catalog;\n"),
        (
            "controller/trainjob/mod.rs",
            "pub fn gvk() {}\nuse crate::controller::catalog::Catalog;\n",
        ),
        (
            "controller/catalog/mod.rs",
            "pub struct Catalog;\nfn f() { crate::controller::trainjob::gvk() }\n",
        ),
    ]);
    let found = cycles(&imports_of(dir.path()));
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found
            .iter()
            .any(|c| c.starts_with("modules controller/catalog/, controller/trainjob/")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|c| c.starts_with("files plugin/descriptor.rs, plugin/load.rs")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|c| c.starts_with("files controller/catalog/mod.rs, controller/trainjob/mod.rs")),
        "{found:#?}"
    );
}

#[test]
fn every_link_and_path_in_the_docs_exists() {
    let root = repo();
    let files = docs::markdown_files(&root).unwrap();
    assert!(
        files.iter().any(|f| f.ends_with("docs/architecture.md")),
        "docs/ was not read: {files:?}"
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        checked += docs::references(&text).len();
        broken.extend(docs::broken(&root, f).unwrap());
    }
    assert!(
        checked > 100,
        "only {checked} references found in {files:?}"
    );
    let mut msg = String::new();
    for b in &broken {
        let _ = writeln!(msg, "  {b}");
    }
    assert!(broken.is_empty(), "references to nothing:\n{msg}");
}

#[test]
fn the_docs_check_finds_links_and_paths_to_nothing() {
    let dir = made_up(&[
        (
            "README.md",
            "See [docs](docs/x.md#part), [web](https://example.org), [here](#top).\n\
                       Code in `host/src/gone.rs:12`, `host/src/lib.rs`, `host/src/<floor>/`, `make test`.\n\
                       ```sh\ncat host/src/not-read.rs\n```\n",
        ),
        (
            "docs/x.md",
            "[up](../README.md) and [missing](../nowhere.md); `Makefile`\n",
        ),
        ("host/src/lib.rs", ""),
    ]);
    let root = dir.path();
    let mut broken = Vec::new();
    for f in docs::markdown_files(root).unwrap() {
        broken.extend(docs::broken(root, &f).unwrap());
    }
    broken.sort();
    assert_eq!(
        broken,
        [
            "README.md: path `host/src/gone.rs` does not exist",
            "docs/x.md: link (../nowhere.md) does not exist",
            "docs/x.md: path `Makefile` does not exist",
        ],
    );
}

#[test]
fn the_readme_is_short() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.len() <= 10 * 1024,
        "README.md is {} bytes: keep it to what Trainforge is, the two commands, an example \
         and a map of docs/ (at most 10 KiB)",
        readme.len()
    );
    for command in ["make demo", "make test"] {
        assert!(
            readme.contains(command),
            "README.md does not show `{command}`"
        );
    }
}

/// The tests of upstream's scenarios are exactly the ones
/// `docs/conformance.md` lists: every `#[tokio::test]` of the cluster
/// module `conformance` and every `test_should_*` of the SDK suite's
/// `test_progress.py` (the status server's scenarios).
#[test]
fn the_conformance_page_lists_every_conformance_test() {
    let root = repo();
    let page = std::fs::read_to_string(root.join("docs/conformance.md")).unwrap();
    // The last cell of a table row, when it is one `identifier`.
    let listed: std::collections::BTreeSet<String> = page
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_end().trim_end_matches('|').rsplit('|').next())
        .filter_map(|c| {
            c.trim()
                .strip_prefix('`')?
                .strip_suffix('`')
                .map(str::to_owned)
        })
        .filter(|c| {
            c.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        })
        .collect();
    let src = std::fs::read_to_string(root.join("host/tests/cluster/conformance.rs")).unwrap();
    let ast = syn::parse_file(&src).unwrap();
    let mut tests: std::collections::BTreeSet<String> = ast
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Fn(f)
                if f.attrs.iter().any(|a| {
                    a.path()
                        .segments
                        .iter()
                        .map(|s| s.ident.to_string())
                        .collect::<Vec<_>>()
                        == ["tokio", "test"]
                }) =>
            {
                Some(f.sig.ident.to_string())
            }
            _ => None,
        })
        .collect();
    assert!(
        tests.len() >= 40,
        "only {} conformance tests: {tests:?}",
        tests.len()
    );
    let py = std::fs::read_to_string(root.join("testenv/sdk/test_progress.py")).unwrap();
    let before = tests.len();
    tests.extend(
        py.lines()
            .filter_map(|l| l.strip_prefix("def "))
            .filter(|l| l.starts_with("test_should_"))
            .filter_map(|l| l.split('(').next())
            .map(str::to_owned),
    );
    assert!(
        tests.len() >= before + 6,
        "the status server scenarios were not found"
    );
    let missing: Vec<_> = tests.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&tests).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/conformance.md does not list {missing:?}; it lists tests that do not exist: {unknown:?}"
    );
}

/// The `mod` items of a file (its own modules, declared or inline).
fn declared_modules(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    ast.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// Files of `dir` (a test binary's directory) that its `main.rs` does not
/// declare as modules.
fn undeclared(dir: &Path) -> Vec<String> {
    let declared = declared_modules(&dir.join("main.rs"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs")
            && stem != "main"
            && !declared.iter().any(|d| d == stem)
        {
            missing.push(path.display().to_string());
        }
    }
    missing.sort();
    missing
}

#[test]
fn every_file_of_a_test_binary_is_one_of_its_modules() {
    let root = repo();
    let mut binaries = Vec::new();
    for tests in ["host/tests", "testenv/tests", "api/tests", "sdk/tests"] {
        let Ok(entries) = std::fs::read_dir(root.join(tests)) else {
            continue;
        };
        for entry in entries {
            let dir = entry.unwrap().path();
            if dir.join("main.rs").is_file() {
                binaries.push(dir);
            }
        }
    }
    assert!(
        binaries.iter().any(|b| b.ends_with("host/tests/cluster")),
        "host/tests/cluster was not found: {binaries:?}"
    );
    let missing: Vec<String> = binaries.iter().flat_map(|b| undeclared(b)).collect();
    assert!(
        missing.is_empty(),
        "test files no main.rs declares (they would never run): {missing:?}"
    );
}

#[test]
fn the_module_check_finds_an_undeclared_file() {
    let dir = made_up(&[
        ("main.rs", "mod common;\nmod first;\n"),
        ("common.rs", ""),
        ("first.rs", "#[test]\nfn t() {}\n"),
        ("second.rs", "#[test]\nfn forgotten() {}\n"),
    ]);
    let missing = undeclared(dir.path());
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].ends_with("second.rs"), "{missing:?}");
}
