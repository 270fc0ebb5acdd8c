//! Embeds the builtin plugins (every crate under `../plugins/`, plus crates
//! named in `TRAINFORGE_EXTRA_BUILTIN_PLUGINS`) into the operator binary.
//!
//! They are built by one nested `cargo build --keep-going --profile plugin
//! --target wasm32-wasip2 -p …` into its own target dir, `plugin-target/` beside the outer
//! profile directories (`target/plugin-target`: a nested build sharing the
//! outer target dir would deadlock on its lock; one dir for every outer
//! profile, not per `OUT_DIR`, so that `cargo check`/`clippy`/`doc`,
//! `cargo build` and `cargo build --release` share the plugins instead of
//! building them again: the plugin profile does not depend on the outer
//! one; two outer builds at once take turns on its lock), then an
//! `include_bytes!` table is generated for `plugin::builtin`. With no plugin
//! crates the table is empty and no nested build runs.
//!
//! A host build that cannot embed every builtin plugin fails, cause first:
//! a toolchain without the `wasm32-wasip2` standard library is caught before
//! any nested build, with the command that installs it; a plugin that does
//! not build is named, its compiler errors follow.
//! `TRAINFORGE_SKIP_BUILTIN_PLUGINS=1` is the one way to build an operator
//! without them (fast host dev loops; such an operator serves no builtin).
//!
//! Re-runs when a plugin crate changes, or what every plugin is built from:
//! `sdk/`, `api/`, `wit/`, the workspace `Cargo.toml`/`Cargo.lock` and
//! `.cargo/config.toml` (the nested cargo then rebuilds what changed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target the plugins are built for.
const TARGET: &str = "wasm32-wasip2";

/// Opt-out: build the host with no builtin plugins.
const SKIP: &str = "TRAINFORGE_SKIP_BUILTIN_PLUGINS";

fn package_name(manifest: &Path) -> Option<String> {
    let text = std::fs::read_to_string(manifest).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package && let Some(rest) = line.strip_prefix("name") {
            let v = rest
                .trim_start()
                .strip_prefix('=')?
                .trim()
                .trim_matches('"');
            return Some(v.to_owned());
        }
    }
    None
}

/// Fail the build with `lines` as cargo errors, shown before anything else.
/// `show_output`: exit non-zero so that cargo also prints what the script
/// wrote to stderr (the nested build's compiler errors).
fn fail(lines: &[String], show_output: bool) -> ! {
    for l in lines {
        println!("cargo::error={l}");
    }
    std::process::exit(if show_output { 1 } else { 0 });
}

/// The line that tells how to build without the builtin plugins.
fn opt_out_line() -> String {
    format!("(to build an operator without builtin plugins instead, set {SKIP}=1)")
}

/// `Some(why)` when `rustc` cannot build for [`TARGET`]: its sysroot has no
/// standard library for it.
fn wasm_target_missing(rustc: &str) -> Option<String> {
    let out = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output();
    let dir = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        Ok(o) => {
            return Some(format!(
                "`{rustc} --print target-libdir --target {TARGET}` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Err(e) => return Some(format!("running `{rustc}`: {e}")),
    };
    let has_std = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libstd-") && name.ends_with(".rlib")
        })
    });
    (!has_std).then(|| format!("no standard library in {}", dir.display()))
}

/// The command that installs [`TARGET`]: `rustup target add … --toolchain T`
/// when rustup runs this build (it names the toolchain in
/// `RUSTUP_TOOLCHAIN`, with the host triple that `T` is shown without).
fn install_command() -> String {
    match std::env::var("RUSTUP_TOOLCHAIN") {
        Ok(tc) if !tc.is_empty() => {
            let host = std::env::var("HOST").unwrap_or_default();
            let short = tc.strip_suffix(&format!("-{host}")).unwrap_or(&tc);
            format!("rustup target add {TARGET} --toolchain {short}")
        }
        _ => format!(
            "install the {TARGET} standard library for this Rust toolchain (with rustup: rustup target add {TARGET})"
        ),
    }
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    println!("cargo::rerun-if-env-changed=TRAINFORGE_EXTRA_BUILTIN_PLUGINS");
    println!("cargo::rerun-if-env-changed={SKIP}");
    // What every plugin is built from (a directory is scanned recursively).
    for input in [
        "../plugins",
        "../sdk",
        "../api",
        "../wit",
        "../Cargo.toml",
        "../Cargo.lock",
        "../.cargo/config.toml",
    ] {
        println!("cargo::rerun-if-changed={input}");
    }

    let mut crate_dirs: Vec<PathBuf> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root.join("plugins")) {
        for e in entries.flatten() {
            if e.path().join("Cargo.toml").is_file() {
                crate_dirs.push(e.path());
            }
        }
    }
    if let Ok(extra) = std::env::var("TRAINFORGE_EXTRA_BUILTIN_PLUGINS") {
        crate_dirs.extend(
            extra
                .split(':')
                .filter(|s| !s.is_empty())
                .map(|s| root.join(s)),
        );
    }
    crate_dirs.sort();

    let mut crates = Vec::new();
    for dir in &crate_dirs {
        println!("cargo::rerun-if-changed={}", dir.display());
        match package_name(&dir.join("Cargo.toml")) {
            Some(n) => crates.push(n),
            None => fail(
                &[format!(
                    "cannot embed the builtin plugins: no [package] name in {}",
                    dir.join("Cargo.toml").display()
                )],
                false,
            ),
        }
    }

    let mut table = String::from("/// The embedded plugins (generated by host/build.rs).\n");
    table.push_str("pub static BUILTIN_PLUGINS: &[BuiltinPlugin] = &[\n");
    let skip = std::env::var_os(SKIP).is_some_and(|v| !v.is_empty() && v != "0");
    if skip && !crates.is_empty() {
        println!("cargo::warning={SKIP} is set: this operator embeds no builtin plugins");
    }
    let built = if skip || crates.is_empty() {
        Vec::new()
    } else {
        build_plugins(&root, &out_dir, &crates)
    };
    for (c, wasm) in &built {
        // The digest is taken here so that the operator never reads the
        // embedded bytes only to hash them (pages it never touches stay out
        // of its memory); a unit test checks it against the bytes.
        let sha256 = match std::fs::read(wasm) {
            Ok(bytes) => sha256_hex(&bytes),
            Err(e) => fail(
                &[format!("reading the built plugin {}: {e}", wasm.display())],
                false,
            ),
        };
        let _ = writeln!(
            table,
            "    BuiltinPlugin {{ crate_name: {c:?}, wasm: include_bytes!({:?}), sha256: {sha256:?} }},",
            wasm.display().to_string()
        );
    }
    table.push_str("];\n");
    if let Err(e) = std::fs::write(out_dir.join("builtin_plugins.rs"), table) {
        fail(&[format!("writing the builtin plugin table: {e}")], false);
    }
}

