//! Gang arithmetic shared by the PodGroup plugins (coscheduling, volcano):
//! `minMember = Σ count` and `minResources = Σ (singlePodRequests × count)`
//! over **every** pod set (initializers and launcher included, as upstream),
//! with exact Kubernetes quantity arithmetic.
//!
//! Also the "frozen once running" rule shared by both: an existing PodGroup
//! is not re-applied unless the TrainJob is suspended.

use std::collections::BTreeMap;

use kube_quantity::ParsedQuantity;
use trainforge_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use trainforge_sdk::{Info, PluginError};

/// Σ of the pod-set counts (a pod set without a count counts 1).
pub fn min_member(info: &Info) -> i32 {
    info.template_spec
        .pod_sets
        .iter()
        .map(|p| p.count.unwrap_or(1))
        .fold(0i32, i32::saturating_add)
}

/// Σ (single-pod requests × count), per resource name. A quantity that does
/// not parse is an error naming the pod set and the resource.
pub fn min_resources(info: &Info) -> Result<BTreeMap<String, Quantity>, PluginError> {
    let mut sum: BTreeMap<String, ParsedQuantity> = BTreeMap::new();
    for ps in &info.template_spec.pod_sets {
        let count = ps.count.unwrap_or(1);
        for (name, q) in &ps.single_pod_requests {
            let parsed = ParsedQuantity::try_from(q).map_err(|e| {
                PluginError::InvalidInput(format!(
                    "pod set {:?}: singlePodRequests[{name}] = {:?} is not a valid quantity: {e}",
                    ps.name, q.0
                ))
            })?;
            let total = parsed * count;
            let next = match sum.remove(name) {
                Some(acc) => acc + total,
                None => total,
            };
            sum.insert(name.clone(), next);
        }
    }
    Ok(sum
        .into_iter()
        .map(|(k, v)| (k, Quantity::from(v)))
        .collect())
}

/// Whether `build` must emit the PodGroup: it does not exist yet, or the
/// TrainJob is suspended (a running gang is never changed).
pub fn should_apply(existing: bool, trainjob_suspended: bool) -> bool {
    !existing || trainjob_suspended
}

/// [`should_apply`] for this TrainJob, looking up its PodGroup of `kind`
/// (named after the TrainJob) through the host's cache.
pub fn should_apply_for(
    ctx: &trainforge_sdk::PhaseContext,
    kind: &trainforge_sdk::KindRef,
) -> Result<bool, PluginError> {
    let existing = ctx
        .get_object(kind, ctx.trainjob_namespace(), ctx.trainjob_name())?
        .is_some();
    let suspended = ctx
        .trainjob()
        .pointer("/spec/suspend")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    Ok(should_apply(existing, suspended))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainforge_sdk::PodSet;

    fn ps(name: &str, count: i32, req: &[(&str, &str)]) -> PodSet {
        PodSet {
            name: name.into(),
            count: Some(count),
            single_pod_requests: req
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
            ..PodSet::default()
        }
    }

    /// Upstream's integration example: 100 trainer nodes + 2 initializers,
    /// every pod 1 CPU / 4Gi.
    #[test]
    fn hundred_nodes_and_two_initializers() {
        let mut info = Info::default();
        let r = [("cpu", "1"), ("memory", "4Gi")];
        info.template_spec.pod_sets = vec![
            ps("dataset-initializer", 1, &r),
            ps("model-initializer", 1, &r),
            ps("node", 100, &r),
        ];
        assert_eq!(min_member(&info), 102);
        let res = min_resources(&info).expect("sums");
        assert_eq!(res.get("cpu"), Some(&Quantity("102".into())));
        assert_eq!(res.get("memory"), Some(&Quantity("408Gi".into())));
    }

    #[test]
    fn mixed_units_and_missing_resources() {
        let mut info = Info::default();
        info.template_spec.pod_sets = vec![
            ps("launcher", 1, &[("cpu", "500m")]),
            ps("node", 2, &[("cpu", "2"), ("nvidia.com/gpu", "4")]),
        ];
        let res = min_resources(&info).expect("sums");
        let cpu = ParsedQuantity::try_from(res.get("cpu").expect("cpu")).expect("parses");
        assert_eq!(cpu, ParsedQuantity::try_from("4500m").expect("q"));
        assert_eq!(res.get("nvidia.com/gpu"), Some(&Quantity("8".into())));
        assert_eq!(min_member(&info), 3);
    }

    #[test]
    fn bad_quantity_names_pod_set_and_resource() {
        let mut info = Info::default();
        info.template_spec.pod_sets = vec![ps("node", 1, &[("cpu", "lots")])];
        let err = min_resources(&info).expect_err("invalid");
        assert!(
            matches!(&err, PluginError::InvalidInput(m) if m.contains("\"node\"") && m.contains("cpu")),
            "{err}"
        );
    }

    #[test]
    fn frozen_rule() {
        assert!(should_apply(false, false));
        assert!(should_apply(true, true));
        assert!(!should_apply(true, false));
    }
}
