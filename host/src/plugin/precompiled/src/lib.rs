//! Load precompiled wasmtime components safely enough to expose a safe API.
//!
//! `wasmtime::component::Component::deserialize` is `unsafe` because it
//! trusts its input to be an artifact produced by `Engine::precompile_component`
//! of the same wasmtime version and `Config`. This crate wraps that call in a
//! safe function whose precondition is *checked*:
//!
//! 1. the artifact file carries a sidecar holding the sha256 of its bytes,
//!    written by [`store`] in the same process family that compiled it;
//! 2. the bytes read are hashed and compared with the sidecar before use;
//! 3. the cache key (file name) includes the engine's
//!    `precompile_compatibility_hash`, and wasmtime itself rejects artifacts
//!    of another version or configuration.
//!
//! Only the operator writes into its artifact directory (an emptyDir or a
//! private cache dir), so a matching sidecar means "we wrote this".

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Why an artifact could not be loaded. Callers fall back to compiling.
#[derive(Debug)]
pub enum LoadError {
    /// No artifact (or no sidecar) for this key.
    Missing,
    /// The bytes do not match the sidecar digest (corrupt or tampered).
    Corrupt,
    /// I/O error reading the artifact.
    Io(std::io::Error),
    /// wasmtime rejected the artifact (other version/config).
    Rejected(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Missing => f.write_str("no cached artifact"),
            LoadError::Corrupt => f.write_str("cached artifact does not match its sha256 sidecar"),
            LoadError::Io(e) => write!(f, "reading cached artifact: {e}"),
            LoadError::Rejected(e) => write!(f, "wasmtime rejected cached artifact: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Paths of the artifact and its sidecar for `key` in `dir`.
pub fn paths(dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    (dir.join(format!("{key}.cwasm")), dir.join(format!("{key}.cwasm.sha256")))
}

/// Write `artifact` (output of `Engine::precompile_component`) and its
/// sha256 sidecar atomically (temp file + rename).
pub fn store(dir: &Path, key: &str, artifact: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (path, sidecar) = paths(dir, key);
    let digest = hex::encode(Sha256::digest(artifact));
    let tmp = dir.join(format!("{key}.tmp{}", std::process::id()));
    std::fs::write(&tmp, artifact)?;
    std::fs::rename(&tmp, &path)?;
    let tmp = dir.join(format!("{key}.sha256.tmp{}", std::process::id()));
    std::fs::write(&tmp, digest)?;
    std::fs::rename(&tmp, &sidecar)?;
    Ok(())
}

/// Load the artifact for `key` from `dir` if its bytes match its sidecar.
pub fn load(engine: &Engine, dir: &Path, key: &str) -> Result<Component, LoadError> {
    let (path, sidecar) = paths(dir, key);
    let expected = match std::fs::read_to_string(&sidecar) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LoadError::Missing),
        Err(e) => return Err(LoadError::Io(e)),
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LoadError::Missing),
        Err(e) => return Err(LoadError::Io(e)),
    };
    if hex::encode(Sha256::digest(&bytes)) != expected.trim() {
        return Err(LoadError::Corrupt);
    }
    // SAFETY: the bytes were written by `store` from the output of
    // `Engine::precompile_component` (the sidecar digest proves they are the
    // bytes we wrote, and only this process family writes the directory);
    // the key includes the engine's compatibility hash, and wasmtime checks
    // the version/config header itself and fails safely on a mismatch.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, &bytes) };
    component.map_err(|e| LoadError::Rejected(e.to_string()))
}
