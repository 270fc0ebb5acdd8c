//! Step 1 of building the info (pure): runtime template + TrainJob overrides →
//! the merged JobSet blueprint that plugins start from.
//!
//! Mirrors Kubeflow Trainer's `newRuntimeInfo` merge:
//! 1. JobSet labels/annotations: the runtime template's, overlaid by the older
//!    API's `spec.labels`/`spec.annotations`, then by each runtime patch's
//!    `template.metadata` in list order (later wins);
//! 2. `spec.podTemplateOverrides` (v2.1) and then `spec.runtimePatches` (HEAD),
//!    each applied with strategic-merge semantics ([`super::strategic_merge`]),
//!    after which replicated jobs are put back into the runtime's order;
//! 3. `trainer.resourcesPerNode` strategic-merged into the `node` container of
//!    the trainer job (only when the runtime has an `mlPolicy`), and of the MPI
//!    `node` job when the launcher also runs as a node.
//!
//! Unlike upstream's merge (whose errors the webhook reports later), every
//! reference to a job or container that the runtime does not have is an error
//! here, naming the TrainJob field, because merging it would create a job or a
//! container without an image.

use std::collections::BTreeMap;

use crate::jobset::v1alpha2::JobSetSpec;
use crate::trainer::v1alpha1::constants::{
    ANCESTOR_TRAINER, CONTAINER_NODE, LABEL_TRAINJOB_ANCESTOR, NODE,
};
use crate::trainer::v1alpha1::{
    MLPolicy, PodGroupPolicy, RunPolicy, RuntimePatch, TrainJob, TrainingRuntimeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

use super::strategic_merge;

/// The runtime blueprint after every TrainJob override has been applied.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedTemplate {
    /// Labels of the JobSet object.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the JobSet object.
    pub annotations: BTreeMap<String, String>,
    /// The JobSet spec, replicated jobs in the runtime's order.
    pub spec: JobSetSpec,
    /// The runtime's ML policy.
    pub ml_policy: Option<MLPolicy>,
    /// The runtime's pod-group policy.
    pub pod_group_policy: Option<PodGroupPolicy>,
    /// The runtime's run policy.
    pub run_policy: Option<RunPolicy>,
}

/// Why a TrainJob's overrides cannot be merged into its runtime.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MergeError {
    /// The runtime has no `spec.template.spec`.
    #[error("the runtime has no spec.template.spec (JobSet blueprint)")]
    MissingTemplateSpec,
    /// An override names a replicated job that the runtime does not have.
    #[error("{field}: {}", self.reason())]
    UnknownJob {
        /// The TrainJob field that names it.
        field: String,
        /// The job name.
        name: String,
    },
    /// An override names a container that the runtime job does not have.
    #[error("{field}: {}", self.reason())]
    UnknownContainer {
        /// The TrainJob field that names it.
        field: String,
        /// The replicated job.
        job: String,
        /// `container` or `init container`.
        kind: &'static str,
        /// The container name.
        name: String,
    },
    /// The merged result is not a valid JobSet spec.
    #[error("merging {source_field} into the runtime produced an invalid JobSet spec: {reason}")]
    InvalidResult {
        /// The TrainJob field being merged.
        source_field: String,
        /// The decoding error.
        reason: String,
    },
}

impl MergeError {
    /// The TrainJob field the problem is about.
    pub fn field(&self) -> &str {
        match self {
            MergeError::UnknownJob { field, .. } | MergeError::UnknownContainer { field, .. } => {
                field
            }
            MergeError::MissingTemplateSpec => "spec.runtimeRef",
            MergeError::InvalidResult { source_field, .. } => source_field,
        }
    }

    /// The problem without the field name.
    pub fn reason(&self) -> String {
        match self {
            MergeError::UnknownJob { name, .. } => {
                format!("the runtime has no replicated job {name:?}")
            }
            MergeError::UnknownContainer {
                job, kind, name, ..
            } => {
                format!("the runtime job {job:?} has no {kind} {name:?}")
            }
            other => other.to_string(),
        }
    }
}

/// Merge `job`'s overrides into `runtime` (pure; see the module docs).
/// The first problem found is the error.
pub fn merge(job: &TrainJob, runtime: &TrainingRuntimeSpec) -> Result<MergedTemplate, MergeError> {
    let (merged, mut problems) = merge_collecting(job, runtime)?;
    match problems.is_empty() {
        true => Ok(merged),
        false => Err(problems.remove(0)),
    }
}

