//! The values a phase works on, plus helpers for common edits.

use crate::host::Host;
use k8s_openapi::api::core::v1::{EnvVar, Volume, VolumeMount};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::cell::OnceCell;
use trainforge_api::plugin::{Info, KindRef, PluginError, PodSet, RuntimePolicy};

/// Input of a reconcile phase: the TrainJob and info as modified by earlier
/// phases, the plugin's configuration, and the host.
///
/// Reading is free; mutating through [`PhaseContext::info_mut`] or
/// [`PhaseContext::trainjob_mut`] marks the value as changed so it is sent
/// back to the host (unchanged values are not re-serialised).
///
/// In a Wasm call the TrainJob and info are parsed lazily, on first use:
/// a phase that only looks at a policy ([`PhaseContext::policy`]) and the
/// TrainJob's name never pays for parsing the whole info.
pub struct PhaseContext<'a> {
    trainjob: Lazy<Value>,
    info: Lazy<Info>,
    /// The info's policies only, when read before the full info.
    policies: OnceCell<Info>,
    config: Value,
    host: &'a dyn Host,
    info_changed: bool,
    trainjob_changed: bool,
}

/// A value parsed from JSON on first access. A parse error is recorded
/// (see [`PhaseContext::input_error`]) and the value reads as its default.
struct Lazy<T> {
    json: Option<String>,
    what: &'static str,
    /// Parsed on first shared access.
    value: OnceCell<T>,
    /// Moved here on first mutable access.
    owned: Option<T>,
    error: OnceCell<PluginError>,
}

impl<T: DeserializeOwned + Default> Lazy<T> {
    fn parsed(value: T) -> Self {
        Lazy { json: None, what: "", value: OnceCell::new(), owned: Some(value), error: OnceCell::new() }
    }

    fn raw(what: &'static str, json: &str) -> Self {
        Lazy { json: Some(json.to_owned()), what, value: OnceCell::new(), owned: None, error: OnceCell::new() }
    }

    fn is_parsed(&self) -> bool {
        self.owned.is_some() || self.value.get().is_some()
    }

    fn parse(&self) -> T {
        let json = self.json.as_deref().unwrap_or("{}");
        serde_json::from_str(json).unwrap_or_else(|e| {
            let _ = self.error.set(PluginError::InvalidInput(format!("{} JSON: {e}", self.what)));
            T::default()
        })
    }

    fn get(&self) -> &T {
        match &self.owned {
            Some(v) => v,
            None => self.value.get_or_init(|| self.parse()),
        }
    }

    fn get_mut(&mut self) -> &mut T {
        let v = match self.owned.take() {
            Some(v) => v,
            None => match self.value.take() {
                Some(v) => v,
                None => self.parse(),
            },
        };
        self.owned.insert(v)
    }

    fn into_inner(mut self) -> T {
        match self.owned.take() {
            Some(v) => v,
            None => match self.value.take() {
                Some(v) => v,
                None => self.parse(),
            },
        }
    }
}

/// Only the policies of an info (parsing skips everything else).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PoliciesOnly {
    #[serde(default)]
    runtime_policy: RuntimePolicy,
}

impl<'a> PhaseContext<'a> {
    /// A context from already parsed values.
    pub fn new(trainjob: Value, info: Info, config: Value, host: &'a dyn Host) -> Self {
        PhaseContext {
            trainjob: Lazy::parsed(trainjob),
            info: Lazy::parsed(info),
            policies: OnceCell::new(),
            config,
            host,
            info_changed: false,
            trainjob_changed: false,
        }
    }

    /// A context from the JSON strings of the WIT `phase-input`, parsed
    /// now (an invalid TrainJob or info is an `InvalidInput` error).
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

    /// Like [`PhaseContext::from_json`], but the TrainJob and info are
    /// parsed on first use. Check [`PhaseContext::input_error`] after the
    /// phase ran: a value that failed to parse read as empty.
    pub fn from_json_lazy(
        trainjob: &str,
        info: &str,
        config: &str,
        host: &'a dyn Host,
    ) -> Result<Self, PluginError> {
        Ok(PhaseContext {
            trainjob: Lazy::raw("trainjob", trainjob),
            info: Lazy::raw("info", info),
            policies: OnceCell::new(),
            config: parse_config(config)?,
            host,
            info_changed: false,
            trainjob_changed: false,
        })
    }

    /// The first input that failed to parse (lazy contexts only).
    pub fn input_error(&self) -> Option<PluginError> {
        self.trainjob.error.get().or_else(|| self.info.error.get()).cloned()
    }

