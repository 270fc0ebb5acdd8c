//! EnforceMLPolicy and CustomValidation of the MPI plugin.

use std::collections::BTreeMap;

use trainforge_sdk::api::trainer::v1alpha1::MPIMLPolicySource;
use trainforge_sdk::api::trainer::v1alpha1::constants::{
    CONTAINER_NODE, DEFAULT_SSH_AUTH_MOUNT_PATH, LAUNCHER, MPI_IMPLEMENTATION_OPENMPI, NODE,
};
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, KeyToPath, ResourceRequirements, SecretVolumeSource, Volume, VolumeMount,
};
use trainforge_sdk::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use trainforge_sdk::prelude::*;

use crate::{
    HOSTFILE_KEY, POLICY, SSH_PRIVATE_KEY, SSH_PUBLIC_KEY, hostfile_name, ssh_secret_name,
};

/// Volume (and mount) name of the SSH keys.
pub const SSH_AUTH_VOLUME: &str = "mpi-ssh-auth";
/// Volume (and mount) name of the hostfile.
pub const HOSTFILE_VOLUME: &str = "mpi-hostfile";
/// Where the launcher mounts the hostfile.
pub const HOSTFILE_DIR: &str = "/etc/mpi";
/// `OMPI_MCA_orte_default_hostfile`.
pub const ENV_HOSTFILE: &str = "OMPI_MCA_orte_default_hostfile";
/// `OMPI_MCA_orte_keep_fqdn_hostnames`.
pub const ENV_KEEP_FQDN: &str = "OMPI_MCA_orte_keep_fqdn_hostnames";
/// `OMPI_MCA_orte_set_default_slots`.
pub const ENV_DEFAULT_SLOTS: &str = "OMPI_MCA_orte_set_default_slots";
/// `OMPI_MCA_plm_rsh_args`.
pub const ENV_RSH_ARGS: &str = "OMPI_MCA_plm_rsh_args";
/// The OpenMPI env names the plugin owns (rejected in `trainer.env`).
pub const RESERVED_ENV: [&str; 4] = [ENV_HOSTFILE, ENV_KEEP_FQDN, ENV_DEFAULT_SLOTS, ENV_RSH_ARGS];

/// `trainer.numProcPerNode` as an integer (`None` if unset or not an int).
fn trainjob_num_proc(trainjob: &Value) -> Option<i32> {
    match trainjob.pointer("/spec/trainer/numProcPerNode")? {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Kubernetes `GetNumGPUPerNode`: the first resource (by name) whose
/// lower-cased name contains `gpu`, from requests, else limits; rounded up.
pub fn gpus(res: &ResourceRequirements) -> i64 {
    let find = |m: Option<&BTreeMap<String, Quantity>>| {
        m.and_then(|m| {
            m.iter()
                .find(|(k, _)| k.to_lowercase().contains("gpu"))
                .map(|(_, q)| ceil_quantity(&q.0))
        })
    };
    find(res.requests.as_ref())
        .or_else(|| find(res.limits.as_ref()))
        .unwrap_or(0)
}

/// A device-count quantity rounded up (plain numbers and milli units).
fn ceil_quantity(q: &str) -> i64 {
    let (num, div) = match q.strip_suffix('m') {
        Some(n) => (n, 1000.0),
        None => (q, 1.0),
    };
    num.parse::<f64>()
        .map(|v| (v / div).ceil() as i64)
        .unwrap_or(0)
}

/// Resources of the runtime's trainer node container: the first container
/// `node` that sets resources, in the jobs named `node` or labelled
/// `trainer`.
fn runtime_node_resources(info: &Info) -> Option<ResourceRequirements> {
    info.runtime_node_containers()
        .find_map(|c| c.get("resources").filter(|r| !r.is_null()))
        .and_then(|r| serde_json::from_value(r.clone()).ok())
}

/// Slots per node: `trainer.numProcPerNode`; else the policy value, raised
/// to the GPU count when it is 1 and the node has more than one GPU.
pub fn slots(
    trainjob: &Value,
    info: &Info,
    policy: &MPIMLPolicySource,
) -> Result<i32, PluginError> {
    if let Some(n) = trainjob_num_proc(trainjob) {
        return Ok(n);
    }
    let current = policy.num_proc_per_node.unwrap_or(1);
    if current != 1 {
        return Ok(current);
    }
    let res = match trainjob.pointer("/spec/trainer/resourcesPerNode") {
        Some(r) if !r.is_null() => Some(
            serde_json::from_value::<ResourceRequirements>(r.clone()).map_err(|e| {
                PluginError::InvalidInput(format!("spec.trainer.resourcesPerNode: {e}"))
            })?,
        ),
        _ => runtime_node_resources(info),
    };
    let g = res.as_ref().map(gpus).unwrap_or(0);
    Ok(if g > 1 {
        i32::try_from(g).unwrap_or(i32::MAX)
    } else {
        1
    })
}

fn ssh_volume(job: &str) -> Volume {
    let item = |key: &str, path: &str, mode: i32| KeyToPath {
        key: key.into(),
        path: path.into(),
        mode: Some(mode),
    };
    Volume {
        name: SSH_AUTH_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(ssh_secret_name(job)),
            default_mode: Some(0o400),
            items: Some(vec![
                item(SSH_PRIVATE_KEY, "id_rsa", 0o640),
                item(SSH_PUBLIC_KEY, "id_rsa.pub", 0o644),
                item(SSH_PUBLIC_KEY, "authorized_keys", 0o644),
            ]),
            optional: None,
        }),
        ..Volume::default()
    }
}

