//! The Trainforge operator library.
//!
//! - [`admission`]: the admission webhooks (TrainJob, runtimes, plugins).
//! - [`crdgen`]: CRD YAML generation from the Rust API types (`trainforge crds`).
//! - [`plugin`]: the sandboxed Wasm component runtime that runs framework plugins.
//! - [`pipeline`]: the pure TrainJob + runtime → objects pipeline.
//! - [`oci`]: plugins as signed OCI artifacts (pull, push, cosign signatures).
//! - [`render`]: `trainforge render`, the pipeline without a cluster.
//! - [`cli`]: the `trainforge` command line.
//! - [`controller`]: the operator — TrainJob controller, cluster and tenant
//!   plugin controllers, webhooks' listener and certificates, metrics,
//!   health, leader election.

pub mod admission;
pub mod cli;
pub mod controller;
pub mod crdgen;
pub mod oci;
pub mod pipeline;
pub mod plugin;
pub mod render;
