//! Load precompiled wasmtime components safely enough to expose a safe API.
//!
//! `wasmtime::component::Component::deserialize` is `unsafe` because it
//! trusts its input to be an artifact produced by `Engine::precompile_component`
//! of the same wasmtime version and `Config`. This crate wraps that call in a
//! safe function whose precondition is *checked*:
//!
//! 1. the artifact file carries a sidecar holding a checksum of its bytes
//!    (XXH3-128), written by [`store`] after the artifact was renamed into
//!    place;
//! 2. the bytes mapped are checksummed and compared with the sidecar before
//!    wasmtime sees them, so a torn, truncated or bit-rotted file is
//!    recompiled instead of executed;
//! 3. the cache key (file name) includes the engine's
//!    `precompile_compatibility_hash`, and wasmtime itself rejects artifacts
//!    of another version or configuration.
//!
//! [`compile_isolated`] is the other `unsafe` call: it compiles on a
//! short-lived engine and hands the artifact to the long-lived one, so the
//! compiler's scratch memory is freed with the short-lived engine.
//! [`from_worker_artifact`] loads what the operator's own compile worker
//! (a child process of the same executable) produced.
//!
//! The checksum guards against accidents, not attackers: whoever can write
//! the artifact can write its sidecar too, with any hash. What keeps
//! attackers out is the directory itself — only the operator writes into it
//! (an emptyDir, or a private `0700` cache dir that `render` refuses when
//! group- or other-writable). A cryptographic digest here would add ~1.4 ms
//! to every load (sha256 of a 2.5 MB artifact) and no protection; XXH3 reads
//! the same bytes at memory speed.

use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};
use xxhash_rust::xxh3::xxh3_128;

/// Why an artifact could not be loaded. Callers fall back to compiling.
#[derive(Debug)]
pub enum LoadError {
    /// No artifact (or no sidecar) for this key.
    Missing,
    /// The bytes do not match the sidecar checksum (corrupt or torn).
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
            LoadError::Corrupt => {
                f.write_str("cached artifact does not match its checksum sidecar")
            }
            LoadError::Io(e) => write!(f, "reading cached artifact: {e}"),
            LoadError::Rejected(e) => write!(f, "wasmtime rejected cached artifact: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Paths of the artifact and its checksum sidecar for `key` in `dir`.
pub fn paths(dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{key}.cwasm")),
        dir.join(format!("{key}.cwasm.xxh3")),
    )
}

fn checksum(bytes: &[u8]) -> String {
    format!("{:032x}", xxh3_128(bytes))
}

/// Write `artifact` for `key` atomically (temp file + rename), then its
/// checksum sidecar. A reader that sees the sidecar sees the whole artifact.
pub fn store(dir: &Path, key: &str, artifact: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (path, sidecar) = paths(dir, key);
    let tmp = dir.join(format!("{key}.tmp{}", std::process::id()));
    std::fs::write(&tmp, artifact)?;
    std::fs::rename(&tmp, &path)?;
    let tmp = dir.join(format!("{key}.xxh3.tmp{}", std::process::id()));
    std::fs::write(&tmp, checksum(artifact))?;
    std::fs::rename(&tmp, &sidecar)?;
    Ok(())
}

fn not_found_is_missing(e: std::io::Error) -> LoadError {
    if e.kind() == std::io::ErrorKind::NotFound {
        LoadError::Missing
    } else {
        LoadError::Io(e)
    }
}

/// Load the artifact for `key` if present and intact.
pub fn load(engine: &Engine, dir: &Path, key: &str) -> Result<Component, LoadError> {
    let (path, sidecar) = paths(dir, key);
    let expected = std::fs::read_to_string(&sidecar).map_err(not_found_is_missing)?;
    let file = File::open(&path).map_err(not_found_is_missing)?;
    // SAFETY: a read-only map of a file only the operator writes, and only
    // by rename (never in place), so the mapped bytes do not change under us.
    #[allow(unsafe_code)]
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(LoadError::Io)?;
    if checksum(&map) != expected.trim() {
        return Err(LoadError::Corrupt);
    }
    drop(map);
    // wasmtime maps the file itself (copy-on-write, code pages straight from
    // the page cache): ~5x faster than `deserialize(&bytes)`, which copies
    // 2.5 MB into fresh memory. It re-opens the path; every file that can be
    // at that path was put there whole by `store`'s rename.
    //
    // SAFETY: the file is an artifact `store` wrote for this key (checked
    // above) and wasmtime verifies version and configuration itself.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize_file(engine, &path) };
    component.map_err(|e| LoadError::Rejected(e.to_string()))
}

/// How [`compile_isolated`] compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiled {
    /// On a short-lived engine whose scratch memory is gone now.
    Isolated,
    /// On the long-lived engine itself (the short-lived one was not
    /// compatible); its compiler keeps its scratch memory.
    InPlace,
}

fn compatibility(engine: &Engine) -> u64 {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    h.finish()
}

/// Compile component `bytes` for `engine` on a fresh engine built from
/// `compiler_config`, then load the artifact into `engine`. Returns the
/// component and its artifact (for [`store`]).
///
/// Why: Cranelift keeps a pool of compilation contexts (register allocator
/// arenas of tens of MB each) in the engine for as long as it lives. An
/// operator that compiled its plugins on the engine it runs them on kept
/// ~270 MB of compiler scratch for its whole life; compiled here, that
/// memory goes with the short-lived engine. When the two engines do not
/// agree on `precompile_compatibility_hash` the component is compiled on
/// `engine` directly (same result, more memory kept).
pub fn compile_isolated(
    engine: &Engine,
    compiler_config: &Config,
    bytes: &[u8],
) -> wasmtime::Result<(Component, Vec<u8>, Compiled)> {
    let compiler = Engine::new(compiler_config)?;
    if compatibility(&compiler) != compatibility(engine) {
        drop(compiler);
        let component = Component::new(engine, bytes)?;
        let artifact = component.serialize()?;
        return Ok((component, artifact, Compiled::InPlace));
    }
    let artifact = compiler.precompile_component(bytes)?;
    drop(compiler);
    // SAFETY: produced just now, in this process, by an engine of the same
    // wasmtime build whose compatibility hash (version, compiler settings,
    // tunables, features) equals `engine`'s, which is the precondition of
    // `deserialize`; wasmtime re-checks version and configuration itself.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, &artifact) }?;
    Ok((component, artifact, Compiled::Isolated))
}

/// Load an artifact the operator's compile worker produced: a child
/// process running this same executable, which called
/// `Engine::precompile_component` with the operator's code-generation
/// configuration and wrote the bytes to a private temporary directory the
/// parent created. Artifacts of another wasmtime version or configuration
/// are rejected by wasmtime's own compatibility check.
pub fn from_worker_artifact(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the bytes are the output of `precompile_component` of the same
    // wasmtime build (the worker is this executable, started by the caller
    // with a path only it knows); wasmtime verifies the version and
    // configuration recorded in the artifact before using it.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, artifact) };
    component
}
