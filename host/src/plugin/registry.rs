//! Loading plugins (digest pin, cache, interface checks, `describe`) and
//! running a set of them as the reconcile pipeline.

use super::Error;
use super::bindings::{Plugin as WitPlugin, PluginPre};
use super::cache::{ArtifactCache, CacheOutcome, sha256_hex};
use super::call::{
    CallEnv, Inner, LoadedPlugin, PhaseInput, ValidateInput, descriptor_from_wit, with_instance,
};
use super::engine::{EngineHandle, Limits, RuntimeConfig};
use super::observe::{CallObserver, FailurePolicy, ObserverSlot, ignored_warning};
use super::sandbox::{CallState, Grants, PluginContext};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use trainforge_api::plugin::{
    Descriptor, FieldError, Info, KindRef, ObjectKey, Phase, WIT_VERSION, object_key,
};
use wasmtime::component::{HasSelf, Linker};

/// Read-only access to cluster objects for `host.get-object` (the
/// controller serves it from its reflector cache).
pub trait ObjectSource: Send + Sync {
    /// The object as JSON, `None` if absent; `Err` if the cache cannot answer.
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String>;
}

/// An [`ObjectSource`] with nothing in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn get(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// A fixed set of objects (CLI dry runs, tests).
#[derive(Debug, Default, Clone)]
pub struct StaticObjects(BTreeMap<ObjectKey, String>);

impl StaticObjects {
    /// Add an object (uses its apiVersion, kind, namespace and name).
    pub fn insert(&mut self, object: &Value) {
        self.0.insert(object_key(object), object.to_string());
    }
}

impl ObjectSource for StaticObjects {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        Ok(self
            .0
            .get(&(kind.clone(), namespace.to_owned(), name.to_owned()))
            .cloned())
    }
}

/// A plugin to load.
#[derive(Clone)]
pub struct PluginSource {
    /// A label for errors before the plugin has told its name (file name).
    pub label: String,
    /// Component bytes.
    pub bytes: Arc<[u8]>,
    /// Pinned sha256 (hex); refused with `DigestMismatch` if different.
    pub sha256: Option<String>,
    /// Plugin configuration (JSON), passed to every phase.
    pub config: String,
    /// Capabilities granted by the configuration.
    pub grants: Grants,
    /// Limits overriding the runtime defaults.
    pub limits: Option<Limits>,
    /// Objects served through `host.get-object`.
    pub objects: Arc<dyn ObjectSource>,
    /// What a pass does when this plugin fails (default `Fail`).
    pub failure_policy: FailurePolicy,
    /// Narrows the kinds the plugin declared in `emits`: `build` output is
    /// checked against the intersection (`None` = what it declared).
    pub allowed_emits: Option<Vec<KindRef>>,
    /// Phases to call, intersected with what the plugin implements
    /// (`None` = every phase it implements).
    pub phases: Option<Vec<Phase>>,
}

impl PluginSource {
    /// A source with default config (`{}`), no grants and no objects.
    pub fn new(label: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        PluginSource {
            label: label.into(),
            bytes: bytes.into(),
            sha256: None,
            config: "{}".into(),
            grants: Grants::default(),
            limits: None,
            objects: Arc::new(NoObjects),
            failure_policy: FailurePolicy::Fail,
            allowed_emits: None,
            phases: None,
        }
    }

    /// Read a component file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, Error> {
        let label = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(path).map_err(|e| Error::LoadFailed {
            plugin: label.clone(),
            message: format!("reading {}: {e}", path.display()),
        })?;
        Ok(PluginSource::new(label, bytes))
    }
}

/// The plugin runtime: one engine (epoch ticker on its own thread), one
/// linker, the artifact cache. Create once per process; `Send + Sync`, so
/// share it as `Arc<PluginRuntime>` (loads and calls are synchronous: run
/// them from `spawn_blocking`).
pub struct PluginRuntime {
    engine: EngineHandle,
    linker: Linker<CallState>,
    cache: ArtifactCache,
    config: RuntimeConfig,
    observer: Arc<ObserverSlot>,
    /// Linked (`InstancePre`) components by cache key: linking type-checks
    /// every import, so a reload of a known digest skips it.
    linked: Mutex<HashMap<String, PluginPre<CallState>>>,
}

