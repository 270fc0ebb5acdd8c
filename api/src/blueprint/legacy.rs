//! The v2.1 override fields (`spec.labels`, `spec.annotations`,
//! `spec.podTemplateOverrides`) as one runtime patch (pure).
//!
//! Clients built with the newer API's types (Kueue, the Python SDK, GitOps
//! tools) do not know the v2.1 fields: when such a client rewrites a TrainJob
//! (an update of the whole object), the fields are dropped and what they asked
//! for is silently lost. The operator therefore moves them into a runtime
//! patch owned by [`LEGACY_FIELDS_MANAGER`], which every client keeps.
//!
//! Rules:
//! - The patch has the same effect on the merged blueprint as the fields:
//!   the fields were merged before every runtime patch, so the converted patch
//!   goes first in `spec.runtimePatches` (or replaces, in place, a patch of
//!   the same manager left by an earlier conversion).
//! - Several `podTemplateOverrides` naming the same replicated job become one
//!   replicated-job entry, their pod patches merged in list order (later
//!   entries win, as when they were applied one after the other).
//! - A field set to an empty value is removed too; it asked for nothing.
//! - The conversion is refused, and the fields stay where they are, when the
//!   result would exceed the 16 runtime patches the API allows or when a
//!   value cannot be expressed as a runtime patch.

use serde_json::{Map, Value, json};

use super::strategic_merge;
use crate::trainer::v1alpha1::constants::MANAGER_LEGACY_FIELDS;
use crate::trainer::v1alpha1::{RuntimePatch, TrainJobSpec};

/// The manager of the runtime patch that carries the converted v2.1 fields.
pub const LEGACY_FIELDS_MANAGER: &str = MANAGER_LEGACY_FIELDS;

/// The most runtime patches a TrainJob may have (the CRD's `maxItems`).
pub const MAX_RUNTIME_PATCHES: usize = 16;

/// Why the v2.1 fields could not be converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LegacyError {
    /// The TrainJob already has as many runtime patches as allowed.
    #[error(
        "spec.runtimePatches: already has {0} patches, the most allowed; the v2.1 fields stay in place"
    )]
    TooManyPatches(usize),
    /// A field's value could not be turned into (or read back as) a patch.
    #[error("{field}: cannot be expressed as a runtime patch: {reason}")]
    Unrepresentable {
        /// The TrainJob field.
        field: String,
        /// The decoding error.
        reason: String,
    },
}

/// The result of a conversion.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// The TrainJob's new `spec.runtimePatches`.
    pub runtime_patches: Vec<RuntimePatch>,
    /// The v2.1 fields that were set (and are to be removed), as
    /// `spec.<name>`.
    pub converted: Vec<&'static str>,
}

/// What a user is told when the fields `converted` were moved (the
/// admission warning on create, the operator's Warning Event otherwise).
pub fn moved_note(converted: &[&str]) -> String {
    format!(
        "{} moved into spec.runtimePatches (manager {LEGACY_FIELDS_MANAGER}): clients with Kubeflow Trainer v2.2+ types drop the v2.1 fields; set runtimePatches instead",
        converted.join(", ")
    )
}

/// Whether `spec` uses a v2.1 override field (even with an empty value).
pub fn has_legacy_fields(spec: &TrainJobSpec) -> bool {
    spec.labels.is_some() || spec.annotations.is_some() || spec.pod_template_overrides.is_some()
}

