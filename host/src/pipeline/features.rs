//! Feature gates: what upstream Kubeflow Trainer has behind a gate is
//! behind the same gate here, off by default as upstream's, turned on with
//! `--feature-gates Name=true[,Name=false…]` (the operator and `trainforge
//! render`). Gates change what the plugins are given, never the objects as
//! stored: the runtime snapshot keeps every field.
//!
//! | gate | upstream | what it turns on |
//! |---|---|---|
//! | `TrainJobFailurePolicy` | alpha, off (KEP-4162) | the runtime's `runPolicy.failurePolicy` and the TrainJob's `failurePolicy`: with the gate off, the plugins see neither, so a failed TrainJob is not restarted |
//!
//! TrainJob progress (upstream's `TrainJobStatus` gate) is turned on by
//! giving the operator its status server's address instead.

use std::borrow::Cow;

use trainforge_api::trainer::v1alpha1::{TrainJob, TrainingRuntimeSpec};

/// `TrainJobFailurePolicy`.
pub const TRAINJOB_FAILURE_POLICY: &str = "TrainJobFailurePolicy";

/// Every gate's name, for the error naming an unknown one.
pub const GATES: &[&str] = &[TRAINJOB_FAILURE_POLICY];

/// The gates, each off unless turned on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `TrainJobFailurePolicy`.
    pub failure_policy: bool,
}

/// Why a `--feature-gates` value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FeatureGateError {
    /// An entry is not `Name=true` or `Name=false`.
    #[error("feature gate {0:?}: expected Name=true or Name=false")]
    Malformed(String),
    /// A name no gate has.
    #[error("unknown feature gate {name:?} (known: {known})", known = GATES.join(", "))]
    Unknown {
        /// The name given.
        name: String,
    },
}

impl std::str::FromStr for Features {
    type Err = FeatureGateError;

    /// `Name=bool` entries separated by commas (blanks ignored; a later
    /// entry for the same gate wins), as Kubernetes components take them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut features = Features::default();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| FeatureGateError::Malformed(entry.to_owned()))?;
            let on = match value.trim() {
                "true" => true,
                "false" => false,
                _ => return Err(FeatureGateError::Malformed(entry.to_owned())),
            };
            match name.trim() {
                TRAINJOB_FAILURE_POLICY => features.failure_policy = on,
                other => {
                    return Err(FeatureGateError::Unknown {
                        name: other.to_owned(),
                    });
                }
            }
        }
        Ok(features)
    }
}

impl Features {
    /// The TrainJob as the plugins see it: with `TrainJobFailurePolicy`
    /// off, without its `failurePolicy` (borrowed unchanged when there is
    /// nothing to remove).
    pub fn visible_job<'a>(&self, job: &'a TrainJob) -> Cow<'a, TrainJob> {
        if self.failure_policy || job.spec.failure_policy.is_none() {
            return Cow::Borrowed(job);
        }
        let mut j = job.clone();
        j.spec.failure_policy = None;
        Cow::Owned(j)
    }

    /// Whether the gates hide part of a runtime's `spec` from the plugins
    /// (with `TrainJobFailurePolicy` off, its `runPolicy.failurePolicy`).
    pub fn hides(&self, spec: &TrainingRuntimeSpec) -> bool {
        !self.failure_policy
            && spec
                .run_policy
                .as_ref()
                .is_some_and(|p| p.failure_policy.is_some())
    }

    /// Remove from a runtime's `spec` what [`Self::hides`].
    pub fn strip(&self, spec: &mut TrainingRuntimeSpec) {
        if let Some(p) = spec.run_policy.as_mut().filter(|_| !self.failure_policy) {
            p.failure_policy = None;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn gates_parse_as_kubernetes_components_take_them() {
        assert_eq!("".parse::<Features>().unwrap(), Features::default());
        let on = Features {
            failure_policy: true,
        };
        assert_eq!(
            "TrainJobFailurePolicy=true".parse::<Features>().unwrap(),
            on
        );
        assert_eq!(
            " TrainJobFailurePolicy = true , "
                .parse::<Features>()
                .unwrap(),
            on
        );
        assert_eq!(
            "TrainJobFailurePolicy=true,TrainJobFailurePolicy=false"
                .parse::<Features>()
                .unwrap(),
            Features::default()
        );
        assert_eq!(
            "TrainJobFailurePolicy".parse::<Features>(),
            Err(FeatureGateError::Malformed("TrainJobFailurePolicy".into()))
        );
        assert_eq!(
            "TrainJobFailurePolicy=yes".parse::<Features>(),
            Err(FeatureGateError::Malformed(
                "TrainJobFailurePolicy=yes".into()
            ))
        );
        let unknown = "TrainJobStatus=true".parse::<Features>().unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown feature gate \"TrainJobStatus\" (known: TrainJobFailurePolicy)"
        );
    }

    #[test]
    fn with_the_gate_off_the_plugins_see_no_failure_policy() {
        let job: TrainJob = serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "r"}, "failurePolicy": {"maxRestarts": 2}}}))
        .unwrap();
        let spec: TrainingRuntimeSpec = serde_json::from_value(json!({
            "runPolicy": {"activeDeadlineSeconds": 60,
                "failurePolicy": {"maxRestarts": 1, "rules": []}},
            "template": {"spec": {"replicatedJobs": []}}}))
        .unwrap();
        let off = Features::default();
        assert!(off.visible_job(&job).spec.failure_policy.is_none());
        assert!(off.hides(&spec));
        let mut stripped = spec.clone();
        off.strip(&mut stripped);
        let run = stripped.run_policy.as_ref().unwrap();
        assert!(run.failure_policy.is_none());
        assert_eq!(run.active_deadline_seconds, Some(60), "the rest stays");
        assert!(!off.hides(&stripped));
        let on = Features {
            failure_policy: true,
        };
        assert!(matches!(on.visible_job(&job), Cow::Borrowed(_)));
        assert!(!on.hides(&spec));
        let mut kept = spec.clone();
        on.strip(&mut kept);
        assert_eq!(kept, spec);
    }
}
