//! The operator: everything that talks to the API server.
//!
//! - [`trainjob`]: the TrainJob controller (runtime snapshot → the pure
//!   [`pipeline`](crate::pipeline) → server-side apply → status).
//! - [`catalog`]: the `ClusterTrainerPlugin` controller that fetches,
//!   verifies, compiles and hot-swaps the plugin set in service (the Wasm
//!   runtime itself is [`crate::plugin`]).
//! - [`tenants`]: the `TrainerPlugin` controller (tenant plugins, capped by
//!   the `TrainerPluginPolicy`) and the per-TrainJob plugin set.
//! - [`admission`]: the HTTPS admission webhooks (certificates, listener);
//!   what they check is [`crate::admission`].
//! - [`ops`]: metrics, health endpoints, leader election, shutdown.
//! - [`operator`]: `trainforge operator`, which wires them together.

pub mod admission;
pub mod catalog;
pub mod operator;
pub mod ops;
pub mod tenants;
pub mod trainjob;
