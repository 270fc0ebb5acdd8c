//! Step 2 of building the info (pure): the merged blueprint → the runtime info
//! that plugins see ([`crate::plugin::Info`]), one pod set per
//! replicated job in the template's order.

use std::collections::BTreeMap;

use crate::plugin::{Container, Info, PodSet, RuntimePolicy, Scheduler, TemplateSpec};
use crate::trainer::v1alpha1::constants::ANCESTOR_TRAINER;
use k8s_openapi::api::core::v1::{Container as K8sContainer, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use super::merge::{MergedTemplate, ancestor};

/// Why the runtime info cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InfoError {
    /// A resource quantity in the template does not parse.
    #[error(
        "replicated job {job:?}, container {container:?}: invalid quantity {value:?} for {resource}: {reason}"
    )]
    InvalidQuantity {
        /// Replicated job.
        job: String,
        /// Container.
        container: String,
        /// Resource name.
        resource: String,
        /// The quantity as written.
        value: String,
        /// Parser message.
        reason: String,
    },
    /// The merged blueprint does not serialise (should not happen).
    #[error("cannot serialise the JobSet blueprint: {0}")]
    Serialize(String),
}

/// Build the runtime info from a merged blueprint (upstream `newRuntimeInfo`,
/// step 4): a pod set's count is the job's `parallelism` (default 1), except
/// for the `trainer` job of a runtime with an `mlPolicy`, whose count is
/// `mlPolicy.numNodes` (default 1); never less than 1.
pub fn runtime_info(merged: &MergedTemplate) -> Result<Info, InfoError> {
    let mut pod_sets = Vec::new();
    for rj in merged.spec.replicated_jobs.iter().flatten() {
        let ancestor = ancestor(rj).map(str::to_string);
        let job_spec = rj.template.spec.as_ref();
        let mut count = job_spec.and_then(|s| s.parallelism).unwrap_or(1);
        if ancestor.as_deref() == Some(ANCESTOR_TRAINER)
            && let Some(policy) = &merged.ml_policy
        {
            count = policy.num_nodes.unwrap_or(1);
        }
        let pod = job_spec.and_then(|s| s.template.spec.as_ref());
        pod_sets.push(PodSet {
            name: rj.name.clone(),
            ancestor,
            count: Some(count.max(1)),
            init_containers: pod
                .map(|p| p.init_containers.iter().flatten().map(container).collect())
                .unwrap_or_default(),
            containers: pod
                .map(|p| p.containers.iter().map(container).collect())
                .unwrap_or_default(),
            volumes: pod.and_then(|p| p.volumes.clone()).unwrap_or_default(),
            endpoints: Vec::new(),
            single_pod_requests: match pod {
                Some(p) => pod_requests(&rj.name, p)?,
                None => BTreeMap::new(),
            },
        });
    }
    let obj =
        serde_json::to_value(&merged.spec).map_err(|e| InfoError::Serialize(e.to_string()))?;
    let policy = |v: Option<serde_json::Result<serde_json::Value>>| {
        v.transpose()
            .map_err(|e| InfoError::Serialize(e.to_string()))
    };
    Ok(Info {
        labels: merged.labels.clone(),
        annotations: merged.annotations.clone(),
        runtime_policy: RuntimePolicy {
            ml_policy: policy(merged.ml_policy.as_ref().map(serde_json::to_value))?,
            pod_group_policy: policy(merged.pod_group_policy.as_ref().map(serde_json::to_value))?,
            run_policy: policy(merged.run_policy.as_ref().map(serde_json::to_value))?,
        },
        scheduler: Scheduler::default(),
        template_spec: TemplateSpec { obj, pod_sets },
    })
}

fn container(c: &K8sContainer) -> Container {
    Container {
        name: c.name.clone(),
        image: c.image.clone(),
        command: c.command.clone().unwrap_or_default(),
        env: c.env.clone().unwrap_or_default(),
        ports: c.ports.clone().unwrap_or_default(),
        volume_mounts: c.volume_mounts.clone().unwrap_or_default(),
    }
}

