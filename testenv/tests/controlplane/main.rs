//! The test control plane's own tests, as one test binary: API-only and full
//! mode, the loopback OCI registry, and the demo end to end.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../common/mod.rs"]
mod common;

mod api_mode;
mod demo;
mod full_mode;
mod registry;
