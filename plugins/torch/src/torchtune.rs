//! torchtune mode: a TrainJob whose `trainer.command` is exactly
//! `["tune", "run"]` gets its command completed with the rendezvous flag,
//! the recipe, the config and the runtime's immutable overrides.

use crate::env::{TRAINER_PORT, master_addr};
use crate::num_proc::NumProc;

/// The command that selects torchtune mode.
pub const TUNE_RUN: [&str; 2] = ["tune", "run"];
/// Pretrained models the torchtune runtimes support.
pub const SUPPORTED_MODELS: [&str; 4] =
    ["llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B"];
/// The one model that may run on several nodes.
pub const MULTI_NODE_MODEL: &str = "llama3_3/70B";
/// Config keys owned by the runtime: copied from its command, refused in
/// `trainer.args`.
pub const IMMUTABLE_CONFIGS: [&str; 4] = [
    "output_dir",
    "tokenizer.path",
    "checkpointer.checkpoint_dir",
    "tokenizer.merges_file",
];

/// Whether `command` selects torchtune mode.
pub fn is_torchtune(command: Option<&[String]>) -> bool {
    command.is_some_and(|c| c.len() == 2 && c[0] == TUNE_RUN[0] && c[1] == TUNE_RUN[1])
}

/// `<x>-<a>-<b>` → `a` with `.` → `_`, `/`, upper-case `b`
/// (`torchtune-llama3.2-1b` → `llama3_2/1B`); any other shape → empty.
pub fn model_from_runtime_ref(name: &str) -> String {
    let parts: Vec<&str> = name.split('-').collect();
    match parts.as_slice() {
        [_, a, b] => format!("{}/{}", a.replace('.', "_"), b.to_uppercase()),
        _ => String::new(),
    }
}

fn flag_true(args: &[String], key: &str) -> bool {
    args.iter().any(|a| {
        a.contains(key)
            && a.split_once('=')
                .is_some_and(|(_, v)| v.trim().eq_ignore_ascii_case("true"))
    })
}

/// LoRA: some arg mentions `model.lora_attn_modules`.
pub fn is_lora(args: &[String]) -> bool {
    args.iter().any(|a| a.contains("model.lora_attn_modules"))
}

/// QLoRA: `model.quantize_base=true` and not `model.use_dora=true`.
pub fn is_qlora(args: &[String]) -> bool {
    flag_true(args, "model.quantize_base") && !flag_true(args, "model.use_dora")
}

/// The `(recipe, config)` pair (`getRecipeAndConfig`).
pub fn recipe_and_config(
    num_nodes: i32,
    nproc: NumProc,
    gpu: i64,
    args: &[String],
    runtime_name: &str,
) -> (String, String) {
    let (qlora, lora) = (is_qlora(args), is_lora(args));
    let single_device = num_nodes == 1 && (nproc == NumProc::Int(1) || gpu == 1);
    let (recipe, suffix) = if single_device {
        if qlora {
            ("lora_finetune_single_device", "_qlora_single_device")
        } else if lora {
            ("lora_finetune_single_device", "_lora_single_device")
        } else {
            ("full_finetune_single_device", "_full_single_device")
        }
    } else if num_nodes == 1 && qlora {
        ("lora_finetune_distributed", "_qlora")
    } else if num_nodes == 1 && lora {
        ("lora_finetune_distributed", "_lora")
    } else if num_nodes > 1 {
        ("full_finetune_distributed", "_full_multinode")
    } else {
        ("full_finetune_distributed", "_full")
    };
    (
        recipe.to_owned(),
        format!("{}{suffix}", model_from_runtime_ref(runtime_name)),
    )
}

/// Whether the `--rdzv_endpoint` flag is needed: several nodes, or several
/// processes per node.
pub fn needs_rendezvous(num_nodes: i32, nproc: NumProc, gpu: i64) -> bool {
    num_nodes > 1
        || matches!(nproc, NumProc::Int(n) if n > 1)
        || (nproc == NumProc::Auto && gpu > 1)
}

/// The key of a `key=value` config entry.
pub fn config_key(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(k, _)| k)
}

