//! The environment the Torch plugin injects, and its ordering rule.
//!
//! * torchrun's `PET_*` variables (upstream): `PET_NNODES`,
//!   `PET_NPROC_PER_NODE`, `PET_NODE_RANK` (completion-index `fieldRef`),
//!   `PET_MASTER_ADDR` = `<job>-node-0-0.<job>`, `PET_MASTER_PORT` = `29500`.
//! * Elastic extras (older generation's `elasticPolicy`, see [`crate::elastic`]).
//! * Trainforge's `TRAINER_*` variables (not upstream):
//!   `TRAINER_NNODES` (same value as `PET_NNODES`), `TRAINER_NPROC_PER_NODE`
//!   (same as `PET_NPROC_PER_NODE`), `TRAINER_NODE_0_HOSTNAME` (DNS name of
//!   the first trainer pod) and `TRAINER_JOB_ID` (the TrainJob name).
//!
//! Ordering: Kubernetes expands `$(VAR)` in an env value only if `VAR` is
//! defined *earlier* in the list (command/args see every variable). Injected
//! variables are upserted in upstream order (after the runtime's and the
//! TrainJob's), and then [`define_before_use`] moves each injected variable
//! in front of the first entry whose value references it. Injected values
//! never reference other variables, so moving them is always safe, and when
//! nothing references them the order is exactly upstream's.

use trainforge_sdk::k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

/// Trainer port (`ContainerTrainerPort`).
pub const TRAINER_PORT: i32 = 29500;
/// Field path of the Job completion index (used as rank).
pub const COMPLETION_INDEX_FIELD: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// torchrun `--nnodes`.
pub const PET_NNODES: &str = "PET_NNODES";
/// torchrun `--nproc-per-node`.
pub const PET_NPROC_PER_NODE: &str = "PET_NPROC_PER_NODE";
/// torchrun `--node-rank`.
pub const PET_NODE_RANK: &str = "PET_NODE_RANK";
/// torchrun `--master-addr`.
pub const PET_MASTER_ADDR: &str = "PET_MASTER_ADDR";
/// torchrun `--master-port`.
pub const PET_MASTER_PORT: &str = "PET_MASTER_PORT";
/// torchrun `--max-restarts` (elastic only).
pub const PET_MAX_RESTARTS: &str = "PET_MAX_RESTARTS";
/// torchrun `--rdzv-backend` (elastic only).
pub const PET_RDZV_BACKEND: &str = "PET_RDZV_BACKEND";
/// torchrun `--rdzv-endpoint` (elastic only).
pub const PET_RDZV_ENDPOINT: &str = "PET_RDZV_ENDPOINT";
/// torchrun `--rdzv-id` (elastic only).
pub const PET_RDZV_ID: &str = "PET_RDZV_ID";
/// Brief variable: number of nodes (or `min:max` when elastic).
pub const TRAINER_NNODES: &str = "TRAINER_NNODES";
/// Brief variable: processes per node.
pub const TRAINER_NPROC_PER_NODE: &str = "TRAINER_NPROC_PER_NODE";
/// Brief variable: DNS name of the first trainer pod.
pub const TRAINER_NODE_0_HOSTNAME: &str = "TRAINER_NODE_0_HOSTNAME";
/// Brief variable: job identifier (the TrainJob name).
pub const TRAINER_JOB_ID: &str = "TRAINER_JOB_ID";

/// The five upstream reserved `PET_*` names.
pub const PET_RESERVED: [&str; 5] = [
    PET_NNODES,
    PET_NPROC_PER_NODE,
    PET_NODE_RANK,
    PET_MASTER_ADDR,
    PET_MASTER_PORT,
];
/// The `TRAINER_*` names: always injected, but a value the user sets in
/// `trainer.env` wins (they are ours, not upstream's, so not reserved).
pub const TRAINER_VARS: [&str; 4] = [
    TRAINER_NNODES,
    TRAINER_NPROC_PER_NODE,
    TRAINER_NODE_0_HOSTNAME,
    TRAINER_JOB_ID,
];
/// The names injected only with an elastic policy.
pub const ELASTIC_VARS: [&str; 4] = [
    PET_MAX_RESTARTS,
    PET_RDZV_BACKEND,
    PET_RDZV_ENDPOINT,
    PET_RDZV_ID,
];

/// `<job>-node-0-0.<job>`: upstream's hard-coded master address.
pub fn master_addr(job: &str) -> String {
    format!("{job}-node-0-0.{job}")
}

/// A literal env var.
pub fn literal(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// An env var from the pod's completion-index annotation.
pub fn completion_index(name: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: COMPLETION_INDEX_FIELD.to_owned(),
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// Values every injection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Values {
    /// TrainJob name.
    pub job: String,
    /// `PET_NNODES`/`TRAINER_NNODES`: the node count, or `min:max`.
    pub nnodes: String,
    /// `PET_NPROC_PER_NODE`/`TRAINER_NPROC_PER_NODE`.
    pub nproc: String,
    /// `TRAINER_NODE_0_HOSTNAME`.
    pub node0_hostname: String,
    /// Elastic settings, when the runtime has an elastic policy.
    pub elastic: Option<ElasticEnv>,
}

/// torchrun settings of elastic mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElasticEnv {
    /// `--max-restarts`, when set.
    pub max_restarts: Option<i32>,
}

