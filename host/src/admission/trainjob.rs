//! TrainJob validation (CREATE and UPDATE; other operations are admitted).
//!
//! 1. The referenced runtime kind must be `TrainingRuntime` or
//!    `ClusterTrainingRuntime` of `trainer.kubeflow.org` (defaults:
//!    `ClusterTrainingRuntime`, `trainer.kubeflow.org`); otherwise
//!    `spec.RuntimeRef: Invalid value: unsupported runtime: <Kind>.<group>`.
//! 2. The runtime must exist now ([`RuntimeLookup`]): a TrainingRuntime in
//!    the TrainJob's namespace (failure reported on `spec.runtimeRef`), a
//!    ClusterTrainingRuntime by name (on `spec.RuntimeRef`), with the detail
//!    `<error>: specified trainingRuntime must be created before the TrainJob is created`
//!    (`clusterTrainingRuntime` for the cluster kind); a missing runtime's
//!    error is `<plural>.trainer.kubeflow.org "<name>" not found`.
//!    The reference itself is not printed as the bad value.
//! 3. A ClusterTrainingRuntime labelled `trainer.kubeflow.org/support:
//!    deprecated` adds a warning.
//! 4. The runtime info is built and every plugin's `validate` runs
//!    ([`crate::pipeline::run::validate_within`]), each call within what
//!    remains of the request budget. Field errors deny with 403 `Forbidden`;
//!    a plugin that fails under `failurePolicy: Fail` denies with 500
//!    `InternalError` naming the plugin and the reason; under `Ignore` its
//!    failure becomes a warning.
//!
//! Every update is validated (the plugins decide what may change, given the
//! old object); status updates go to the status subresource, which this
//! webhook does not receive.

use serde_json::Value;
use trainforge_api::blueprint::admission_info_for;
use trainforge_api::plugin::FieldError;
use trainforge_api::trainer::v1alpha1::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, DEFAULT_RUNTIME_API_GROUP, DEFAULT_RUNTIME_KIND, GROUP,
    TRAINING_RUNTIME_KIND,
};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

use super::review::{Operation, Verdict};
use crate::pipeline::run::{PipelineError, RuntimeObject, validate_within};
use crate::plugin::{self, PluginSet, ValidateBudget};

/// Reads the runtimes a TrainJob references, as they are now (the watch
/// cache or the API server). Synchronous: handlers call it from a blocking
/// thread.
pub trait RuntimeLookup: Send + Sync {
    /// The TrainingRuntime `name` in `namespace`: `Ok(None)` when it does
    /// not exist, `Err` with the reason when it cannot be read.
    fn training_runtime(&self, ns: &str, name: &str) -> Result<Option<TrainingRuntime>, String>;
    /// The ClusterTrainingRuntime `name`, as for
    /// [`RuntimeLookup::training_runtime`].
    fn cluster_training_runtime(
        &self,
        name: &str,
    ) -> Result<Option<ClusterTrainingRuntime>, String>;
}

/// Why a TrainJob review could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum TrainJobReviewError {
    /// The object (or the old object) is not a TrainJob.
    #[error("decoding the {which}: {reason}")]
    Decode {
        /// `TrainJob` or `old TrainJob`.
        which: &'static str,
        /// The decoding error.
        reason: String,
    },
}

/// The message of a plugin failure that denies a request.
pub fn plugin_failure_message(e: &plugin::Error) -> String {
    let name = plugin_name(e).unwrap_or("unknown");
    let detail = match e {
        plugin::Error::Timeout { limit_ms, .. } => {
            format!("did not finish within its {limit_ms} ms time limit")
        }
        other => other.to_string(),
    };
    format!(
        "plugin {name:?} failed in validate ({}): {detail}",
        e.reason()
    )
}

/// The plugin an error is about, when it names one.
pub fn plugin_name(e: &plugin::Error) -> Option<&str> {
    use plugin::Error as E;
    match e {
        E::Timeout { plugin, .. }
        | E::Budget { plugin, .. }
        | E::Busy { plugin, .. }
        | E::MemoryLimit { plugin, .. }
        | E::Trap { plugin, .. }
        | E::InvalidOutput { plugin, .. }
        | E::ForbiddenObject { plugin, .. }
        | E::IdentityChanged { plugin, .. }
        | E::PodSecurity { plugin, .. }
        | E::ForbiddenKind { plugin, .. }
        | E::InvalidDescriptor { plugin, .. }
        | E::CompileLimit { plugin, .. }
        | E::LoadFailed { plugin, .. }
        | E::DigestMismatch { plugin, .. }
        | E::IncompatibleInterface { plugin, .. }
        | E::Plugin { plugin, .. } => Some(plugin),
        E::InvalidTrainJob(_) | E::Host(_) => None,
    }
}

