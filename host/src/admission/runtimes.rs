//! TrainingRuntime and ClusterTrainingRuntime validation.
//!
//! For every replicated job whose template carries the ancestor label
//! (`trainer.kubeflow.org/trainjob-ancestor-step`) `trainer`,
//! `dataset-initializer` or `model-initializer` (other values are allowed
//! and ignored):
//! - `replicas` must be 1 (absent counts as 1, the CRD default):
//!   `spec.template.spec.replicatedJobs[i].replicas: Invalid value: <n>: always must be 1`;
//! - the pod template must have the ancestor's container (`node`,
//!   `dataset-initializer`, `model-initializer`):
//!   `spec.template.spec.replicatedJobs[i].template.spec.template.spec.containers: Invalid value: must contain the required container for the ancestor: <ancestor>`
//!   (the container list is not printed).
//!
//! Beyond those, a runtime whose blueprint cannot give any TrainJob its
//! runtime info (a resource quantity that does not parse) is refused on
//! `spec.template.spec.replicatedJobs`, since every TrainJob on it would be.
//! The blueprint code has no other runtime-only rule: everything else it
//! refuses depends on the TrainJob and is reported when one is admitted.
//!
//! `spec.runPolicy` (ahead of upstream, [`failure_policy`], [`cleanup`])
//! refuses the template's own failure handling, TTL and deadlines beside
//! the field that replaces each, and warns where they are used alone.
//!
//! When: a TrainingRuntime on CREATE only (an update is never refused); a
//! ClusterTrainingRuntime on CREATE and UPDATE. A ClusterTrainingRuntime
//! created with the label `trainer.kubeflow.org/support: deprecated` is
//! admitted with a warning saying it is deprecated.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use trainforge_api::blueprint::{BlueprintError, admission_info_for, merge::ancestor};
use trainforge_api::plugin::{FieldError, FieldErrorType};
use trainforge_api::trainer::v1alpha1::constants::{
    ANCESTOR_DATASET_INITIALIZER, ANCESTOR_MODEL_INITIALIZER, ANCESTOR_TRAINER,
    CONTAINER_DATASET_INITIALIZER, CONTAINER_MODEL_INITIALIZER, CONTAINER_NODE, LABEL_SUPPORT,
    SUPPORT_DEPRECATED,
};
use trainforge_api::trainer::v1alpha1::{
    ClusterTrainingRuntime, TrainJob, TrainingRuntime, TrainingRuntimeSpec,
};

use super::review::{Operation, Verdict};

/// Why a runtime review could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeReviewError {
    /// The object is not a TrainingRuntime / ClusterTrainingRuntime.
    #[error("decoding the {kind}: {reason}")]
    Decode {
        /// The kind expected.
        kind: &'static str,
        /// The decoding error.
        reason: String,
    },
}

/// Which runtime kind is reviewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// `TrainingRuntime` (namespaced).
    Namespaced,
    /// `ClusterTrainingRuntime`.
    Cluster,
}

/// The deprecation warning of a ClusterTrainingRuntime being created.
pub fn created_deprecated_warning(name: &str) -> String {
    format!(
        "ClusterTrainingRuntime {name:?} is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
    )
}

/// The container an ancestor's job must have, for the three ancestors the
/// rules apply to.
fn required_container(ancestor: &str) -> Option<&'static str> {
    match ancestor {
        ANCESTOR_TRAINER => Some(CONTAINER_NODE),
        ANCESTOR_DATASET_INITIALIZER => Some(CONTAINER_DATASET_INITIALIZER),
        ANCESTOR_MODEL_INITIALIZER => Some(CONTAINER_MODEL_INITIALIZER),
        _ => None,
    }
}

