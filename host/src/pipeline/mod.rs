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
//! order).

pub mod run;

pub use trainforge_api::blueprint::{defaults, info, merge, strategic_merge};
