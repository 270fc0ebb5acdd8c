//! The operator: everything that talks to the API server.
//!
//! - [`trainjob`]: the TrainJob controller (runtime snapshot → the pure
//!   [`pipeline`](crate::pipeline) → server-side apply → status).
//! - [`plugins`]: the `ClusterTrainerPlugin` controller that fetches,
//!   verifies, compiles and hot-swaps the plugin set.
//! - [`ops`]: metrics, health endpoints, leader election, shutdown.

pub mod ops;
pub mod plugins;
pub mod trainjob;