type Requests = BTreeMap<String, ParsedQuantity>;

/// The resource requests of one pod, with Kubernetes' rules
/// (`resourcehelpers.PodRequests`): regular containers and sidecars (init
/// containers with `restartPolicy: Always`) add up; each other init container
/// needs its own requests plus the sidecars started before it; the pod needs
/// the larger of the two, per resource, plus the pod overhead.
pub fn pod_requests(job: &str, pod: &PodSpec) -> Result<BTreeMap<String, Quantity>, InfoError> {
    let mut running = Requests::new();
    for c in &pod.containers {
        add(&mut running, &requests_of(job, c)?);
    }
    let mut sidecars = Requests::new();
    let mut init_peak = Requests::new();
    for c in pod.init_containers.iter().flatten() {
        let req = requests_of(job, c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &req);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut during = sidecars.clone();
            add(&mut during, &req);
            max_into(&mut init_peak, &during);
        }
    }
    add(&mut running, &sidecars);
    max_into(&mut running, &init_peak);
    if let Some(overhead) = &pod.overhead {
        add(&mut running, &parse_map(job, "<pod overhead>", overhead)?);
    }
    Ok(running
        .into_iter()
        .map(|(k, v)| (k, Quantity::from(v)))
        .collect())
}

fn requests_of(job: &str, c: &K8sContainer) -> Result<Requests, InfoError> {
    match c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(r) => parse_map(job, &c.name, r),
        None => Ok(Requests::new()),
    }
}

fn parse_map(
    job: &str,
    container: &str,
    m: &BTreeMap<String, Quantity>,
) -> Result<Requests, InfoError> {
    m.iter()
        .map(|(k, q)| {
            ParsedQuantity::try_from(q)
                .map(|p| (k.clone(), p))
                .map_err(|e| InfoError::InvalidQuantity {
                    job: job.to_string(),
                    container: container.to_string(),
                    resource: k.clone(),
                    value: q.0.clone(),
                    reason: e.to_string(),
                })
        })
        .collect()
}

fn add(into: &mut Requests, other: &Requests) {
    for (k, v) in other {
        let sum = match into.remove(k) {
            Some(cur) => cur + v.clone(),
            None => v.clone(),
        };
        into.insert(k.clone(), sum);
    }
}

fn max_into(into: &mut Requests, other: &Requests) {
    for (k, v) in other {
        match into.get(k) {
            Some(cur) if cur >= v => {}
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn req(m: &BTreeMap<String, Quantity>, k: &str) -> ParsedQuantity {
        ParsedQuantity::try_from(m.get(k).unwrap()).unwrap()
    }

    fn q(s: &str) -> ParsedQuantity {
        ParsedQuantity::try_from(s).unwrap()
    }

    #[test]
    fn containers_add_up_and_init_containers_take_the_max() {
        let p = pod(json!({
            "initContainers": [{"name": "big-init", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}}
            ]
        }));
        let r = pod_requests("node", &p).unwrap();
        assert_eq!(req(&r, "cpu"), q("3"), "init 3 > running 1.5");
        assert_eq!(req(&r, "memory"), q("2Gi"));
        assert_eq!(req(&r, "nvidia.com/gpu"), q("2"));
    }

    #[test]
    fn sidecars_add_to_running_and_to_later_init_containers() {
        let p = pod(json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "100m"}
        }));
        // running = 1 + sidecar 1 = 2; init phase = sidecar 1 + init 2 = 3; + overhead.
        assert_eq!(req(&pod_requests("j", &p).unwrap(), "cpu"), q("3.1"));
    }

    #[test]
    fn invalid_quantity_names_job_container_and_resource() {
        let p =
            pod(json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}));
        let err = pod_requests("node", &p).unwrap_err();
        assert!(
            matches!(&err, InfoError::InvalidQuantity { job, container, resource, .. }
            if job == "node" && container == "a" && resource == "cpu"),
            "{err}"
        );
    }
}
