//! The sandboxed Wasm plugin runtime (issue 3).
//!
//! Framework plugins are Wasm components targeting `wit/plugin.wit`
//! (`trainforge:plugin@0.1.0`). This module loads them and calls them
//! safely; all calls are synchronous (wrap them in `spawn_blocking` from
//! async code).
//!
//! - [`PluginRuntime`]: one wasmtime `Engine` (epoch interruption, ticker on
//!   its own OS thread), one `Linker` (deny-all WASI + the `host` imports),
//!   the compiled-artifact cache (memory + optional disk, keyed by the
//!   component's sha256 and the engine's compatibility hash).
//! - [`PluginRuntime::load`]: digest pin → compile/cache → interface check
//!   (exports `trainforge:plugin/guest@0.1.x`, no unknown imports) →
//!   `InstancePre` → `describe` → [`LoadedPlugin`].
//! - [`LoadedPlugin`]: every call gets a fresh `Store` with an epoch deadline,
//!   a memory cap, bounded output/logs/stderr; `build` output goes through
//!   [`output_check`] before anything can be applied.
//! - [`PluginSet`]: the framework pipeline (phases in order, TrainJob and
//!   info threaded through), validation and status; per plugin, the
//!   configuration narrows the phases called and the kinds it may emit, and
//!   its [`FailurePolicy`] decides whether a failure stops the pass.
//! - [`CallObserver`]: told about every guest call (metrics).
//! - [`builtin`]: plugins embedded in the binary at build time.
//! - [`cli`]: `trainforge plugin inspect|run|bench`.
//!
//! Every failure is an [`Error`] with a distinct reason (`Timeout`,
//! `MemoryLimit`, `Trap`, `InvalidOutput`, `ForbiddenObject`, `LoadFailed`,
//! `DigestMismatch`, `IncompatibleInterface`, ...); nothing a plugin does
//! can panic the host.

mod bindings;
pub mod builtin;
mod cache;
mod call;
pub mod cli;
mod engine;
mod error;
mod load;
mod observe;
pub mod output_check;
pub mod sample;
mod sandbox;
mod set;
mod source;

pub use cache::{CacheOutcome, sha256_hex};
pub use call::{LoadedPlugin, PhaseInput, ValidateInput};
pub use engine::{Limits, RuntimeConfig};
pub use error::Error;
pub use load::{PluginRuntime, wit_compatible};
pub use observe::{CallObserver, FailurePolicy};
pub use sandbox::Grants;
pub use set::{PluginFieldError, PluginSet, ReconcileOutput, StatusOutput, ValidateOutput};
pub use source::{NoObjects, ObjectSource, PluginSource, StaticObjects};
