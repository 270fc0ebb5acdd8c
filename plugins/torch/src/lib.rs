//! Torch (Kubeflow Trainer's `plugins/torch`): torchrun's `PET_*` environment, `numProcPerNode`
//! resolution, torchtune command rewriting, `envInjection`, admission
//! checks — plus the older generation's
//! `elasticPolicy` (torchrun elastic settings and an `autoscaling/v2`
//! HorizontalPodAutoscaler, see [`elastic`]) and the `TRAINER_*` variables
//! (see [`env`](mod@env)).
//!
//! Runs only when the runtime's `mlPolicy.torch` is set.
//!
//! Enforce-ml-policy, in order:
//! 1. trainer pod set count ← `trainer.numNodes` (elastic: the initial node
//!    count within the bounds);
//! 2. `numProcPerNode` resolved ([`num_proc`]) against the node's GPUs/CPUs;
//! 3. torchtune mode (`trainer.command == [tune, run]`): the in-memory
//!    TrainJob's command is completed ([`torchtune`]);
//! 4. with `spec.trainer` and a `node` container in the trainer pod set:
//!    `trainer.env`, then `PET_NNODES`, `PET_NPROC_PER_NODE`,
//!    `PET_NODE_RANK`, `PET_MASTER_ADDR`/`PET_MASTER_PORT` (not in torchtune
//!    mode), elastic settings, and container port 29500;
//! 5. the `TRAINER_*` variables into that `node` container (also without
//!    `spec.trainer`, so runtimes that use them in args always resolve);
//! 6. `envInjection.targets`: the five `PET_*` variables (+ elastic,
//!    `TRAINER_*`) into each named container or init container.
//!
//! Every injected variable is defined before the first env entry that
//! references it ([`env::define_before_use`]).

pub mod elastic;
pub mod env;
pub mod inputs;
pub mod num_proc;
pub use trainforge_sdk::quantity;
pub mod torchtune;
pub mod validate;

use elastic::Elastic;
use env::Values;
use inputs::{FieldIssue, to_plugin_error};
use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, CONTAINER_NODE};
use trainforge_sdk::k8s_openapi::api::core::v1::{ContainerPort, EnvVar};
use trainforge_sdk::prelude::*;

/// The policy key.
pub const POLICY: &str = "mlPolicy.torch";

/// The plugin.
#[derive(Default)]
pub struct Torch;

impl Plugin for Torch {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("torch", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .emits("autoscaling/v2", "HorizontalPodAutoscaler")
            .object_name("autoscaling/v2", "HorizontalPodAutoscaler", "")
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        enforce(ctx).map_err(to_plugin_error)
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some((ml, torch)) = inputs::torch_policy(ctx.info()).map_err(to_plugin_error)? else {
            return Ok(Vec::new());
        };
        let Some(policy) = &torch.elastic_policy else {
            return Ok(Vec::new());
        };
        let count = trainer_count(ctx.info());
        let trainer = inputs::trainer(ctx.trainjob()).map_err(to_plugin_error)?;
        let e = Elastic::resolve(
            policy,
            ml.num_nodes,
            trainer.and_then(|t| t.num_nodes),
            count,
        )
        .map_err(|e| to_plugin_error((e.field, e.reason)))?;
        Ok(e.hpa(
            ctx.trainjob_name(),
            ctx.trainjob_namespace(),
            ctx.owner_reference(),
        )
        .into_iter()
        .collect())
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        Ok(validate::validate(ctx.trainjob(), ctx.info()))
    }
}

/// The trainer pod set's count (1 without a trainer pod set).
fn trainer_count(info: &Info) -> i32 {
    info.pod_set_by_ancestor(ANCESTOR_TRAINER)
        .and_then(|p| p.count)
        .unwrap_or(1)
}

/// The message when an `envInjection` target does not exist.
pub fn missing_target_message(job: &str, container: &str) -> String {
    format!(
        "envInjection target podSet {job:?} container {container:?} not found in runtime template"
    )
}

