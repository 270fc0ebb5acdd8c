//! The host's tests that need no control plane, as one test binary (each
//! file was a binary of its own: one link of Wasmtime and kube instead of
//! eleven). Plugins run in-process or through the `trainforge` binary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../monitoring_common/mod.rs"]
mod monitoring_common;
#[path = "../plugin_common/mod.rs"]
mod plugin_common;

mod admission_adversarial;
mod crds_current;
mod fetch_https;
mod fixture_equivalence;
mod monitoring;
mod oci_hops;
mod plugin_adversarial;
mod plugin_cli;
mod plugin_code;
mod plugin_example;
mod plugin_policy;
mod render_cli;
mod render_golden;
