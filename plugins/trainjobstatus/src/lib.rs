//! TrainJobStatus (Kubeflow Trainer's `plugins/trainjobstatus`): gives the
//! trainer pods what they need to report their progress to the operator's
//! TrainJob status server (`status.trainerStatus`).
//!
//! The host writes the server's base URL and CA into this plugin's
//! configuration under `trainJobStatusServer` (`{"url", "caCert"}`) when the
//! operator serves one and the plugin is granted `trainJobStatusServer`;
//! the plugin never derives them. Without that key every phase leaves the
//! TrainJob as it is (the feature is off, as upstream's gate).
//!
//! **enforce-pod-spec**: every container of every pod set whose ancestor is
//! the trainer gets (upserted, by name) `KUBEFLOW_TRAINER_SERVER_URL` = this
//! TrainJob's endpoint, `KUBEFLOW_TRAINER_SERVER_CA_CERT` and
//! `KUBEFLOW_TRAINER_SERVER_TOKEN` (files under [`MOUNT_PATH`]) and a
//! read-only mount of [`VOLUME`]; the pod set gets that volume: a projected
//! service-account token whose audience is the endpoint ([`audience`], one
//! hour) and the key `ca.crt` of the ConfigMap [`ca_config_map_name`].
//! Other pod sets (initializers) are untouched.
//!
//! **build**: the ConfigMap [`ca_config_map_name`] with the CA, owned by the
//! TrainJob; only when a trainer pod set exists (nothing else mounts it).

use trainforge_sdk::api::trainer::v1alpha1::constants::ANCESTOR_TRAINER;
use trainforge_sdk::k8s_openapi::api::core::v1::{
    ConfigMapProjection, EnvVar, KeyToPath, ProjectedVolumeSource, ServiceAccountTokenProjection,
    Volume, VolumeMount, VolumeProjection,
};
use trainforge_sdk::prelude::*;

/// The configuration key the host writes the server's facts under.
pub const CONFIG_KEY: &str = "trainJobStatusServer";
/// The capability the plugin asks for to be given them.
pub const CAPABILITY: &str = "trainjob-status-server";
/// The endpoint URL.
pub const ENV_URL: &str = "KUBEFLOW_TRAINER_SERVER_URL";
/// The CA file.
pub const ENV_CA_CERT: &str = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
/// The token file.
pub const ENV_TOKEN: &str = "KUBEFLOW_TRAINER_SERVER_TOKEN";
/// The projected volume (token and CA).
pub const VOLUME: &str = "kubeflow-trainer-token";
/// Where it is mounted.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubeflow/trainer";
/// The token file's name in the volume.
pub const TOKEN_FILE: &str = "token";
/// The CA file's name in the volume, and its key in the ConfigMap.
pub const CA_FILE: &str = "ca.crt";
/// Lifetime of the projected token (the kubelet refreshes it).
pub const TOKEN_SECONDS: i64 = 3600;

/// The status endpoint's path for the TrainJob `namespace/name`.
pub use trainforge_sdk::api::trainer::v1alpha1::status_endpoint_path as path;

/// The audience the status server accepts for the TrainJob
/// `namespace/name` only.
pub use trainforge_sdk::api::trainer::v1alpha1::status_audience as audience;

/// The CA ConfigMap's name after its TrainJob's (a naming rule).
pub const CA_CONFIG_MAP_SUFFIX: &str = "-tls-config";

/// `<job>-tls-config`: the ConfigMap with the server's CA.
pub fn ca_config_map_name(job: &str) -> String {
    format!("{job}{CA_CONFIG_MAP_SUFFIX}")
}

/// The status server, as the host describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Base URL (`https://host:port`, no trailing `/`).
    pub url: String,
    /// CA bundle (PEM).
    pub ca_cert: String,
}

