//! Where the control-plane binaries and data files live.
//!
//! `testenv/build.sh` builds into
//! `${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/testenv/<CACHE_KEY>/{bin,data}`.
//! `TRAINFORGE_TESTENV_BIN` overrides the binary directory (its data files are
//! then expected in `<bin>/../data`), `TRAINFORGE_TESTENV_DATA` the data
//! directory, and `TRAINFORGE_CRDS_DIR` the directory of our own CRDs.

use std::path::{Path, PathBuf};

use crate::{Error, Mode};

/// Version key of the cache directory; must match `testenv/build.sh`.
pub const CACHE_KEY: &str = "k1.36.3-e3.6.8-js0.12.0-kw0.8.0";

/// Binaries needed in api mode.
pub const API_BINARIES: &[&str] = &["etcd", "kube-apiserver"];
/// Binaries needed in full mode. The OCI [`crate::Registry`] is not part of the
/// environment, but is checked with it: tests that use it run in full-mode
/// setups, and a cache built before it existed then counts as not built.
pub const FULL_BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "jobset",
    "kwok",
    "registry",
];

/// Third-party CRD files (in `<data>/crds/`).
pub const THIRD_PARTY_CRDS: &[&str] = &[
    "jobset.x-k8s.io_jobsets.yaml",
    "scheduling.x-k8s.io_podgroups.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
];

/// The Prometheus Operator's CRDs (in `<data>/monitoring/`), generated from
/// its API module; installed only by tests that apply monitoring objects.
pub const MONITORING_CRDS: &[&str] = &[
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
];

/// Resolved locations of everything the environment needs.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Directory with the executables.
    pub bin: PathBuf,
    /// Directory with `crds/`, `jobset/`, `kwok/`, `monitoring/`.
    pub data: PathBuf,
    /// Directory with our own generated CRDs (may be missing or empty).
    pub own_crds: PathBuf,
}

impl Paths {
    /// Resolve from the environment / defaults (does not check existence).
    pub fn from_env() -> Self {
        let bin = std::env::var_os("TRAINFORGE_TESTENV_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| default_cache_dir().join("bin"));
        let data = std::env::var_os("TRAINFORGE_TESTENV_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| bin.parent().unwrap_or(Path::new("/")).join("data"));
        let own_crds = std::env::var_os("TRAINFORGE_CRDS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds"));
        Self {
            bin,
            data,
            own_crds,
        }
    }

    /// Path of one of [`MONITORING_CRDS`].
    pub fn monitoring_crd(&self, file: &str) -> PathBuf {
        self.data.join("monitoring").join(file)
    }

    /// Path of one executable.
    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// Check that everything `mode` needs exists.
    pub fn check(&self, mode: Mode) -> Result<(), Error> {
        let bins = match mode {
            Mode::Api => API_BINARIES,
            Mode::Full => FULL_BINARIES,
        };
        let mut missing: Vec<String> = bins
            .iter()
            .filter(|b| !self.binary(b).is_file())
            .map(|b| b.to_string())
            .collect();
        let crds = THIRD_PARTY_CRDS
            .iter()
            .map(|c| self.data.join("crds").join(c));
        for p in crds.chain(MONITORING_CRDS.iter().map(|c| self.monitoring_crd(c))) {
            if !p.is_file() {
                missing.push(p.display().to_string());
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::NotBuilt {
                dir: self.bin.clone(),
                missing,
            })
        }
    }
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/trainforge/testenv/<CACHE_KEY>` (or
/// `$TRAINFORGE_TESTENV_CACHE/<CACHE_KEY>`).
pub fn default_cache_dir() -> PathBuf {
    let root = if let Some(c) = std::env::var_os("TRAINFORGE_TESTENV_CACHE") {
        PathBuf::from(c)
    } else {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into()))
                    .join(".cache")
            });
        base.join("trainforge").join("testenv")
    };
    root.join(CACHE_KEY)
}
