//! JAX (Kubeflow Trainer's `plugins/jax`): when the runtime's `mlPolicy.jax` is set, the trainer
//! pod set's count becomes `trainer.numNodes`, and (with `spec.trainer` and a
//! `node` container in the trainer pod set) JAX's distributed settings are
//! upserted: `JAX_NUM_PROCESSES` = node count, `JAX_PROCESS_ID` = the Job
//! completion index (`fieldRef`), `JAX_COORDINATOR_ADDRESS` =
//! `<job>-node-0-0.<job>:29500`, plus container port 29500. `trainer.env` is
//! left to the JobSet builder. Upstream's JAX `Validate` is a no-op, so the
//! plugin does not declare the validate phase (no observable difference).

use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, CONTAINER_NODE};
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector,
};
use trainforge_sdk::prelude::*;

/// The policy key.
pub const POLICY: &str = "mlPolicy.jax";
/// Coordinator port (`ContainerTrainerPort`).
pub const PORT: i32 = 29500;
/// Number of JAX processes (one per node).
pub const JAX_NUM_PROCESSES: &str = "JAX_NUM_PROCESSES";
/// This process's index.
pub const JAX_PROCESS_ID: &str = "JAX_PROCESS_ID";
/// Address of process 0.
pub const JAX_COORDINATOR_ADDRESS: &str = "JAX_COORDINATOR_ADDRESS";
/// Field path of the Job completion index.
pub const COMPLETION_INDEX_FIELD: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// The plugin.
#[derive(Default)]
pub struct Jax;

impl Plugin for Jax {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("jax", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if ctx.policy(POLICY).is_none() {
            return Ok(());
        }
        let trainer = match ctx.trainjob().pointer("/spec/trainer") {
            None | Some(Value::Null) => None,
            Some(t) => Some(t.clone()),
        };
        let num_nodes =
            match trainer.as_ref().and_then(|t| t.get("numNodes")) {
                None | Some(Value::Null) => None,
                Some(n) => Some(n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(
                    || {
                        PluginError::InvalidInput(format!(
                            "spec.trainer.numNodes: not an integer: {n}"
                        ))
                    },
                )?),
            };
        let job = ctx.trainjob_name().to_owned();
        if ctx.pod_set_by_ancestor(ANCESTOR_TRAINER).is_none() {
            return Ok(());
        }
        let Some(ps) = ctx.pod_set_by_ancestor_mut(ANCESTOR_TRAINER) else {
            return Ok(());
        };
        if let Some(n) = num_nodes {
            ps.count = Some(n);
        }
        let count = ps.count.unwrap_or(1);
        if trainer.is_none() {
            return Ok(());
        }
        if let Some(node) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE) {
            for e in env(&job, count) {
                node.upsert_env(e);
            }
            node.upsert_port(ContainerPort {
                container_port: PORT,
                ..ContainerPort::default()
            });
        }
        Ok(())
    }
}

/// The JAX variables for TrainJob `job` on `count` nodes, in upstream order.
pub fn env(job: &str, count: i32) -> Vec<EnvVar> {
    vec![
        EnvVar {
            name: JAX_NUM_PROCESSES.into(),
            value: Some(count.to_string()),
            value_from: None,
        },
        EnvVar {
            name: JAX_PROCESS_ID.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: COMPLETION_INDEX_FIELD.into(),
                }),
                ..EnvVarSource::default()
            }),
        },
        EnvVar {
            name: JAX_COORDINATOR_ADDRESS.into(),
            value: Some(format!("{job}-node-0-0.{job}:{PORT}")),
            value_from: None,
        },
    ]
}

trainforge_sdk::export_plugin!(Jax);

#[cfg(test)]
mod tests;
