//! CustomValidation with upstream's fields and messages, plus
//! our checks for `numProcPerNode` strings, the elastic reserved names and
//! the elastic bounds. The `TRAINER_*` names are not reserved: a value the
//! user sets in `trainer.env` wins over ours (see [`crate::env::trainer_vars`]).

use crate::elastic::Elastic;
use crate::env::{ELASTIC_VARS, PET_RESERVED};
use crate::inputs;
use crate::torchtune::{self, MULTI_NODE_MODEL, SUPPORTED_MODELS};
use std::collections::BTreeSet;
use trainforge_sdk::api::trainer::v1alpha1::constants::ANCESTOR_TRAINER;
use trainforge_sdk::serde_json::Value;
use trainforge_sdk::{FieldError, Info, Validation};

/// Admission checks of a TrainJob on a Torch runtime (no-op otherwise).
pub fn validate(trainjob: &Value, info: &Info) -> Validation {
    let mut v = Validation::default();
    let (ml, torch) = match inputs::torch_policy(info) {
        Ok(Some(p)) => p,
        Ok(None) => return v,
        Err((field, reason)) => {
            v.errors.push(FieldError::invalid(field, reason));
            return v;
        }
    };
    let trainer = match inputs::trainer(trainjob) {
        Ok(t) => t,
        Err((field, reason)) => {
            v.errors.push(FieldError::invalid(field, reason));
            return v;
        }
    };

    // envInjection targets must exist.
    for target in torch
        .env_injection
        .iter()
        .flat_map(|i| i.targets.iter().flatten())
    {
        for name in &target.container_names {
            if info
                .pod_set(&target.job_name)
                .and_then(|p| p.container(name))
                .is_none()
            {
                v.errors.push(FieldError::invalid(
                    "spec.runtimeRef",
                    crate::missing_target_message(&target.job_name, name),
                ));
            }
        }
    }

    // Reserved env names.
    let elastic_policy = torch.elastic_policy.as_ref();
    let reserved: BTreeSet<&str> = trainer
        .iter()
        .flat_map(|t| t.env.iter().flatten())
        .map(|e| e.name.as_str())
        .filter(|n| {
            PET_RESERVED.contains(n) || (elastic_policy.is_some() && ELASTIC_VARS.contains(n))
        })
        .collect();
    if !reserved.is_empty() {
        let names: Vec<&str> = reserved.into_iter().collect();
        v.errors.push(FieldError::invalid(
            "spec.trainer.env",
            format!(
                "must not have reserved envs, invalid envs configured: [{}]",
                names.join(" ")
            ),
        ));
    }

    let runtime_count = info
        .pod_set_by_ancestor(ANCESTOR_TRAINER)
        .and_then(|p| p.count)
        .unwrap_or(1);
    let trainer_nodes = trainer.as_ref().and_then(|t| t.num_nodes);
    if let Some(p) = elastic_policy
        && let Err(e) = Elastic::resolve(p, ml.num_nodes, trainer_nodes, runtime_count)
    {
        v.errors.push(FieldError::invalid(e.field, e.reason));
    }

    let sizing = match inputs::sizing(trainer.as_ref(), &torch, info) {
        Ok(s) => s,
        Err((field, reason)) => {
            v.errors.push(FieldError::invalid(field, reason));
            return v;
        }
    };

    // torchtune.
    let Some(t) = trainer
        .as_ref()
        .filter(|t| torchtune::is_torchtune(t.command.as_deref()))
    else {
        return v;
    };
    let runtime_name = inputs::runtime_name(trainjob);
    let model = torchtune::model_from_runtime_ref(runtime_name);
    if !SUPPORTED_MODELS.contains(&model.as_str()) {
        v.errors.push(FieldError::invalid(
            "spec.runtimeRef.name",
            format!("must have a supported pretrained model, invalid model configured: {model}"),
        ));
        return v;
    }
    let num_nodes = trainer_nodes.unwrap_or(runtime_count);
    let args = t.args.clone().unwrap_or_default();
    let (qlora, lora) = (torchtune::is_qlora(&args), torchtune::is_lora(&args));
    if num_nodes > 1 && model != MULTI_NODE_MODEL {
        v.errors.push(FieldError::invalid(
            "spec.trainer.numNodes",
            format!("must be 1 for {model} model"),
        ));
    }
    if qlora && model.starts_with("qwen") {
        v.errors.push(FieldError::invalid(
            "spec.runtimeRef.name",
            format!("QLoRA is not supported for {model} model"),
        ));
    }
    let (_, config) =
        torchtune::recipe_and_config(num_nodes, sizing.nproc, sizing.gpu, &args, runtime_name);
    if config.ends_with("_qlora") && (model == "llama3_2/1B" || model == "llama3_2/3B") {
        v.errors.push(FieldError::invalid(
            "spec.trainer.numProcPerNode",
            format!("must be auto or 1 for {model} model when using QLoRA"),
        ));
        v.errors.push(FieldError::invalid(
            "spec.trainer.resourcesPerNode",
            format!("must have gpu resource with value 1 for {model} model when using QLoRA"),
        ));
    }
    if num_nodes > 1 && (lora || qlora) {
        v.errors.push(FieldError::invalid(
            "spec.trainer.numNodes",
            "LoRA fine-tuning is not supported for multi-node training in TorchTune",
        ));
    }
    for (i, arg) in args.iter().enumerate() {
        let key = torchtune::config_key(arg);
        if torchtune::IMMUTABLE_CONFIGS.contains(&key) {
            v.errors.push(FieldError::invalid(
                format!("spec.trainer.args[{i}]"),
                format!("must not set immutable config {key:?} in trainer args; it is managed by the runtime"),
            ));
        }
    }
    v
}
