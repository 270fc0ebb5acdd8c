//! CustomValidation of the JobSet plugin (admission), with the upstream
//! messages, plus Trainforge's warning for `spec.trainer` on a
//! runtime without a trainer-labelled job.

use serde::Deserialize;
use serde_json::Value;
use trainforge_sdk::api::trainer::v1alpha1::constants::{
    ANCESTOR_TRAINER, CONTAINER_DATASET_INITIALIZER, CONTAINER_MODEL_INITIALIZER, CONTAINER_NODE,
    MANAGER_LEGACY_FIELDS,
};
use trainforge_sdk::{ANCESTOR_LABEL, FieldError, FieldErrorType, Info, Validation};

use crate::json::bool_at;

/// Name of the volume (mount) initializers write to.
pub const INITIALIZER_VOLUME: &str = "initializer";

/// Plugin configuration.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// Reject (as Kubeflow Trainer v2.3+ does) instead of warn when an
    /// initializer container has no volumeMount named `initializer`.
    /// Default `false`: initializer runtimes that mount their own volumes
    /// (as the product's example runtime does) must be accepted.
    pub strict_initializer_volume_mount: bool,
}

/// The JobSet lookup validation needs (for the "still active" rules):
/// `Ok(None)` when there is no JobSet.
pub type JobSetLookup<'a> = &'a dyn Fn() -> Result<Option<Value>, String>;

/// Every rule, for a create (`old = None`) or an update.
pub fn validate(
    trainjob: &Value,
    old: Option<&Value>,
    info: &Info,
    cfg: &Config,
    jobset: JobSetLookup<'_>,
) -> Validation {
    let mut v = Validation::default();
    trainer_label_warning(trainjob, info, &mut v);
    initializers(trainjob, info, cfg, &mut v);
    runtime_patches(trainjob, info, &mut v);
    failure_policy(trainjob, info, &mut v);
    if let Some(old) = old {
        immutability(trainjob, old, jobset, &mut v);
    }
    v
}

fn error(
    t: FieldErrorType,
    field: &str,
    bad: Option<String>,
    detail: impl Into<String>,
) -> FieldError {
    FieldError {
        error_type: t,
        field: field.to_owned(),
        bad_value: bad,
        detail: detail.into(),
    }
}

