//! The operator's one [`Info`] builder: TrainJob + runtime (both as the
//! API server stores them) → the runtime info plugins see. Pure, no I/O;
//! the operator's pipeline, `trainforge render`, `trainforge plugin run` and
//! the plugins' native tests (through `trainforge_sdk::testing`) all call it,
//! so a plugin sees the same info everywhere.
//!
//! - [`defaults`]: our CRDs' structural defaults, as the API server applies
//!   them (for objects read from files).
//! - [`merge`]: the runtime template with the TrainJob's overrides applied.
//! - [`strategic_merge`]: Kubernetes strategic-merge-patch semantics over JSON.
//! - [`info`]: the merged blueprint → the runtime info, one pod set per
//!   replicated job.
//! - [`legacy`]: the v2.1 override fields as one runtime patch with the same
//!   effect (the operator moves them so newer clients cannot drop them).
//!
//! Not built for `wasm32`: plugins receive the info, they never build it.

pub mod defaults;
pub mod info;
pub mod legacy;
pub mod merge;
pub mod strategic_merge;

#[cfg(test)]
mod merge_tests;

use crate::plugin::Info;
use crate::trainer::v1alpha1::{TrainJob, TrainingRuntimeSpec};

/// Which step of building the info failed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BlueprintError {
    /// Merging the TrainJob's overrides into the runtime's blueprint.
    #[error(transparent)]
    Merge(#[from] merge::MergeError),
    /// Building the info from the merged blueprint.
    #[error(transparent)]
    Info(#[from] info::InfoError),
}

/// The info the operator hands to the first reconcile phase for `job` on
/// `runtime`: [`merge::merge`] (an override naming a job or container the
/// runtime does not have is an error), then [`info::runtime_info`]. Both
/// objects must already carry their CRD defaults ([`defaults`]).
pub fn runtime_info_for(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
) -> Result<Info, BlueprintError> {
    Ok(info::runtime_info(&merge::merge(job, runtime)?)?)
}

/// The info admission (`validate`) hands to plugins for `job` on `runtime`:
/// like [`runtime_info_for`], but each override naming a job or container
/// the runtime does not have is skipped and returned beside the info, so
/// admission can report every problem.
pub fn admission_info_for(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
) -> Result<(Info, Vec<merge::MergeError>), BlueprintError> {
    let (merged, problems) = merge::merge_collecting(job, runtime)?;
    Ok((info::runtime_info(&merged)?, problems))
}
