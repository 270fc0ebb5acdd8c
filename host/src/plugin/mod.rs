//! The sandboxed Wasm plugin runtime.
//!
//! Framework plugins are Wasm components targeting `wit/plugin.wit`
//! (`trainforge:plugin@0.1.0`). This module loads them and calls them
//! safely; all calls are synchronous (wrap them in `spawn_blocking` from
//! async code). A plugin is untrusted code: nothing it returns decides
//! identity, namespace, ownership, scope or size.
//!
//! - [`PluginRuntime`]: one wasmtime `Engine` (epoch interruption, ticker on
//!   its own OS thread), one `Linker` (deny-all WASI, no waiting, the `host`
//!   imports), the compiled-artifact cache (memory + optional disk, keyed by
//!   the component's sha256 and the engine's compatibility hash).
//! - [`PluginRuntime::load`]: digest pin → [`compile`] (bounded in time and
//!   memory in a child process) or cache → interface check → `InstancePre`
//!   → `describe` (short deadline) → [`descriptor`] checks (name, reserved
//!   builtin names, bounded lists) → [`kinds`] the plugin may emit and read
//!   → [`LoadedPlugin`]. A component refused after compiling is evicted.
//! - [`LoadedPlugin`]: every call gets a fresh `Store` with an epoch deadline,
//!   a memory cap, bounded output/logs/stderr ([`bounded`]) and the
//!   [`CallScope`] of its TrainJob; `build` output goes through
//!   [`output_check`] before anything can be applied.
//! - [`PluginSet`]: the framework pipeline (phases in order, TrainJob and
//!   info threaded through). Identity comes from the stored TrainJob
//!   ([`Owner`]); a phase that changes it, or adds a pod privilege it was
//!   not granted ([`pod_policy`]), is refused; per plugin, the configuration
//!   narrows the phases called and its [`FailurePolicy`] decides whether a
//!   failure stops the pass.
//! - [`CallObserver`]: told about every guest call (metrics).
//! - [`builtin`]: plugins embedded in the binary at build time.
//! - [`facts`]: what the host tells plugins that ask about the operator
//!   (the TrainJob status server's address and CA).
//! - `trainforge plugin inspect|run|bench` and the compile worker are
//!   [`crate::cmd::plugin`], a floor above.
//!
//! Every failure is an [`Error`] with a distinct reason (`Timeout`,
//! `MemoryLimit`, `Trap`, `InvalidOutput`, `ForbiddenObject`,
//! `IdentityChanged`, `PodSecurity`, `ForbiddenKind`, `InvalidDescriptor`,
//! `CompileLimit`, `LoadFailed`, `DigestMismatch`, `IncompatibleInterface`,
//! ...); nothing a plugin does can panic the host.

mod bindings;
pub mod bounded;
pub mod builtin;
mod cache;
mod call;
mod code;
pub mod compile;
pub mod descriptor;
mod engine;
mod error;
pub mod facts;
mod grants;
pub mod kinds;
mod load;
mod lru_cache;
mod observe;
pub mod output_check;
pub mod pod_policy;
mod sandbox;
mod set;
mod source;

pub use cache::{CacheOutcome, CompilePlace, sha256_hex};
pub use call::{GuestBudget, LoadedPlugin, PhaseInput, ValidateInput};
pub use compile::{CompileLimits, Compiler};
pub use descriptor::wit_compatible;
pub use engine::{Limits, RuntimeConfig, run_compile_worker};
pub use error::Error;
pub use facts::{HostFacts, StatusServer};
pub use grants::Grants;
pub use load::{DESCRIBE_TIMEOUT, PluginRuntime};
pub use observe::CallObserver;
pub use output_check::Owner;
pub use pod_policy::PodGrants;
pub use sandbox::{CallScope, HostInputs, record_host_inputs};
pub use set::{
    CallOutcome, CallRecord, PASS_BUDGET, PluginFieldError, PluginSet, ReconcileOutput,
    StatusOutput, ValidateBudget, ValidateOutput,
};
pub use source::{
    FileError, NoObjects, ObjectSource, PluginSource, StaticObjects, read_component_file,
};
/// What a pass does when one plugin fails: the `failurePolicy` of its
/// `ClusterTrainerPlugin`.
pub use trainforge_api::trainforge::v1alpha1::FailurePolicy;
