//! Plugins as OCI artifacts: the Wasm artifact layout ([`artifact`]),
//! cosign-compatible key-based signatures ([`cosign`]), and the registry
//! client that pulls, pushes and signs ([`registry`]). The operator's
//! `oci://` sources and `trainforge plugin push|pull|sign|verify` share
//! them.

pub mod artifact;
pub mod cosign;
pub mod proxy;
pub mod registry;
