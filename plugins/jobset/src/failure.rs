//! The failure policy (upstream's KEP-4162) in the JobSet: how often a
//! failed TrainJob is restarted and which pod failures end it at once.
//!
//! Resolution ([`resolve`]): the rules come only from the runtime's
//! `runPolicy.failurePolicy`; `maxRestarts` is the TrainJob's
//! `spec.failurePolicy.maxRestarts`, else the runtime's, else 0. With
//! neither side set, the JobSet is left as the runtime wrote it.
//!
//! Translation ([`apply`]):
//! - every replicated job: `backoffLimit: 0`, pods `restartPolicy: Never`,
//!   and a `podFailurePolicy` with one `FailJob` rule per policy rule that
//!   applies to it, in order (an exit-code rule naming a container applies
//!   only to the jobs whose pods have that container or init container;
//!   exit codes are sorted and deduplicated, a condition's status defaults
//!   to `True`, as the Job API requires);
//! - the JobSet: `failurePolicy.maxRestarts` and, per policy rule `i`, a
//!   rule named `TrainJobFailurePolicyRule<i>` with the mapped action
//!   (`FailJobSet`, `RestartJobSet`, `RestartJobSetAndIgnoreMaxRestarts`),
//!   `onJobFailureReasons: [PodFailurePolicy]`, the Job controller's
//!   message `matching FailJob rule at index <k>$` and the jobs it targets.
//!   `k` is the rule's index in those jobs' `podFailurePolicy`; where it
//!   differs between jobs (an earlier rule skipped some), the rule is split
//!   per index (`TrainJobFailurePolicyRule<i>Index<k>`).
//!
//! A failure no rule matches fails the Job as `BackoffLimitExceeded`, which
//! the JobSet restarts by default (counted). A template `failurePolicy` or
//! Job `podFailurePolicy` is replaced (admission refuses combining them).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use trainforge_sdk::api::trainer::v1alpha1::failure_policy::{
    ACTION_FAIL, ACTION_RESTART, ACTION_RESTART_UNCOUNTED,
};
use trainforge_sdk::api::trainer::v1alpha1::{
    FailurePolicyRule, RuntimeFailurePolicy, TrainJobFailurePolicy,
};
use trainforge_sdk::{Info, PluginError};

use crate::json::{obj_mut, path_mut, str_at};

/// The info key of the runtime's policy.
pub const RUNTIME_POLICY_KEY: &str = "runPolicy.failurePolicy";

/// The Job failure reason of a matched `podFailurePolicy` rule.
pub const REASON_POD_FAILURE_POLICY: &str = "PodFailurePolicy";

/// The policy a TrainJob runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Counted restarts allowed.
    pub max_restarts: i32,
    /// The runtime's rules, in order.
    pub rules: Vec<FailurePolicyRule>,
}

/// The runtime's policy, or an error naming the field.
pub fn runtime_policy(info: &Info) -> Result<Option<RuntimeFailurePolicy>, PluginError> {
    info.policy(RUNTIME_POLICY_KEY)
        .map(|v| {
            serde_json::from_value(v.clone()).map_err(|e| {
                PluginError::InvalidInput(format!("runtime spec.runPolicy.failurePolicy: {e}"))
            })
        })
        .transpose()
}

/// The TrainJob's policy, or an error naming the field.
pub fn trainjob_policy(trainjob: &Value) -> Result<Option<TrainJobFailurePolicy>, PluginError> {
    match trainjob.pointer("/spec/failurePolicy") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| PluginError::InvalidInput(format!("spec.failurePolicy: {e}"))),
    }
}

/// The policy of `trainjob` on the runtime in `info` (see the module
/// rules); `None` when neither sets one.
pub fn resolve(info: &Info, trainjob: &Value) -> Result<Option<Resolved>, PluginError> {
    let runtime = runtime_policy(info)?;
    let own = trainjob_policy(trainjob)?;
    if runtime.is_none() && own.is_none() {
        return Ok(None);
    }
    let max_restarts = own
        .map(|p| p.max_restarts)
        .or_else(|| runtime.as_ref().and_then(|p| p.max_restarts))
        .unwrap_or(0);
    let rules = runtime.and_then(|p| p.rules).unwrap_or_default();
    Ok(Some(Resolved {
        max_restarts,
        rules,
    }))
}

