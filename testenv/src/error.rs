//! The crate's error type.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, starting or using a test
/// control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Control-plane binaries or data files are missing (not built yet).
    #[error(
        "control-plane binaries/data not found: missing {missing:?} in {dir} \
         (build them with `make controlplane` / testenv/build.sh, or set TRAINFORGE_TESTENV_BIN)"
    )]
    NotBuilt {
        /// Directory that was searched.
        dir: PathBuf,
        /// Files that are missing.
        missing: Vec<String>,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Generating the PKI failed.
    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),
    /// A component exited before it became ready.
    #[error("{component} exited early ({status}); last log lines:\n{log_tail}")]
    Exited {
        /// Component name.
        component: String,
        /// Exit status.
        status: String,
        /// Tail of the component's log.
        log_tail: String,
    },
    /// A bounded wait ran out.
    #[error("timed out after {after:?} waiting for {what}{}", log_tail.as_deref().map(|t| format!("; last log lines:\n{t}")).unwrap_or_default())]
    Timeout {
        /// What was waited for.
        what: String,
        /// The bound.
        after: Duration,
        /// Tail of the relevant component's log, if any.
        log_tail: Option<String>,
    },
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Reading the kubeconfig failed.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A YAML/JSON manifest could not be parsed or has an unexpected shape.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// File the manifest came from.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The shared environment failed to start earlier in this process.
    #[error("the shared {mode} test environment failed to start: {message}")]
    SharedStartFailed {
        /// Mode name.
        mode: String,
        /// The original error, rendered.
        message: String,
    },
    /// The environment's supervisor thread is gone.
    #[error("test environment supervisor thread died: {0}")]
    Supervisor(String),
}

impl Error {
    /// Wrap an I/O error with context.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// A manifest error.
    pub(crate) fn manifest(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self::Manifest {
            path: path.into(),
            message: message.into(),
        }
    }
}