/// The upstream `PET_*` variables, in upstream order. `with_master` is false
/// for the trainer container in torchtune mode.
pub fn pet(v: &Values, with_master: bool) -> Vec<EnvVar> {
    let mut out = vec![
        literal(PET_NNODES, v.nnodes.clone()),
        literal(PET_NPROC_PER_NODE, v.nproc.clone()),
        completion_index(PET_NODE_RANK),
    ];
    if with_master {
        out.push(literal(PET_MASTER_ADDR, master_addr(&v.job)));
        out.push(literal(PET_MASTER_PORT, TRAINER_PORT.to_string()));
    }
    out
}

/// Elastic torchrun settings: `--max-restarts` and a dynamic (`c10d`)
/// rendezvous hosted on the first trainer pod, which `--nnodes=min:max`
/// needs (the default static rendezvous waits for `max` nodes).
pub fn elastic(v: &Values) -> Vec<EnvVar> {
    let Some(e) = &v.elastic else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(n) = e.max_restarts {
        out.push(literal(PET_MAX_RESTARTS, n.to_string()));
    }
    out.push(literal(PET_RDZV_BACKEND, "c10d"));
    out.push(literal(
        PET_RDZV_ENDPOINT,
        format!("{}:{TRAINER_PORT}", master_addr(&v.job)),
    ));
    out.push(literal(PET_RDZV_ID, v.job.clone()));
    out
}

/// Trainforge's `TRAINER_*` variables (not upstream). Where `user` (the
/// TrainJob's `trainer.env`) sets one of these names, the user's variable is
/// used instead of ours, everywhere they are injected.
pub fn trainer_vars(v: &Values, user: &[EnvVar]) -> Vec<EnvVar> {
    [
        literal(TRAINER_NNODES, v.nnodes.clone()),
        literal(TRAINER_NPROC_PER_NODE, v.nproc.clone()),
        literal(TRAINER_NODE_0_HOSTNAME, v.node0_hostname.clone()),
        literal(TRAINER_JOB_ID, v.job.clone()),
    ]
    .into_iter()
    .map(|ours| match user.iter().find(|e| e.name == ours.name) {
        Some(theirs) => theirs.clone(),
        None => ours,
    })
    .collect()
}

/// Upsert by name: replace in place, else append.
pub fn upsert(list: &mut Vec<EnvVar>, env: EnvVar) {
    match list.iter_mut().find(|e| e.name == env.name) {
        Some(slot) => *slot = env,
        None => list.push(env),
    }
}

/// The variable names `$(NAME)` referenced by `s`, with Kubernetes' escape
/// rule (`$$` is a literal `$`).
pub fn references(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    out.push(&body[..end]);
                    rest = &body[end + 1..];
                }
                None => break,
            }
        } else {
            rest = after;
        }
    }
    out
}

/// Move each variable named in `injected` in front of the first entry whose
/// value references it (see the module docs). Other entries keep their order.
pub fn define_before_use(list: &mut Vec<EnvVar>, injected: &[&str]) {
    for name in injected {
        let Some(def) = list.iter().position(|e| e.name == *name) else {
            continue;
        };
        let first_use = list.iter().position(|e| {
            e.value
                .as_deref()
                .is_some_and(|v| references(v).contains(name))
        });
        if let Some(u) = first_use
            && u < def
        {
            let var = list.remove(def);
            list.insert(u, var);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Kubelet's expansion of one string against the variables defined so
    /// far (`$$` → `$`, unknown references kept verbatim).
    pub(crate) fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(body) = after.strip_prefix('(')
                && let Some(end) = body.find(')')
            {
                let name = &body[..end];
                match vars.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&format!("$({name})")),
                }
                rest = &body[end + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        out
    }

    /// The environment a container sees, kubelet-style: each value expanded
    /// against the variables defined before it; `fieldRef` values given by
    /// `field`.
    pub(crate) fn container_env(env: &[EnvVar], field: &str) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        for e in env {
            let v = match (&e.value, &e.value_from) {
                (Some(v), _) => expand(v, &vars),
                (None, Some(_)) => field.to_owned(),
                (None, None) => String::new(),
            };
            vars.insert(e.name.clone(), v);
        }
        vars
    }

    #[test]
    fn finds_references_and_honours_escapes() {
        assert_eq!(references("a $(X) b $(Y_1)"), vec!["X", "Y_1"]);
        assert_eq!(references("$$(X) $(Z"), Vec::<&str>::new());
        assert_eq!(references("$X $$$(W)"), vec!["W"]);
    }

    #[test]
    fn kubelet_expansion_only_sees_earlier_variables() {
        let env = vec![
            literal("A", "$(B)"),
            literal("B", "1"),
            literal("C", "$(B)-$$(B)"),
        ];
        let vars = container_env(&env, "0");
        assert_eq!(vars["A"], "$(B)");
        assert_eq!(vars["C"], "1-$(B)");
    }

    #[test]
    fn injected_variables_move_before_their_first_use_only() {
        let mut env = vec![
            literal("KEEP", "x"),
            literal("USES", "--nnodes=$(TRAINER_NNODES)"),
            literal(PET_NNODES, "2"),
            literal(TRAINER_NNODES, "2"),
        ];
        define_before_use(&mut env, &[PET_NNODES, TRAINER_NNODES]);
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["KEEP", TRAINER_NNODES, "USES", PET_NNODES]);
        assert_eq!(container_env(&env, "0")["USES"], "--nnodes=2");
    }
}
