//! Kubeflow Trainer API types (`trainer.kubeflow.org/v1alpha1`) and the typed
//! models of the objects Trainforge produces (JobSet, PodGroups).
//!
//! This crate is shared by the operator host and by plugins, so it must build
//! for `wasm32-wasip2`: no I/O, no client, only types and pure helpers.
//!
//! - [`trainer::v1alpha1`] — TrainJob, TrainingRuntime, ClusterTrainingRuntime.
//! - [`jobset::v1alpha2`] — JobSet.
//! - [`scheduling`] — scheduler-plugins and Volcano PodGroups.
//! - [`trainforge::v1alpha1`] — ClusterTrainerPlugin (the operator's plugin configuration).
//! - [`crds`] — the CRDs of our kinds, generated from these types ([`schema`]
//!   makes the schemas structural, [`k8s_markers`] adds the list types and
//!   defaults of embedded Kubernetes types).
//! - `blueprint` (not on `wasm32`) — the operator's one builder of the
//!   [`plugin::Info`] plugins see, from a TrainJob and its runtime.

#[cfg(not(target_arch = "wasm32"))]
pub mod blueprint;
pub mod cel;
pub mod crds;
pub mod jobset;
pub mod k8s_markers;
pub mod plugin;
pub mod scheduling;
pub mod schema;
pub mod trainer;
pub mod trainforge;