/// `major.minor` of a version string, for 0.x compatibility (a 0.x minor
/// bump is breaking in semver; patches are additive).
fn compat_line(v: &str) -> Option<(u64, u64)> {
    let mut it = v.split(['.', '-', '+']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a plugin built against `plugin` WIT can be served by this host.
pub fn wit_compatible(plugin: &str) -> bool {
    match (compat_line(plugin), compat_line(WIT_VERSION)) {
        (Some((pm, pn)), Some((hm, hn))) if pm == 0 || hm == 0 => pm == hm && pn == hn,
        (Some((pm, _)), Some((hm, _))) => pm == hm,
        _ => false,
    }
}

const GUEST_EXPORT: &str = "trainforge:plugin/guest@";
const OUR_IMPORTS: [&str; 2] = ["trainforge:plugin/host@", "trainforge:plugin/types@"];

impl PluginRuntime {
    /// Create the runtime (engine, ticker thread, linker with deny-all WASI).
    pub fn new(config: RuntimeConfig) -> Result<Self, Error> {
        let engine = EngineHandle::new(config.epoch_tick, config.max_concurrent_calls)?;
        let mut linker = Linker::<CallState>::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| Error::Host(format!("linking WASI: {e:#}")))?;
        WitPlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| Error::Host(format!("linking host imports: {e:#}")))?;
        let cache = ArtifactCache::new(&engine.engine, config.cache_dir.clone());
        let observer = Arc::new(ObserverSlot::new(config.observer.clone()));
        Ok(PluginRuntime {
            engine,
            linker,
            cache,
            config,
            observer,
            linked: Mutex::new(HashMap::new()),
        })
    }

    /// Set (or replace) the observer told about every guest call, for
    /// plugins loaded before and after this call.
    pub fn set_observer(&self, observer: Arc<dyn CallObserver>) {
        self.observer.set(Some(observer));
    }

    /// The runtime configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The wasmtime engine (for benchmarks).
    pub fn engine(&self) -> &wasmtime::Engine {
        &self.engine.engine
    }

    /// Drop compiled components held in memory (the disk cache stays).
    pub fn clear_memory_cache(&self) {
        self.cache.clear_memory();
        if let Ok(mut m) = self.linked.lock() {
            m.clear();
        }
    }

    /// Verify, compile (or load from cache), check the interface, call
    /// `describe`, and return a plugin ready to call.
    pub fn load(&self, src: PluginSource) -> Result<LoadedPlugin, Error> {
        self.load_traced(src).map(|(p, _)| p)
    }

    /// Like [`PluginRuntime::load`], also telling where the compiled code came from.
    pub fn load_traced(&self, src: PluginSource) -> Result<(LoadedPlugin, CacheOutcome), Error> {
        let label = src.label.clone();
        let load_failed = |m: String| Error::LoadFailed {
            plugin: label.clone(),
            message: m,
        };
        if src.bytes.len() > self.config.max_component_bytes {
            return Err(load_failed(format!(
                "component is {} bytes; the limit is {}",
                src.bytes.len(),
                self.config.max_component_bytes
            )));
        }
        let sha256 = sha256_hex(&src.bytes);
        if let Some(expected) = &src.sha256 {
            let expected = expected
                .trim()
                .trim_start_matches("sha256:")
                .to_ascii_lowercase();
            if expected != sha256 {
                return Err(Error::DigestMismatch {
                    plugin: label,
                    expected,
                    actual: sha256,
                });
            }
        }
        let engine = &self.engine.engine;
        let (component, outcome) = self
            .cache
            .get_or_compile(engine, &self.engine.compiler_config, &sha256, &src.bytes)
            .map_err(|m| load_failed(format!("compiling: {m}")))?;

        // Interface check from the component type (no instantiation needed).
        let ty = component.component_type();
        let incompatible = |m: String| Error::IncompatibleInterface {
            plugin: label.clone(),
            message: m,
        };
        let exported: Vec<&str> = ty.exports(engine).map(|(n, _)| n).collect();
        let guest = exported
            .iter()
            .find(|n| n.starts_with(GUEST_EXPORT))
            .ok_or_else(|| {
                incompatible(format!(
                    "does not export {GUEST_EXPORT}{WIT_VERSION} (exports: {exported:?})"
                ))
            })?;
        let version = &guest[GUEST_EXPORT.len()..];
        if !wit_compatible(version) {
            return Err(incompatible(format!(
                "exports {guest}; this host serves trainforge:plugin@{WIT_VERSION} (0.{}.x)",
                compat_line(WIT_VERSION).map_or(0, |v| v.1)
            )));
        }
        for (name, _) in ty.imports(engine) {
            let ours = OUR_IMPORTS.iter().any(|p| name.starts_with(p));
            if ours && !wit_compatible(name.rsplit('@').next().unwrap_or_default()) {
                return Err(incompatible(format!("imports {name}")));
            }
            if !ours && !name.starts_with("wasi:") {
                return Err(incompatible(format!("imports unknown interface {name}")));
            }
        }
        let key = self.cache.key(&sha256);
        let cached_pre = self.linked.lock().ok().and_then(|m| m.get(&key).cloned());
        let pre = match cached_pre {
            Some(pre) => pre,
            None => {
                let pre = self
                    .linker
                    .instantiate_pre(&component)
                    .map_err(|e| incompatible(format!("linking: {e:#}")))?;
                let pre = PluginPre::new(pre)
                    .map_err(|e| incompatible(format!("exports do not match the WIT: {e:#}")))?;
                if let Ok(mut m) = self.linked.lock() {
                    m.insert(key, pre.clone());
                }
                pre
            }
        };

        let limits = src.limits.unwrap_or(self.config.limits);
        let boot = CallEnv {
            engine: engine.clone(),
            tick: self.config.epoch_tick,
            _ticker: self.engine.ticker.clone(),
            pre,
            ctx: Arc::new(PluginContext {
                name: label.clone(),
                reads: BTreeSet::new(),
                random: false,
                clock: false,
                limits,
            }),
            objects: src.objects.clone(),
            observer: self.observer.clone(),
        };
        let start = std::time::Instant::now();
        let (described, high_water) = with_instance(&boot, "describe", |s, p| {
            p.trainforge_plugin_guest().call_describe(s)
        });
        let descriptor = described
            .map(descriptor_from_wit)
            .and_then(|d| self.check_descriptor(&label, d));
        let observed_name = descriptor
            .as_ref()
            .map_or(label.as_str(), |d| d.name.as_str());
        self.observer.notify(
            observed_name,
            "describe",
            start.elapsed(),
            descriptor.as_ref().err().map(Error::reason),
            high_water,
        );
        let descriptor = descriptor?;
        let wants = |c: &str| descriptor.capabilities.iter().any(|x| x == c);
        let ctx = Arc::new(PluginContext {
            name: descriptor.name.clone(),
            reads: descriptor.reads.iter().cloned().collect(),
            random: wants("random") && src.grants.random,
            clock: wants("clock") && src.grants.clock,
            limits,
        });
        let emits = descriptor
            .emits
            .iter()
            .filter(|k| {
                src.allowed_emits
                    .as_ref()
                    .is_none_or(|allowed| allowed.contains(k))
            })
            .cloned()
            .collect();
        Ok((
            LoadedPlugin {
                inner: Arc::new(Inner {
                    env: CallEnv { ctx, ..boot },
                    descriptor,
                    sha256,
                    config: src.config,
                    emits,
                    failure_policy: src.failure_policy,
                    phases: src.phases.map(|p| p.into_iter().collect()),
                }),
            },
            outcome,
        ))
    }

    /// The checks on what `describe` answered at load.
    fn check_descriptor(&self, label: &str, descriptor: Descriptor) -> Result<Descriptor, Error> {
        if !wit_compatible(&descriptor.wit_version) {
            return Err(Error::IncompatibleInterface {
                plugin: label.to_owned(),
                message: format!(
                    "describe() reports WIT version {:?}; this host serves {WIT_VERSION}",
                    descriptor.wit_version
                ),
            });
        }
        if descriptor.name.is_empty() {
            return Err(Error::invalid_output(
                label,
                Phase::Validate,
                "describe() returned an empty name",
            ));
        }
        for p in &descriptor.phases {
            if Phase::parse(p).is_none() {
                tracing::info!(plugin = %descriptor.name, phase = %p, "ignoring phase unknown to this host");
            }
        }
        Ok(descriptor)
    }
}

