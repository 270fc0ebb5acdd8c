//! The pure pipeline: TrainJob + (Cluster)TrainingRuntime → plugin calls →
//! desired objects. No I/O here, so the same code runs in unit tests, in
//! `trainforge render` and in the controller.
//!
//! - [`merge`]: the runtime template with the TrainJob's overrides applied.
//! - [`strategic_merge`]: Kubernetes strategic-merge-patch semantics over JSON.

pub mod merge;
pub mod strategic_merge;

#[cfg(test)]
mod merge_tests;
