//! The values a phase works on, plus helpers for common edits.

use crate::host::Host;
use crate::lazy_info::InfoCell;
use k8s_openapi::api::core::v1::{EnvVar, Volume, VolumeMount};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::cell::OnceCell;
use trainforge_api::plugin::{Info, KindRef, PluginError, PodSet};

/// Input of a reconcile phase: the TrainJob and info as modified by earlier
/// phases, the plugin's configuration, and the host.
///
/// Reading is free; mutating through [`PhaseContext::info_mut`],
/// [`PhaseContext::pod_set_mut`] (and the edit helpers) or
/// [`PhaseContext::trainjob_mut`] marks the value as changed so it is sent
/// back to the host (unchanged values are not re-serialised).
///
/// In a Wasm call the TrainJob and info are parsed lazily, as far as the
/// phase reads them: [`PhaseContext::policy`], [`PhaseContext::pod_set`] and
/// the edit helpers parse only the policy or the one pod set they touch, and
/// an info written back copies every untouched part verbatim. Reading the
/// whole info ([`PhaseContext::info`]) parses all of it — prefer the narrow
/// accessors in hot phases.
pub struct PhaseContext<'a> {
    trainjob: Lazy<Value>,
    info: InfoCell<'a>,
    config: Value,
    host: &'a dyn Host,
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
        Lazy {
            json: None,
            what: "",
            value: OnceCell::new(),
            owned: Some(value),
            error: OnceCell::new(),
        }
    }

    fn raw(what: &'static str, json: &str) -> Self {
        Lazy {
            json: Some(json.to_owned()),
            what,
            value: OnceCell::new(),
            owned: None,
            error: OnceCell::new(),
        }
    }

    fn parse(&self) -> T {
        let json = self.json.as_deref().unwrap_or("{}");
        serde_json::from_str(json).unwrap_or_else(|e| {
            let _ = self.error.set(PluginError::InvalidInput(format!(
                "{} JSON: {e}",
                self.what
            )));
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

impl<'a> PhaseContext<'a> {
    /// A context from already parsed values.
    pub fn new(trainjob: Value, info: Info, config: Value, host: &'a dyn Host) -> Self {
        PhaseContext {
            trainjob: Lazy::parsed(trainjob),
            info: InfoCell::parsed(info),
            config,
            host,
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
    /// parsed on first use, only as far as they are read. Check
    /// [`PhaseContext::input_error`] after the phase ran: a value that
    /// failed to parse read as empty.
    pub fn from_json_lazy(
        trainjob: &str,
        info: &'a str,
        config: &str,
        host: &'a dyn Host,
    ) -> Result<Self, PluginError> {
        Ok(PhaseContext {
            trainjob: Lazy::raw("trainjob", trainjob),
            info: InfoCell::raw(info),
            config: parse_config(config)?,
            host,
            trainjob_changed: false,
        })
    }

    /// The first input that failed to parse (lazy contexts only).
    pub fn input_error(&self) -> Option<PluginError> {
        self.trainjob
            .error
            .get()
            .or_else(|| self.info.error())
            .cloned()
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

    /// The whole runtime info (parses all of it; see the type docs).
    pub fn info(&self) -> &Info {
        self.info.info()
    }

    /// The whole runtime info, mutably (marks it changed).
    pub fn info_mut(&mut self) -> &mut Info {
        self.info.info_mut()
    }

    /// The pod set named `name` (parses only that pod set).
    pub fn pod_set(&self, name: &str) -> Option<&PodSet> {
        self.info.pod_set(name)
    }

    /// The first pod set whose ancestor is `ancestor` (e.g. `trainer`).
    pub fn pod_set_by_ancestor(&self, ancestor: &str) -> Option<&PodSet> {
        self.info.pod_set_by_ancestor(ancestor)
    }

    /// The first pod set whose ancestor is `ancestor`, mutably (marks the
    /// info changed).
    pub fn pod_set_by_ancestor_mut(&mut self, ancestor: &str) -> Option<&mut PodSet> {
        self.info.pod_set_by_ancestor_mut(ancestor)
    }

    /// The names of the pod sets, in template order.
    pub fn pod_set_names(&self) -> Vec<&str> {
        self.info.pod_set_names()
    }

    /// The plugin configuration (JSON; `{}` when none is set).
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The configuration deserialised into `T`.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, PluginError> {
        config_as(&self.config)
    }

    /// The host (object cache, randomness, logging).
    pub fn host(&self) -> &dyn Host {
        self.host
    }

    /// The TrainJob's `metadata.name` (empty if absent).
    pub fn trainjob_name(&self) -> &str {
        self.trainjob()
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The TrainJob's `metadata.namespace` (empty if absent).
    pub fn trainjob_namespace(&self) -> &str {
        self.trainjob()
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// A policy by key (`mlPolicy.torch`, `podGroupPolicy.volcano`, ...).
    /// Parses only the info's policies.
    pub fn policy(&self, key: &str) -> Option<&Value> {
        self.info.runtime_policy().get(key)
    }

    /// A policy by key, deserialised into `T`. `Ok(None)` when absent.
    pub fn policy_as<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, PluginError> {
        policy_as(self.policy(key), key)
    }

    /// The pod set `name`, mutably, or `InvalidInput` (marks the info
    /// changed; parses only that pod set).
    pub fn pod_set_mut(&mut self, name: &str) -> Result<&mut PodSet, PluginError> {
        self.info
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
        self.upsert_env(
            pod_set,
            container,
            EnvVar {
                name: name.to_owned(),
                value: Some(value.to_owned()),
                value_from: None,
            },
        )
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
            PluginError::InvalidInput(format!(
                "container {container:?} not found in pod set {pod_set:?}"
            ))
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
            PluginError::InvalidInput(format!(
                "container {container:?} not found in pod set {pod_set:?}"
            ))
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
        let info = self.info.changed().then(|| self.info.into_info());
        let trainjob = self.trainjob_changed.then(|| self.trainjob.into_inner());
        (info, trainjob)
    }

    /// The changed info and TrainJob as JSON (`None` = unchanged), as the
    /// host receives them. Untouched parts of the info are copied verbatim.
    pub fn changed_json(&self) -> Result<(Option<String>, Option<String>), PluginError> {
        let ser = |e: serde_json::Error| PluginError::Internal(format!("serialise: {e}"));
        let info = self.info.to_json_if_changed().map_err(ser)?;
        let trainjob = if self.trainjob_changed {
            Some(serde_json::to_string(self.trainjob.get()).map_err(ser)?)
        } else {
            None
        };
        Ok((info, trainjob))
    }
}

/// Input of `validate` (admission). Parsed lazily, like [`PhaseContext`].
pub struct ValidateContext<'a> {
    trainjob: Lazy<Value>,
    old_trainjob: Option<Lazy<Value>>,
    info: InfoCell<'a>,
    config: Value,
    host: &'a dyn Host,
}

impl<'a> ValidateContext<'a> {
    /// A context from already parsed values.
    pub fn new(
        trainjob: Value,
        old_trainjob: Option<Value>,
        info: Info,
        config: Value,
        host: &'a dyn Host,
    ) -> Self {
        ValidateContext {
            trainjob: Lazy::parsed(trainjob),
            old_trainjob: old_trainjob.map(Lazy::parsed),
            info: InfoCell::parsed(info),
            config,
            host,
        }
    }

    /// A context from the JSON strings of the WIT `validate-input`. The
    /// TrainJobs and info are parsed on first use; check
    /// [`ValidateContext::input_error`] afterwards.
    pub fn from_json(
        trainjob: &str,
        old_trainjob: Option<&str>,
        info: &'a str,
        config: &str,
        host: &'a dyn Host,
    ) -> Result<Self, PluginError> {
        Ok(ValidateContext {
            trainjob: Lazy::raw("trainjob", trainjob),
            old_trainjob: old_trainjob.map(|s| Lazy::raw("old trainjob", s)),
            info: InfoCell::raw(info),
            config: parse_config(config)?,
            host,
        })
    }

    /// The first input that failed to parse.
    pub fn input_error(&self) -> Option<PluginError> {
        self.trainjob
            .error
            .get()
            .or_else(|| self.old_trainjob.as_ref().and_then(|t| t.error.get()))
            .or_else(|| self.info.error())
            .cloned()
    }

    /// The TrainJob being admitted.
    pub fn trainjob(&self) -> &Value {
        self.trainjob.get()
    }

    /// The previous TrainJob on update, `None` on create.
    pub fn old_trainjob(&self) -> Option<&Value> {
        self.old_trainjob.as_ref().map(Lazy::get)
    }

    /// The whole info built from the live runtime, without plugin
    /// enforcement (parses all of it).
    pub fn info(&self) -> &Info {
        self.info.info()
    }

    /// The pod set named `name` (parses only that pod set).
    pub fn pod_set(&self, name: &str) -> Option<&PodSet> {
        self.info.pod_set(name)
    }

    /// The first pod set whose ancestor is `ancestor`.
    pub fn pod_set_by_ancestor(&self, ancestor: &str) -> Option<&PodSet> {
        self.info.pod_set_by_ancestor(ancestor)
    }

    /// A policy by key (`mlPolicy.torch`, ...); parses only the policies.
    pub fn policy(&self, key: &str) -> Option<&Value> {
        self.info.runtime_policy().get(key)
    }

    /// A policy by key, deserialised into `T`. `Ok(None)` when absent.
    pub fn policy_as<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, PluginError> {
        policy_as(self.policy(key), key)
    }

    /// The plugin configuration.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The configuration deserialised into `T`.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, PluginError> {
        config_as(&self.config)
    }

    /// The host.
    pub fn host(&self) -> &dyn Host {
        self.host
    }
}

fn config_as<T: DeserializeOwned>(config: &Value) -> Result<T, PluginError> {
    T::deserialize(config).map_err(|e| PluginError::InvalidConfig(e.to_string()))
}

fn policy_as<T: DeserializeOwned>(
    policy: Option<&Value>,
    key: &str,
) -> Result<Option<T>, PluginError> {
    policy
        .map(|v| {
            T::deserialize(v).map_err(|e| PluginError::InvalidInput(format!("policy {key}: {e}")))
        })
        .transpose()
}

fn parse_config(config: &str) -> Result<Value, PluginError> {
    if config.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(config)
        .map_err(|e| PluginError::InvalidConfig(format!("config JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MockHost;
    use serde_json::json;
    use trainforge_api::plugin::{ANCESTOR_LABEL, RuntimePolicy};

    fn info_json() -> String {
        let info = Info {
            runtime_policy: RuntimePolicy {
                ml_policy: Some(json!({"torch": {"numProcPerNode": 2}})),
                pod_group_policy: None,
                run_policy: None,
            },
            ..Info::default()
        };
        serde_json::to_string(&info).unwrap()
    }

    #[test]
    fn lazy_context_reads_policy_without_parsing_info() {
        let host = MockHost::default();
        let tj = json!({"metadata": {"name": "j", "namespace": "ns"}}).to_string();
        let info = info_json();
        let ctx = PhaseContext::from_json_lazy(&tj, &info, "", &host).unwrap();
        assert_eq!(ctx.policy("mlPolicy.torch.numProcPerNode"), Some(&json!(2)));
        assert!(
            !ctx.info.fully_parsed(),
            "policy() must not parse the whole info"
        );
        assert_eq!(ctx.trainjob_name(), "j");
        assert!(ctx.input_error().is_none());
        let (info, trainjob) = ctx.into_parts();
        assert!(info.is_none() && trainjob.is_none(), "nothing changed");
    }

    #[test]
    fn lazy_context_mutations_come_back() {
        let host = MockHost::default();
        let info = info_json();
        let mut ctx = PhaseContext::from_json_lazy("{}", &info, "{}", &host).unwrap();
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
        let info = info_json();
        let ctx = PhaseContext::from_json_lazy("{", &info, "{}", &host).unwrap();
        assert!(ctx.input_error().is_none(), "not parsed yet");
        assert_eq!(ctx.trainjob_name(), "");
        assert!(
            matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("trainjob"))
        );
        let ctx = PhaseContext::from_json_lazy("{}", "[1]", "{}", &host).unwrap();
        assert!(ctx.policy("mlPolicy").is_none());
        assert!(
            matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("info"))
        );
        assert!(matches!(
            PhaseContext::from_json_lazy("{}", "{}", "nope", &host),
            Err(PluginError::InvalidConfig(_))
        ));
    }

    /// An info with two pod sets (trainer `node`, initializer `init`).
    fn two_pod_sets() -> Info {
        let container = |name: &str| json!({"name": name, "image": "img", "env": [{"name": "A", "value": "1"}]});
        let job = |name: &str, ancestor: &str| {
            json!({"name": name, "replicas": 1, "template": {
            "metadata": {"labels": {ANCESTOR_LABEL: ancestor}},
            "spec": {"template": {"spec": {"containers": [container("node")],
                                           "volumes": [{"name": "data", "emptyDir": {}}]}}}}})
        };
        let runtime = json!({"spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {
            "replicatedJobs": [job("init", "dataset-initializer"), job("node", "trainer")]}}}});
        crate::testing::RuntimeFixture::new(runtime)
            .info_for(&json!({"metadata": {"name": "j"}}))
            .unwrap()
    }

    #[test]
    fn pod_set_edit_parses_and_rewrites_only_that_pod_set() {
        let host = MockHost::default();
        let info = two_pod_sets();
        let json = serde_json::to_string(&info).unwrap();
        let mut ctx = PhaseContext::from_json_lazy("{}", &json, "{}", &host).unwrap();
        assert_eq!(ctx.pod_set_names(), ["init", "node"]);
        assert_eq!(
            ctx.pod_set_by_ancestor("trainer").map(|p| p.name.as_str()),
            Some("node")
        );
        ctx.set_env("node", "node", "B", "2").unwrap();
        assert!(
            !ctx.info.fully_parsed(),
            "an edit through a helper must not parse the whole info"
        );
        assert!(ctx.set_env("node", "missing", "B", "2").is_err());
        assert!(
            matches!(ctx.pod_set_mut("nope"), Err(PluginError::InvalidInput(m)) if m.contains("nope"))
        );
        let (out, trainjob) = ctx.changed_json().unwrap();
        assert!(trainjob.is_none());
        let out: Info = serde_json::from_str(&out.expect("info changed")).unwrap();
        let mut expected = info;
        expected
            .pod_set_mut("node")
            .unwrap()
            .container_mut("node")
            .unwrap()
            .set_env("B", "2");
        assert_eq!(out, expected);
    }

    #[test]
    fn pod_set_and_whole_info_views_agree() {
        let host = MockHost::default();
        let json = serde_json::to_string(&two_pod_sets()).unwrap();
        // A pod-set edit is seen by a later whole-info read...
        let mut ctx = PhaseContext::from_json_lazy("{}", &json, "{}", &host).unwrap();
        ctx.pod_set_mut("init").unwrap().count = Some(3);
        assert_eq!(ctx.info().pod_set("init").unwrap().count, Some(3));
        // ...and by the next edit after that read.
        ctx.pod_set_by_ancestor_mut("trainer").unwrap().count = Some(5);
        assert_eq!(ctx.info().pod_set("node").unwrap().count, Some(5));
        assert_eq!(ctx.info().pod_set("init").unwrap().count, Some(3));
        // A whole-info edit is seen by later pod-set reads and edits.
        ctx.info_mut().labels.insert("l".into(), "v".into());
        ctx.pod_set_mut("node").unwrap().count = Some(7);
        assert_eq!(ctx.pod_set("node").unwrap().count, Some(7));
        let (info, _) = ctx.into_parts();
        let info = info.unwrap();
        assert_eq!(info.labels["l"], "v");
        assert_eq!(
            (
                info.pod_set("init").unwrap().count,
                info.pod_set("node").unwrap().count
            ),
            (Some(3), Some(7))
        );
    }

    #[test]
    fn reads_alone_change_nothing() {
        let host = MockHost::default();
        let json = serde_json::to_string(&two_pod_sets()).unwrap();
        let ctx = PhaseContext::from_json_lazy("{}", &json, "{}", &host).unwrap();
        assert_eq!(ctx.pod_set("node").unwrap().containers[0].env[0].name, "A");
        assert_eq!(ctx.info().template_spec.pod_sets.len(), 2);
        assert_eq!(ctx.changed_json().unwrap(), (None, None));
    }

    #[test]
    fn a_malformed_pod_set_is_an_input_error_naming_it() {
        let host = MockHost::default();
        let json = json!({"templateSpec": {"podSets": [
            {"name": "ok", "containers": []}, {"name": "bad", "containers": "not a list"}]}})
        .to_string();
        let ctx = PhaseContext::from_json_lazy("{}", &json, "{}", &host).unwrap();
        assert!(ctx.pod_set("ok").is_some());
        assert!(
            ctx.input_error().is_none(),
            "the bad pod set was not read yet"
        );
        assert!(ctx.pod_set("bad").is_none());
        assert!(
            matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("\"bad\""))
        );
    }

    #[test]
    fn validate_context_is_lazy_and_reports_bad_input() {
        let host = MockHost::default();
        let json = serde_json::to_string(&two_pod_sets()).unwrap();
        let ctx =
            ValidateContext::from_json(r#"{"spec": {}}"#, Some("{"), &json, "{}", &host).unwrap();
        assert!(ctx.policy("mlPolicy.torch").is_some());
        assert_eq!(
            ctx.pod_set_by_ancestor("trainer").map(|p| p.name.as_str()),
            Some("node")
        );
        assert!(!ctx.info.fully_parsed());
        assert_eq!(ctx.trainjob()["spec"], json!({}));
        assert!(ctx.input_error().is_none());
        assert_eq!(ctx.old_trainjob(), Some(&Value::Null));
        assert!(
            matches!(ctx.input_error(), Some(PluginError::InvalidInput(m)) if m.contains("old trainjob"))
        );
    }
}