fn hostfile_volume(job: &str) -> Volume {
    Volume {
        name: HOSTFILE_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: hostfile_name(job),
            items: Some(vec![KeyToPath {
                key: HOSTFILE_KEY.into(),
                path: HOSTFILE_KEY.into(),
                mode: Some(0o444),
            }]),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..VolumeMount::default()
    }
}

/// EnforceMLPolicy (only with `mlPolicy.mpi`).
pub fn enforce(ctx: &mut PhaseContext) -> Result<(), PluginError> {
    let Some(mut policy) = ctx.policy_as::<MPIMLPolicySource>(POLICY)? else {
        return Ok(());
    };
    let implementation = policy.mpi_implementation.clone().unwrap_or_default();
    if !(implementation.is_empty() || implementation == MPI_IMPLEMENTATION_OPENMPI) {
        return Err(PluginError::InvalidInput(format!(
            "{POLICY}.mpiImplementation: MPI implementation for {implementation} doesn't supported"
        )));
    }
    let job = ctx.trainjob_name().to_owned();
    let launcher_as_node = policy.run_launcher_as_node.unwrap_or(false);
    let num_nodes = ctx
        .trainjob()
        .pointer("/spec/trainer/numNodes")
        .and_then(Value::as_i64);
    let slots = slots(ctx.trainjob(), ctx.info(), &policy)?;
    let mount_path = policy
        .ssh_auth_mount_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_SSH_AUTH_MOUNT_PATH.to_owned());

    // Write the resolved slots back into the policy (later phases read it).
    policy.num_proc_per_node = Some(slots);
    let policy_json =
        serde_json::to_value(&policy).map_err(|e| PluginError::Internal(e.to_string()))?;
    let info = ctx.info_mut();
    if let Some(Value::Object(ml)) = info.runtime_policy.ml_policy.as_mut() {
        ml.insert("mpi".into(), policy_json);
    }

    for ps in info.template_spec.pod_sets.iter_mut() {
        if ps.name == NODE
            && let Some(n) = num_nodes
        {
            let n = if launcher_as_node { (n - 1).max(1) } else { n };
            ps.count = Some(i32::try_from(n).unwrap_or(i32::MAX));
        }
        if ps.name != NODE && ps.name != LAUNCHER {
            continue;
        }
        ps.upsert_volume(ssh_volume(&job));
        let is_launcher = ps.name == LAUNCHER;
        if is_launcher {
            ps.upsert_volume(hostfile_volume(&job));
        }
        let Some(c) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE) else {
            continue;
        };
        c.upsert_volume_mount(mount(SSH_AUTH_VOLUME, &mount_path));
        if is_launcher {
            c.upsert_volume_mount(mount(HOSTFILE_VOLUME, HOSTFILE_DIR));
            c.set_env(ENV_HOSTFILE, format!("{HOSTFILE_DIR}/{HOSTFILE_KEY}"));
            c.set_env(ENV_KEEP_FQDN, "true");
            c.set_env(ENV_DEFAULT_SLOTS, slots.to_string());
            c.set_env(ENV_RSH_ARGS, "-o ConnectionAttempts=10");
        }
    }
    Ok(())
}

/// CustomValidation (only with `mlPolicy.mpi`).
pub fn validate(ctx: &ValidateContext) -> Validation {
    let mut v = Validation::default();
    let Some(policy) = ctx.policy(POLICY) else {
        return v;
    };
    let launcher_as_node = policy
        .get("runLauncherAsNode")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tj = ctx.trainjob();
    let num_nodes = tj
        .pointer("/spec/trainer/numNodes")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if num_nodes >= 2
        && launcher_as_node
        && (ctx.pod_set(LAUNCHER).is_none() || ctx.pod_set(NODE).is_none())
    {
        let mut e = FieldError::invalid(
            "spec.trainer.numNodes",
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either launcher and node",
        );
        e.bad_value = Some(num_nodes.to_string());
        v.errors.push(e);
    }
    if let Some(Value::String(s)) = tj.pointer("/spec/trainer/numProcPerNode")
        && s.parse::<i32>().is_err()
    {
        let mut e = FieldError::invalid(
            "spec.trainer.numProcPerNode",
            "must have an int value for MPI TrainJob",
        );
        e.bad_value = Some(json!(s).to_string());
        v.errors.push(e);
    }
    let mut reserved: Vec<&str> = tj
        .pointer("/spec/trainer/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("name").and_then(Value::as_str))
        .filter(|n| RESERVED_ENV.contains(n))
        .collect();
    reserved.sort_unstable();
    reserved.dedup();
    if !reserved.is_empty() {
        let mut e = FieldError::invalid(
            "spec.trainer.env",
            format!(
                "must not have reserved envs, invalid envs configured: [{}]",
                reserved.join(" ")
            ),
        );
        e.bad_value = tj.pointer("/spec/trainer/env").map(Value::to_string);
        v.errors.push(e);
    }
    v
}