/// The JobSet action of a policy action.
fn jobset_action(action: &str) -> Result<&'static str, PluginError> {
    match action {
        ACTION_FAIL => Ok("FailJobSet"),
        ACTION_RESTART => Ok("RestartJobSet"),
        ACTION_RESTART_UNCOUNTED => Ok("RestartJobSetAndIgnoreMaxRestarts"),
        other => Err(PluginError::InvalidInput(format!(
            "runtime spec.runPolicy.failurePolicy.rules: unknown action {other:?} \
             (FailTrainJob, RestartTrainJob or RestartTrainJobAndIgnoreMaxRestarts)"
        ))),
    }
}

/// The container and init container names of a replicated job's pods.
fn container_names(rjob: &Value) -> Vec<&str> {
    ["containers", "initContainers"]
        .iter()
        .filter_map(|k| rjob.pointer(&format!("/template/spec/template/spec/{k}")))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|c| str_at(c, "/name"))
        .collect()
}

/// The Job `podFailurePolicy` rule of policy rule `rule`, if it applies to
/// a job whose pods have `containers`.
fn job_rule(
    rule: &FailurePolicyRule,
    containers: &[&str],
    i: usize,
) -> Result<Option<Value>, PluginError> {
    if let Some(codes) = &rule.on_exit_codes {
        if let Some(c) = &codes.container_name
            && !containers.contains(&c.as_str())
        {
            return Ok(None);
        }
        let mut values = codes.values.clone();
        values.sort_unstable();
        values.dedup();
        let mut req = json!({"operator": codes.operator, "values": values});
        if let Some(c) = &codes.container_name {
            req["containerName"] = json!(c);
        }
        return Ok(Some(json!({"action": "FailJob", "onExitCodes": req})));
    }
    if let Some(patterns) = &rule.on_pod_conditions {
        let patterns: Vec<Value> = patterns
            .iter()
            .map(|p| json!({"type": p.type_, "status": p.status.as_deref().unwrap_or("True")}))
            .collect();
        return Ok(Some(
            json!({"action": "FailJob", "onPodConditions": patterns}),
        ));
    }
    Err(PluginError::InvalidInput(format!(
        "runtime spec.runPolicy.failurePolicy.rules[{i}]: exactly one of onExitCodes and \
         onPodConditions must be set"
    )))
}