/// Convert the v2.1 fields of `spec` into one runtime patch; `Ok(None)` when
/// `spec` uses none of them.
pub fn convert(spec: &TrainJobSpec) -> Result<Option<Conversion>, LegacyError> {
    if !has_legacy_fields(spec) {
        return Ok(None);
    }
    let mut converted = Vec::new();
    let mut metadata = Map::new();
    if let Some(labels) = &spec.labels {
        converted.push("spec.labels");
        if !labels.is_empty() {
            metadata.insert("labels".into(), json!(labels));
        }
    }
    if let Some(annotations) = &spec.annotations {
        converted.push("spec.annotations");
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), json!(annotations));
        }
    }

    // Replicated jobs in order of first mention, each with its merged pod
    // patch.
    let mut jobs: Vec<(String, Value)> = Vec::new();
    if let Some(overrides) = &spec.pod_template_overrides {
        converted.push("spec.podTemplateOverrides");
        for (i, ov) in overrides.iter().enumerate() {
            let field = format!("spec.podTemplateOverrides[{i}]");
            let mut pod = Map::new();
            if let Some(meta) = &ov.metadata {
                let mut m = Map::new();
                if let Some(l) = meta.labels.as_ref().filter(|l| !l.is_empty()) {
                    m.insert("labels".into(), json!(l));
                }
                if let Some(a) = meta.annotations.as_ref().filter(|a| !a.is_empty()) {
                    m.insert("annotations".into(), json!(a));
                }
                if !m.is_empty() {
                    pod.insert("metadata".into(), Value::Object(m));
                }
            }
            if let Some(s) = &ov.spec {
                let v = serde_json::to_value(s).map_err(|e| LegacyError::Unrepresentable {
                    field: format!("{field}.spec"),
                    reason: e.to_string(),
                })?;
                if v.as_object().is_some_and(|o| !o.is_empty()) {
                    pod.insert("spec".into(), v);
                }
            }
            let pod = Value::Object(pod);
            for target in &ov.target_jobs {
                match jobs.iter_mut().find(|(n, _)| *n == target.name) {
                    Some((_, existing)) => strategic_merge::merge(existing, &pod),
                    None => jobs.push((target.name.clone(), pod.clone())),
                }
            }
        }
    }

    let mut template = Map::new();
    if !metadata.is_empty() {
        template.insert("metadata".into(), Value::Object(metadata));
    }
    if !jobs.is_empty() {
        let replicated: Vec<Value> = jobs
            .into_iter()
            .map(|(name, pod)| json!({"name": name, "template": {"spec": {"template": pod}}}))
            .collect();
        template.insert("spec".into(), json!({"replicatedJobs": replicated}));
    }

    let mut patches: Vec<RuntimePatch> = spec.runtime_patches.clone().unwrap_or_default();
    let position = patches
        .iter()
        .position(|p| p.manager == LEGACY_FIELDS_MANAGER);
    if template.is_empty() {
        // Nothing to carry: the fields are removed, an earlier conversion's
        // patch stays as it is.
        return Ok(Some(Conversion {
            runtime_patches: patches,
            converted,
        }));
    }
    let patch: RuntimePatch = serde_json::from_value(json!({
        "manager": LEGACY_FIELDS_MANAGER,
        "trainingRuntimeSpec": {"template": Value::Object(template)},
    }))
    .map_err(|e| LegacyError::Unrepresentable {
        field: converted.join(", "),
        reason: e.to_string(),
    })?;
    match position {
        Some(i) => {
            // Fields set again after an earlier conversion (e.g. re-applied
            // by a GitOps tool): they win over what was converted before.
            let mut merged =
                serde_json::to_value(&patches[i]).map_err(|e| LegacyError::Unrepresentable {
                    field: "spec.runtimePatches".into(),
                    reason: e.to_string(),
                })?;
            let new = serde_json::to_value(&patch).map_err(|e| LegacyError::Unrepresentable {
                field: "spec.runtimePatches".into(),
                reason: e.to_string(),
            })?;
            strategic_merge::merge(&mut merged, &new);
            patches[i] =
                serde_json::from_value(merged).map_err(|e| LegacyError::Unrepresentable {
                    field: "spec.runtimePatches".into(),
                    reason: e.to_string(),
                })?;
        }
        None if patches.len() >= MAX_RUNTIME_PATCHES => {
            return Err(LegacyError::TooManyPatches(patches.len()));
        }
        None => patches.insert(0, patch),
    }
    Ok(Some(Conversion {
        runtime_patches: patches,
        converted,
    }))
}

#[cfg(test)]
#[path = "legacy_tests.rs"]
mod tests;