/// Warn when `spec.trainer` is set but no replicated job carries the
/// trainer ancestor label, so nothing of it can apply.
pub fn trainer_label_warning(trainjob: &Value, info: &Info, v: &mut Validation) {
    let trainer_set = trainjob
        .pointer("/spec/trainer")
        .and_then(Value::as_object)
        .is_some_and(|t| t.values().any(|x| !x.is_null()));
    if !trainer_set || info.pod_set_by_ancestor(ANCESTOR_TRAINER).is_some() {
        return;
    }
    let kind = trainjob
        .pointer("/spec/runtimeRef/kind")
        .and_then(Value::as_str)
        .unwrap_or("ClusterTrainingRuntime");
    let name = trainjob
        .pointer("/spec/runtimeRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let job = info
        .pod_set(CONTAINER_NODE)
        .or_else(|| info.template_spec.pod_sets.first())
        .map(|p| format!(" (replicated job {:?})", p.name))
        .unwrap_or_default();
    v.warnings.push(format!(
        "spec.trainer is set, but no replicated job of {kind} {name:?} has the label \
         {ANCESTOR_LABEL}: {ANCESTOR_TRAINER}, so the trainer settings (image, command, args, env, \
         numNodes, resourcesPerNode, numProcPerNode) cannot apply; add the label \
         {ANCESTOR_LABEL}: {ANCESTOR_TRAINER} to the template metadata of the trainer job{job} \
         in the runtime"
    ));
}

/// `spec.initializer.dataset`/`.model` need a job named like the
/// initializer, with a container of that name mounting `initializer`.
fn initializers(trainjob: &Value, info: &Info, cfg: &Config, v: &mut Validation) {
    for (key, name, config) in [
        ("dataset", CONTAINER_DATASET_INITIALIZER, "datasetConfig"),
        ("model", CONTAINER_MODEL_INITIALIZER, "modelConfig"),
    ] {
        let set = trainjob
            .pointer(&format!("/spec/initializer/{key}"))
            .is_some_and(|x| !x.is_null());
        if !set {
            continue;
        }
        let field = "spec.runtimeRef";
        let Some(ps) = info.pod_set(name) else {
            v.errors.push(error(
                FieldErrorType::Invalid,
                field,
                None,
                format!("must have {name} job when trainJob is configured with input {config}"),
            ));
            continue;
        };
        let Some(c) = ps.container(name) else {
            v.errors.push(error(
                FieldErrorType::Invalid,
                field,
                None,
                format!("must have container with name - {name} in the {name} job"),
            ));
            continue;
        };
        if !c.volume_mounts.iter().any(|m| m.name == INITIALIZER_VOLUME) {
            let msg = format!(
                "must have volumeMount with name - {INITIALIZER_VOLUME} in container {name} of the {name} job"
            );
            if cfg.strict_initializer_volume_mount {
                v.errors
                    .push(error(FieldErrorType::Invalid, field, None, msg));
            } else {
                v.warnings.push(format!(
                    "{field}: container {name} of the {name} job has no volumeMount named {INITIALIZER_VOLUME}; \
                     Kubeflow Trainer v2.3+ rejects this (\"{msg}\"), Trainforge accepts it because the runtime \
                     mounts its own volumes: make sure the trainer reads what the initializer writes"
                ));
            }
        }
    }
}

/// Kubernetes' `IsDomainPrefixedPath` (e.g. `kueue.x-k8s.io/manager`).
pub fn domain_prefixed_path_errors(field: &str, path: &str) -> Vec<FieldError> {
    let quoted = |s: &str| Some(Value::String(s.to_owned()).to_string());
    if path.is_empty() {
        return vec![error(FieldErrorType::Required, field, None, "")];
    }
    let Some((host, rest)) = path
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        return vec![error(
            FieldErrorType::Invalid,
            field,
            quoted(path),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )];
    };
    let mut out = Vec::new();
    if host.len() > 253 {
        out.push(error(
            FieldErrorType::Invalid,
            field,
            quoted(host),
            "must be no more than 253 characters",
        ));
    }
    if !is_dns1123_subdomain(host) {
        out.push(error(
            FieldErrorType::Invalid,
            field,
            quoted(host),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
             and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
             validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    }
    let path_ok = rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if !path_ok {
        out.push(error(
            FieldErrorType::Invalid,
            field,
            quoted(rest),
            "Invalid path: must match the regex [A-Za-z0-9/\\-._~%!$&'()*+,;=:]+",
        ));
    }
    out
}

fn is_dns1123_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(e)) => {
                (f.is_ascii_lowercase() || f.is_ascii_digit())
                    && (e.is_ascii_lowercase() || e.is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    };
    !s.is_empty() && s.split('.').all(label_ok)
}

/// Per runtime patch: manager, job and container names, no env on the
/// reserved containers. Field `spec.runtimePatches`, bad value the list.
fn runtime_patches(trainjob: &Value, info: &Info, v: &mut Validation) {
    let Some(patches) = trainjob
        .pointer("/spec/runtimePatches")
        .and_then(Value::as_array)
    else {
        return;
    };
    let field = "spec.runtimePatches";
    let whole = Some(Value::Array(patches.clone()).to_string());
    let mut push = |detail: String| {
        v.errors
            .push(error(FieldErrorType::Invalid, field, whole.clone(), detail))
    };
    let mut manager_errors = Vec::new();
    for patch in patches {
        let manager = patch
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default();
        manager_errors.extend(domain_prefixed_path_errors(
            "spec.runtimePatches.manager",
            manager,
        ));
        // The operator's conversion of the v2.1 fields, which allowed env on
        // every container.
        let env_allowed = manager == MANAGER_LEGACY_FIELDS;
        let jobs = patch
            .pointer("/trainingRuntimeSpec/template/spec/replicatedJobs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for rj in jobs {
            let name = rj.get("name").and_then(Value::as_str).unwrap_or_default();
            let Some(ps) = info.pod_set(name) else {
                push(
                    "must not have replicated job that doesn't exist in the runtime job template"
                        .into(),
                );
                continue;
            };
            let pod = rj.pointer("/template/spec/template/spec");
            let list = |k: &str| {
                pod.and_then(|p| p.get(k))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            for ic in list("initContainers") {
                let n = ic.get("name").and_then(Value::as_str).unwrap_or_default();
                if !ps.init_containers.iter().any(|c| c.name == n) {
                    push(format!(
                        "must not have initContainer that doesn't exist in the runtime job {name}"
                    ));
                }
            }
            for c in list("containers") {
                let n = c.get("name").and_then(Value::as_str).unwrap_or_default();
                if !ps.containers.iter().any(|x| x.name == n) {
                    push(format!(
                        "must not have container that doesn't exist in the runtime job {name}"
                    ));
                }
                let reserved = [
                    CONTAINER_DATASET_INITIALIZER,
                    CONTAINER_MODEL_INITIALIZER,
                    CONTAINER_NODE,
                ]
                .contains(&n);
                let has_env = c
                    .get("env")
                    .and_then(Value::as_array)
                    .is_some_and(|e| !e.is_empty());
                if reserved && has_env && !env_allowed {
                    push("must not have envs for the dataset-initializer, model-initializer, node containers".into());
                }
            }
        }
    }
    v.errors.extend(manager_errors);
}

/// The failure policy ([`crate::failure`]): it must parse, it cannot be
/// combined with a JobSet `failurePolicy` or a Job `podFailurePolicy` of the
/// runtime (or of the TrainJob's runtime patches), and a rule that restarts
/// without counting, with no active deadline to end the TrainJob, is
/// admitted with a warning.
fn failure_policy(trainjob: &Value, info: &Info, v: &mut Validation) {
    let own = trainjob
        .pointer("/spec/failurePolicy")
        .is_some_and(|p| !p.is_null());
    let field = if own {
        "spec.failurePolicy"
    } else {
        "spec.runtimeRef"
    };
    let policy = match crate::failure::resolve(info, trainjob) {
        Ok(Some(p)) => p,
        Ok(None) => return,
        Err(e) => {
            v.errors
                .push(error(FieldErrorType::Invalid, field, None, e.to_string()));
            return;
        }
    };
    let spec = &info.template_spec.obj;
    let mut clashes = Vec::new();
    if spec.get("failurePolicy").is_some_and(|p| !p.is_null()) {
        clashes.push("the JobSet failurePolicy".to_owned());
    }
    for rjob in spec
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if rjob
            .pointer("/template/spec/podFailurePolicy")
            .is_some_and(|p| !p.is_null())
        {
            let name = rjob.get("name").and_then(Value::as_str).unwrap_or_default();
            clashes.push(format!("the podFailurePolicy of replicated job {name:?}"));
        }
    }
    if !clashes.is_empty() {
        let whose = if own {
            "a TrainJob failurePolicy"
        } else {
            "the runtime's runPolicy.failurePolicy"
        };
        v.errors.push(error(
            FieldErrorType::Forbidden,
            field,
            None,
            format!(
                "{whose} cannot be combined with {} of the runtime",
                clashes.join(" and ")
            ),
        ));
    }
    let restarts_forever = policy.rules.iter().any(|r| {
        r.action == trainforge_sdk::api::trainer::v1alpha1::failure_policy::ACTION_RESTART_UNCOUNTED
    });
    let deadline = trainjob
        .pointer("/spec/activeDeadlineSeconds")
        .is_some_and(|d| !d.is_null())
        || info.policy("runPolicy.activeDeadlineSeconds").is_some();
    if restarts_forever && !deadline {
        v.warnings.push(
            "the runtime's failure policy has a RestartTrainJobAndIgnoreMaxRestarts rule and no \
             activeDeadlineSeconds is set: a TrainJob failing that way restarts without end"
                .to_owned(),
        );
    }
}

/// Updates: overrides may only change while suspended and while no
/// replicated job of the JobSet is active.
fn immutability(new: &Value, old: &Value, jobset: JobSetLookup<'_>, v: &mut Validation) {
    let new_suspend = bool_at(new, "/spec/suspend");
    let old_suspend = bool_at(old, "/spec/suspend");
    let changed = |p: &str| new.pointer(p) != old.pointer(p);
    // HEAD: runtimePatches (suspended before or after the update).
    if changed("/spec/runtimePatches") {
        let field = "spec.runtimePatches";
        if !new_suspend && !old_suspend {
            v.errors.push(error(
                FieldErrorType::Forbidden,
                field,
                None,
                "RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
            ));
        } else {
            active_jobs(field, "RuntimePatches", jobset, v);
        }
    }
    // v2.1: podTemplateOverrides (only the new suspend value counts).
    if changed("/spec/podTemplateOverrides") {
        let field = "spec.podTemplateOverrides";
        if !new_suspend {
            v.errors.push(error(
                FieldErrorType::Forbidden,
                field,
                None,
                "PodTemplateOverrides can only be modified when the TrainJob is suspended",
            ));
        } else {
            active_jobs(field, "PodTemplateOverrides", jobset, v);
        }
    }
}

fn active_jobs(field: &str, what: &str, jobset: JobSetLookup<'_>, v: &mut Validation) {
    match jobset() {
        Ok(None) => {}
        Ok(Some(js)) => {
            for r in js
                .pointer("/status/replicatedJobsStatus")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if r.get("active").and_then(Value::as_i64).unwrap_or(0) > 0 {
                    let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
                    v.errors.push(error(
                        FieldErrorType::Forbidden,
                        field,
                        None,
                        format!("{what} cannot be modified when the JobSet's ReplicatedJob {name} is still active"),
                    ));
                }
            }
        }
        Err(e) => v
            .errors
            .push(error(FieldErrorType::Internal, field, None, e)),
    }
}