/// Write `policy` into the JobSet `spec` (see the module rules).
pub fn apply(spec: &mut Value, policy: &Resolved) -> Result<(), PluginError> {
    // Per policy rule: local index in a job's podFailurePolicy → jobs.
    let mut targets: Vec<BTreeMap<usize, Vec<String>>> = vec![BTreeMap::new(); policy.rules.len()];
    if let Some(rjobs) = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut) {
        for rjob in rjobs.iter_mut() {
            let name = str_at(rjob, "/name").unwrap_or_default().to_owned();
            let containers: Vec<String> = container_names(rjob)
                .into_iter()
                .map(str::to_owned)
                .collect();
            let containers: Vec<&str> = containers.iter().map(String::as_str).collect();
            let mut job_rules = Vec::new();
            for (i, rule) in policy.rules.iter().enumerate() {
                if let Some(r) = job_rule(rule, &containers, i)?
                    && let Some(by_index) = targets.get_mut(i)
                {
                    by_index
                        .entry(job_rules.len())
                        .or_default()
                        .push(name.clone());
                    job_rules.push(r);
                }
            }
            let job_spec = path_mut(rjob, &["template", "spec"]);
            job_spec["backoffLimit"] = json!(0);
            if let Value::Object(m) = &mut *job_spec {
                if job_rules.is_empty() {
                    m.remove("podFailurePolicy");
                } else {
                    m.insert("podFailurePolicy".into(), json!({"rules": job_rules}));
                }
            }
            path_mut(job_spec, &["template", "spec"])["restartPolicy"] = json!("Never");
        }
    }
    let mut rules = Vec::new();
    for (i, (rule, by_index)) in policy.rules.iter().zip(&targets).enumerate() {
        let action = jobset_action(&rule.action)?;
        for (k, jobs) in by_index {
            let name = if by_index.len() == 1 && *k == i {
                format!("TrainJobFailurePolicyRule{i}")
            } else {
                format!("TrainJobFailurePolicyRule{i}Index{k}")
            };
            rules.push(json!({
                "name": name,
                "action": action,
                "onJobFailureReasons": [REASON_POD_FAILURE_POLICY],
                "onJobFailureMessagePatterns": [format!("matching FailJob rule at index {k}$")],
                "targetReplicatedJobs": jobs,
            }));
        }
    }
    let fp = obj_mut(spec, "failurePolicy");
    *fp = json!({"maxRestarts": policy.max_restarts});
    if !rules.is_empty() {
        fp["rules"] = json!(rules);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use pretty_assertions::assert_eq;
    use trainforge_sdk::api::plugin::RuntimePolicy;

    use super::*;

    fn info(run_policy: Option<Value>) -> Info {
        Info {
            runtime_policy: RuntimePolicy {
                run_policy,
                ..RuntimePolicy::default()
            },
            ..Info::default()
        }
    }

    fn trainjob(failure_policy: Option<Value>) -> Value {
        match failure_policy {
            Some(p) => json!({"spec": {"failurePolicy": p}}),
            None => json!({"spec": {}}),
        }
    }

    #[test]
    fn the_trainjobs_max_restarts_wins_and_rules_come_from_the_runtime() {
        let rules =
            json!([{"action": "FailTrainJob", "onExitCodes": {"operator": "In", "values": [42]}}]);
        let runtime = Some(json!({"failurePolicy": {"maxRestarts": 3, "rules": rules}}));
        assert_eq!(resolve(&info(None), &trainjob(None)).unwrap(), None);
        assert_eq!(
            resolve(
                &info(Some(json!({"ttlSecondsAfterFinished": 5}))),
                &trainjob(None)
            )
            .unwrap(),
            None,
            "a run policy without a failure policy changes nothing"
        );
        let own = resolve(&info(None), &trainjob(Some(json!({"maxRestarts": 2}))))
            .unwrap()
            .unwrap();
        assert_eq!((own.max_restarts, own.rules.len()), (2, 0));
        let theirs = resolve(&info(runtime.clone()), &trainjob(None))
            .unwrap()
            .unwrap();
        assert_eq!((theirs.max_restarts, theirs.rules.len()), (3, 1));
        let both = resolve(&info(runtime), &trainjob(Some(json!({"maxRestarts": 0}))))
            .unwrap()
            .unwrap();
        assert_eq!((both.max_restarts, both.rules.len()), (0, 1));
        let bare = resolve(&info(Some(json!({"failurePolicy": {}}))), &trainjob(None))
            .unwrap()
            .unwrap();
        assert_eq!(bare.max_restarts, 0, "the default");
    }

    #[test]
    fn malformed_policies_name_their_field() {
        let e = resolve(&info(None), &trainjob(Some(json!({"maxRestarts": "two"})))).unwrap_err();
        assert!(e.to_string().contains("spec.failurePolicy"), "{e}");
        let e = resolve(
            &info(Some(json!({"failurePolicy": {"rules": 1}}))),
            &trainjob(None),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("runtime spec.runPolicy.failurePolicy"),
            "{e}"
        );
        let policy = Resolved {
            max_restarts: 0,
            rules: vec![FailurePolicyRule {
                action: "Explode".into(),
                on_pod_conditions: Some(vec![]),
                on_exit_codes: None,
            }],
        };
        let e = apply(&mut json!({"replicatedJobs": []}), &policy).unwrap_err();
        assert!(e.to_string().contains("unknown action \"Explode\""), "{e}");
        let policy = Resolved {
            max_restarts: 0,
            rules: vec![FailurePolicyRule {
                action: ACTION_FAIL.into(),
                ..FailurePolicyRule::default()
            }],
        };
        let mut spec = json!({"replicatedJobs": [{"name": "node"}]});
        let e = apply(&mut spec, &policy).unwrap_err();
        assert!(e.to_string().contains("rules[0]: exactly one of"), "{e}");
    }

    fn rjob(name: &str, container: &str) -> Value {
        json!({"name": name, "template": {"spec": {
            "backoffLimit": 6,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [9]}}]},
            "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": container}]}}}}})
    }

    #[test]
    fn every_job_fails_fast_and_the_jobset_maps_each_rule_to_the_jobs_it_applies_to() {
        let rules: Vec<FailurePolicyRule> = serde_json::from_value(json!([
            {"action": "FailTrainJob",
             "onExitCodes": {"containerName": "node", "operator": "In", "values": [42, 3, 42]}},
            {"action": "RestartTrainJobAndIgnoreMaxRestarts",
             "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "RestartTrainJob", "onExitCodes": {"operator": "NotIn", "values": [0, 1]}},
        ]))
        .unwrap();
        let mut spec = json!({
            "failurePolicy": {"maxRestarts": 9, "restartStrategy": "BlockingRecreate"},
            "replicatedJobs": [rjob("dataset-initializer", "dataset-initializer"), rjob("node", "node")]
        });
        apply(
            &mut spec,
            &Resolved {
                max_restarts: 2,
                rules,
            },
        )
        .unwrap();
        let exit42 = json!({"action": "FailJob", "onExitCodes":
            {"containerName": "node", "operator": "In", "values": [3, 42]}});
        let disruption = json!({"action": "FailJob", "onPodConditions":
            [{"type": "DisruptionTarget", "status": "True"}]});
        let not_ok =
            json!({"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0, 1]}});
        for (i, job_rules) in [
            json!([disruption, not_ok]),
            json!([exit42, disruption, not_ok]),
        ]
        .into_iter()
        .enumerate()
        {
            let job = &spec["replicatedJobs"][i]["template"]["spec"];
            assert_eq!(job["backoffLimit"], json!(0));
            assert_eq!(job["template"]["spec"]["restartPolicy"], json!("Never"));
            assert_eq!(job["podFailurePolicy"]["rules"], job_rules, "job {i}");
        }
        let rule = |name: &str, action: &str, k: usize, jobs: &[&str]| {
            json!({"name": name, "action": action,
                   "onJobFailureReasons": ["PodFailurePolicy"],
                   "onJobFailureMessagePatterns": [format!("matching FailJob rule at index {k}$")],
                   "targetReplicatedJobs": jobs})
        };
        assert_eq!(
            spec["failurePolicy"],
            json!({"maxRestarts": 2, "rules": [
                rule("TrainJobFailurePolicyRule0", "FailJobSet", 0, &["node"]),
                rule("TrainJobFailurePolicyRule1Index0", "RestartJobSetAndIgnoreMaxRestarts", 0,
                     &["dataset-initializer"]),
                rule("TrainJobFailurePolicyRule1Index1", "RestartJobSetAndIgnoreMaxRestarts", 1,
                     &["node"]),
                rule("TrainJobFailurePolicyRule2Index1", "RestartJobSet", 1, &["dataset-initializer"]),
                rule("TrainJobFailurePolicyRule2Index2", "RestartJobSet", 2, &["node"]),
            ]}),
            "the template's failurePolicy is replaced"
        );
    }

    #[test]
    fn without_rules_a_job_keeps_no_pod_failure_policy_and_the_jobset_only_counts() {
        let mut spec = json!({"replicatedJobs": [rjob("node", "node")]});
        apply(
            &mut spec,
            &Resolved {
                max_restarts: 1,
                rules: vec![],
            },
        )
        .unwrap();
        let job = &spec["replicatedJobs"][0]["template"]["spec"];
        assert_eq!(job.get("podFailurePolicy"), None);
        assert_eq!(job["backoffLimit"], json!(0));
        assert_eq!(spec["failurePolicy"], json!({"maxRestarts": 1}));
    }

    #[test]
    fn a_rule_for_a_container_no_job_has_targets_nothing() {
        let rules: Vec<FailurePolicyRule> = serde_json::from_value(json!([
            {"action": "FailTrainJob",
             "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [1]}},
        ]))
        .unwrap();
        let mut spec = json!({"replicatedJobs": [rjob("node", "node")]});
        apply(
            &mut spec,
            &Resolved {
                max_restarts: 0,
                rules,
            },
        )
        .unwrap();
        assert_eq!(
            spec["replicatedJobs"][0]["template"]["spec"].get("podFailurePolicy"),
            None
        );
        assert_eq!(spec["failurePolicy"], json!({"maxRestarts": 0}));
    }
}
