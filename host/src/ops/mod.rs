//! Shared operations, used by every floor above: metrics, health endpoints,
//! leader election, the API client, Events, the network guard of downloads,
//! TLS crypto, shutdown.
//!
//! - [`metrics`]: the Prometheus registry ([`Metrics`]) the controllers and
//!   the plugin runtime report into.
//! - [`health`]: the axum server with `/healthz`, `/readyz` ([`Readiness`])
//!   and `/metrics`, or `/metrics` alone over HTTPS.
//! - [`metrics_auth`]: who may read `/metrics` (`TokenReview` and
//!   `SubjectAccessReview`).
//! - [`tls`]: the HTTPS listener (admission webhooks, TrainJob status server,
//!   secure metrics) whose certificate is replaced without a restart.
//! - [`leader`]: Lease-based leader election ([`LeaderElection`]).
//! - [`fence`]: no write from a replica not sure to hold the Lease.
//! - [`shutdown`]: a cancellation token fired by SIGTERM / Ctrl-C.
//! - [`client`]: the API client, with a `User-Agent` naming the operator.
//! - [`events`]: Kubernetes Events with aggregated repeats ([`events::Recorder`]).
//! - [`netguard`]: which addresses plugin and registry downloads may reach.
//! - [`crypto`]: the process's rustls crypto provider.
//!
//! Typical wiring in `trainforge operator`:
//!
//! ```no_run
//! # async fn wire(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use trainforge::ops::{health, leader, shutdown, Metrics, Readiness};
//!
//! let stop = shutdown::on_signal(Some(std::time::Duration::from_secs(25)))?;
//! let metrics = Arc::new(Metrics::new());
//! let readiness = Readiness::new();
//! let plugins_ready = readiness.register("plugins", "not loaded yet");
//! let addr = health::parse_bind_address(":8081")?.expect("enabled");
//! tokio::spawn(health::serve(addr, metrics.clone(), readiness.clone(), stop.clone()));
//! let election = leader::LeaderElection::start(
//!     client,
//!     leader::LeaderOptions::new("trainforge-system"),
//!     tokio_util::sync::CancellationToken::new(), // released explicitly below
//! )
//! .await?;
//! tokio::select! {
//!     _ = stop.cancelled() => {}
//!     _ = election.acquired() => { /* start controllers; stop them on `stop` or `election.lost()` */ }
//! }
//! plugins_ready.set_ready();
//! election.release().await?; // after the controllers drained
//! # Ok(()) }
//! ```

pub mod client;
pub mod crypto;
pub mod events;
pub mod fence;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod metrics_auth;
pub mod netguard;
pub mod shutdown;
pub mod tls;

pub use health::{CheckState, Readiness, ReadyFlag};
pub use leader::{LeaderElection, LeaderOptions};
pub use metrics::Metrics;