/// The server from the configuration: `None` when the key is absent or
/// null (feature off); `invalid-config` naming the field when malformed.
pub fn server(config: &Value) -> Result<Option<Server>, PluginError> {
    let v = match config.get(CONFIG_KEY) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let bad =
        |field: &str, why: &str| PluginError::InvalidConfig(format!("{CONFIG_KEY}.{field}: {why}"));
    let Some(o) = v.as_object() else {
        return Err(PluginError::InvalidConfig(format!(
            "{CONFIG_KEY}: must be an object with url and caCert"
        )));
    };
    let url = o
        .get("url")
        .and_then(Value::as_str)
        .map(|u| u.trim_end_matches('/'))
        .filter(|u| u.len() > "https://".len() && u.starts_with("https://"))
        .ok_or_else(|| bad("url", "must be an https:// URL"))?;
    let ca_cert = o
        .get("caCert")
        .and_then(Value::as_str)
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| bad("caCert", "must be a PEM CA bundle"))?;
    Ok(Some(Server {
        url: url.to_owned(),
        ca_cert: ca_cert.to_owned(),
    }))
}

/// The variables of a trainer container of TrainJob `namespace/name`.
pub fn env(server: &Server, namespace: &str, name: &str) -> Vec<EnvVar> {
    let var = |n: &str, v: String| EnvVar {
        name: n.into(),
        value: Some(v),
        value_from: None,
    };
    vec![
        var(ENV_URL, format!("{}{}", server.url, path(namespace, name))),
        var(ENV_CA_CERT, format!("{MOUNT_PATH}/{CA_FILE}")),
        var(ENV_TOKEN, format!("{MOUNT_PATH}/{TOKEN_FILE}")),
    ]
}

/// The read-only mount of [`VOLUME`].
pub fn mount() -> VolumeMount {
    VolumeMount {
        name: VOLUME.into(),
        mount_path: MOUNT_PATH.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The projected volume of TrainJob `namespace/name`: its token and the CA.
pub fn volume(namespace: &str, name: &str) -> Volume {
    Volume {
        name: VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(audience(namespace, name)),
                        expiration_seconds: Some(TOKEN_SECONDS),
                        path: TOKEN_FILE.into(),
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: ca_config_map_name(name),
                        items: Some(vec![KeyToPath {
                            key: CA_FILE.into(),
                            path: CA_FILE.into(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

/// The plugin.
#[derive(Default)]
pub struct TrainJobStatus;

impl Plugin for TrainJobStatus {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("trainjobstatus", env!("CARGO_PKG_VERSION"))
            .phase(Phase::EnforcePodSpec)
            .phase(Phase::Build)
            .emits("v1", "ConfigMap")
            .object_name("v1", "ConfigMap", CA_CONFIG_MAP_SUFFIX)
            .watches("v1", "ConfigMap")
            .capability(CAPABILITY)
            .build()
    }

    fn enforce_pod_spec(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        let Some(server) = server(ctx.config())? else {
            return Ok(());
        };
        let (ns, name) = (
            ctx.trainjob_namespace().to_owned(),
            ctx.trainjob_name().to_owned(),
        );
        let vars = env(&server, &ns, &name);
        let trainers = ctx
            .info_mut()
            .template_spec
            .pod_sets
            .iter_mut()
            .filter(|p| p.ancestor.as_deref() == Some(ANCESTOR_TRAINER));
        for ps in trainers {
            ps.upsert_volume(volume(&ns, &name));
            for c in &mut ps.containers {
                for e in &vars {
                    c.upsert_env(e.clone());
                }
                c.upsert_volume_mount(mount());
            }
        }
        Ok(())
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let Some(server) = server(ctx.config())? else {
            return Ok(Vec::new());
        };
        if ctx.pod_set_by_ancestor(ANCESTOR_TRAINER).is_none() {
            return Ok(Vec::new());
        }
        let (ns, name) = (ctx.trainjob_namespace(), ctx.trainjob_name());
        Ok(vec![json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ca_config_map_name(name),
                "namespace": ns,
                "ownerReferences": [ctx.owner_reference()],
            },
            "data": {CA_FILE: server.ca_cert},
        })])
    }
}

trainforge_sdk::export_plugin!(TrainJobStatus);

#[cfg(test)]
mod tests;
