//! PreComponentBuilder: consolidate the info with the concrete template.
//!
//! - every pod set gets its pod DNS names,
//!   `<job>-<replicatedJob>-<replica>-<pod>.<subdomain>`;
//! - the `parallelism`/`completions` of each replicated job are set to its
//!   pod set's count.

use serde_json::Value;
use trainforge_sdk::{Info, PluginError};

use crate::json::{path_mut, str_at};

/// The JobSet's pod subdomain: `network.subdomain` of the blueprint, or the
/// TrainJob name when unset or empty.
pub fn subdomain<'a>(obj: &'a Value, job: &'a str) -> &'a str {
    str_at(obj, "/network/subdomain")
        .filter(|s| !s.is_empty())
        .unwrap_or(job)
}

/// The DNS names of the pods of replicated job `rjob`: for every replica `r`
/// and pod `p`, `<job>-<rjob>-<r>-<p>.<subdomain>`.
pub fn endpoints(job: &str, rjob: &str, replicas: i64, pods: i64, subdomain: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in 0..replicas.max(0) {
        for p in 0..pods.max(0) {
            out.push(format!("{job}-{rjob}-{r}-{p}.{subdomain}"));
        }
    }
    out
}

/// Fill `endpoints` of every pod set (by index, as upstream) and sync
/// `parallelism`/`completions` of the same-named replicated jobs.
pub fn pre_build(info: &mut Info, job: &str) -> Result<(), PluginError> {
    // Infallible today; the Result leaves room for template checks.
    let obj = &mut info.template_spec.obj;
    let sub = subdomain(obj, job).to_owned();
    let rjobs: Vec<Value> = match obj.get("replicatedJobs") {
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    };
    for (i, ps) in info.template_spec.pod_sets.iter_mut().enumerate() {
        let rjob = rjobs.get(i);
        let name = rjob
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .unwrap_or(&ps.name)
            .to_owned();
        let replicas = rjob
            .and_then(|r| r.get("replicas"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let pods = i64::from(ps.count.unwrap_or(1));
        ps.endpoints = endpoints(job, &name, replicas, pods, &sub);
    }
    let Some(list) = obj.get_mut("replicatedJobs").and_then(Value::as_array_mut) else {
        return Ok(());
    };
    for ps in &info.template_spec.pod_sets {
        let Some(count) = ps.count else { continue };
        let Some(rjob) = list
            .iter_mut()
            .find(|r| r.get("name").and_then(Value::as_str) == Some(ps.name.as_str()))
        else {
            continue;
        };
        // `path_mut` always yields an object.
        if let Value::Object(m) = path_mut(rjob, &["template", "spec"]) {
            m.insert("parallelism".into(), Value::from(count));
            m.insert("completions".into(), Value::from(count));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use trainforge_sdk::PodSet;

    fn info(obj: Value, sets: Vec<(&str, Option<i32>)>) -> Info {
        let mut i = Info::default();
        i.template_spec.obj = obj;
        i.template_spec.pod_sets = sets
            .into_iter()
            .map(|(n, c)| PodSet {
                name: n.into(),
                count: c,
                ..PodSet::default()
            })
            .collect();
        i
    }

    #[test]
    fn endpoints_cover_every_replica_and_pod() {
        assert_eq!(
            endpoints("alpha", "node", 2, 2, "alpha"),
            vec![
                "alpha-node-0-0.alpha",
                "alpha-node-0-1.alpha",
                "alpha-node-1-0.alpha",
                "alpha-node-1-1.alpha"
            ]
        );
    }

    #[test]
    fn pre_build_uses_subdomain_replicas_and_counts() {
        let obj = json!({"network": {"subdomain": "sub"}, "replicatedJobs": [
            {"name": "launcher", "template": {"spec": {"parallelism": 5}}},
            {"name": "node", "replicas": 2, "template": {}}
        ]});
        let mut i = info(obj, vec![("launcher", Some(1)), ("node", Some(3))]);
        pre_build(&mut i, "j").unwrap();
        assert_eq!(
            i.template_spec.pod_sets[0].endpoints,
            vec!["j-launcher-0-0.sub"]
        );
        assert_eq!(i.template_spec.pod_sets[1].endpoints.len(), 6);
        assert_eq!(i.template_spec.pod_sets[1].endpoints[5], "j-node-1-2.sub");
        let jobs = &i.template_spec.obj["replicatedJobs"];
        assert_eq!(jobs[0]["template"]["spec"]["parallelism"], 1);
        assert_eq!(jobs[0]["template"]["spec"]["completions"], 1);
        assert_eq!(jobs[1]["template"]["spec"]["parallelism"], 3);
        assert_eq!(jobs[1]["template"]["spec"]["completions"], 3);
    }

    #[test]
    fn subdomain_defaults_to_the_trainjob_name() {
        let mut i = info(
            json!({"replicatedJobs": [{"name": "node"}]}),
            vec![("node", Some(2))],
        );
        pre_build(&mut i, "alpha").unwrap();
        assert_eq!(
            i.template_spec.pod_sets[0].endpoints,
            vec!["alpha-node-0-0.alpha", "alpha-node-0-1.alpha"]
        );
    }

    #[test]
    fn pod_sets_without_count_keep_the_template_parallelism() {
        let obj =
            json!({"replicatedJobs": [{"name": "x", "template": {"spec": {"parallelism": 4}}}]});
        let mut i = info(obj, vec![("x", None)]);
        pre_build(&mut i, "j").unwrap();
        assert_eq!(
            i.template_spec.obj["replicatedJobs"][0]["template"]["spec"]["parallelism"],
            4
        );
        assert_eq!(i.template_spec.pod_sets[0].endpoints, vec!["j-x-0-0.j"]);
    }
}
