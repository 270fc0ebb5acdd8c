//! The wasmtime engine, its epoch ticker thread, and runtime configuration.

use super::Error;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::{Config, Engine};

/// Per-call limits. Defaults follow `wasm-host.md` §5.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline of one call (enforced by epochs).
    pub timeout: Duration,
    /// Linear-memory cap of one instance, in bytes.
    pub memory_bytes: usize,
    /// Total bytes a call may return (all strings together).
    pub max_output_bytes: usize,
    /// Bytes of `log` messages kept per call (rest dropped).
    pub max_log_bytes: usize,
    /// Bytes of guest stderr captured per call (for trap messages).
    pub max_stderr_bytes: usize,
    /// Bytes `random-bytes` may hand out per call.
    pub max_random_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            max_output_bytes: 8 << 20,
            max_log_bytes: 256 << 10,
            max_stderr_bytes: 64 << 10,
            max_random_bytes: 64 << 10,
        }
    }
}

/// Configuration of a [`PluginRuntime`](super::PluginRuntime).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Epoch tick period (deadline granularity). Default 10 ms.
    pub epoch_tick: Duration,
    /// Directory for precompiled artifacts; `None` = memory cache only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Largest component accepted, in bytes. Default 32 MiB.
    pub max_component_bytes: usize,
    /// Default limits of every call (a plugin's grants may override them).
    pub limits: Limits,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            epoch_tick: Duration::from_millis(10),
            cache_dir: None,
            max_component_bytes: 32 << 20,
            limits: Limits::default(),
        }
    }
}

/// The one wasmtime [`Engine`] (epoch interruption on) plus its ticker.
pub(crate) fn new_engine() -> Result<Engine, Error> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    Engine::new(&config).map_err(|e| Error::Host(format!("creating wasmtime engine: {e}")))
}

/// Increments the engine epoch every tick on its own OS thread (never a
/// tokio task: a busy async runtime would starve it). Stops on drop.
pub(crate) struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engine: &Engine, tick: Duration) -> Result<Self, Error> {
        let (tx, rx) = mpsc::channel::<()>();
        let weak = engine.weak();
        let handle = std::thread::Builder::new()
            .name("trainforge-epoch".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(tick) {
                        Err(RecvTimeoutError::Timeout) => match weak.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => return,
                        },
                        _ => return,
                    }
                }
            })
            .map_err(|e| Error::Host(format!("spawning epoch ticker: {e}")))?;
        Ok(EpochTicker { stop: Some(tx), handle: Some(handle) })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Number of epoch ticks that cover `timeout` (at least 1, plus one so the
/// deadline is never shorter than asked: the first tick may come at once).
pub(crate) fn deadline_ticks(timeout: Duration, tick: Duration) -> u64 {
    let tick = tick.as_nanos().max(1);
    let n = timeout.as_nanos().div_ceil(tick);
    u64::try_from(n).unwrap_or(u64::MAX / 2).max(1).saturating_add(1)
}

/// Keeps the engine alive together with the ticker.
pub(crate) struct EngineHandle {
    pub(crate) engine: Engine,
    _ticker: Arc<EpochTicker>,
}

impl EngineHandle {
    pub(crate) fn new(tick: Duration) -> Result<Self, Error> {
        let engine = new_engine()?;
        let ticker = EpochTicker::start(&engine, tick)?;
        Ok(EngineHandle { engine, _ticker: Arc::new(ticker) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_cover_the_timeout() {
        let t = Duration::from_millis(10);
        assert_eq!(deadline_ticks(Duration::from_millis(100), t), 11);
        assert_eq!(deadline_ticks(Duration::from_millis(101), t), 12);
        assert_eq!(deadline_ticks(Duration::ZERO, t), 2);
    }
}
