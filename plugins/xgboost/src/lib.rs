//! XGBoost (Kubeflow Trainer's `plugins/xgboost`): when the runtime's `mlPolicy.xgboost` is set and a
//! trainer pod set exists, its count becomes `trainer.numNodes`, and (with
//! `spec.trainer` and a `node` container) the Rabit/collective tracker
//! settings are upserted: `DMLC_TRACKER_URI` = `<job>-node-0-0.<job>`,
//! `DMLC_TRACKER_PORT` = `29500`, `DMLC_TASK_ID` = the Job completion index
//! (`fieldRef`), `DMLC_NUM_WORKER` = nodes × workers per node (the node's GPU
//! count, or 1 without GPUs), plus container port 29500. PlainML also runs
//! for XGBoost runtimes (count and `trainer.env`).
//!
//! Validation: each reserved name in `trainer.env` is refused
//! (`spec.trainer.env[i]`, Forbidden, "`<NAME>` is reserved for the XGBoost
//! runtime").

pub use trainforge_sdk::quantity;

use serde::Deserialize;
use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, CONTAINER_NODE};
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector,
};
use trainforge_sdk::prelude::*;

/// The policy key.
pub const POLICY: &str = "mlPolicy.xgboost";
/// Tracker port (`ContainerTrainerPort`).
pub const PORT: i32 = 29500;
/// Tracker host.
pub const DMLC_TRACKER_URI: &str = "DMLC_TRACKER_URI";
/// Tracker port.
pub const DMLC_TRACKER_PORT: &str = "DMLC_TRACKER_PORT";
/// This worker's task id (node rank).
pub const DMLC_TASK_ID: &str = "DMLC_TASK_ID";
/// Total number of workers.
pub const DMLC_NUM_WORKER: &str = "DMLC_NUM_WORKER";
/// Names a TrainJob may not set.
pub const RESERVED: [&str; 4] = [
    DMLC_TRACKER_URI,
    DMLC_TRACKER_PORT,
    DMLC_TASK_ID,
    DMLC_NUM_WORKER,
];
/// Field path of the Job completion index.
pub const COMPLETION_INDEX_FIELD: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// The plugin.
#[derive(Default)]
pub struct XgBoost;

/// The `spec.trainer` fields XGBoost uses; resources stay JSON so quantities
/// written as YAML numbers are accepted.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Trainer {
    #[serde(default)]
    num_nodes: Option<i32>,
    #[serde(default)]
    resources_per_node: Option<Value>,
}

fn trainer(trainjob: &Value) -> Result<Option<Trainer>, PluginError> {
    match trainjob.pointer("/spec/trainer") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => trainforge_sdk::serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| PluginError::InvalidInput(format!("spec.trainer: {e}"))),
    }
}

impl Plugin for XgBoost {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("xgboost", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .phase(Phase::Validate)
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if ctx.policy(POLICY).is_none() || ctx.pod_set_by_ancestor(ANCESTOR_TRAINER).is_none() {
            return Ok(());
        }
        let trainer = trainer(ctx.trainjob())?;
        let job = ctx.trainjob_name().to_owned();
        let (resources, field) = match trainer.as_ref().and_then(|t| t.resources_per_node.as_ref())
        {
            Some(r) => (Some(r.clone()), "spec.trainer.resourcesPerNode"),
            None => (
                runtime_node_resources(ctx.info()).cloned(),
                "spec.runtimeRef",
            ),
        };
        let gpu = quantity::gpu_per_node(resources.as_ref(), "resources")
            .map_err(|e| PluginError::InvalidInput(format!("{field}: {e}")))?;
        let Some(ps) = ctx.pod_set_by_ancestor_mut(ANCESTOR_TRAINER) else {
            return Ok(());
        };
        if let Some(n) = trainer.as_ref().and_then(|t| t.num_nodes) {
            ps.count = Some(n);
        }
        if trainer.is_none() {
            return Ok(());
        }
        let count = i64::from(ps.count.unwrap_or(1));
        let workers = count.saturating_mul(if gpu > 0 { gpu } else { 1 });
        if let Some(node) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE) {
            for e in env(&job, workers) {
                node.upsert_env(e);
            }
            node.upsert_port(ContainerPort {
                container_port: PORT,
                ..ContainerPort::default()
            });
        }
        Ok(())
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        let mut v = Validation::default();
        if ctx.policy(POLICY).is_none() {
            return Ok(v);
        }
        let env = ctx
            .trainjob()
            .pointer("/spec/trainer/env")
            .and_then(Value::as_array);
        for (i, e) in env.into_iter().flatten().enumerate() {
            if let Some(name) = e.get("name").and_then(Value::as_str)
                && RESERVED.contains(&name)
            {
                v.errors.push(FieldError::forbidden(
                    format!("spec.trainer.env[{i}]"),
                    format!("{name} is reserved for the XGBoost runtime"),
                ));
            }
        }
        Ok(v)
    }
}

/// Resources of the runtime's trainer `node` container (the first one).
fn runtime_node_resources(info: &Info) -> Option<&Value> {
    info.runtime_node_containers()
        .next()
        .and_then(|c| c.get("resources"))
}

/// The DMLC variables, in upstream order.
pub fn env(job: &str, num_workers: i64) -> Vec<EnvVar> {
    let lit = |n: &str, v: String| EnvVar {
        name: n.into(),
        value: Some(v),
        value_from: None,
    };
    vec![
        lit(DMLC_TRACKER_URI, format!("{job}-node-0-0.{job}")),
        lit(DMLC_TRACKER_PORT, PORT.to_string()),
        EnvVar {
            name: DMLC_TASK_ID.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: COMPLETION_INDEX_FIELD.into(),
                }),
                ..EnvVarSource::default()
            }),
        },
        lit(DMLC_NUM_WORKER, num_workers.to_string()),
    ]
}

trainforge_sdk::export_plugin!(XgBoost);

#[cfg(test)]
mod tests;