/// The field errors of a runtime's replicated jobs (see the module rules).
pub fn validate_replicated_jobs(spec: &TrainingRuntimeSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let jobs = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.replicated_jobs.as_ref());
    for (i, rj) in jobs.into_iter().flatten().enumerate() {
        let Some(anc) = ancestor(rj) else { continue };
        let Some(container) = required_container(anc) else {
            continue;
        };
        let base = format!("spec.template.spec.replicatedJobs[{i}]");
        let replicas = rj.replicas.unwrap_or(1);
        if replicas != 1 {
            errors.push(FieldError {
                error_type: FieldErrorType::Invalid,
                field: format!("{base}.replicas"),
                bad_value: Some(replicas.to_string()),
                detail: "always must be 1".into(),
            });
        }
        let has = rj
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| p.containers.iter().any(|c| c.name == container));
        if !has {
            errors.push(FieldError::invalid(
                format!("{base}.template.spec.template.spec.containers"),
                format!("must contain the required container for the ancestor: {anc}"),
            ));
        }
    }
    errors
}

/// The Job spec of each replicated job of the runtime's template that has
/// one, with its index.
fn job_specs(
    spec: &TrainingRuntimeSpec,
) -> impl Iterator<Item = (usize, &k8s_openapi::api::batch::v1::JobSpec)> {
    spec.template
        .spec
        .as_ref()
        .and_then(|s| s.replicated_jobs.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, rj)| rj.template.spec.as_ref().map(|j| (i, j)))
}

/// The runtime's `runPolicy.failurePolicy` (upstream's KEP-4162) cannot be
/// combined with a template JobSet `failurePolicy` or a Job
/// `podFailurePolicy`; a `RestartTrainJobAndIgnoreMaxRestarts` rule without
/// `runPolicy.activeDeadlineSeconds` is admitted with a warning.
pub fn failure_policy(spec: &TrainingRuntimeSpec) -> (Vec<FieldError>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let run = spec.run_policy.as_ref();
    let Some(policy) = run.and_then(|r| r.failure_policy.as_ref()) else {
        return (errors, warnings);
    };
    let template = spec.template.spec.as_ref();
    if template.is_some_and(|s| s.failure_policy.is_some()) {
        errors.push(FieldError {
            error_type: FieldErrorType::Forbidden,
            field: "spec.runPolicy.failurePolicy".into(),
            bad_value: None,
            detail: "cannot be combined with spec.template.spec.failurePolicy".into(),
        });
    }
    for (i, job) in job_specs(spec) {
        if job.pod_failure_policy.is_some() {
            errors.push(FieldError {
                error_type: FieldErrorType::Forbidden,
                field: "spec.runPolicy.failurePolicy".into(),
                bad_value: None,
                detail: format!(
                    "cannot be combined with spec.template.spec.replicatedJobs[{i}].template.spec.podFailurePolicy"
                ),
            });
        }
    }
    let uncounted = policy.rules.iter().flatten().any(|r| {
        r.action == trainforge_api::trainer::v1alpha1::failure_policy::ACTION_RESTART_UNCOUNTED
    });
    if uncounted && run.and_then(|r| r.active_deadline_seconds).is_none() {
        warnings.push(
            "spec.runPolicy.failurePolicy has a RestartTrainJobAndIgnoreMaxRestarts rule and \
             spec.runPolicy.activeDeadlineSeconds is not set: a TrainJob failing that way \
             restarts without end unless it sets activeDeadlineSeconds"
                .to_owned(),
        );
    }
    (errors, warnings)
}

