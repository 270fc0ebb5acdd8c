//! Flux: Kubeflow Trainer's `plugins/flux` (v2.2+). Runs when the runtime
//! has `mlPolicy.flux`: every pod of the trainer job `node` becomes a
//! broker of one Flux instance, and the lead broker runs the TrainJob's
//! command under `flux run`.
//!
//! **Settings** ([`settings`]): `FLUX_VIEW_IMAGE` (the installer image,
//! default [`DEFAULT_VIEW_IMAGE`]), `FLUX_NETWORK_DEVICE` (the brokers'
//! bind device, default `eth0`) and `FLUX_QUEUE_POLICY` (Fluxion's queue
//! policy, default `fcfs`). A literal `env` value of the runtime's trainer
//! `node` container overrides a default; the TrainJob's `trainer.env` wins
//! over both.
//!
//! **enforce-ml-policy** ([`Flux::enforce_ml_policy`]):
//! - the original command — the TrainJob's `trainer.command`, else the
//!   runtime `node` container's, followed by the TrainJob's `trainer.args`,
//!   joined by spaces — becomes the TrainJob's command
//!   `["/bin/bash", "/etc/flux-config/entrypoint.sh", "<original>"]`, and
//!   `trainer.args` is cleared (the runtime template's args are not);
//! - the pod set `node` gets the volumes `spack-install`, `flux-install`
//!   (emptyDir), `<job>-flux-entrypoint` (the scripts ConfigMap, mode
//!   0755), `shared-memory` (emptyDir, medium Memory) and `flux-curve`
//!   (Secret `<job>-flux-curve`, mode 0400); the init container
//!   `flux-installer` (image `FLUX_VIEW_IMAGE`, command
//!   `["/bin/bash", "/etc/flux-config/init.sh"]`, mounts
//!   `flux-install:/mnt/flux` and the scripts at `/etc/flux-config`
//!   read-only) is appended; its container `node` mounts
//!   `flux-install:/mnt/flux`, `spack-install:/opt/software`, the scripts at
//!   `/etc/flux-config`, `flux-curve:/curve` and `shared-memory:/dev/shm`
//!   (the last three read-only).
//!
//! **build**: ConfigMap `<job>-flux-entrypoint` (keys `entrypoint.sh` and
//! `init.sh`, [`scripts`]) and Secret `<job>-flux-curve` (key `curve.cert`,
//! the CURVE certificate derived from the TrainJob's uid, [`curve`]).
//!
//! Both phases need `spec.trainer` with `numNodes`, and the runtime a
//! replicated job `node`; without them they fail naming what is missing
//! (upstream dereferences them unchecked and panics).
//!
//! **validate**: an init container `flux-installer` already in the
//! runtime's `node` job is refused (`spec.trainer.initContainers`, Invalid,
//! "InitContainer 'flux-installer' is reserved"; 403 at admission).

pub mod curve;
pub mod scripts;

use base64ct::{Base64, Encoding};
use serde::Deserialize;
use trainforge_sdk::api::trainer::v1alpha1::FluxMLPolicySource;
use trainforge_sdk::api::trainer::v1alpha1::constants::{ANCESTOR_TRAINER, CONTAINER_NODE, NODE};
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EmptyDirVolumeSource, SecretVolumeSource, Volume, VolumeMount,
};
use trainforge_sdk::prelude::*;

pub use trainforge_sdk::quantity;

/// The policy key this plugin serves.
pub const POLICY: &str = "mlPolicy.flux";
/// The init container that installs Flux (reserved in the runtime).
pub const INSTALLER: &str = "flux-installer";
/// Setting: the installer image.
pub const FLUX_VIEW_IMAGE: &str = "FLUX_VIEW_IMAGE";
/// Setting: the network device the brokers bind.
pub const FLUX_NETWORK_DEVICE: &str = "FLUX_NETWORK_DEVICE";
/// Setting: Fluxion's queue policy.
pub const FLUX_QUEUE_POLICY: &str = "FLUX_QUEUE_POLICY";
/// Default installer image: a Flux view on Ubuntu 22.04 (other views:
/// `ghcr.io/converged-computing/flux-view-{ubuntu,rocky}:…`).
pub const DEFAULT_VIEW_IMAGE: &str = "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy";
/// Default network device.
pub const DEFAULT_NETWORK_DEVICE: &str = "eth0";
/// Default queue policy (first come, first served).
pub const DEFAULT_QUEUE_POLICY: &str = "fcfs";

