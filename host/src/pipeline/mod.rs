//! The pure pipeline: TrainJob + (Cluster)TrainingRuntime → plugin calls →
//! desired objects. No I/O here, so the same code runs in unit tests, in
//! `trainforge render` and in the controller.
//!
//! - [`merge`]: the runtime template with the TrainJob's overrides applied.
//! - [`defaults`]: CRD structural defaults, as the API server applies them.
//! - [`info`]: the merged blueprint → the runtime info plugins see.
//! - [`run`]: the whole pipeline (validate → plugin phases → objects in apply order).
//! - [`strategic_merge`]: Kubernetes strategic-merge-patch semantics over JSON.

pub mod defaults;
pub mod info;
pub mod merge;
pub mod run;
pub mod strategic_merge;

#[cfg(test)]
mod merge_tests;