/// Cleanup and deadlines belong to the TrainJob (upstream's proposal #3824
/// puts them in `spec.runPolicy`, and its runtime CEL refuses them in the
/// template). Upstream v2.3 admits a template JobSet
/// `ttlSecondsAfterFinished` and a Job `activeDeadlineSeconds`, so they are
/// refused only beside the `spec.runPolicy` field that replaces them, and
/// otherwise admitted with a warning naming that field: a JobSet's TTL
/// deletes the JobSet of a finished TrainJob but never the TrainJob (the
/// cause of upstream #3779's re-created JobSets), and a Job's deadline
/// fails that Job, not the TrainJob with `DeadlineExceeded`.
pub fn cleanup(spec: &TrainingRuntimeSpec) -> (Vec<FieldError>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let run = spec.run_policy.as_ref();
    let template = spec.template.spec.as_ref();
    if template.is_some_and(|s| s.ttl_seconds_after_finished.is_some()) {
        if run.is_some_and(|r| r.ttl_seconds_after_finished.is_some()) {
            errors.push(FieldError {
                error_type: FieldErrorType::Forbidden,
                field: "spec.runPolicy.ttlSecondsAfterFinished".into(),
                bad_value: None,
                detail: "cannot be combined with spec.template.spec.ttlSecondsAfterFinished: \
                         the finished TrainJob is deleted, and its JobSet with it"
                    .into(),
            });
        } else {
            warnings.push(
                "spec.template.spec.ttlSecondsAfterFinished deletes the JobSet of a finished \
                 TrainJob but not the TrainJob; spec.runPolicy.ttlSecondsAfterFinished deletes both"
                    .to_owned(),
            );
        }
    }
    for (i, job) in job_specs(spec) {
        if job.active_deadline_seconds.is_none() {
            continue;
        }
        let field =
            format!("spec.template.spec.replicatedJobs[{i}].template.spec.activeDeadlineSeconds");
        if run.is_some_and(|r| r.active_deadline_seconds.is_some()) {
            errors.push(FieldError {
                error_type: FieldErrorType::Forbidden,
                field: "spec.runPolicy.activeDeadlineSeconds".into(),
                bad_value: None,
                detail: format!("cannot be combined with {field}"),
            });
        } else {
            warnings.push(format!(
                "{field} fails that replicated job's Jobs, not the TrainJob; \
                 spec.runPolicy.activeDeadlineSeconds bounds the whole TrainJob"
            ));
        }
    }
    (errors, warnings)
}

/// Whether the blueprint can give a TrainJob its runtime info at all.
fn blueprint_errors(spec: &TrainingRuntimeSpec) -> Vec<FieldError> {
    let probe: Result<TrainJob, _> = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "admission-probe", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "admission-probe"}}
    }));
    let Ok(probe) = probe else {
        return Vec::new();
    };
    match admission_info_for(&probe, spec) {
        Err(BlueprintError::Info(e)) => vec![FieldError::invalid(
            "spec.template.spec.replicatedJobs",
            e.to_string(),
        )],
        // A missing blueprint or an undecodable merge is not the runtime's
        // alone to answer for: left to the TrainJob's admission.
        _ => Vec::new(),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    object: &Value,
    kind: &'static str,
) -> Result<T, RuntimeReviewError> {
    serde_json::from_value(object.clone()).map_err(|e| RuntimeReviewError::Decode {
        kind,
        reason: e.to_string(),
    })
}