/// Merge like [`merge`], but skip each override that names a job or container
/// the runtime does not have and return those problems beside the result, so
/// admission can report them together with the plugins' findings. Only a
/// runtime without a blueprint or an undecodable result is an error.
pub fn merge_collecting(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
) -> Result<(MergedTemplate, Vec<MergeError>), MergeError> {
    let mut problems = Vec::new();
    let spec = &job.spec;
    let template_meta = runtime.template.metadata.as_ref();
    let mut labels = template_meta
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut annotations = template_meta
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    labels.extend(spec.labels.clone().unwrap_or_default());
    annotations.extend(spec.annotations.clone().unwrap_or_default());
    let patches = spec.runtime_patches.as_deref().unwrap_or_default();
    for patch in patches {
        if let Some(meta) = patch_template(patch).and_then(|t| t.metadata.as_ref()) {
            labels.extend(meta.labels.clone().unwrap_or_default());
            annotations.extend(meta.annotations.clone().unwrap_or_default());
        }
    }

    let runtime_spec = runtime
        .template
        .spec
        .as_ref()
        .ok_or(MergeError::MissingTemplateSpec)?;
    let runtime_order: Vec<String> = jobs(runtime_spec).map(|j| j.name.clone()).collect();
    let mut tree = to_value(Some(runtime_spec), "spec.runtimeRef")?.unwrap_or(Value::Null);

    for (i, ov) in spec.pod_template_overrides.iter().flatten().enumerate() {
        let field = format!("spec.podTemplateOverrides[{i}]");
        let pod_patch = object([
            ("metadata", meta_patch(ov.metadata.as_ref())),
            ("spec", to_value(ov.spec.as_ref(), &field)?),
        ])
        .unwrap_or_else(|| Value::Object(Map::new()));
        for (t, target) in ov.target_jobs.iter().enumerate() {
            let target_field = format!("{field}.targetJobs[{t}].name");
            let index = match job_index(runtime_spec, &target.name, &target_field) {
                Ok(i) => i,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let spec_ref = ov.spec.as_ref();
            if let Err(e) = check_containers(
                runtime_spec,
                index,
                spec_ref
                    .and_then(|s| s.containers.as_ref())
                    .map(|c| c.iter().map(|c| c.name.as_str())),
                spec_ref
                    .and_then(|s| s.init_containers.as_ref())
                    .map(|c| c.iter().map(|c| c.name.as_str())),
                &format!("{field}.spec"),
            ) {
                problems.push(e);
                continue;
            }
            if let Some(pod_template) =
                tree.pointer_mut(&format!("/replicatedJobs/{index}/template/spec/template"))
            {
                strategic_merge::merge(pod_template, &pod_patch);
            }
        }
    }

    for (i, patch) in patches.iter().enumerate() {
        let field = format!("spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec");
        let Some(jobs_patch) = patch_template(patch)
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.replicated_jobs.as_ref())
        else {
            continue;
        };
        let mut rjobs = Vec::with_capacity(jobs_patch.len());
        for (j, rj) in jobs_patch.iter().enumerate() {
            let job_field = format!("{field}.replicatedJobs[{j}]");
            let index = match job_index(runtime_spec, &rj.name, &format!("{job_field}.name")) {
                Ok(i) => i,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let job_tpl = rj.template.as_ref();
            let pod_tpl = job_tpl
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref());
            let pod_spec = pod_tpl.and_then(|t| t.spec.as_ref());
            if let Err(e) = check_containers(
                runtime_spec,
                index,
                pod_spec
                    .and_then(|s| s.containers.as_ref())
                    .map(|c| c.iter().map(|c| c.name.as_str())),
                pod_spec
                    .and_then(|s| s.init_containers.as_ref())
                    .map(|c| c.iter().map(|c| c.name.as_str())),
                &format!("{job_field}.template.spec.template.spec"),
            ) {
                problems.push(e);
                continue;
            }
            let pod_patch = object([
                (
                    "metadata",
                    meta_patch(pod_tpl.and_then(|t| t.metadata.as_ref())),
                ),
                ("spec", to_value(pod_spec, &job_field)?),
            ]);
            let template = object([
                (
                    "metadata",
                    meta_patch(job_tpl.and_then(|t| t.metadata.as_ref())),
                ),
                ("spec", object([("template", pod_patch)])),
            ]);
            rjobs.push(object([
                ("name", Some(json!(rj.name))),
                ("template", template),
            ]));
        }
        if !rjobs.is_empty() {
            strategic_merge::merge(&mut tree, &json!({"replicatedJobs": rjobs}));
        }
    }
    sort_jobs(&mut tree, &runtime_order);

    if let Some(rpn) = spec
        .trainer
        .as_ref()
        .and_then(|t| t.resources_per_node.as_ref())
    {
        let rpn = to_value(Some(rpn), "spec.trainer.resourcesPerNode")?.unwrap_or(Value::Null);
        let launcher_as_node = runtime
            .ml_policy
            .as_ref()
            .and_then(|p| p.mpi.as_ref())
            .and_then(|m| m.run_launcher_as_node)
            .unwrap_or(false);
        for (i, rj) in jobs(runtime_spec).enumerate() {
            let is_trainer = ancestor(rj) == Some(ANCESTOR_TRAINER) && runtime.ml_policy.is_some();
            if !(is_trainer || (launcher_as_node && rj.name == NODE)) {
                continue;
            }
            let Some(containers) = tree
                .pointer_mut(&format!(
                    "/replicatedJobs/{i}/template/spec/template/spec/containers"
                ))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for c in containers
                .iter_mut()
                .filter(|c| c["name"] == CONTAINER_NODE)
            {
                if let Some(obj) = c.as_object_mut() {
                    let resources = obj
                        .entry("resources")
                        .or_insert_with(|| Value::Object(Map::new()));
                    strategic_merge::merge(resources, &rpn);
                }
            }
        }
    }

    let spec_out: JobSetSpec =
        serde_json::from_value(tree).map_err(|e| MergeError::InvalidResult {
            source_field: "spec".into(),
            reason: e.to_string(),
        })?;
    let merged = MergedTemplate {
        labels,
        annotations,
        spec: spec_out,
        ml_policy: runtime.ml_policy.clone(),
        pod_group_policy: runtime.pod_group_policy.clone(),
        run_policy: runtime.run_policy.clone(),
    };
    Ok((merged, problems))
}

