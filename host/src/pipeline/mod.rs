//! The pure pipeline: TrainJob + (Cluster)TrainingRuntime → plugin calls →
//! desired objects. No I/O here, so the same code runs in unit tests, in
//! `trainforge render` and in the controller.
//!
//! Building the runtime info is shared with the plugins' native tests, so it
//! lives in the API crate ([`trainforge_api::blueprint`]) and is re-exported
//! here:
//!
//! - [`merge`]: the runtime template with the TrainJob's overrides applied.
//! - [`defaults`]: CRD structural defaults, as the API server applies them.
//! - [`info`]: the merged blueprint → the runtime info plugins see.
//! - [`strategic_merge`]: Kubernetes strategic-merge-patch semantics over JSON.
//!
//! [`run`] is the whole pipeline (validate → plugin phases → objects in apply
//! order). [`input`] reads TrainJobs and runtimes from documents as the API
//! server would store them (`trainforge render`, `plugin run`, admission's
//! plugin try-outs); [`sample`] makes synthetic ones (`plugin bench`, the
//! benchmarks). [`pod_checks`] refuses, before any plugin runs, what the API
//! server would refuse in the TrainJob's pods. [`features`] holds
//! upstream's feature gates, which change what the plugins are given.

pub mod features;
pub mod input;
pub mod pod_checks;
pub mod run;
pub mod sample;

pub use trainforge_api::blueprint::{defaults, info, merge, strategic_merge};