/// Review a runtime of `kind` (`object` is the new object) for `operation`.
pub fn review_runtime(
    kind: RuntimeKind,
    operation: Operation,
    object: &Value,
) -> Result<Verdict, RuntimeReviewError> {
    let (meta, spec): (ObjectMeta, TrainingRuntimeSpec) = match kind {
        RuntimeKind::Namespaced => {
            if operation != Operation::Create {
                return Ok(Verdict::allow(Vec::new()));
            }
            let r: TrainingRuntime = decode(object, "TrainingRuntime")?;
            (r.metadata, r.spec)
        }
        RuntimeKind::Cluster => {
            if !matches!(operation, Operation::Create | Operation::Update) {
                return Ok(Verdict::allow(Vec::new()));
            }
            let r: ClusterTrainingRuntime = decode(object, "ClusterTrainingRuntime")?;
            (r.metadata, r.spec)
        }
    };
    let mut warnings = Vec::new();
    if kind == RuntimeKind::Cluster
        && operation == Operation::Create
        && meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SUPPORT))
            .is_some_and(|v| v == SUPPORT_DEPRECATED)
    {
        warnings.push(created_deprecated_warning(
            meta.name.as_deref().unwrap_or_default(),
        ));
    }
    let mut errors = validate_replicated_jobs(&spec);
    errors.extend(blueprint_errors(&spec));
    let (fp_errors, fp_warnings) = failure_policy(&spec);
    errors.extend(fp_errors);
    warnings.extend(fp_warnings);
    let (cleanup_errors, cleanup_warnings) = cleanup(&spec);
    errors.extend(cleanup_errors);
    warnings.extend(cleanup_warnings);
    Ok(if errors.is_empty() {
        Verdict::allow(warnings)
    } else {
        Verdict::forbidden(&errors, warnings)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn job(
        name: &str,
        ancestor: Option<&str>,
        replicas: Option<i32>,
        containers: &[&str],
    ) -> Value {
        let mut j = json!({"name": name, "template": {"spec": {"template": {"spec": {
            "containers": containers.iter().map(|c| json!({"name": c, "image": "busybox"})).collect::<Vec<_>>()
        }}}}});
        if let Some(a) = ancestor {
            j["template"]["metadata"] =
                json!({"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": a}});
        }
        if let Some(r) = replicas {
            j["replicas"] = json!(r);
        }
        j
    }

    fn runtime(kind: &str, labels: Value, jobs: Vec<Value>) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
            "metadata": {"name": "rt", "namespace": "ns", "labels": labels},
            "spec": {"template": {"spec": {"replicatedJobs": jobs}}}})
    }

    fn message(v: &Verdict) -> &str {
        &v.message
    }

    #[test]
    fn valid_runtime_is_allowed() {
        let rt = runtime(
            "TrainingRuntime",
            json!({}),
            vec![
                job(
                    "dataset-initializer",
                    Some("dataset-initializer"),
                    Some(1),
                    &["dataset-initializer"],
                ),
                job(
                    "model-initializer",
                    Some("model-initializer"),
                    None,
                    &["model-initializer"],
                ),
                job("node", Some("trainer"), Some(1), &["node", "sidecar"]),
            ],
        );
        let v = review_runtime(RuntimeKind::Namespaced, Operation::Create, &rt).unwrap();
        assert!(v.allowed, "{v:?}");
        assert!(v.warnings.is_empty());
    }

    #[test]
    fn a_failure_policy_refuses_the_templates_own_and_warns_on_endless_restarts() {
        let with = |run_policy: Value, js_policy: Option<Value>, pod_policy: bool| {
            let mut node = job("node", Some("trainer"), None, &["node"]);
            if pod_policy {
                node["template"]["spec"]["podFailurePolicy"] = json!({"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
            }
            let mut rt = runtime("ClusterTrainingRuntime", json!({}), vec![node]);
            rt["spec"]["runPolicy"] = run_policy;
            if let Some(p) = js_policy {
                rt["spec"]["template"]["spec"]["failurePolicy"] = p;
            }
            review_runtime(RuntimeKind::Cluster, Operation::Create, &rt).unwrap()
        };
        let counted = json!({"failurePolicy": {"maxRestarts": 2, "rules": [
            {"action": "FailTrainJob", "onExitCodes": {"operator": "In", "values": [42]}}]}});
        let v = with(counted.clone(), None, false);
        assert!(v.allowed && v.warnings.is_empty(), "{v:?}");
        // Without a runtime policy, the template's own handling stays allowed.
        let v = with(json!({}), Some(json!({"maxRestarts": 1})), true);
        assert!(v.allowed, "{v:?}");
        let v = with(counted, Some(json!({"maxRestarts": 1})), true);
        assert!(!v.allowed);
        assert!(
            message(&v).contains(
                "spec.runPolicy.failurePolicy: Forbidden: cannot be combined with spec.template.spec.failurePolicy"
            ),
            "{v:?}"
        );
        assert!(
            message(&v)
                .contains("spec.template.spec.replicatedJobs[0].template.spec.podFailurePolicy"),
            "{v:?}"
        );
        let endless = json!({"failurePolicy": {"rules": [{"action": "RestartTrainJobAndIgnoreMaxRestarts",
            "onPodConditions": [{"type": "DisruptionTarget"}]}]}});
        let v = with(endless.clone(), None, false);
        assert!(v.allowed, "{v:?}");
        assert_eq!(v.warnings.len(), 1, "{v:?}");
        assert!(v.warnings[0].contains("activeDeadlineSeconds"), "{v:?}");
        let mut bounded = endless;
        bounded["activeDeadlineSeconds"] = json!(3600);
        assert!(with(bounded, None, false).warnings.is_empty());
    }

    /// Every combination of the runtime's `runPolicy` cleanup fields and the
    /// template's own: refused only together, warned alone, silent without.
    #[test]
    fn cleanup_belongs_to_the_run_policy() {
        let with = |run: Value, jobset_ttl: bool, job_deadline: bool| {
            let mut node = job("node", Some("trainer"), None, &["node"]);
            if job_deadline {
                node["template"]["spec"]["activeDeadlineSeconds"] = json!(60);
            }
            let mut rt = runtime("ClusterTrainingRuntime", json!({}), vec![node]);
            rt["spec"]["runPolicy"] = run;
            if jobset_ttl {
                rt["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = json!(0);
            }
            review_runtime(RuntimeKind::Cluster, Operation::Create, &rt).unwrap()
        };
        let ttl = json!({"ttlSecondsAfterFinished": 30});
        let deadline = json!({"activeDeadlineSeconds": 600});
        for run in [json!({}), ttl.clone(), deadline.clone()] {
            let v = with(run.clone(), false, false);
            assert!(v.allowed && v.warnings.is_empty(), "{run}: {v:?}");
        }
        // The template's own, as upstream v2.3 admits them: allowed, with a
        // warning naming the runPolicy field.
        let v = with(json!({}), true, true);
        assert!(v.allowed, "{v:?}");
        assert_eq!(v.warnings.len(), 2, "{v:?}");
        assert!(v.warnings[0].starts_with("spec.template.spec.ttlSecondsAfterFinished"));
        assert!(v.warnings[0].contains("spec.runPolicy.ttlSecondsAfterFinished"));
        assert!(v.warnings[1].starts_with(
            "spec.template.spec.replicatedJobs[0].template.spec.activeDeadlineSeconds"
        ));
        // Beside the field that replaces them: refused, naming both.
        for (run, jobset_ttl, job_deadline, words) in [
            (
                ttl.clone(),
                true,
                false,
                "spec.runPolicy.ttlSecondsAfterFinished: Forbidden: cannot be combined with spec.template.spec.ttlSecondsAfterFinished",
            ),
            (
                deadline.clone(),
                false,
                true,
                "spec.runPolicy.activeDeadlineSeconds: Forbidden: cannot be combined with spec.template.spec.replicatedJobs[0].template.spec.activeDeadlineSeconds",
            ),
        ] {
            let v = with(run, jobset_ttl, job_deadline);
            assert!(!v.allowed && message(&v).contains(words), "{v:?}");
        }
        // Each runPolicy field refuses only its own counterpart.
        let v = with(ttl, false, true);
        assert!(v.allowed && v.warnings.len() == 1, "{v:?}");
        let v = with(deadline, true, false);
        assert!(v.allowed && v.warnings.len() == 1, "{v:?}");
    }

    #[test]
    fn unknown_ancestor_and_unlabelled_jobs_are_ignored() {
        let rt = runtime(
            "TrainingRuntime",
            json!({}),
            vec![
                job("x", Some("something-else"), Some(3), &["whatever"]),
                job("y", None, Some(5), &["whatever"]),
            ],
        );
        assert!(
            review_runtime(RuntimeKind::Namespaced, Operation::Create, &rt)
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn invalid_replicas_is_refused() {
        let rt = runtime(
            "ClusterTrainingRuntime",
            json!({}),
            vec![job("node", Some("trainer"), Some(2), &["node"])],
        );
        let v = review_runtime(RuntimeKind::Cluster, Operation::Create, &rt).unwrap();
        assert!(!v.allowed);
        assert_eq!((v.code, v.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            message(&v),
            "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1"
        );
    }

    #[test]
    fn missing_required_container_is_refused() {
        let rt = runtime(
            "TrainingRuntime",
            json!({}),
            vec![
                job("init", Some("model-initializer"), Some(1), &["other"]),
                job("node", Some("trainer"), Some(3), &["trainer"]),
            ],
        );
        let v = review_runtime(RuntimeKind::Namespaced, Operation::Create, &rt).unwrap();
        assert_eq!(
            message(&v),
            "[spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Invalid value: must contain the required container for the ancestor: model-initializer, \
             spec.template.spec.replicatedJobs[1].replicas: Invalid value: 3: always must be 1, \
             spec.template.spec.replicatedJobs[1].template.spec.template.spec.containers: Invalid value: must contain the required container for the ancestor: trainer]"
        );
    }

    #[test]
    fn training_runtime_updates_are_not_validated_cluster_ones_are() {
        let bad = |kind| {
            runtime(
                kind,
                json!({}),
                vec![job("node", Some("trainer"), Some(2), &["node"])],
            )
        };
        assert!(
            review_runtime(
                RuntimeKind::Namespaced,
                Operation::Update,
                &bad("TrainingRuntime")
            )
            .unwrap()
            .allowed
        );
        assert!(
            !review_runtime(
                RuntimeKind::Cluster,
                Operation::Update,
                &bad("ClusterTrainingRuntime")
            )
            .unwrap()
            .allowed
        );
        assert!(
            review_runtime(RuntimeKind::Cluster, Operation::Delete, &json!({}))
                .unwrap()
                .allowed
        );
    }

    #[test]
    fn deprecated_cluster_runtime_warns_on_create_only() {
        let rt = runtime(
            "ClusterTrainingRuntime",
            json!({"trainer.kubeflow.org/support": "deprecated"}),
            vec![job("node", Some("trainer"), Some(1), &["node"])],
        );
        let v = review_runtime(RuntimeKind::Cluster, Operation::Create, &rt).unwrap();
        assert!(v.allowed);
        assert_eq!(
            v.warnings,
            [
                "ClusterTrainingRuntime \"rt\" is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
            ]
        );
        assert!(
            review_runtime(RuntimeKind::Cluster, Operation::Update, &rt)
                .unwrap()
                .warnings
                .is_empty()
        );
        // Namespaced runtimes never warn.
        let mut ns = rt.clone();
        ns["kind"] = json!("TrainingRuntime");
        assert!(
            review_runtime(RuntimeKind::Namespaced, Operation::Create, &ns)
                .unwrap()
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn a_quantity_no_trainjob_could_use_is_refused() {
        let mut j = job("node", Some("trainer"), Some(1), &["node"]);
        j["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] =
            json!({"requests": {"cpu": "lots"}});
        let rt = runtime("TrainingRuntime", json!({}), vec![j]);
        let v = review_runtime(RuntimeKind::Namespaced, Operation::Create, &rt).unwrap();
        assert!(!v.allowed);
        assert!(
            v.message
                .starts_with("spec.template.spec.replicatedJobs: Invalid value: "),
            "{}",
            v.message
        );
        assert!(v.message.contains("lots"), "{}", v.message);
    }

    #[test]
    fn odd_objects_do_not_panic() {
        for o in [
            json!(null),
            json!({}),
            json!({"spec": 1}),
            json!({"spec": {"template": {"spec": {"replicatedJobs": "x"}}}}),
        ] {
            let _ = review_runtime(RuntimeKind::Cluster, Operation::Create, &o);
            let _ = review_runtime(RuntimeKind::Namespaced, Operation::Create, &o);
        }
        let empty = runtime("TrainingRuntime", json!({}), vec![]);
        assert!(
            review_runtime(RuntimeKind::Namespaced, Operation::Create, &empty)
                .unwrap()
                .allowed
        );
    }
}
