//! Moving a TrainJob's v2.1 override fields into `spec.runtimePatches`.
//!
//! `spec.labels`, `spec.annotations` and `spec.podTemplateOverrides` are
//! still served, but clients built with the newer API's types (Kueue, the
//! Python SDK, GitOps tools) drop them whenever they rewrite the TrainJob. So
//! the TrainJob mutating webhook moves them on create
//! ([`crate::admission::defaulting`]), and the first reconcile of an
//! unfinished TrainJob that still uses them (stored while admission was
//! bypassed, or set again by an update) rewrites it:
//! the fields become one runtime patch with the same effect
//! ([`trainforge_api::blueprint::legacy`]) and are removed, with a Warning
//! Event naming them. The JobSet does not change.
//!
//! Rules:
//! - the write is a merge patch pinned to the resourceVersion that was read:
//!   if anyone changed the TrainJob in between, nothing is written and the
//!   next reconcile (triggered by that change) tries again;
//! - a conversion that cannot be done (too many runtime patches) is reported
//!   as a Warning Event (repeats are folded by the Event recorder) and the
//!   fields keep working where they are;
//! - a finished TrainJob or one managed by another controller is left alone.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};
use trainforge_api::blueprint::legacy::{self, LegacyError};
use trainforge_api::trainer::v1alpha1::TrainJob;

use super::Context;
use super::events::{self, ACTION_RECONCILING, EventType};

/// Event reason when the v2.1 fields were moved into a runtime patch.
pub const REASON_CONVERTED: &str = "DeprecatedFieldsConverted";
/// Event reason when they could not be.
pub const REASON_NOT_CONVERTED: &str = "DeprecatedFieldsNotConverted";

/// Field manager of the rewrite.
const FIELD_MANAGER: &str = "trainer";

/// Why the rewrite failed.
#[derive(Debug, thiserror::Error)]
pub enum LegacyWriteError {
    /// The conversion itself was refused.
    #[error(transparent)]
    Convert(#[from] LegacyError),
    /// The TrainJob could not be serialised into the patch.
    #[error("serialising the runtime patches: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The API server did not take the patch.
    #[error("writing the TrainJob: {0}")]
    Write(#[source] kube::Error),
}

/// What [`convert`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The TrainJob uses none of the v2.1 fields.
    Nothing,
    /// The TrainJob was rewritten; its watch event reconciles it again.
    Rewritten,
    /// The fields stay (reported); reconcile the TrainJob as it is.
    Kept,
}

/// Rewrite `job` without its v2.1 fields when it has any.
pub async fn convert(ctx: &Context, job: &TrainJob) -> Outcome {
    if !legacy::has_legacy_fields(&job.spec) {
        return Outcome::Nothing;
    }
    match write(ctx, job).await {
        Ok(converted) => {
            let note = legacy::moved_note(&converted);
            info!(fields = %converted.join(","), "v2.1 fields converted to a runtime patch");
            events::publish(
                ctx,
                job,
                EventType::Warning,
                REASON_CONVERTED,
                ACTION_RECONCILING,
                note,
            )
            .await;
            Outcome::Rewritten
        }
        Err(LegacyWriteError::Write(kube::Error::Api(e))) if e.code == 409 => {
            info!("TrainJob changed while converting its v2.1 fields: retried on the next change");
            Outcome::Rewritten
        }
        Err(e) => {
            warn!(error = %e, "v2.1 fields not converted");
            let note = format!(
                "the v2.1 fields stay in place and a client with newer types may drop them: {e}"
            );
            events::publish(
                ctx,
                job,
                EventType::Warning,
                REASON_NOT_CONVERTED,
                ACTION_RECONCILING,
                note,
            )
            .await;
            Outcome::Kept
        }
    }
}

async fn write(ctx: &Context, job: &TrainJob) -> Result<Vec<&'static str>, LegacyWriteError> {
    let Some(conversion) = legacy::convert(&job.spec)? else {
        return Ok(Vec::new());
    };
    let patches =
        serde_json::to_value(&conversion.runtime_patches).map_err(LegacyWriteError::Serialize)?;
    let body = json!({
        "metadata": {"resourceVersion": job.metadata.resource_version},
        "spec": {
            "labels": null,
            "annotations": null,
            "podTemplateOverrides": null,
            "runtimePatches": patches,
        }
    });
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let api: Api<TrainJob> = Api::namespaced(ctx.client.clone(), ns);
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        },
        &Patch::Merge(&body),
    )
    .await
    .map_err(LegacyWriteError::Write)?;
    ctx.metrics.api_write("patch", "TrainJob");
    Ok(conversion.converted)
}