/// Lower-case hex SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `<target dir>/plugin-target` for `OUT_DIR` =
/// `<target dir>/<profile>/build/<unit>/out`, else `OUT_DIR/plugin-target`.
fn plugin_target_dir(out_dir: &Path) -> PathBuf {
    let build = out_dir.parent().and_then(Path::parent);
    match build.and_then(|b| Some((b.file_name()?, b.parent()?.parent()?))) {
        Some((name, target_dir)) if name == "build" => target_dir.join("plugin-target"),
        _ => out_dir.join("plugin-target"),
    }
}

/// Build every crate of `crates` for [`TARGET`]; their `.wasm` files, or a
/// failed build.
fn build_plugins(root: &Path, out_dir: &Path, crates: &[String]) -> Vec<(String, PathBuf)> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Some(why) = wasm_target_missing(&rustc) {
        fail(
            &[
                format!(
                    "cannot embed the builtin plugins: this Rust toolchain cannot build for {TARGET}, the target they are built for ({why})"
                ),
                format!("fix: {}", install_command()),
                opt_out_line(),
            ],
            false,
        );
    }
    let target_dir = plugin_target_dir(out_dir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let wasm_of = |c: &str| {
        target_dir
            .join(TARGET)
            .join("plugin")
            .join(format!("{}.wasm", c.replace('-', "_")))
    };
    // A crate built iff its `.wasm` is there after the build: the copies
    // of the last build are removed first (cargo links them again from its
    // own outputs when they are up to date, without compiling).
    for c in crates {
        match std::fs::remove_file(wasm_of(c)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => fail(&[format!("removing {}: {e}", wasm_of(c).display())], false),
        }
    }
    // One nested build of every crate, so that they compile side by side
    // (the final link of each is one LTO unit on one core: built one after
    // the other they took ~1.5x as long on 2 cores); `--keep-going` so
    // that a broken plugin does not hide the others. Its output goes to
    // stderr: cargo shows it when this script fails, and nothing in it is
    // read as a build-script instruction.
    let status = Command::new(&cargo)
        .arg("build")
        .arg("--keep-going")
        .arg("--profile=plugin")
        .arg(format!("--target={TARGET}"))
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(crates.iter().flat_map(|c| ["-p", c.as_str()]))
        .env("CARGO_TARGET_DIR", &target_dir)
        // What the outer build sets for its own compiles: flags for the
        // host target, and under `cargo clippy` its lint driver.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .stdout(Stdio::from(std::io::stderr()))
        .status();
    let mut built = Vec::new();
    let mut problems = Vec::new();
    match status {
        Err(e) => fail(
            &[
                format!("cannot embed the builtin plugins: running {cargo}: {e}"),
                opt_out_line(),
            ],
            false,
        ),
        Ok(s) => {
            for c in crates {
                let wasm = wasm_of(c);
                if wasm.is_file() {
                    built.push((c.clone(), wasm));
                } else if s.success() {
                    problems.push(format!(
                        "{c}: {} not produced (is it a cdylib?)",
                        wasm.display()
                    ));
                } else {
                    problems.push(format!("{c}: its build for {TARGET} failed ({s})"));
                }
            }
        }
    }
    if !problems.is_empty() {
        let mut lines = vec![format!(
            "cannot embed the builtin plugins: {} of {} did not build; the nested cargo output is below",
            problems.len(),
            crates.len()
        )];
        lines.extend(problems);
        lines.push(opt_out_line());
        fail(&lines, true);
    }
    built
}
