//! Kubeflow Trainer API types (`trainer.kubeflow.org/v1alpha1`) and the typed
//! models of the objects Trainforge produces (JobSet, PodGroups).
//!
//! This crate is shared by the operator host and by plugins, so it must build
//! for `wasm32-wasip2`: no I/O, no client, only types and pure helpers.

pub mod plugin;
