//! The Trainforge operator library, on floors: a module imports only its own
//! floor and the floors below it (`host/tests/house.rs` checks it, and that
//! no imports form a cycle).
//!
//! 6. [`cmd`]: the `trainforge` commands — the CLI, operator start-up,
//!    `render`, `plugin …`, `crds`.
//! 5. [`admission`], [`controller`] and [`statusserver`]: the admission
//!    webhooks; the TrainJob, plugin catalog and tenant plugin controllers;
//!    the server training pods report their progress to.
//! 4. [`pipeline`] and [`oci`]: the pure TrainJob + runtime → objects
//!    pipeline; plugins as signed OCI artifacts.
//! 3. [`ops`]: shared operations — metrics, health, leader election, the API
//!    client, Events, the network guard, TLS crypto, shutdown.
//! 2. [`plugin`]: the sandboxed Wasm component runtime that runs plugins.
//! 1. `trainforge_api` (the `api/` crate): the API types.

pub mod admission;
pub mod cmd;
pub mod controller;
pub mod oci;
pub mod ops;
pub mod pipeline;
pub mod plugin;
pub mod statusserver;