    /// The TrainJob (JSON), as modified by earlier phases.
    pub fn trainjob(&self) -> &Value {
        self.trainjob.get()
    }

    /// The TrainJob, mutably (marks it changed).
    pub fn trainjob_mut(&mut self) -> &mut Value {
        self.trainjob_changed = true;
        self.trainjob.get_mut()
    }

    /// The runtime info.
    pub fn info(&self) -> &Info {
        self.info.get()
    }

    /// The runtime info, mutably (marks it changed).
    pub fn info_mut(&mut self) -> &mut Info {
        self.info_changed = true;
        self.info.get_mut()
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
        self.trainjob().pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }

    /// The TrainJob's `metadata.namespace` (empty if absent).
    pub fn trainjob_namespace(&self) -> &str {
        self.trainjob().pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default()
    }

    /// A policy by key (`mlPolicy.torch`, `podGroupPolicy.volcano`, ...).
    /// Does not parse the whole info when it has not been read yet.
    pub fn policy(&self, key: &str) -> Option<&Value> {
        if self.info.is_parsed() {
            return self.info().policy(key);
        }
        self.policies
            .get_or_init(|| {
                let json = self.info.json.as_deref().unwrap_or("{}");
                match serde_json::from_str::<PoliciesOnly>(json) {
                    Ok(p) => Info { runtime_policy: p.runtime_policy, ..Info::default() },
                    // Report the error through the full parse.
                    Err(_) => self.info().clone(),
                }
            })
            .policy(key)
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
            "apiVersion": self.trainjob().get("apiVersion").cloned().unwrap_or_else(|| "trainer.kubeflow.org/v1alpha1".into()),
            "kind": "TrainJob",
            "name": self.trainjob_name(),
            "uid": self.trainjob().pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }

    /// Whether the info / TrainJob were changed, and their final values.
    pub fn into_parts(self) -> (Option<Info>, Option<Value>) {
        let info = self.info_changed.then(|| self.info.into_inner());
        let trainjob = self.trainjob_changed.then(|| self.trainjob.into_inner());
        (info, trainjob)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MockHost;
    use serde_json::json;

    fn info_json() -> String {
        let info = Info {
            runtime_policy: RuntimePolicy { ml_policy: Some(json!({"torch": {"numProcPerNode": 2}})), pod_group_policy: None },
            ..Info::default()
        };
        serde_json::to_string(&info).unwrap()
    }

    #[test]
    fn lazy_context_reads_policy_without_parsing_info() {
        let host = MockHost::default();
        let tj = json!({"metadata": {"name": "j", "namespace": "ns"}}).to_string();
        let ctx = PhaseContext::from_json_lazy(&tj, &info_json(), "", &host).unwrap();
        assert_eq!(ctx.policy("mlPolicy.torch.numProcPerNode"), Some(&json!(2)));
        assert!(!ctx.info.is_parsed(), "policy() must not parse the whole info");
        assert_eq!(ctx.trainjob_name(), "j");
        assert!(ctx.input_error().is_none());
        let (info, trainjob) = ctx.into_parts();
        assert!(info.is_none() && trainjob.is_none(), "nothing changed");
    }

    #[test]
    fn lazy_context_mutations_come_back() {
        let host = MockHost::default();
        let mut ctx = PhaseContext::from_json_lazy("{}", &info_json(), "{}", &host).unwrap();
        assert!(ctx.policy("mlPolicy.torch").is_some());
        ctx.info_mut().labels.insert("a".into(), "b".into());
        ctx.trainjob_mut()["x"] = json!(1);
        assert_eq!(ctx.info().labels["a"], "b");
        let (info, trainjob) = ctx.into_parts();
        assert_eq!(info.unwrap().labels["a"], "b");
        assert_eq!(trainjob.unwrap()["x"], 1);
    }

    #[test]
    fn lazy_context_reports_bad_input_on_use() {
        let host = MockHost::default();
        let ctx = PhaseContext::from_json_lazy("{", &info_json(), "{}", &host).unwrap();
        assert!(ctx.input_error().is_none(), "not parsed yet");
        assert_eq!(ctx.trainjob_name(), "");
        assert!(matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("trainjob")));
        let ctx = PhaseContext::from_json_lazy("{}", "[1]", "{}", &host).unwrap();
        assert!(ctx.policy("mlPolicy").is_none());
        assert!(matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("info")));
        assert!(matches!(
            PhaseContext::from_json_lazy("{}", "{}", "nope", &host),
            Err(PluginError::InvalidConfig(_))
        ));
    }
}
