//! Trainforge's own API (`trainforge.dev`): the operator's configuration
//! kinds, as opposed to Kubeflow Trainer's user-facing API in
//! [`crate::trainer`].
//!
//! - [`v1alpha1::ClusterTrainerPlugin`] — one framework plugin the operator
//!   loads, verifies, compiles and hot-swaps at run time.

pub mod v1alpha1;

/// The API group of Trainforge's own kinds.
pub const GROUP: &str = "trainforge.dev";
