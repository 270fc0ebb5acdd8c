//! `trainforge plugin new NAME`: a plugin crate that builds, passes its own
//! tests and has golden cases to keep.
//!
//! Rules:
//! - `NAME` is the plugin's name: a DNS label, not a builtin plugin's (an
//!   operator would refuse it), which also names the crate, its policy key
//!   (`mlPolicy.NAME`), its env var and its ConfigMap;
//! - the crate goes into a new directory (`./NAME` unless `--dir`), never
//!   over existing files;
//! - it depends on the Rust SDK by path (`--sdk`, by default the SDK this
//!   binary was built from when it is still there), as a workspace of its
//!   own;
//! - `--lang python` is refused: there is no Python SDK yet.

use std::path::{Path, PathBuf};

/// Errors of `plugin new`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name cannot be a plugin's.
    #[error("plugin name {name:?}: {why}")]
    Name {
        /// The name given.
        name: String,
        /// Why not.
        why: String,
    },
    /// The language is not one plugins can be written in yet.
    #[error("--lang {0}: only rust plugins can be made (there is no Python SDK yet)")]
    Lang(String),
    /// The SDK to depend on was not found.
    #[error(
        "the Rust SDK {0} is not there: pass --sdk with the path of trainforge's sdk/ directory"
    )]
    Sdk(PathBuf),
    /// The target directory exists and is not empty.
    #[error("{0} exists and is not empty: choose another --dir")]
    Exists(PathBuf),
    /// Writing a file failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The files of a new plugin, each with its template.
const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("scaffold/Cargo.toml.tmpl")),
    ("src/lib.rs", include_str!("scaffold/lib.rs.tmpl")),
    ("README.md", include_str!("scaffold/README.md.tmpl")),
    (".gitignore", include_str!("scaffold/gitignore.tmpl")),
    (
        "cases/basic/trainjob.yaml",
        include_str!("scaffold/trainjob.yaml.tmpl"),
    ),
    (
        "cases/basic/runtime.yaml",
        include_str!("scaffold/runtime.yaml.tmpl"),
    ),
];

/// The SDK this binary was built from (`--sdk`'s default).
pub fn default_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk")
}

/// Write plugin `name` (in `lang`) into `dir` (default `./name`) against
/// the SDK at `sdk` (default [`default_sdk`]); returns the directory.
pub fn new_plugin(
    name: &str,
    lang: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> Result<PathBuf, Error> {
    if lang != "rust" {
        return Err(Error::Lang(lang.to_owned()));
    }
    check_name(name)?;
    let sdk = sdk.map_or_else(default_sdk, Path::to_owned);
    let sdk = std::fs::canonicalize(&sdk)
        .ok()
        .filter(|p| p.join("Cargo.toml").is_file())
        .ok_or_else(|| Error::Sdk(sdk.clone()))?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_owned);
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::Exists(dir));
    }
    let env = format!("{}_PLUGIN", name.to_ascii_uppercase().replace('-', "_"));
    let crate_name = format!("plugin-{name}");
    let fill = |t: &str| {
        t.replace("{{crate_file}}", &crate_name.replace('-', "_"))
            .replace("{{crate}}", &crate_name)
            .replace("{{name}}", name)
            .replace("{{env}}", &env)
            .replace("{{sdk}}", &sdk.display().to_string())
    };
    for (file, template) in FILES {
        let path = dir.join(file);
        let write = |source| Error::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write)?;
        }
        std::fs::write(&path, fill(template)).map_err(write)?;
    }
    Ok(dir)
}

/// A DNS label that no builtin plugin has.
fn check_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| Error::Name {
        name: name.to_owned(),
        why: why.to_owned(),
    };
    // The descriptor's own rule, and a letter first (the env var the
    // template derives from the name).
    let label = crate::plugin::descriptor::is_dns_label(name)
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if !label {
        return Err(bad(
            "not a DNS label starting with a letter (lower-case letters, digits and '-', at most 63)",
        ));
    }
    if crate::plugin::builtin::names().iter().any(|n| n == name) {
        return Err(bad(
            "the name of a builtin plugin: an operator would refuse a plugin of that name",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn names_are_labels_and_not_builtins() {
        for ok in ["myfw", "my-fw2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "My", "-a", "a-", "9a", "a_b", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let e = check_name("torch").unwrap_err().to_string();
        assert!(e.contains("builtin"), "{e}");
    }

    #[test]
    fn a_new_plugin_fills_every_template_and_never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let made = new_plugin("my-fw", "rust", Some(&dir), None).unwrap();
        for (file, _) in FILES {
            let text = std::fs::read_to_string(made.join(file)).unwrap();
            assert!(!text.contains("{{"), "{file} left a placeholder");
        }
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("\"mlPolicy.my-fw\"") && lib.contains("MY_FW_PLUGIN"));
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"plugin-my-fw\""), "{cargo}");
        assert!(matches!(
            new_plugin("my-fw", "rust", Some(&dir), None),
            Err(Error::Exists(_))
        ));
        assert!(matches!(
            new_plugin("x", "python", Some(&tmp.path().join("q")), None),
            Err(Error::Lang(_))
        ));
        assert!(matches!(
            new_plugin("x", "rust", Some(&tmp.path().join("r")), Some(tmp.path())),
            Err(Error::Sdk(_))
        ));
    }
}
