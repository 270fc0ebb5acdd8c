//! The host's control-plane tests, compiled as one test binary and run as
//! one process per module (`testenv/by-module.sh`, from `make test`): each
//! module keeps the control plane and the operator it starts to itself, as
//! when each file was a binary of its own, and the workspace compiles and
//! links Wasmtime and kube into one test binary instead of one per module.
//!
//! `cargo test -p trainforge --test cluster -- MODULE::` runs one module by
//! hand (the target is left out of a plain `cargo test`: run in one process,
//! the modules' operators would share one control plane).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../catalog_common/mod.rs"]
mod catalog_common;
#[path = "../monitoring_common/mod.rs"]
mod monitoring_common;
#[path = "../operator_common/mod.rs"]
mod operator_common;
#[path = "../plugin_common/mod.rs"]
mod plugin_common;

mod admission_certs;
mod admission_e2e;
mod apply_fields;
mod conformance;
mod containment_e2e;
mod crds_apiserver;
mod crds_merge;
mod events_e2e;
mod fidelity_e2e;
mod helm_chart;
mod image;
mod kubeflow_sdk;
mod kueue;
mod leader_election;
mod manifests;
mod operator_e2e;
mod operator_lifecycle;
mod operator_no_plugins;
mod plugin_config;
mod plugin_oci;
mod tenants_e2e;