/// Volume of the Flux install (the view and its configuration).
pub const INSTALL_VOLUME: &str = "flux-install";
/// Where the Flux install is mounted.
pub const INSTALL_PATH: &str = "/mnt/flux";
/// Volume of the software the view links to.
pub const SPACK_VOLUME: &str = "spack-install";
/// Where that software is mounted in the trainer container.
pub const SPACK_PATH: &str = "/opt/software";
/// Where the scripts ConfigMap is mounted.
pub const CONFIG_PATH: &str = "/etc/flux-config";
/// Volume of the CURVE certificate.
pub const CURVE_VOLUME: &str = "flux-curve";
/// Where the CURVE certificate is mounted.
pub const CURVE_PATH: &str = "/curve";
/// Memory-backed volume for `/dev/shm`.
pub const MEMORY_VOLUME: &str = "shared-memory";
/// Where it is mounted.
pub const MEMORY_PATH: &str = "/dev/shm";
/// ConfigMap key of the trainer container's script.
pub const ENTRYPOINT_KEY: &str = "entrypoint.sh";
/// ConfigMap key of the init container's script.
pub const INIT_KEY: &str = "init.sh";
/// Secret key of the CURVE certificate.
pub const CURVE_KEY: &str = "curve.cert";

/// The scripts ConfigMap's name after its TrainJob's (a naming rule).
pub const ENTRYPOINT_SUFFIX: &str = "-flux-entrypoint";
/// The CURVE Secret's name after its TrainJob's (a naming rule).
pub const CURVE_SUFFIX: &str = "-flux-curve";

/// `<job>-flux-entrypoint`: the scripts ConfigMap, also its volume's name.
pub fn entrypoint_config_map_name(job: &str) -> String {
    format!("{job}{ENTRYPOINT_SUFFIX}")
}

/// `<job>-flux-curve`: the CURVE certificate Secret.
pub fn curve_secret_name(job: &str) -> String {
    format!("{job}{CURVE_SUFFIX}")
}

/// The plugin. Stateless.
#[derive(Default)]
pub struct Flux;

/// The `spec.trainer` fields Flux reads; resources stay JSON so that
/// quantities written as YAML numbers are accepted.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Trainer {
    #[serde(default)]
    num_nodes: Option<i32>,
    #[serde(default)]
    num_proc_per_node: Option<Value>,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<Env>>,
    #[serde(default)]
    resources_per_node: Option<Value>,
}

/// One `trainer.env` entry (only its name and literal value matter here).
#[derive(Debug, Default, Deserialize)]
struct Env {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

/// `spec.trainer`, required by the Flux policy.
fn trainer(trainjob: &Value) -> Result<Trainer, PluginError> {
    match trainjob.pointer("/spec/trainer") {
        None | Some(Value::Null) => Err(PluginError::InvalidInput(format!(
            "spec.trainer: required by the runtime's {POLICY} (Flux needs trainer.numNodes to lay out its brokers)"
        ))),
        Some(v) => trainforge_sdk::serde_json::from_value(v.clone())
            .map_err(|e| PluginError::InvalidInput(format!("spec.trainer: {e}"))),
    }
}

/// `trainer.numNodes`, required by the Flux policy.
fn num_nodes(trainer: &Trainer) -> Result<i64, PluginError> {
    trainer.num_nodes.map(i64::from).ok_or_else(|| {
        PluginError::InvalidInput(format!(
            "spec.trainer.numNodes: required by the runtime's {POLICY} (the number of Flux brokers)"
        ))
    })
}

/// The runtime has a replicated job `node`, where Flux runs.
fn require_node_pod_set(has_node: bool) -> Result<(), PluginError> {
    if has_node {
        Ok(())
    } else {
        Err(PluginError::InvalidInput(format!(
            "spec.runtimeRef: the runtime has no replicated job {NODE:?}, where its {POLICY} runs the Flux brokers"
        )))
    }
}

/// The three settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `FLUX_VIEW_IMAGE`.
    pub view_image: String,
    /// `FLUX_NETWORK_DEVICE`.
    pub network_device: String,
    /// `FLUX_QUEUE_POLICY`.
    pub queue_policy: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            view_image: DEFAULT_VIEW_IMAGE.into(),
            network_device: DEFAULT_NETWORK_DEVICE.into(),
            queue_policy: DEFAULT_QUEUE_POLICY.into(),
        }
    }
}

impl Settings {
    fn set(&mut self, name: &str, value: &str) {
        let slot = match name {
            FLUX_VIEW_IMAGE => &mut self.view_image,
            FLUX_NETWORK_DEVICE => &mut self.network_device,
            FLUX_QUEUE_POLICY => &mut self.queue_policy,
            _ => return,
        };
        value.clone_into(slot);
    }
}

