//! Compiling a component, bounded in time and memory.
//!
//! Compilation is the one step that runs untrusted input through a large
//! optimising compiler before any sandbox exists: a small component can be
//! crafted to take minutes or gigabytes. With [`Compiler::Subprocess`] the
//! operator compiles in a child process (its own executable, subcommand
//! `plugin compile-worker`) whose data segment is capped with `RLIMIT_DATA`
//! and which is killed at the deadline, so a hostile component costs at
//! most [`CompileLimits`] and never the operator's own memory. The child
//! writes the precompiled artifact to a private temporary directory; the
//! parent loads it like an artifact of its own cache (same executable, so
//! the same wasmtime version and configuration, which wasmtime checks).
//!
//! [`Compiler::InProcess`] compiles on a short-lived engine in the calling
//! thread, unbounded: for trusted components only (tests, benchmarks).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Bounds of one compilation in a child process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Wall-clock deadline; the child is killed when it passes.
    pub timeout: Duration,
    /// The child's `RLIMIT_DATA` (heap and other private writable memory).
    pub memory_bytes: u64,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            timeout: Duration::from_secs(60),
            memory_bytes: 1 << 30,
        }
    }
}

/// Where components are compiled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Compiler {
    /// In the calling process, unbounded (trusted components only).
    #[default]
    InProcess,
    /// In a child process: `program args... --memory-bytes N INPUT OUTPUT`
    /// (for the `trainforge` binary, `args` is `plugin compile-worker`).
    Subprocess {
        /// The executable.
        program: PathBuf,
        /// Arguments before the worker's own.
        args: Vec<String>,
    },
}

impl Compiler {
    /// The `trainforge` executable running now as the compile worker.
    pub fn this_executable() -> Result<Compiler, String> {
        let program =
            std::env::current_exe().map_err(|e| format!("finding the operator executable: {e}"))?;
        Ok(Compiler::Subprocess {
            program,
            args: vec!["plugin".into(), "compile-worker".into()],
        })
    }

    /// How many compilations may run at once: one in process (Cranelift's
    /// scratch memory is the operator's), two in children (each bounded).
    pub fn parallelism(&self) -> usize {
        match self {
            Compiler::InProcess => 1,
            Compiler::Subprocess { .. } => 2,
        }
    }
}

/// Why a compilation failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The deadline passed.
    #[error("compilation did not finish within {0:?} (stopped)")]
    Timeout(Duration),
    /// The child ran out of its memory allowance.
    #[error("compilation exceeded its {0}-byte memory limit (stopped)")]
    Memory(u64),
    /// The compiler refused the component.
    #[error("{0}")]
    Invalid(String),
    /// The host could not run the compilation (spawn, temporary files).
    #[error("running the compiler: {0}")]
    Host(String),
    /// Cancelled while queued or compiling (its `TrainerPlugin` was
    /// deleted or changed).
    #[error("compilation cancelled: the TrainerPlugin was deleted or changed")]
    Cancelled,
}

/// Compile `bytes` for `engine`. Returns the component (loaded into
/// `engine`) and its precompiled artifact (for the disk cache).
pub fn compile(
    compiler: &Compiler,
    limits: CompileLimits,
    engine: &Engine,
    compiler_config: &Config,
    bytes: &[u8],
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<(Component, Vec<u8>), CompileError> {
    match compiler {
        Compiler::InProcess => {
            let (component, artifact, how) =
                trainforge_precompiled::compile_isolated(engine, compiler_config, bytes)
                    .map_err(|e| CompileError::Invalid(format!("{e:#}")))?;
            tracing::debug!(?how, "compiled plugin in process");
            Ok((component, artifact))
        }
        Compiler::Subprocess { program, args } => {
            let artifact = in_child(program, args, limits, bytes, cancel)?;
            let component = trainforge_precompiled::from_worker_artifact(engine, &artifact)
                .map_err(|e| CompileError::Host(format!("loading the compiled artifact: {e:#}")))?;
            Ok((component, artifact))
        }
    }
}

/// Bytes of the child's stderr kept for the error message.
const STDERR_KEPT: u64 = 4096;

fn in_child(
    program: &Path,
    args: &[String],
    limits: CompileLimits,
    bytes: &[u8],
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<Vec<u8>, CompileError> {
    let host = |what: &str, e: std::io::Error| CompileError::Host(format!("{what}: {e}"));
    let dir = tempfile::Builder::new()
        .prefix("trainforge-compile-")
        .tempdir()
        .map_err(|e| host("creating a temporary directory", e))?;
    let input = dir.path().join("component.wasm");
    let output = dir.path().join("component.cwasm");
    let stderr_path = dir.path().join("stderr");
    std::fs::write(&input, bytes).map_err(|e| host("writing the component", e))?;
    let stderr = std::fs::File::create(&stderr_path).map_err(|e| host("creating stderr", e))?;
    let mut child = Command::new(program)
        .args(args)
        .arg("--memory-bytes")
        .arg(limits.memory_bytes.to_string())
        .arg(&input)
        .arg(&output)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0")
        // The operator's allocator (mimalloc) reserves address space in
        // large arenas, which RLIMIT_DATA counts before it is used: with
        // small arenas the limit measures what the compiler really takes.
        .env("MIMALLOC_ARENA_RESERVE", "16MiB")
        .spawn()
        .map_err(|e| host(&format!("starting {}", program.display()), e))?;
    let deadline = Instant::now() + limits.timeout;
    let mut pause = Duration::from_millis(2);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileError::Timeout(limits.timeout));
            }
            Ok(None) if cancel.is_some_and(|c| c.is_cancelled()) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileError::Cancelled);
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(host("waiting for the compiler", e));
            }
        }
    };
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(&stderr_path) {
        let _ = f.take(STDERR_KEPT).read_to_string(&mut text);
    }
    let text = text.trim();
    if status.success() {
        return std::fs::read(&output).map_err(|e| host("reading the compiled artifact", e));
    }
    // Allocation failure under the rlimit aborts the child (or the kernel
    // kills it); both mean the memory bound was hit.
    if text.contains("memory allocation of") || text.contains("out of memory") {
        return Err(CompileError::Memory(limits.memory_bytes));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return Err(if matches!(sig, 6 | 9 | 11) {
                CompileError::Memory(limits.memory_bytes)
            } else {
                CompileError::Invalid(format!("the compiler was killed by signal {sig}"))
            });
        }
    }
    Err(CompileError::Invalid(if text.is_empty() {
        format!("the compiler failed ({status})")
    } else {
        text.to_owned()
    }))
}

/// The compile worker: cap this process's memory, compile `input` on a
/// fresh engine with the operator's code-generation settings, write the
/// artifact to `output`. Runs as `trainforge plugin compile-worker`.
pub fn run_worker(
    compiler_config: &Config,
    memory_bytes: u64,
    input: &Path,
    output: &Path,
) -> Result<(), String> {
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(Resource::RLIMIT_DATA, memory_bytes, memory_bytes)
        .map_err(|e| format!("setting the memory limit: {e}"))?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|e| format!("disabling core dumps: {e}"))?;
    #[cfg(target_os = "linux")]
    {
        // Die with the operator instead of compiling on as an orphan.
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    }
    let bytes = std::fs::read(input).map_err(|e| format!("reading {}: {e}", input.display()))?;
    let engine = Engine::new(compiler_config).map_err(|e| format!("creating the engine: {e:#}"))?;
    let artifact = engine
        .precompile_component(&bytes)
        .map_err(|e| format!("{e:#}"))?;
    std::fs::write(output, artifact).map_err(|e| format!("writing {}: {e}", output.display()))
}
