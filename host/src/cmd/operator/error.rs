//! Why `trainforge operator` stops with an error.

use crate::plugin;

/// Why the operator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No API client.
    #[error("connecting to the API server: {0}")]
    Client(#[from] kube::Error),
    /// The API client could not be configured.
    #[error(transparent)]
    ClientConfig(#[from] crate::ops::client::Error),
    /// Another replica took the Lease (or it could not be renewed in time):
    /// the controllers were stopped.
    #[error("lost the leader-election Lease; exiting so that this replica restarts as a standby")]
    LeaseLost,
    /// An endpoint could not start.
    #[error(transparent)]
    Health(#[from] crate::ops::health::Error),
    /// `--metrics-secure` with the metrics and probe addresses the same.
    #[error(
        "--metrics-secure serves /metrics over HTTPS on its own: --metrics-bind-address and --health-probe-bind-address must differ (both {0})"
    )]
    MetricsAddress(std::net::SocketAddr),
    /// Leader election failed.
    #[error(transparent)]
    Leader(#[from] crate::ops::leader::Error),
    /// Signal handlers could not be installed.
    #[error(transparent)]
    Shutdown(#[from] crate::ops::shutdown::Error),
    /// The plugin runtime or the builtin plugins failed.
    #[error(transparent)]
    Plugin(#[from] plugin::Error),
    /// The status server's flags are wrong.
    #[error(transparent)]
    StatusServer(#[from] crate::statusserver::Error),
    /// The compile worker (this executable) could not be located.
    #[error("plugin compiler: {0}")]
    Compiler(String),
    /// A start-up task failed.
    #[error("start-up: {0}")]
    Startup(String),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
}
