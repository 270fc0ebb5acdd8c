//! MPI: Kubeflow Trainer's `plugins/mpi`. Runs when the runtime
//! has `mlPolicy.mpi` (OpenMPI only, as upstream).
//!
//! - **enforce-ml-policy** ([`enforce`]): `node` count from
//!   `trainer.numNodes` (minus the launcher with `runLauncherAsNode`), slots
//!   per node (written back into the policy), SSH key and hostfile volumes
//!   and mounts, OpenMPI env on the launcher;
//! - **build**: Secret `<job>-mpi-ssh-auth` (type `kubernetes.io/ssh-auth`,
//!   immutable, ECDSA P-521 from host randomness — [`ssh`]) only when absent,
//!   and ConfigMap `<job>-mpi-hostfile` ([`hostfile`]);
//! - **validate**: launcher/node presence with `runLauncherAsNode`, reserved
//!   `OMPI_MCA_*` env, integer `numProcPerNode`.

pub mod enforce;
pub mod hostfile;
pub mod ssh;

use base64ct::{Base64, Encoding};
use trainforge_sdk::api::trainer::v1alpha1::MPIMLPolicySource;
use trainforge_sdk::prelude::*;

/// The policy key this plugin serves.
pub const POLICY: &str = "mlPolicy.mpi";
/// Secret type of the SSH keys.
pub const SSH_AUTH_SECRET_TYPE: &str = "kubernetes.io/ssh-auth";
/// Secret key of the private key.
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// Secret key of the public key.
pub const SSH_PUBLIC_KEY: &str = "ssh-publickey";
/// ConfigMap key of the hostfile.
pub const HOSTFILE_KEY: &str = "hostfile";

/// The SSH Secret's name after its TrainJob's (a naming rule).
pub const SSH_SECRET_SUFFIX: &str = "-mpi-ssh-auth";
/// The hostfile ConfigMap's name after its TrainJob's (a naming rule).
pub const HOSTFILE_SUFFIX: &str = "-mpi-hostfile";

/// `<job>-mpi-ssh-auth`.
pub fn ssh_secret_name(job: &str) -> String {
    format!("{job}{SSH_SECRET_SUFFIX}")
}

/// `<job>-mpi-hostfile`.
pub fn hostfile_name(job: &str) -> String {
    format!("{job}{HOSTFILE_SUFFIX}")
}

/// The plugin. Stateless.
#[derive(Default)]
pub struct Mpi;

impl Plugin for Mpi {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("mpi", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .emits("v1", "Secret")
            .emits("v1", "ConfigMap")
            .object_name("v1", "Secret", SSH_SECRET_SUFFIX)
            .object_name("v1", "ConfigMap", HOSTFILE_SUFFIX)
            .reads("v1", "Secret")
            .watches("v1", "Secret")
            .watches("v1", "ConfigMap")
            .capability("random")
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        enforce::enforce(ctx)
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some(policy) = ctx.policy_as::<MPIMLPolicySource>(POLICY)? else {
            return Ok(Vec::new());
        };
        let (job, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        let owner = ctx.owner_reference();
        let mut out = Vec::new();
        let secret_name = ssh_secret_name(job);
        if ctx
            .get_object(&KindRef::new("v1", "Secret"), ns, &secret_name)?
            .is_none()
        {
            let seed = ctx.host().random_bytes(ssh::SEED_LEN as u32).map_err(|e| {
                PluginError::Unavailable(format!("host randomness for the SSH key: {e}"))
            })?;
            let keys = ssh::generate(&seed)?;
            out.push(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": ns, "ownerReferences": [owner.clone()]},
                "type": SSH_AUTH_SECRET_TYPE,
                "immutable": true,
                "data": {
                    SSH_PRIVATE_KEY: Base64::encode_string(keys.private_pem.as_bytes()),
                    SSH_PUBLIC_KEY: Base64::encode_string(keys.authorized_key.as_bytes()),
                },
            }));
        }
        let slots = policy.num_proc_per_node.unwrap_or(1);
        let launcher_as_node = policy.run_launcher_as_node.unwrap_or(false);
        out.push(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": hostfile_name(job), "namespace": ns, "ownerReferences": [owner]},
            "data": {HOSTFILE_KEY: hostfile::hostfile(ctx.info(), job, slots, launcher_as_node)},
        }));
        Ok(out)
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        Ok(enforce::validate(ctx))
    }
}

trainforge_sdk::export_plugin!(Mpi);

#[cfg(test)]
mod tests;
