//! The operator: everything that talks to the API server.
//!
//! - [`trainjob`]: the TrainJob controller (runtime snapshot → the pure
//!   [`pipeline`](crate::pipeline) → server-side apply → status).
//! - [`plugins`]: the `ClusterTrainerPlugin` controller that fetches,
//!   verifies, compiles and hot-swaps the plugin set.
//! - [`ops`]: metrics, health endpoints, leader election, shutdown.
//! - [`operator`]: `trainforge operator`, which wires them together.

pub mod operator;
pub mod ops;
pub mod plugins;
pub mod trainjob;