fn enforce(ctx: &mut PhaseContext) -> Result<(), FieldIssue> {
    let Some((ml, torch)) = inputs::torch_policy(ctx.info())? else {
        return Ok(());
    };
    let trainer = inputs::trainer(ctx.trainjob())?;
    let trainer_nodes = trainer.as_ref().and_then(|t| t.num_nodes);
    let job = ctx.trainjob_name().to_owned();

    // 1. node count.
    let runtime_count = trainer_count(ctx.info());
    let elastic = match &torch.elastic_policy {
        Some(p) => Some(
            Elastic::resolve(p, ml.num_nodes, trainer_nodes, runtime_count)
                .map_err(|e| (e.field, e.reason))?,
        ),
        None => None,
    };
    let count = match &elastic {
        Some(e) => Some(e.initial_nodes(trainer_nodes, runtime_count)),
        None => trainer_nodes,
    };
    if let Some(n) = count
        && ctx.pod_set_by_ancestor(ANCESTOR_TRAINER).is_some()
        && let Some(ps) = ctx.pod_set_by_ancestor_mut(ANCESTOR_TRAINER)
    {
        ps.count = Some(n);
    }
    let num_nodes = trainer_count(ctx.info());

    // 2. processes per node.
    let sizing = inputs::sizing(trainer.as_ref(), &torch, ctx.info())?;
    let values = Values {
        job: job.clone(),
        nnodes: elastic
            .as_ref()
            .map_or_else(|| num_nodes.to_string(), Elastic::nnodes),
        nproc: sizing.nproc.to_string(),
        node0_hostname: inputs::node0_hostname(ctx.info(), &job),
        elastic: elastic.as_ref().map(Elastic::env),
    };

    // 3. torchtune.
    let tune = torchtune::is_torchtune(trainer.as_ref().and_then(|t| t.command.as_deref()));
    if tune {
        let runtime_command = ctx
            .info()
            .pod_set_by_ancestor(ANCESTOR_TRAINER)
            .and_then(|p| p.containers.iter().find(|c| c.name == CONTAINER_NODE))
            .map(|c| c.command.clone())
            .unwrap_or_default();
        let args = trainer
            .as_ref()
            .and_then(|t| t.args.clone())
            .unwrap_or_default();
        let command = torchtune::command(&torchtune::Tune {
            job: &job,
            num_nodes,
            nproc: sizing.nproc,
            gpu: sizing.gpu,
            args: &args,
            runtime_name: inputs::runtime_name(ctx.trainjob()),
            runtime_command: &runtime_command,
        });
        let slot = ctx
            .trainjob_mut()
            .pointer_mut("/spec/trainer")
            .and_then(Value::as_object_mut)
            .ok_or(("spec.trainer", "must be an object".to_owned()))?;
        slot.insert("command".to_owned(), json!(command));
    }

    // 4.–5. the trainer's node container.
    let mut injected: Vec<&str> = Vec::new();
    injected.extend(env::PET_RESERVED);
    injected.extend(env::ELASTIC_VARS);
    injected.extend(env::TRAINER_VARS);
    let user_env: Vec<EnvVar> = trainer
        .as_ref()
        .and_then(|t| t.env.clone())
        .unwrap_or_default();
    if let Some(ps) = ctx.pod_set_by_ancestor_mut(ANCESTOR_TRAINER)
        && let Some(node) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE)
    {
        if let Some(t) = &trainer {
            for e in t.env.iter().flatten() {
                env::upsert(&mut node.env, e.clone());
            }
            upsert_all(&mut node.env, env::pet(&values, !tune));
            upsert_all(&mut node.env, env::elastic(&values));
            node.upsert_port(ContainerPort {
                container_port: env::TRAINER_PORT,
                ..ContainerPort::default()
            });
        }
        upsert_all(&mut node.env, env::trainer_vars(&values, &user_env));
        env::define_before_use(&mut node.env, &injected);
    }

    // 6. envInjection targets.
    let targets = torch
        .env_injection
        .as_ref()
        .and_then(|i| i.targets.clone())
        .unwrap_or_default();
    for target in &targets {
        for name in &target.container_names {
            let container = ctx
                .info_mut()
                .pod_set_mut(&target.job_name)
                .and_then(|ps| ps.container_mut(name))
                .ok_or_else(|| {
                    (
                        "spec.runtimeRef",
                        missing_target_message(&target.job_name, name),
                    )
                })?;
            upsert_all(&mut container.env, env::pet(&values, true));
            upsert_all(&mut container.env, env::elastic(&values));
            upsert_all(&mut container.env, env::trainer_vars(&values, &user_env));
            env::define_before_use(&mut container.env, &injected);
        }
    }
    Ok(())
}

fn upsert_all(list: &mut Vec<EnvVar>, vars: Vec<EnvVar>) {
    for v in vars {
        env::upsert(list, v);
    }
}

trainforge_sdk::export_plugin!(Torch);

#[cfg(test)]
mod tests;
