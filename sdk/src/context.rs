//! The values a phase works on, plus helpers for common edits.

use crate::host::Host;
use k8s_openapi::api::core::v1::{EnvVar, Volume, VolumeMount};
use serde::de::DeserializeOwned;
use serde_json::Value;
use trainforge_api::plugin::{Info, KindRef, PluginError, PodSet};

/// Input of a reconcile phase: the TrainJob and info as modified by earlier
/// phases, the plugin's configuration, and the host.
///
/// Reading is free; mutating through [`PhaseContext::info_mut`] or
/// [`PhaseContext::trainjob_mut`] marks the value as changed so it is sent
/// back to the host (unchanged values are not re-serialised).
pub struct PhaseContext<'a> {
    trainjob: Value,
    info: Info,
    config: Value,
    host: &'a dyn Host,
    info_changed: bool,
    trainjob_changed: bool,
}

impl<'a> PhaseContext<'a> {
    /// A context from already parsed values.
    pub fn new(trainjob: Value, info: Info, config: Value, host: &'a dyn Host) -> Self {
        PhaseContext { trainjob, info, config, host, info_changed: false, trainjob_changed: false }
    }

    /// A context from the JSON strings of the WIT `phase-input`.
    pub fn from_json(
        trainjob: &str,
        info: &str,
        config: &str,
        host: &'a dyn Host,
    ) -> Result<Self, PluginError> {
        let trainjob = serde_json::from_str(trainjob)
            .map_err(|e| PluginError::InvalidInput(format!("trainjob JSON: {e}")))?;
        let info = serde_json::from_str(info)
            .map_err(|e| PluginError::InvalidInput(format!("info JSON: {e}")))?;
        let config = parse_config(config)?;
        Ok(PhaseContext::new(trainjob, info, config, host))
    }

    /// The TrainJob (JSON), as modified by earlier phases.
    pub fn trainjob(&self) -> &Value {
        &self.trainjob
    }

    /// The TrainJob, mutably (marks it changed).
    pub fn trainjob_mut(&mut self) -> &mut Value {
        self.trainjob_changed = true;
        &mut self.trainjob
    }

    /// The runtime info.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The runtime info, mutably (marks it changed).
    pub fn info_mut(&mut self) -> &mut Info {
        self.info_changed = true;
        &mut self.info
    }

    /// The plugin configuration (JSON; `{}` when none is set).
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The configuration deserialised into `T`.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, PluginError> {
        serde_json::from_value(self.config.clone())
            .map_err(|e| PluginError::InvalidConfig(e.to_string()))
    }

    /// The host (object cache, randomness, logging).
    pub fn host(&self) -> &dyn Host {
        self.host
    }

    /// The TrainJob's `metadata.name` (empty if absent).
    pub fn trainjob_name(&self) -> &str {
        self.trainjob.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }

    /// The TrainJob's `metadata.namespace` (empty if absent).
    pub fn trainjob_namespace(&self) -> &str {
        self.trainjob.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default()
    }

    /// A policy by key (`mlPolicy.torch`, `podGroupPolicy.volcano`, ...).
    pub fn policy(&self, key: &str) -> Option<&Value> {
        self.info.policy(key)
    }

    /// A policy by key, deserialised into `T`. `Ok(None)` when absent.
    pub fn policy_as<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, PluginError> {
        self.policy(key)
            .map(|v| {
                serde_json::from_value(v.clone())
                    .map_err(|e| PluginError::InvalidInput(format!("policy {key}: {e}")))
            })
            .transpose()
    }

    /// The pod set `name`, mutably, or `InvalidInput`.
    pub fn pod_set_mut(&mut self, name: &str) -> Result<&mut PodSet, PluginError> {
        self.info_mut()
            .pod_set_mut(name)
            .ok_or_else(|| PluginError::InvalidInput(format!("pod set {name:?} not found")))
    }