fn decode(v: &Value, which: &'static str) -> Result<TrainJob, TrainJobReviewError> {
    serde_json::from_value(v.clone()).map_err(|e| TrainJobReviewError::Decode {
        which,
        reason: e.to_string(),
    })
}

/// Find the runtime `job` references, or the field error saying why not.
fn find_runtime(job: &TrainJob, lookup: &dyn RuntimeLookup) -> Result<RuntimeObject, FieldError> {
    let r = &job.spec.runtime_ref;
    let kind = r.kind.as_deref().unwrap_or(DEFAULT_RUNTIME_KIND);
    let group = r.api_group.as_deref().unwrap_or(DEFAULT_RUNTIME_API_GROUP);
    if group != GROUP || (kind != TRAINING_RUNTIME_KIND && kind != CLUSTER_TRAINING_RUNTIME_KIND) {
        return Err(FieldError::invalid(
            "spec.RuntimeRef",
            format!("unsupported runtime: {kind}.{group}"),
        ));
    }
    if kind == TRAINING_RUNTIME_KIND {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let found = lookup.training_runtime(ns, &r.name).and_then(|o| {
            o.ok_or_else(|| format!("trainingruntimes.{GROUP} {:?} not found", r.name))
        });
        return found.map(RuntimeObject::Namespaced).map_err(|e| {
            FieldError::invalid(
                "spec.runtimeRef",
                format!(
                    "{e}: specified trainingRuntime must be created before the TrainJob is created"
                ),
            )
        });
    }
    let found = lookup.cluster_training_runtime(&r.name).and_then(|o| {
        o.ok_or_else(|| format!("clustertrainingruntimes.{GROUP} {:?} not found", r.name))
    });
    found.map(RuntimeObject::Cluster).map_err(|e| {
        FieldError::invalid(
            "spec.RuntimeRef",
            format!(
                "{e}: specified clusterTrainingRuntime must be created before the TrainJob is created"
            ),
        )
    })
}

/// Whether the v2.1 override fields of `object` (a TrainJob being created)
/// may be moved into their runtime patch at admission: its runtime is found
/// and has every replicated job and container they name. Otherwise they stay
/// as sent, and validation refuses them naming the field the user wrote.
pub fn legacy_fields_movable(object: &Value, lookup: &dyn RuntimeLookup) -> bool {
    let Ok(job) = decode(object, "TrainJob") else {
        return false;
    };
    let Ok(runtime) = find_runtime(&job, lookup) else {
        return false;
    };
    admission_info_for(&job, runtime.spec()).is_ok_and(|(_, problems)| {
        problems
            .iter()
            .all(|p| p.field().starts_with("spec.runtimePatches"))
    })
}

