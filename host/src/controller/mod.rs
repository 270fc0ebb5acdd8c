//! The controllers: everything that reconciles objects with the API server.
//!
//! - [`trainjob`]: the TrainJob controller (runtime snapshot → the pure
//!   [`pipeline`](crate::pipeline) → server-side apply → status).
//! - [`catalog`]: the `ClusterTrainerPlugin` controller that fetches,
//!   verifies, compiles and hot-swaps the plugin set in service (the Wasm
//!   runtime itself is [`crate::plugin`]).
//! - [`tenants`]: the `TrainerPlugin` controller (tenant plugins, capped by
//!   the `TrainerPluginPolicy`) and the per-TrainJob plugin set.
//!
//! `trainforge operator` ([`crate::cmd::operator`]) wires them together with
//! the admission webhooks ([`crate::admission`]) and the shared operations
//! ([`crate::ops`]).

pub mod catalog;
pub mod tenants;
pub mod trainjob;
