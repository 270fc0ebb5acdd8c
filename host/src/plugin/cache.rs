//! Compiled-component cache: in memory, and optionally on disk as
//! precompiled artifacts. Keyed by sha256 of the component bytes plus the
//! engine's `precompile_compatibility_hash` (wasmtime version + `Config`).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Where a component came from on this load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Found in the in-memory cache.
    Memory,
    /// Loaded from a precompiled artifact on disk.
    Disk,
    /// Compiled now (and written to the caches).
    Compiled,
}

/// sha256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Feeds `Hash` output into sha256.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex digest of the engine's precompile compatibility hash.
pub(crate) fn engine_hash(engine: &Engine) -> String {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(h.0.finalize())
}

/// The compiled-component cache.
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    engine_hash: String,
    memory: Mutex<HashMap<String, Component>>,
    /// Held while compiling (see `get_or_compile`).
    compiling: Mutex<()>,
}

impl ArtifactCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        ArtifactCache {
            dir,
            engine_hash: engine_hash(engine),
            memory: Mutex::new(HashMap::new()),
            compiling: Mutex::new(()),
        }
    }

    /// Cache key of a component with digest `sha256`.
    pub(crate) fn key(&self, sha256: &str) -> String {
        // 16 hex chars of the engine hash are plenty to separate configs.
        format!(
            "{sha256}-{}",
            &self.engine_hash[..16.min(self.engine_hash.len())]
        )
    }

    /// Get the compiled component for `bytes` (digest `sha256`), compiling
    /// (on a short-lived engine built from `compiler_config`, see
    /// [`trainforge_precompiled::compile_isolated`]) and caching it if needed.
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        compiler_config: &Config,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<(Component, CacheOutcome), String> {
        let key = self.key(sha256);
        if let Some(c) = self.memory.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok((c, CacheOutcome::Memory));
        }
        if let Some(dir) = &self.dir {
            match trainforge_precompiled::load(engine, dir, &key) {
                Ok(c) => {
                    self.remember(&key, &c);
                    return Ok((c, CacheOutcome::Disk));
                }
                Err(trainforge_precompiled::LoadError::Missing) => {}
                Err(e) => tracing::warn!(key, error = %e, "ignoring cached artifact; recompiling"),
            }
        }
        // One compile at a time: Cranelift's memory grows with the functions
        // compiled at once (tens of MB of register-allocator state each),
        // and the plugin controller loads every changed plugin concurrently.
        // Unbounded, an operator starting with a dozen plugins peaked at
        // 1.8 GB; a module still compiles its functions in parallel.
        let _one_at_a_time = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        // Whoever held the lock may just have compiled this very module.
        if let Some(c) = self.memory.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok((c, CacheOutcome::Memory));
        }
        let (component, artifact, how) =
            trainforge_precompiled::compile_isolated(engine, compiler_config, bytes)
                .map_err(|e| format!("{e:#}"))?;
        tracing::debug!(key, ?how, "compiled plugin");
        let component = match &self.dir {
            Some(dir) => {
                if let Err(e) = trainforge_precompiled::store(dir, &key, &artifact) {
                    tracing::warn!(key, error = %e, "could not write artifact cache");
                }
                // The mapped file shares the page cache; the component
                // deserialised from memory holds a private copy.
                trainforge_precompiled::load(engine, dir, &key).unwrap_or(component)
            }
            None => component,
        };
        self.remember(&key, &component);
        Ok((component, CacheOutcome::Compiled))
    }

    fn remember(&self, key: &str, c: &Component) {
        if let Ok(mut m) = self.memory.lock() {
            m.insert(key.to_owned(), c.clone());
        }
    }

    /// Drop the in-memory entries (the disk cache stays). For benchmarks.
    pub(crate) fn clear_memory(&self) {
        if let Ok(mut m) = self.memory.lock() {
            m.clear();
        }
    }
}
