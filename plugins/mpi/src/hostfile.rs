//! The MPI hostfile: one line `<endpoint> slots=<slots>` per pod of the
//! pod set named `node` (and `launcher` when it also runs as a node).

use serde_json::Value;
use trainforge_sdk::api::trainer::v1alpha1::constants::{LAUNCHER, NODE};
use trainforge_sdk::{Info, PodSet};

/// The pod DNS names of a pod set: the ones filled by the JobSet plugin's
/// pre-build, or (when that did not run, e.g. in isolation) computed the
/// same way: `<job>-<rjob>-<replica>-<pod>.<subdomain>`.
pub fn endpoints_of(info: &Info, ps: &PodSet, job: &str) -> Vec<String> {
    if !ps.endpoints.is_empty() {
        return ps.endpoints.clone();
    }
    let obj = &info.template_spec.obj;
    let subdomain = obj
        .pointer("/network/subdomain")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(job);
    let replicas = obj
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|j| j.get("name").and_then(Value::as_str) == Some(ps.name.as_str()))
        .and_then(|j| j.get("replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let pods = i64::from(ps.count.unwrap_or(1));
    let mut out = Vec::new();
    for r in 0..replicas.max(0) {
        for p in 0..pods.max(0) {
            out.push(format!("{job}-{}-{r}-{p}.{subdomain}", ps.name));
        }
    }
    out
}

/// The hostfile contents, pod sets in template order.
pub fn hostfile(info: &Info, job: &str, slots: i32, launcher_as_node: bool) -> String {
    let mut out = String::new();
    for ps in &info.template_spec.pod_sets {
        if ps.name == NODE || (launcher_as_node && ps.name == LAUNCHER) {
            for e in endpoints_of(info, ps, job) {
                out.push_str(&format!("{e} slots={slots}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(sets: &[(&str, i32)]) -> Info {
        let mut i = Info::default();
        i.template_spec.obj = json!({"replicatedJobs": sets.iter().map(|(n, _)| json!({"name": n})).collect::<Vec<_>>()});
        i.template_spec.pod_sets = sets
            .iter()
            .map(|(n, c)| PodSet {
                name: (*n).into(),
                count: Some(*c),
                ..PodSet::default()
            })
            .collect();
        i
    }

    #[test]
    fn upstream_integration_example() {
        let i = info(&[("launcher", 1), ("node", 2)]);
        assert_eq!(
            hostfile(&i, "alpha", 8, false),
            "alpha-node-0-0.alpha slots=8\nalpha-node-0-1.alpha slots=8\n"
        );
    }

    #[test]
    fn launcher_first_when_it_runs_as_node() {
        let i = info(&[("launcher", 1), ("node", 1)]);
        assert_eq!(
            hostfile(&i, "j", 2, true),
            "j-launcher-0-0.j slots=2\nj-node-0-0.j slots=2\n"
        );
    }

    #[test]
    fn prefers_endpoints_from_pre_build_and_honours_subdomain() {
        let mut i = info(&[("node", 2)]);
        i.template_spec.obj["network"] = json!({"subdomain": "sub"});
        assert_eq!(
            endpoints_of(&i, &i.template_spec.pod_sets[0], "j"),
            vec!["j-node-0-0.sub", "j-node-0-1.sub"]
        );
        i.template_spec.pod_sets[0].endpoints = vec!["x.y".into()];
        assert_eq!(hostfile(&i, "j", 1, false), "x.y slots=1\n");
    }
}