/// Entries of the runtime `node` command whose key is an immutable config.
pub fn runtime_overrides(runtime_command: &[String]) -> Vec<String> {
    runtime_command
        .iter()
        .filter(|a| IMMUTABLE_CONFIGS.contains(&config_key(a)))
        .cloned()
        .collect()
}

/// Inputs of the rewrite.
#[derive(Debug, Clone)]
pub struct Tune<'a> {
    /// TrainJob name.
    pub job: &'a str,
    /// Trainer node count.
    pub num_nodes: i32,
    /// Resolved processes per node.
    pub nproc: NumProc,
    /// GPUs per node.
    pub gpu: i64,
    /// `trainer.args`.
    pub args: &'a [String],
    /// `spec.runtimeRef.name`.
    pub runtime_name: &'a str,
    /// The runtime's `node` container command.
    pub runtime_command: &'a [String],
}

/// `tune run [--rdzv_endpoint=<job>-node-0-0.<job>:29500] <recipe> --config <config> <overrides…>`.
pub fn command(t: &Tune<'_>) -> Vec<String> {
    let mut out: Vec<String> = TUNE_RUN.iter().map(|s| (*s).to_owned()).collect();
    if needs_rendezvous(t.num_nodes, t.nproc, t.gpu) {
        out.push(format!(
            "--rdzv_endpoint={}:{TRAINER_PORT}",
            master_addr(t.job)
        ));
    }
    let (recipe, config) = recipe_and_config(t.num_nodes, t.nproc, t.gpu, t.args, t.runtime_name);
    out.push(recipe);
    out.push("--config".to_owned());
    out.push(config);
    out.extend(runtime_overrides(t.runtime_command));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn model_from_runtime_name() {
        assert_eq!(
            model_from_runtime_ref("torchtune-llama3.2-1b"),
            "llama3_2/1B"
        );
        assert_eq!(
            model_from_runtime_ref("torchtune-llama3.2-3b"),
            "llama3_2/3B"
        );
        assert_eq!(
            model_from_runtime_ref("torchtune-qwen2.5-1.5b"),
            "qwen2_5/1.5B"
        );
        assert_eq!(
            model_from_runtime_ref("torchtune-llama3.3-70b"),
            "llama3_3/70B"
        );
        assert_eq!(model_from_runtime_ref("torch-distributed"), "");
        assert_eq!(model_from_runtime_ref("a-b-c-d"), "");
    }

    #[test]
    fn lora_detection() {
        assert!(is_lora(&v(&["model.lora_attn_modules=[q_proj,v_proj]"])));
        assert!(!is_lora(&v(&["batch_size=2"])));
        assert!(!is_lora(&[]));
    }

    #[test]
    fn qlora_detection() {
        assert!(is_qlora(&v(&["model.quantize_base=True"])));
        assert!(is_qlora(&v(&["model.quantize_base= true "])));
        assert!(!is_qlora(&v(&["model.quantize_base=false"])));
        assert!(!is_qlora(&v(&[
            "model.quantize_base=true",
            "model.use_dora=TRUE"
        ])));
        assert!(is_qlora(&v(&[
            "model.quantize_base=true",
            "model.use_dora=false"
        ])));
        assert!(!is_qlora(&[]));
    }

    /// (nodes, nproc, gpus, args, recipe, config).
    type Case<'a> = (i32, NumProc, i64, &'a [String], &'a str, &'a str);

    #[test]
    fn recipe_table() {
        let lora = v(&["model.lora_attn_modules=[q]"]);
        let qlora = v(&["model.lora_attn_modules=[q]", "model.quantize_base=true"]);
        let rt = "torchtune-llama3.2-1b";
        let cases: [Case<'_>; 9] = [
            (
                1,
                NumProc::Int(1),
                0,
                &qlora,
                "lora_finetune_single_device",
                "llama3_2/1B_qlora_single_device",
            ),
            (
                1,
                NumProc::Auto,
                1,
                &lora,
                "lora_finetune_single_device",
                "llama3_2/1B_lora_single_device",
            ),
            (
                1,
                NumProc::Int(1),
                8,
                &[],
                "full_finetune_single_device",
                "llama3_2/1B_full_single_device",
            ),
            (
                1,
                NumProc::Auto,
                2,
                &qlora,
                "lora_finetune_distributed",
                "llama3_2/1B_qlora",
            ),
            (
                1,
                NumProc::Auto,
                2,
                &lora,
                "lora_finetune_distributed",
                "llama3_2/1B_lora",
            ),
            (
                2,
                NumProc::Auto,
                2,
                &[],
                "full_finetune_distributed",
                "llama3_2/1B_full_multinode",
            ),
            (
                2,
                NumProc::Int(1),
                1,
                &lora,
                "full_finetune_distributed",
                "llama3_2/1B_full_multinode",
            ),
            (
                1,
                NumProc::Auto,
                2,
                &[],
                "full_finetune_distributed",
                "llama3_2/1B_full",
            ),
            (
                1,
                NumProc::Int(4),
                0,
                &[],
                "full_finetune_distributed",
                "llama3_2/1B_full",
            ),
        ];
        for (nodes, nproc, gpu, args, recipe, config) in cases {
            assert_eq!(
                recipe_and_config(nodes, nproc, gpu, args, rt),
                (recipe.to_owned(), config.to_owned()),
                "nodes={nodes} nproc={nproc} gpu={gpu} args={args:?}"
            );
        }
    }

    #[test]
    fn overrides_from_runtime_command() {
        let cmd = v(&[
            "tune",
            "run",
            "--rdzv_endpoint=localhost:29500",
            "full_finetune_distributed",
            "--config",
            "llama3_2/1B_full",
            "dataset=torchtune.datasets.instruct_dataset",
            "output_dir=/workspace/output",
            "tokenizer.path=/workspace/model/original/tokenizer.model",
            "checkpointer.checkpoint_dir=/workspace/model",
            "tokenizer.merges_file=/workspace/model/merges.txt",
        ]);
        assert_eq!(
            runtime_overrides(&cmd),
            v(&[
                "output_dir=/workspace/output",
                "tokenizer.path=/workspace/model/original/tokenizer.model",
                "checkpointer.checkpoint_dir=/workspace/model",
                "tokenizer.merges_file=/workspace/model/merges.txt",
            ])
        );
        assert!(runtime_overrides(&v(&["tune", "run"])).is_empty());
        assert!(runtime_overrides(&[]).is_empty());
        assert!(runtime_overrides(&v(&["output_dir_extra=1"])).is_empty());
    }

    #[test]
    fn command_rewrite_and_rendezvous_flag() {
        let rt_cmd = v(&["tune", "run", "output_dir=/out"]);
        let t = Tune {
            job: "ft",
            num_nodes: 1,
            nproc: NumProc::Auto,
            gpu: 2,
            args: &[],
            runtime_name: "torchtune-llama3.2-1b",
            runtime_command: &rt_cmd,
        };
        assert_eq!(
            command(&t),
            v(&[
                "tune",
                "run",
                "--rdzv_endpoint=ft-node-0-0.ft:29500",
                "full_finetune_distributed",
                "--config",
                "llama3_2/1B_full",
                "output_dir=/out"
            ])
        );
        let single = Tune {
            gpu: 1,
            ..t.clone()
        };
        assert_eq!(
            command(&single),
            v(&[
                "tune",
                "run",
                "full_finetune_single_device",
                "--config",
                "llama3_2/1B_full_single_device",
                "output_dir=/out"
            ])
        );
        assert!(needs_rendezvous(2, NumProc::Int(1), 0));
        assert!(needs_rendezvous(1, NumProc::Int(2), 0));
        assert!(!needs_rendezvous(1, NumProc::Int(1), 8));
        assert!(!needs_rendezvous(1, NumProc::Auto, 1));
    }

    #[test]
    fn only_exactly_tune_run_selects_the_mode() {
        assert!(is_torchtune(Some(&v(&["tune", "run"]))));
        assert!(!is_torchtune(Some(&v(&["tune", "run", "x"]))));
        assert!(!is_torchtune(Some(&v(&["torchrun"]))));
        assert!(!is_torchtune(None));
    }
}