/// The settings: defaults, overridden by the literal env values of the
/// runtime's trainer `node` container (`runtime_node`), overridden by the
/// TrainJob's `trainer.env` (an entry without a value sets the empty
/// string, as upstream).
pub fn settings(runtime_node: Option<&Container>, trainer_env: &[(String, String)]) -> Settings {
    let mut s = Settings::default();
    for e in runtime_node.into_iter().flat_map(|c| c.env.iter()) {
        if let Some(v) = &e.value {
            s.set(&e.name, v);
        }
    }
    for (name, value) in trainer_env {
        s.set(name, value);
    }
    s
}

fn trainer_env(trainer: &Trainer) -> Vec<(String, String)> {
    trainer
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// The trainer `node` container of the runtime (the first pod set whose
/// ancestor is the trainer), as the info holds it.
fn runtime_node(ctx: &PhaseContext) -> Option<Container> {
    ctx.pod_set_by_ancestor(ANCESTOR_TRAINER)
        .and_then(|p| p.containers.iter().find(|c| c.name == CONTAINER_NODE))
        .cloned()
}

/// The command Flux runs: `command` (the TrainJob's, else the runtime
/// `node` container's), then the TrainJob's `args`, joined by spaces and
/// trimmed.
pub fn original_command(
    runtime_command: &[String],
    command: Option<&[String]>,
    args: Option<&[String]>,
) -> String {
    let mut all: Vec<&str> = command
        .unwrap_or(runtime_command)
        .iter()
        .map(String::as_str)
        .collect();
    all.extend(args.into_iter().flatten().map(String::as_str));
    all.join(" ").trim().to_owned()
}

/// Tasks per node: `trainer.numProcPerNode`, else the policy's (default 1).
fn tasks(trainer: &Trainer, policy: &FluxMLPolicySource) -> Result<i64, PluginError> {
    match &trainer.num_proc_per_node {
        None | Some(Value::Null) => Ok(i64::from(policy.num_proc_per_node.unwrap_or(1))),
        Some(v) => v.as_i64().ok_or_else(|| {
            PluginError::InvalidInput(format!(
                "spec.trainer.numProcPerNode: Flux needs an integer (tasks per node), got {v}"
            ))
        }),
    }
}

/// GPUs per node: from the TrainJob's `resourcesPerNode` if set, else the
/// runtime's trainer `node` container (upstream's `GetNumGPUPerNode`).
fn gpus(ctx: &PhaseContext, trainer: &Trainer) -> Result<i64, PluginError> {
    let (resources, field) = match trainer.resources_per_node.as_ref() {
        Some(r) if !r.is_null() => (Some(r.clone()), "spec.trainer.resourcesPerNode"),
        _ => (
            ctx.info()
                .runtime_node_containers()
                .next()
                .and_then(|c| c.get("resources"))
                .cloned(),
            "spec.runtimeRef",
        ),
    };
    quantity::gpu_per_node(resources.as_ref(), "resources")
        .map_err(|e| PluginError::InvalidInput(format!("{field}: {e}")))
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str, medium: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: medium.map(str::to_owned),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The volumes of the `node` pods, in upstream's order.
pub fn volumes(job: &str) -> Vec<Volume> {
    let scripts = entrypoint_config_map_name(job);
    vec![
        empty_dir(SPACK_VOLUME, None),
        empty_dir(INSTALL_VOLUME, None),
        Volume {
            name: scripts.clone(),
            config_map: Some(ConfigMapVolumeSource {
                name: scripts,
                default_mode: Some(0o755),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        empty_dir(MEMORY_VOLUME, Some("Memory")),
        Volume {
            name: CURVE_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(curve_secret_name(job)),
                default_mode: Some(0o400),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
    ]
}

/// The init container `flux-installer`.
pub fn installer(job: &str, image: &str) -> Container {
    Container {
        name: INSTALLER.into(),
        image: Some(image.into()),
        command: vec!["/bin/bash".into(), format!("{CONFIG_PATH}/{INIT_KEY}")],
        volume_mounts: vec![
            mount(INSTALL_VOLUME, INSTALL_PATH, false),
            mount(&entrypoint_config_map_name(job), CONFIG_PATH, true),
        ],
        ..Container::default()
    }
}

/// The mounts of the trainer container `node`, in upstream's order.
pub fn node_mounts(job: &str) -> Vec<VolumeMount> {
    vec![
        mount(INSTALL_VOLUME, INSTALL_PATH, false),
        mount(SPACK_VOLUME, SPACK_PATH, false),
        mount(&entrypoint_config_map_name(job), CONFIG_PATH, true),
        mount(CURVE_VOLUME, CURVE_PATH, true),
        mount(MEMORY_VOLUME, MEMORY_PATH, true),
    ]
}

impl Plugin for Flux {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("flux", env!("CARGO_PKG_VERSION"))
            .policy_key(POLICY)
            .phase(Phase::EnforceMlPolicy)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .emits("v1", "ConfigMap")
            .emits("v1", "Secret")
            .object_name("v1", "ConfigMap", ENTRYPOINT_SUFFIX)
            .object_name("v1", "Secret", CURVE_SUFFIX)
            .watches("v1", "ConfigMap")
            .watches("v1", "Secret")
            .build()
    }

    fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        if ctx.policy_as::<FluxMLPolicySource>(POLICY)?.is_none() {
            return Ok(());
        }
        let trainer = trainer(ctx.trainjob())?;
        num_nodes(&trainer)?;
        require_node_pod_set(ctx.pod_set(NODE).is_some())?;
        if ctx
            .pod_set(NODE)
            .is_some_and(|p| p.init_containers.iter().any(|c| c.name == INSTALLER))
        {
            return Err(PluginError::InvalidInput(format!(
                "spec.trainer.initContainers: InitContainer '{INSTALLER}' is reserved (the runtime's {NODE:?} job already has one)"
            )));
        }
        let job = ctx.trainjob_name().to_owned();
        let node = runtime_node(ctx);
        let settings = settings(node.as_ref(), &trainer_env(&trainer));

        // The TrainJob's command wraps the original one; its args go.
        let original = original_command(
            node.as_ref().map_or(&[][..], |c| &c.command),
            trainer.command.as_deref(),
            trainer.args.as_deref(),
        );
        let spec_trainer = ctx
            .trainjob_mut()
            .pointer_mut("/spec/trainer")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| PluginError::InvalidInput("spec.trainer: must be an object".into()))?;
        spec_trainer.insert(
            "command".into(),
            json!([
                "/bin/bash",
                format!("{CONFIG_PATH}/{ENTRYPOINT_KEY}"),
                original
            ]),
        );
        spec_trainer.remove("args");

        let ps = ctx.pod_set_mut(NODE)?;
        for v in volumes(&job) {
            ps.upsert_volume(v);
        }
        ps.init_containers
            .push(installer(&job, &settings.view_image));
        if let Some(c) = ps.containers.iter_mut().find(|c| c.name == CONTAINER_NODE) {
            for m in node_mounts(&job) {
                c.upsert_volume_mount(m);
            }
        }
        Ok(())
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some(policy) = ctx.policy_as::<FluxMLPolicySource>(POLICY)? else {
            return Ok(Vec::new());
        };
        let trainer = trainer(ctx.trainjob())?;
        let nodes = num_nodes(&trainer)?;
        require_node_pod_set(ctx.pod_set(NODE).is_some())?;
        let settings = settings(runtime_node(ctx).as_ref(), &trainer_env(&trainer));
        let (job, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        let uid = ctx
            .trainjob()
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let params = scripts::Params {
            job,
            namespace: ns,
            nodes,
            tasks: tasks(&trainer, &policy)?,
            gpus: gpus(ctx, &trainer)?,
            network_device: &settings.network_device,
            queue_policy: &settings.queue_policy,
        };
        let owner = ctx.owner_reference();
        let cert = curve::certificate(job, uid);
        Ok(vec![
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": entrypoint_config_map_name(job), "namespace": ns, "ownerReferences": [owner.clone()]},
                "data": {
                    ENTRYPOINT_KEY: params.entrypoint_script(),
                    INIT_KEY: params.init_script(),
                },
            }),
            json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": curve_secret_name(job), "namespace": ns, "ownerReferences": [owner]},
                "data": {CURVE_KEY: Base64::encode_string(cert.as_bytes())},
            }),
        ])
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        let mut v = Validation::default();
        if ctx.policy(POLICY).is_none() {
            return Ok(v);
        }
        let reserved = ctx
            .info()
            .template_spec
            .pod_sets
            .iter()
            .filter(|p| p.name == NODE)
            .flat_map(|p| p.init_containers.iter())
            .filter(|c| c.name == INSTALLER);
        for _ in reserved {
            let mut e = FieldError::invalid(
                "spec.trainer.initContainers",
                format!("InitContainer '{INSTALLER}' is reserved"),
            );
            e.bad_value = Some(json!(INSTALLER).to_string());
            v.errors.push(e);
        }
        Ok(v)
    }
}

trainforge_sdk::export_plugin!(Flux);

#[cfg(test)]
mod tests;
