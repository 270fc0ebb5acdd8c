//! PlainML (Kubeflow Trainer's `plugins/plainml`): for runtimes whose `mlPolicy` selects none of Torch,
//! MPI or JAX (so also XGBoost, Flux and policy-less runtimes), apply
//! `trainer.numNodes` to the trainer pod set and upsert `trainer.env` into its
//! `node` container. Creates nothing.

use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, CONTAINER_NODE};
use trainforge_sdk::k8s_openapi::api::core::v1::EnvVar;
use trainforge_sdk::prelude::*;
use trainforge_sdk::serde::Deserialize;

/// Framework policies whose own plugin handles the trainer node count and env.
pub const FRAMEWORK_POLICIES: [&str; 3] = ["mlPolicy.torch", "mlPolicy.mpi", "mlPolicy.jax"];

/// The plugin.
#[derive(Default)]
pub struct PlainMl;

impl Plugin for PlainMl {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("plainml", env!("CARGO_PKG_VERSION"))
            .policy_key("mlPolicy")
            .phase(Phase::EnforceMlPolicy)
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if FRAMEWORK_POLICIES.iter().any(|k| ctx.policy(k).is_some()) {
            return Ok(());
        }
        let Some(trainer) = trainer(ctx.trainjob())? else {
            return Ok(());
        };
        if ctx.pod_set_by_ancestor(ANCESTOR_TRAINER).is_none() {
            return Ok(());
        }
        let Some(ps) = ctx.pod_set_by_ancestor_mut(ANCESTOR_TRAINER) else {
            return Ok(());
        };
        if let Some(n) = trainer.num_nodes {
            ps.count = Some(n);
        }
        if let Some(node) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE) {
            for env in trainer.env.into_iter().flatten() {
                node.upsert_env(env);
            }
        }
        Ok(())
    }
}

/// The `spec.trainer` fields PlainML uses (other fields are not parsed, so
/// e.g. quantities written as YAML numbers do not matter here).
#[derive(Debug, Default, Deserialize)]
#[serde(crate = "trainforge_sdk::serde", rename_all = "camelCase")]
struct Trainer {
    #[serde(default)]
    num_nodes: Option<i32>,
    #[serde(default)]
    env: Option<Vec<EnvVar>>,
}

/// `spec.trainer` of the TrainJob; `None` when absent.
fn trainer(trainjob: &Value) -> Result<Option<Trainer>, PluginError> {
    match trainjob.pointer("/spec/trainer") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => trainforge_sdk::serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| PluginError::InvalidInput(format!("spec.trainer: {e}"))),
    }
}

trainforge_sdk::export_plugin!(PlainMl);

#[cfg(test)]
mod tests;
