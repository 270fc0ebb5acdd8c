//! The wasmtime engine, its epoch ticker thread, and runtime configuration.

use std::path::Path;

use super::Error;
use super::compile::{CompileLimits, Compiler};
use super::observe::CallObserver;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Per-call limits. By default a call gets 1 s, 64 MiB of linear memory,
/// 8 MiB of output, 256 KiB of log messages, 64 KiB of stderr and 64 KiB of
/// random bytes.
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
    /// Calls of one plugin at once in reconcile passes (`None`: no bound of
    /// its own): a reconcile pass's call that waits longer than
    /// `timeout` for one fails [`Error::Busy`](super::Error::Busy).
    pub concurrency: Option<std::num::NonZeroU16>,
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
            concurrency: None,
        }
    }
}

/// Configuration of a [`PluginRuntime`](super::PluginRuntime).
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Epoch tick period (deadline granularity). Default 10 ms.
    pub epoch_tick: Duration,
    /// Directory for precompiled artifacts; `None` = memory cache only.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Directory of artifacts precompiled when the operator was packaged
    /// (`trainforge plugin precompile --out DIR`): consulted before
    /// `cache_dir`, never written. `None` = none shipped.
    pub shipped_artifacts: Option<std::path::PathBuf>,
    /// Largest component accepted, in bytes. Default 32 MiB.
    pub max_component_bytes: usize,
    /// Default limits of every call (a plugin's grants may override them).
    pub limits: Limits,
    /// Calls that may run at the same time (size of the pooling
    /// allocator's instance pool). Default 256. A call beyond it fails
    /// with `Host` instead of waiting; `0` disables pooling (every call
    /// maps fresh memory: slower, no pool to exhaust).
    pub max_concurrent_calls: u32,
    /// Observer told about every guest call (metrics). Can also be set
    /// later with [`PluginRuntime::set_observer`](super::PluginRuntime::set_observer).
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Where components are compiled (default: in process, for trusted
    /// components; the operator and the CLI compile in a bounded child).
    pub compiler: Compiler,
    /// Time and memory bounds of a compilation in a child process.
    pub compile_limits: CompileLimits,
    /// Facts about the operator given to plugins that ask for them
    /// ([`super::facts`]); shared, updated while plugins run.
    pub facts: Arc<super::HostFacts>,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("epoch_tick", &self.epoch_tick)
            .field("cache_dir", &self.cache_dir)
            .field("shipped_artifacts", &self.shipped_artifacts)
            .field("max_component_bytes", &self.max_component_bytes)
            .field("limits", &self.limits)
            .field("max_concurrent_calls", &self.max_concurrent_calls)
            .field("observer", &self.observer.as_ref().map(|_| "set"))
            .field("compiler", &self.compiler)
            .field("compile_limits", &self.compile_limits)
            .field("facts", &self.facts)
            .finish()
    }
}

impl RuntimeConfig {
    /// Largest component accepted unless configured otherwise.
    pub const DEFAULT_MAX_COMPONENT_BYTES: usize = 32 << 20;
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            epoch_tick: Duration::from_millis(10),
            cache_dir: None,
            shipped_artifacts: None,
            max_component_bytes: Self::DEFAULT_MAX_COMPONENT_BYTES,
            limits: Limits::default(),
            max_concurrent_calls: 256,
            observer: None,
            compiler: Compiler::InProcess,
            compile_limits: CompileLimits::default(),
            facts: Arc::default(),
        }
    }
}

/// Core instances, memories and tables one plugin component may use (a
/// Rust `wasm32-wasip2` component has its module plus a few adapter/shim
/// instances and up to two memories).
const CORE_INSTANCES_PER_CALL: u32 = 16;
const MEMORIES_PER_CALL: u32 = 2;
const TABLES_PER_CALL: u32 = 4;

/// Bytes of linear memory a pool slot keeps mapped (and resets with
/// `memset`) between calls, so the next call does not page-fault its heap
/// in again. Used only with `PAGEMAP_SCAN` (Linux ≥ 6.7), which resets
/// just the pages a call dirtied; without it only a small prefix is kept.
/// With [`MAX_WARM_SLOTS`] this bounds what idle slots keep resident
/// (16 × 4 MiB per memory): at 16 MiB × 64 slots an operator with many
/// TrainJobs reached 680 MiB RSS.
const KEEP_RESIDENT_WITH_SCAN: usize = 4 << 20;
/// Idle slots kept warm (their module image stays mapped for its next call).
const MAX_WARM_SLOTS: u32 = 16;
const KEEP_RESIDENT_WITHOUT_SCAN: usize = 256 << 10;