/// Review a TrainJob (`object`; `old` on UPDATE) with the plugins in
/// service, every plugin call within `budget`.
pub fn review_trainjob(
    operation: Operation,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn RuntimeLookup,
    plugins: &PluginSet,
    budget: &ValidateBudget,
) -> Result<Verdict, TrainJobReviewError> {
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Ok(Verdict::allow(Vec::new()));
    }
    let job = decode(object, "TrainJob")?;
    let old_job = match (&operation, old) {
        (Operation::Update, Some(o)) if !o.is_null() => Some(decode(o, "old TrainJob")?),
        _ => None,
    };
    let runtime = match find_runtime(&job, lookup) {
        Ok(r) => r,
        Err(e) => return Ok(Verdict::forbidden(&[e], Vec::new())),
    };
    Ok(
        match validate_within(&job, old_job.as_ref(), &runtime, plugins, Some(budget)) {
            Ok(warnings) => Verdict::allow(warnings),
            Err(PipelineError::Invalid { problems, warnings }) => {
                let errors: Vec<FieldError> = problems.into_iter().map(|p| p.error).collect();
                Verdict::forbidden(&errors, warnings)
            }
            Err(PipelineError::Runtime(m)) => {
                Verdict::forbidden(&[FieldError::invalid("spec.runtimeRef", m)], Vec::new())
            }
            Err(PipelineError::Blueprint(e)) => Verdict::forbidden(
                &[FieldError::invalid("spec.runtimeRef", e.to_string())],
                Vec::new(),
            ),
            Err(PipelineError::Plugin(e)) => {
                Verdict::deny(500, "InternalError", plugin_failure_message(&e), Vec::new())
            }
            Err(e @ (PipelineError::PolicyNotServed { .. } | PipelineError::Serialize { .. })) => {
                Verdict::deny(500, "InternalError", e.to_string(), Vec::new())
            }
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::admission::test_support::{Runtimes, lookup, torch_set, trainjob};
    use crate::plugin::FailurePolicy;
    use serde_json::json;
    use std::time::Duration;

    fn review(
        object: Value,
        lookup: &Runtimes,
        policy: FailurePolicy,
        budget: Duration,
    ) -> Verdict {
        review_trainjob(
            Operation::Create,
            &object,
            None,
            lookup,
            &torch_set(policy),
            &ValidateBudget::new(budget),
        )
        .unwrap()
    }

    fn ok(object: Value) -> Verdict {
        review(
            object,
            &lookup(),
            FailurePolicy::Fail,
            Duration::from_secs(3),
        )
    }

    #[test]
    fn a_valid_trainjob_is_admitted_on_either_runtime_kind() {
        for kind in ["TrainingRuntime", "ClusterTrainingRuntime"] {
            let v = ok(trainjob(kind, "torch", json!({"numNodes": 1})));
            assert!(v.allowed, "{kind}: {v:?}");
            assert!(v.warnings.is_empty(), "{v:?}");
        }
    }

    /// Upstream's webhook case: a Flux runtime whose `node` job already has
    /// the init container `flux-installer` → 403 naming the field.
    #[test]
    fn a_flux_runtime_with_a_reserved_init_container_is_refused() {
        use crate::admission::test_support::builtins;
        let flux = |init: Value| -> trainforge_api::trainer::v1alpha1::TrainingRuntime {
            serde_json::from_value(json!({"apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainingRuntime", "metadata": {"name": "flux", "namespace": "ns"},
                "spec": {"mlPolicy": {"numNodes": 1, "flux": {"numProcPerNode": 1}},
                "template": {"spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
                "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"initContainers": init,
                    "containers": [{"name": "node", "image": "ubuntu:jammy"}]}}}}}]}}}}))
            .unwrap()
        };
        let set = builtins(
            &["plugin-flux", "plugin-jobset", "plugin-plainml"],
            FailurePolicy::Fail,
        );
        let review = |init: Value| {
            let mut r = Runtimes::default();
            r.namespaced
                .insert(("ns".into(), "flux".into()), flux(init));
            review_trainjob(
                Operation::Create,
                &trainjob("TrainingRuntime", "flux", json!({"numNodes": 2})),
                None,
                &r,
                &set,
                &ValidateBudget::new(Duration::from_secs(3)),
            )
            .unwrap()
        };
        let v = review(json!([{"name": "setup", "image": "busybox"}]));
        assert!(v.allowed, "{v:?}");
        let v = review(json!([{"name": "flux-installer", "image": "busybox"}]));
        assert_eq!((v.allowed, v.code), (false, 403), "{v:?}");
        assert_eq!(
            v.message,
            "spec.trainer.initContainers: Invalid value: \"flux-installer\": InitContainer 'flux-installer' is reserved"
        );
    }

    #[test]
    fn a_missing_training_runtime_is_refused_with_upstreams_message() {
        let v = ok(trainjob("TrainingRuntime", "nope", json!({})));
        assert_eq!(
            (v.allowed, v.code, v.reason.as_str()),
            (false, 403, "Forbidden")
        );
        assert_eq!(
            v.message,
            "spec.runtimeRef: Invalid value: trainingruntimes.trainer.kubeflow.org \"nope\" not found: specified trainingRuntime must be created before the TrainJob is created"
        );
        let v = ok(trainjob("ClusterTrainingRuntime", "nope", json!({})));
        assert_eq!(
            v.message,
            "spec.RuntimeRef: Invalid value: clustertrainingruntimes.trainer.kubeflow.org \"nope\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"
        );
        let failing = Runtimes {
            fail: Some("the cache is not synced".into()),
            ..Runtimes::default()
        };
        let v = review(
            trainjob("TrainingRuntime", "torch", json!({})),
            &failing,
            FailurePolicy::Fail,
            Duration::from_secs(3),
        );
        assert_eq!(
            v.message,
            "spec.runtimeRef: Invalid value: the cache is not synced: specified trainingRuntime must be created before the TrainJob is created"
        );
    }

    #[test]
    fn an_unsupported_runtime_kind_is_refused() {
        let mut j = trainjob("Foo", "torch", json!({}));
        j["spec"]["runtimeRef"]["apiGroup"] = json!("example.com");
        let v = ok(j);
        assert_eq!(
            v.message,
            "spec.RuntimeRef: Invalid value: unsupported runtime: Foo.example.com"
        );
        let v = ok(trainjob("Foo", "torch", json!({})));
        assert_eq!(
            v.message,
            "spec.RuntimeRef: Invalid value: unsupported runtime: Foo.trainer.kubeflow.org"
        );
    }

    #[test]
    fn a_deprecated_cluster_runtime_warns() {
        let v = ok(trainjob("ClusterTrainingRuntime", "old-torch", json!({})));
        assert!(v.allowed);
        assert_eq!(
            v.warnings,
            [
                "Referenced ClusterTrainingRuntime \"old-torch\" is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
            ]
        );
    }

    #[test]
    fn plugin_field_errors_deny_as_kubernetes_prints_them() {
        let v = ok(trainjob(
            "TrainingRuntime",
            "torch",
            json!({"env": [{"name": "PET_NODE_RANK", "value": "1"}]}),
        ));
        assert_eq!((v.allowed, v.code), (false, 403), "{v:?}");
        assert_eq!(
            v.message,
            "spec.trainer.env: Invalid value: must not have reserved envs, invalid envs configured: [PET_NODE_RANK]"
        );
        // An unknown job in podTemplateOverrides is reported by the host.
        let mut j = trainjob("TrainingRuntime", "torch", json!({}));
        j["spec"]["podTemplateOverrides"] = json!([{"targetJobs": [{"name": "ghost"}]}]);
        let v = ok(j);
        assert!(!v.allowed);
        assert!(v.message.contains("ghost"), "{}", v.message);
    }

    #[test]
    fn a_spent_budget_follows_each_plugins_failure_policy() {
        let j = trainjob("TrainingRuntime", "torch", json!({}));
        let v = review(j.clone(), &lookup(), FailurePolicy::Fail, Duration::ZERO);
        assert_eq!((v.allowed, v.code), (false, 500), "{v:?}");
        assert!(
            v.message
                .starts_with("plugin \"jobset\" failed in validate (Timeout): ")
                && v.message.contains("time limit"),
            "{}",
            v.message
        );
        let v = review(j, &lookup(), FailurePolicy::Ignore, Duration::ZERO);
        assert!(v.allowed, "{v:?}");
        assert!(
            v.warnings
                .iter()
                .any(|w| w.contains("plugin jobset") && w.contains("Timeout")),
            "{:?}",
            v.warnings
        );
    }

    #[test]
    fn updates_are_validated_deletes_are_not() {
        let j = trainjob("TrainingRuntime", "torch", json!({}));
        let mut changed = j.clone();
        changed["spec"]["trainer"]["env"] = json!([{"name": "PET_NODE_RANK", "value": "1"}]);
        let v = review_trainjob(
            Operation::Update,
            &changed,
            Some(&j),
            &lookup(),
            &torch_set(FailurePolicy::Fail),
            &ValidateBudget::new(Duration::from_secs(3)),
        )
        .unwrap();
        assert!(!v.allowed);
        let v = review_trainjob(
            Operation::Delete,
            &Value::Null,
            Some(&j),
            &lookup(),
            &torch_set(FailurePolicy::Fail),
            &ValidateBudget::new(Duration::from_secs(3)),
        )
        .unwrap();
        assert!(v.allowed);
    }

    #[test]
    fn odd_objects_do_not_panic() {
        let set = torch_set(FailurePolicy::Fail);
        let budget = ValidateBudget::new(Duration::from_secs(3));
        let huge: Vec<Value> = (0..10_000)
            .map(|i| json!({"name": format!("E{i}"), "value": "x"}))
            .collect();
        for o in [
            json!(null),
            json!({}),
            json!({"spec": null}),
            json!({"spec": {"runtimeRef": 5}}),
            json!({"metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"env": huge}}}),
            json!({"metadata": {"name": "j", "namespace": "ns"}, "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "runtimePatches": [1, "x"]}}),
        ] {
            let _ = review_trainjob(Operation::Create, &o, None, &lookup(), &set, &budget);
            let _ = review_trainjob(
                Operation::Update,
                &o,
                Some(&json!("x")),
                &lookup(),
                &set,
                &budget,
            );
        }
    }
}