/// What a reconcile pass produced.
#[derive(Debug, Clone)]
pub struct ReconcileOutput {
    /// The in-memory TrainJob after every phase.
    pub trainjob: Value,
    /// The info after every enforce/pre-build phase.
    pub info: Info,
    /// Checked objects from every `build`, in plugin order.
    pub objects: Vec<Value>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`):
    /// plugin, phase, reason and message.
    pub warnings: Vec<String>,
}

/// A field error found by one plugin's `validate`.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginFieldError {
    /// The plugin's name.
    pub plugin: String,
    /// The error.
    pub error: FieldError,
}

/// What a validation pass produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidateOutput {
    /// Admission warnings of every plugin, in plugin order.
    pub warnings: Vec<String>,
    /// Field errors of every plugin, in plugin order.
    pub errors: Vec<PluginFieldError>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`).
    pub ignored: Vec<String>,
}

/// What a status pass produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusOutput {
    /// The new TrainJob status, or `None` to leave it.
    pub status: Option<Value>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`).
    pub warnings: Vec<String>,
}

/// An ordered set of plugins run as the Trainer framework pipeline. Cheap
/// to clone (one `Arc`), `Send + Sync`.
#[derive(Debug, Clone, Default)]
pub struct PluginSet {
    plugins: Arc<[LoadedPlugin]>,
}

/// Apply `p`'s failure policy to `r`: `Ignore` turns an error into a
/// logged warning (and `None`), `Fail` returns it.
fn per_policy<T>(
    p: &LoadedPlugin,
    phase: Phase,
    r: Result<T, Error>,
    warnings: &mut Vec<String>,
) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if p.failure_policy() == FailurePolicy::Ignore => {
            let w = ignored_warning(p.name(), phase.as_str(), &e);
            tracing::warn!(plugin = %p.name(), phase = %phase, reason = e.reason(), error = %e, "plugin failure ignored (failurePolicy Ignore)");
            warnings.push(w);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl PluginSet {
    /// A set; order within a phase is the order given. At most one plugin
    /// may have the `status` phase called, and names must be unique.
    pub fn new(plugins: Vec<LoadedPlugin>) -> Result<Self, Error> {
        let mut names = BTreeSet::new();
        for p in &plugins {
            if !names.insert(p.name().to_owned()) {
                return Err(Error::LoadFailed {
                    plugin: p.name().to_owned(),
                    message: "duplicate plugin name".into(),
                });
            }
        }
        let status: Vec<&str> = plugins
            .iter()
            .filter(|p| p.calls(Phase::Status))
            .map(LoadedPlugin::name)
            .collect();
        if status.len() > 1 {
            return Err(Error::LoadFailed {
                plugin: status.join(","),
                message: "too many plugins implement the status phase".into(),
            });
        }
        Ok(PluginSet {
            plugins: plugins.into(),
        })
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// Run enforce-ml-policy → enforce-pod-group-policy → enforce-pod-spec →
    /// pre-build → build, threading the TrainJob and info through every
    /// plugin. A failure stops the pass, unless the plugin's failure policy
    /// is `Ignore`: then its contribution to that phase is skipped and the
    /// failure is reported in [`ReconcileOutput::warnings`].
    pub fn reconcile(&self, trainjob: &Value, info: &Info) -> Result<ReconcileOutput, Error> {
        let _span = tracing::debug_span!("plugin_pipeline", plugins = self.plugins.len()).entered();
        let mut input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut warnings = Vec::new();
        let mut last_info_writer: Option<&str> = None;
        for phase in [
            Phase::EnforceMlPolicy,
            Phase::EnforcePodGroupPolicy,
            Phase::EnforcePodSpec,
            Phase::PreBuild,
        ] {
            for p in self.plugins.iter().filter(|p| p.calls(phase)) {
                let Some(m) = per_policy(p, phase, p.enforce(phase, &input), &mut warnings)? else {
                    continue;
                };
                if let Some(i) = m.info {
                    input.info = i;
                    last_info_writer = Some(p.name());
                }
                if let Some(t) = m.trainjob {
                    input.trainjob = t;
                }
            }
        }
        let mut objects = Vec::new();
        for p in self.plugins.iter().filter(|p| p.calls(Phase::Build)) {
            if let Some(o) = per_policy(p, Phase::Build, p.build(&input), &mut warnings)? {
                objects.extend(o);
            }
        }
        let info: Info = serde_json::from_str(&input.info).map_err(|e| {
            Error::invalid_output(
                last_info_writer.unwrap_or("host"),
                Phase::PreBuild,
                format!("info does not match the info model: {e}"),
            )
        })?;
        let trainjob = serde_json::from_str(&input.trainjob)
            .map_err(|e| Error::Host(format!("TrainJob JSON: {e}")))?;
        Ok(ReconcileOutput {
            trainjob,
            info,
            objects,
            warnings,
        })
    }

    /// Run every `validate`, concatenating warnings and errors (ignored
    /// failures in [`ValidateOutput::ignored`]).
    pub fn validate(
        &self,
        trainjob: &Value,
        old: Option<&Value>,
        info: &Info,
    ) -> Result<ValidateOutput, Error> {
        let input = ValidateInput {
            trainjob: trainjob.to_string(),
            old_trainjob: old.map(Value::to_string),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        self.validate_input(&input)
    }

    /// [`PluginSet::validate`] with the input already serialised.
    pub fn validate_input(&self, input: &ValidateInput) -> Result<ValidateOutput, Error> {
        let mut out = ValidateOutput::default();
        for p in self.plugins.iter().filter(|p| p.calls(Phase::Validate)) {
            let Some(v) = per_policy(p, Phase::Validate, p.validate(input), &mut out.ignored)?
            else {
                continue;
            };
            out.warnings.extend(v.warnings);
            out.errors
                .extend(v.errors.into_iter().map(|error| PluginFieldError {
                    plugin: p.name().to_owned(),
                    error,
                }));
        }
        Ok(out)
    }

    /// Run the (single) `status` plugin, if any. An ignored failure gives
    /// `None` (and a log line); [`PluginSet::status_report`] also returns it
    /// as a warning.
    pub fn status(&self, trainjob: &Value, info: &Info) -> Result<Option<Value>, Error> {
        self.status_report(trainjob, info).map(|s| s.status)
    }

    /// Run the (single) `status` plugin, if any, with ignored failures.
    pub fn status_report(&self, trainjob: &Value, info: &Info) -> Result<StatusOutput, Error> {
        let Some(p) = self.plugins.iter().find(|p| p.calls(Phase::Status)) else {
            return Ok(StatusOutput::default());
        };
        let input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut warnings = Vec::new();
        let status = per_policy(p, Phase::Status, p.status(&input), &mut warnings)?.flatten();
        Ok(StatusOutput { status, warnings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wit_versions() {
        assert!(wit_compatible("0.1.0"));
        assert!(wit_compatible("0.1.7"));
        assert!(!wit_compatible("0.2.0"));
        assert!(!wit_compatible("9.0.0"));
        assert!(!wit_compatible("garbage"));
    }

    #[test]
    fn corrupt_module_is_load_failed() {
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let e = rt
            .load(PluginSource::new("junk.wasm", b"\0asm garbage".to_vec()))
            .unwrap_err();
        assert_eq!(e.reason(), "LoadFailed", "{e}");
        assert!(e.to_string().contains("junk.wasm"));
    }

    #[test]
    fn runtime_set_and_plugin_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PluginRuntime>();
        assert_send_sync::<PluginSet>();
        assert_send_sync::<LoadedPlugin>();
        assert_send_sync::<PluginSource>();
    }

    #[test]
    fn source_defaults_keep_todays_behaviour() {
        let s = PluginSource::new("x", Vec::new());
        assert_eq!(s.failure_policy, FailurePolicy::Fail);
        assert!(s.allowed_emits.is_none() && s.phases.is_none());
    }

    #[test]
    fn ignored_warning_names_plugin_phase_and_reason() {
        let e = Error::Timeout {
            plugin: "p".into(),
            phase: "build".into(),
            limit_ms: 5,
        };
        let w = ignored_warning("p", "build", &e);
        assert!(
            w.contains("plugin p") && w.contains("build") && w.contains("Timeout"),
            "{w}"
        );
    }

    #[test]
    fn observer_slot_notifies_the_current_observer() {
        use std::sync::Mutex;
        use std::time::Duration;
        #[derive(Default)]
        struct Count(Mutex<Vec<(String, Option<&'static str>)>>);
        impl CallObserver for Count {
            fn on_call(
                &self,
                plugin: &str,
                _: &str,
                _: Duration,
                failure: Option<&'static str>,
                _: usize,
            ) {
                self.0.lock().unwrap().push((plugin.to_owned(), failure));
            }
        }
        let slot = ObserverSlot::new(None);
        slot.notify("a", "build", Duration::ZERO, None, 0);
        let c = Arc::new(Count::default());
        slot.set(Some(c.clone()));
        slot.notify("b", "build", Duration::ZERO, Some("Trap"), 0);
        assert_eq!(*c.0.lock().unwrap(), vec![("b".to_owned(), Some("Trap"))]);
    }

    #[test]
    fn digest_is_checked_before_compiling() {
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let mut src = PluginSource::new("x.wasm", b"whatever".to_vec());
        src.sha256 = Some("00".repeat(32));
        assert_eq!(rt.load(src).unwrap_err().reason(), "DigestMismatch");
    }
}