/// The code-generation configuration of every engine (the compile worker
/// uses it too, so its artifacts load into the operator's engine).
pub(crate) fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Explicit (these are wasmtime's defaults today): optimised code, no
    // DWARF, copy-on-write memory images, lazily initialised tables.
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    config.debug_info(false);
    config.memory_init_cow(true);
    config.table_lazy_init(true);
    config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
    // Only for third-party unwinders (wasmtime's own traps and backtraces
    // do not need it); registering it costs time on every load and unload.
    config.native_unwind_info(false);
    if std::env::var_os("TRAINFORGE_PLUGIN_PERFMAP").is_some_and(|v| v != "0") {
        // Debugging aid: `/tmp/perf-<pid>.map` so `perf report` names guest functions.
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

fn pooling(max_calls: u32, scan: bool) -> PoolingAllocationConfig {
    let mut p = PoolingAllocationConfig::new();
    p.total_component_instances(max_calls)
        .total_core_instances(max_calls.saturating_mul(CORE_INSTANCES_PER_CALL))
        .total_memories(max_calls.saturating_mul(MEMORIES_PER_CALL))
        .total_tables(max_calls.saturating_mul(TABLES_PER_CALL))
        .max_memories_per_component(MEMORIES_PER_CALL)
        .max_tables_per_component(TABLES_PER_CALL)
        .max_core_instances_per_component(CORE_INSTANCES_PER_CALL)
        .table_elements(100_000)
        // Slots freed by one plugin are reused by the next call of the same
        // module first (its image is already mapped).
        .max_unused_warm_slots(max_calls.min(MAX_WARM_SLOTS))
        .table_keep_resident(64 << 10);
    if scan {
        p.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_WITH_SCAN);
    } else {
        p.pagemap_scan(Enabled::No)
            .linear_memory_keep_resident(KEEP_RESIDENT_WITHOUT_SCAN);
    }
    p
}

/// The one wasmtime [`Engine`]: epoch interruption, and a pooling instance
/// allocator when the host allows it (falls back to on-demand mapping).
///
/// Pooling keeps the per-call isolation: every call still gets a fresh
/// `Store` and instance; a slot's memory is reset to zero / the module's
/// initial image before it is handed to the next call.
pub(crate) fn new_engine(max_concurrent_calls: u32) -> Result<Engine, Error> {
    if max_concurrent_calls > 0 {
        for scan in [true, false] {
            let mut config = base_config();
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(
                max_concurrent_calls,
                scan,
            )));
            match Engine::new(&config) {
                Ok(engine) => return Ok(engine),
                Err(e) => {
                    tracing::debug!(scan, error = %e, "pooling allocator unavailable with this setting")
                }
            }
        }
        tracing::warn!("pooling allocator unavailable; plugin calls map memory on demand (slower)");
    }
    Engine::new(&base_config()).map_err(|e| Error::Host(format!("creating wasmtime engine: {e}")))
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
        Ok(EpochTicker {
            stop: Some(tx),
            handle: Some(handle),
        })
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
    u64::try_from(n)
        .unwrap_or(u64::MAX / 2)
        .max(1)
        .saturating_add(1)
}

/// Keeps the engine alive together with the ticker.
pub(crate) struct EngineHandle {
    pub(crate) engine: Engine,
    /// Configuration of the short-lived engines components are compiled
    /// on (the same code generation as `engine`, without its instance
    /// pool): see [`trainforge_precompiled::compile_isolated`].
    pub(crate) compiler_config: Config,
    /// Shared with every loaded plugin: deadlines keep working after the
    /// runtime itself is dropped.
    pub(crate) ticker: Arc<EpochTicker>,
}

impl EngineHandle {
    pub(crate) fn new(tick: Duration, max_concurrent_calls: u32) -> Result<Self, Error> {
        let engine = new_engine(max_concurrent_calls)?;
        let ticker = EpochTicker::start(&engine, tick)?;
        Ok(EngineHandle {
            engine,
            compiler_config: base_config(),
            ticker: Arc::new(ticker),
        })
    }
}

/// `trainforge plugin compile-worker`: compile `input` to `output` with this
/// runtime's code-generation settings, in a process whose memory is capped
/// at `memory_bytes` (see [`super::compile::run_worker`]).
pub fn run_compile_worker(memory_bytes: u64, input: &Path, output: &Path) -> Result<(), String> {
    super::compile::run_worker(&base_config(), memory_bytes, input, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Components are compiled on a short-lived engine (so Cranelift's
    /// scratch memory does not live as long as the operator): that needs
    /// the compiler configuration to produce artifacts the pooled engine
    /// accepts, with and without the instance pool.
    #[test]
    fn components_compile_on_a_short_lived_engine() {
        let empty_component = b"\0asm\x0d\0\x01\0";
        for max_calls in [0, 8] {
            let h = EngineHandle::new(Duration::from_millis(10), max_calls).unwrap();
            let (_, artifact, how) = trainforge_precompiled::compile_isolated(
                &h.engine,
                &h.compiler_config,
                empty_component,
            )
            .unwrap();
            assert_eq!(
                how,
                trainforge_precompiled::Compiled::Isolated,
                "max_calls {max_calls}"
            );
            assert!(!artifact.is_empty());
        }
        let h = EngineHandle::new(Duration::from_millis(10), 8).unwrap();
        let mut other = base_config();
        other.cranelift_opt_level(wasmtime::OptLevel::None);
        let (_, _, how) =
            trainforge_precompiled::compile_isolated(&h.engine, &other, empty_component).unwrap();
        assert_eq!(
            how,
            trainforge_precompiled::Compiled::InPlace,
            "an incompatible compiler is not used"
        );
    }

    #[test]
    fn ticks_cover_the_timeout() {
        let t = Duration::from_millis(10);
        assert_eq!(deadline_ticks(Duration::from_millis(100), t), 11);
        assert_eq!(deadline_ticks(Duration::from_millis(101), t), 12);
        assert_eq!(deadline_ticks(Duration::ZERO, t), 2);
    }
}
