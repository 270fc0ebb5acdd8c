//! The plugin runtime's error type: one variant per failure reason.

use trainforge_api::plugin::{Phase, PluginError};

/// Why a plugin could not be loaded or did not give a usable answer.
///
/// Every message names the plugin and the reason; [`Error::reason`] gives a
/// stable machine-readable reason for conditions, events and metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The call exceeded its deadline (epoch interruption).
    #[error("plugin {plugin}: Timeout: {phase} did not finish within {limit_ms} ms")]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// The deadline.
        limit_ms: u64,
    },
    /// The calls of one pass for a TrainJob (every enforce phase and build
    /// of every plugin) used up the pass's time budget
    /// ([`super::PASS_BUDGET`]); `plugin` was running, or about to run.
    #[error(
        "plugin {plugin}: BudgetExceeded: the plugin calls for this TrainJob used up their {budget_ms} ms per pass during {phase}"
    )]
    Budget {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// The pass's budget.
        budget_ms: u64,
    },
    /// The plugin's `limits.concurrency` calls were all running and none
    /// ended within its call deadline: this one did not start.
    #[error(
        "plugin {plugin}: Busy: {phase} did not start: its {concurrency} calls at once (limits.concurrency) were all running for {waited_ms} ms"
    )]
    Busy {
        /// Plugin name.
        plugin: String,
        /// Phase to call.
        phase: String,
        /// The bound.
        concurrency: u16,
        /// How long the call waited.
        waited_ms: u64,
    },
    /// The guest tried to grow memory (or tables) past its cap.
    #[error("plugin {plugin}: MemoryLimit: {phase} exceeded the {limit_bytes}-byte memory cap")]
    MemoryLimit {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// The cap.
        limit_bytes: usize,
    },
    /// The guest trapped (panic, unreachable, stack overflow, ...).
    #[error("plugin {plugin}: Trap: {phase} trapped: {message}")]
    Trap {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// Trap description plus captured stderr (bounded).
        message: String,
    },
    /// The guest returned something unusable (bad JSON, too large, wrong shape).
    #[error("plugin {plugin}: InvalidOutput: {phase}: {message}")]
    InvalidOutput {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// What was wrong.
        message: String,
    },
    /// `build` returned an object the plugin may not emit.
    #[error("plugin {plugin}: ForbiddenObject: {object}: {message}")]
    ForbiddenObject {
        /// Plugin name.
        plugin: String,
        /// `apiVersion/kind namespace/name` of the object.
        object: String,
        /// Which rule it broke.
        message: String,
    },
    /// A phase changed which TrainJob it acts for (its identity fields in
    /// the in-memory TrainJob).
    #[error(
        "plugin {plugin}: IdentityChanged: {phase} changed the TrainJob's {field}; plugins act only on the TrainJob they were called for"
    )]
    IdentityChanged {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// The field changed (`metadata.namespace`, ...).
        field: String,
    },
    /// A phase added a pod privilege it was not granted.
    #[error("plugin {plugin}: PodSecurity: {phase} {message}")]
    PodSecurity {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// What was added and which grant would allow it.
        message: String,
    },
    /// The plugin declares kinds it may not have (emits, reads, watches).
    #[error("plugin {plugin}: ForbiddenKind: {message}")]
    ForbiddenKind {
        /// Plugin name.
        plugin: String,
        /// Which kind and why.
        message: String,
    },
    /// `describe` answered something the host does not accept (name,
    /// version, policy keys, phases, too many kinds, a reserved name).
    #[error("plugin {plugin}: InvalidDescriptor: {message}")]
    InvalidDescriptor {
        /// Plugin name (or its label when the name itself is invalid).
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// Compiling the component exceeded its time or memory bound.
    #[error("plugin {plugin}: CompileLimit: {message}")]
    CompileLimit {
        /// Plugin label.
        plugin: String,
        /// Which bound and how much.
        message: String,
    },
    /// The component could not be read, compiled, linked or instantiated.
    #[error("plugin {plugin}: LoadFailed: {message}")]
    LoadFailed {
        /// Plugin name (or file name before `describe`).
        plugin: String,
        /// What failed.
        message: String,
    },
    /// The component's sha256 is not the pinned digest.
    #[error("plugin {plugin}: DigestMismatch: expected sha256 {expected}, got {actual}")]
    DigestMismatch {
        /// Plugin name (or file name).
        plugin: String,
        /// Pinned digest.
        expected: String,
        /// Actual digest.
        actual: String,
    },
    /// The component targets a WIT version or shape this host does not serve.
    #[error("plugin {plugin}: IncompatibleInterface: {message}")]
    IncompatibleInterface {
        /// Plugin name (or file name).
        plugin: String,
        /// What is incompatible.
        message: String,
    },
    /// The plugin answered with an expected error (`plugin-error`).
    #[error("plugin {plugin}: PluginError: {phase}: {error}")]
    Plugin {
        /// Plugin name.
        plugin: String,
        /// Phase called.
        phase: String,
        /// The plugin's error.
        error: PluginError,
    },
    /// The stored TrainJob a pass was asked to run for lacks its identity
    /// (namespace or name).
    #[error("TrainJob: {0}")]
    InvalidTrainJob(String),
    /// The host's own setup failed (engine, cache directory, ticker thread).
    #[error("plugin runtime: Host: {0}")]
    Host(String),
}

impl Error {
    /// Stable reason string (`Timeout`, `MemoryLimit`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Timeout { .. } => "Timeout",
            Error::Budget { .. } => "BudgetExceeded",
            Error::Busy { .. } => "Busy",
            Error::MemoryLimit { .. } => "MemoryLimit",
            Error::Trap { .. } => "Trap",
            Error::InvalidOutput { .. } => "InvalidOutput",
            Error::ForbiddenObject { .. } => "ForbiddenObject",
            Error::IdentityChanged { .. } => "IdentityChanged",
            Error::PodSecurity { .. } => "PodSecurity",
            Error::ForbiddenKind { .. } => "ForbiddenKind",
            Error::InvalidDescriptor { .. } => "InvalidDescriptor",
            Error::CompileLimit { .. } => "CompileLimit",
            Error::LoadFailed { .. } => "LoadFailed",
            Error::DigestMismatch { .. } => "DigestMismatch",
            Error::IncompatibleInterface { .. } => "IncompatibleInterface",
            Error::Plugin { .. } => "PluginError",
            Error::InvalidTrainJob(_) => "InvalidTrainJob",
            Error::Host(_) => "Host",
        }
    }

    pub(crate) fn invalid_output(plugin: &str, phase: Phase, message: impl Into<String>) -> Self {
        Error::InvalidOutput {
            plugin: plugin.to_owned(),
            phase: phase.to_string(),
            message: message.into(),
        }
    }
}