/// The value of a replicated job's ancestor label, if any.
pub fn ancestor(job: &crate::jobset::v1alpha2::ReplicatedJob) -> Option<&str> {
    job.template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get(LABEL_TRAINJOB_ANCESTOR))
        .map(String::as_str)
}

fn patch_template(patch: &RuntimePatch) -> Option<&crate::trainer::v1alpha1::JobSetTemplatePatch> {
    patch
        .training_runtime_spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
}

fn jobs(spec: &JobSetSpec) -> impl Iterator<Item = &crate::jobset::v1alpha2::ReplicatedJob> {
    spec.replicated_jobs.iter().flatten()
}

fn job_index(spec: &JobSetSpec, name: &str, field: &str) -> Result<usize, MergeError> {
    jobs(spec)
        .position(|j| j.name == name)
        .ok_or_else(|| MergeError::UnknownJob {
            field: field.to_string(),
            name: name.to_string(),
        })
}

/// Every container and init container an override names must exist in the job.
fn check_containers<'a>(
    spec: &JobSetSpec,
    index: usize,
    containers: Option<impl Iterator<Item = &'a str>>,
    init_containers: Option<impl Iterator<Item = &'a str>>,
    field: &str,
) -> Result<(), MergeError> {
    let pod = jobs(spec)
        .nth(index)
        .and_then(|j| j.template.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref());
    let job = jobs(spec)
        .nth(index)
        .map(|j| j.name.clone())
        .unwrap_or_default();
    let has = |init: bool, name: &str| {
        pod.map(|p| {
            if init {
                p.init_containers.iter().flatten().any(|c| c.name == name)
            } else {
                p.containers.iter().any(|c| c.name == name)
            }
        })
        .unwrap_or(false)
    };
    for (i, name) in containers.into_iter().flatten().enumerate() {
        if !has(false, name) {
            return Err(MergeError::UnknownContainer {
                field: format!("{field}.containers[{i}].name"),
                job,
                kind: "container",
                name: name.to_string(),
            });
        }
    }
    for (i, name) in init_containers.into_iter().flatten().enumerate() {
        if !has(true, name) {
            return Err(MergeError::UnknownContainer {
                field: format!("{field}.initContainers[{i}].name"),
                job,
                kind: "init container",
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

/// Only labels and annotations of a patch's metadata are used (as upstream).
fn meta_patch(meta: Option<&ObjectMeta>) -> Option<Value> {
    let meta = meta?;
    object([
        ("labels", meta.labels.as_ref().map(|l| json!(l))),
        ("annotations", meta.annotations.as_ref().map(|a| json!(a))),
    ])
}

/// A JSON object of the present entries, or `None` when none is present:
/// absent parts of a patch must neither create empty fields nor (as `null`)
/// delete runtime fields.
fn object<const N: usize>(entries: [(&str, Option<Value>); N]) -> Option<Value> {
    let map: Map<String, Value> = entries
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect();
    (!map.is_empty()).then_some(Value::Object(map))
}

fn to_value<T: serde::Serialize>(v: Option<&T>, field: &str) -> Result<Option<Value>, MergeError> {
    v.map(|v| {
        serde_json::to_value(v).map_err(|e| MergeError::InvalidResult {
            source_field: field.to_string(),
            reason: e.to_string(),
        })
    })
    .transpose()
}

/// Put replicated jobs back into the runtime's order (strategic merge orders
/// them by the patch).
fn sort_jobs(tree: &mut Value, order: &[String]) {
    if let Some(list) = tree.get_mut("replicatedJobs").and_then(Value::as_array_mut) {
        list.sort_by_key(|j| {
            j.get("name")
                .and_then(Value::as_str)
                .and_then(|n| order.iter().position(|o| o == n))
                .unwrap_or(usize::MAX)
        });
    }
}