    /// Upsert `name=value` in container `container` of pod set `pod_set`.
    pub fn set_env(
        &mut self,
        pod_set: &str,
        container: &str,
        name: &str,
        value: &str,
    ) -> Result<(), PluginError> {
        self.upsert_env(pod_set, container, EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            value_from: None,
        })
    }

    /// Upsert an env var (by name) in a container of a pod set.
    pub fn upsert_env(
        &mut self,
        pod_set: &str,
        container: &str,
        env: EnvVar,
    ) -> Result<(), PluginError> {
        let ps = self.pod_set_mut(pod_set)?;
        let c = ps.container_mut(container).ok_or_else(|| {
            PluginError::InvalidInput(format!("container {container:?} not found in pod set {pod_set:?}"))
        })?;
        c.upsert_env(env);
        Ok(())
    }

    /// Upsert a volume (by name) in a pod set.
    pub fn add_volume(&mut self, pod_set: &str, volume: Volume) -> Result<(), PluginError> {
        self.pod_set_mut(pod_set)?.upsert_volume(volume);
        Ok(())
    }

    /// Upsert a volume mount (by mount path) in a container of a pod set.
    pub fn add_volume_mount(
        &mut self,
        pod_set: &str,
        container: &str,
        mount: VolumeMount,
    ) -> Result<(), PluginError> {
        let ps = self.pod_set_mut(pod_set)?;
        let c = ps.container_mut(container).ok_or_else(|| {
            PluginError::InvalidInput(format!("container {container:?} not found in pod set {pod_set:?}"))
        })?;
        c.upsert_volume_mount(mount);
        Ok(())
    }

    /// Read an object through the host cache (must be declared in `reads`).
    pub fn get_object(
        &self,
        kind: &KindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, PluginError> {
        self.host
            .get_object(kind, namespace, name)
            .map_err(|e| PluginError::Unavailable(e.to_string()))
    }

    /// An ownerReference to the TrainJob (controller), for emitted objects.
    pub fn owner_reference(&self) -> Value {
        serde_json::json!({
            "apiVersion": self.trainjob.get("apiVersion").cloned().unwrap_or_else(|| "trainer.kubeflow.org/v1alpha1".into()),
            "kind": "TrainJob",
            "name": self.trainjob_name(),
            "uid": self.trainjob.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }

    /// Whether the info / TrainJob were changed, and their final values.
    pub fn into_parts(self) -> (Option<Info>, Option<Value>) {
        (
            self.info_changed.then_some(self.info),
            self.trainjob_changed.then_some(self.trainjob),
        )
    }
}

/// Input of `validate` (admission).
pub struct ValidateContext<'a> {
    /// The TrainJob being admitted.
    pub trainjob: Value,
    /// The previous TrainJob on update.
    pub old_trainjob: Option<Value>,
    /// The info built from the live runtime, without plugin enforcement.
    pub info: Info,
    /// The plugin configuration.
    pub config: Value,
    /// The host.
    pub host: &'a dyn Host,
}

impl<'a> ValidateContext<'a> {
    /// A context from the JSON strings of the WIT `validate-input`.
    pub fn from_json(
        trainjob: &str,
        old_trainjob: Option<&str>,
        info: &str,
        config: &str,
        host: &'a dyn Host,
    ) -> Result<Self, PluginError> {
        let parse = |what: &str, s: &str| -> Result<Value, PluginError> {
            serde_json::from_str(s).map_err(|e| PluginError::InvalidInput(format!("{what} JSON: {e}")))
        };
        Ok(ValidateContext {
            trainjob: parse("trainjob", trainjob)?,
            old_trainjob: old_trainjob.map(|s| parse("old trainjob", s)).transpose()?,
            info: serde_json::from_str(info)
                .map_err(|e| PluginError::InvalidInput(format!("info JSON: {e}")))?,
            config: parse_config(config)?,
            host,
        })
    }

    /// A policy by key (`mlPolicy.torch`, ...).
    pub fn policy(&self, key: &str) -> Option<&Value> {
        self.info.policy(key)
    }
}

fn parse_config(config: &str) -> Result<Value, PluginError> {
    if config.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(config).map_err(|e| PluginError::InvalidConfig(format!("config JSON: {e}")))
}
