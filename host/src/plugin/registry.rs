//! Loading plugins (digest pin, cache, interface checks, `describe`) and
//! running a set of them as the reconcile pipeline.

use super::bindings::{Plugin as WitPlugin, PluginPre};
use super::cache::{ArtifactCache, CacheOutcome, sha256_hex};
use super::call::{Inner, LoadedPlugin, PhaseInput, ValidateInput, descriptor_from_wit, with_instance};
use super::engine::{EngineHandle, Limits, RuntimeConfig};
use super::sandbox::{CallState, Grants, PluginContext};
use super::Error;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use trainforge_api::plugin::{Info, KindRef, Phase, Validation, WIT_VERSION};
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
pub struct StaticObjects(BTreeMap<(KindRef, String, String), String>);

impl StaticObjects {
    /// Add an object (uses its apiVersion, kind, namespace and name).
    pub fn insert(&mut self, object: &Value) {
        let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
        self.0.insert(
            (KindRef::new(s("/apiVersion"), s("/kind")), s("/metadata/namespace"), s("/metadata/name")),
            object.to_string(),
        );
    }
}

impl ObjectSource for StaticObjects {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        Ok(self.0.get(&(kind.clone(), namespace.to_owned(), name.to_owned())).cloned())
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
        }
    }

    /// Read a component file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, Error> {
        let label = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let bytes = std::fs::read(path).map_err(|e| Error::LoadFailed {
            plugin: label.clone(),
            message: format!("reading {}: {e}", path.display()),
        })?;
        Ok(PluginSource::new(label, bytes))
    }
}

/// The plugin runtime: one engine (epoch ticker on its own thread), one
/// linker, the artifact cache. Create once per process.
pub struct PluginRuntime {
    engine: EngineHandle,
    linker: Linker<CallState>,
    cache: ArtifactCache,
    config: RuntimeConfig,
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
        let engine = EngineHandle::new(config.epoch_tick)?;
        let mut linker = Linker::<CallState>::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| Error::Host(format!("linking WASI: {e:#}")))?;
        WitPlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| Error::Host(format!("linking host imports: {e:#}")))?;
        let cache = ArtifactCache::new(&engine.engine, config.cache_dir.clone());
        Ok(PluginRuntime { engine, linker, cache, config })
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
    }

    /// Verify, compile (or load from cache), check the interface, call
    /// `describe`, and return a plugin ready to call.
    pub fn load(&self, src: PluginSource) -> Result<LoadedPlugin, Error> {
        self.load_traced(src).map(|(p, _)| p)
    }

    /// Like [`PluginRuntime::load`], also telling where the compiled code came from.
    pub fn load_traced(&self, src: PluginSource) -> Result<(LoadedPlugin, CacheOutcome), Error> {
        let label = src.label.clone();
        let load_failed = |m: String| Error::LoadFailed { plugin: label.clone(), message: m };
        if src.bytes.len() > self.config.max_component_bytes {
            return Err(load_failed(format!(
                "component is {} bytes; the limit is {}",
                src.bytes.len(),
                self.config.max_component_bytes
            )));
        }
        let sha256 = sha256_hex(&src.bytes);
        if let Some(expected) = &src.sha256 {
            let expected = expected.trim().trim_start_matches("sha256:").to_ascii_lowercase();
            if expected != sha256 {
                return Err(Error::DigestMismatch { plugin: label, expected, actual: sha256 });
            }
        }
        let engine = &self.engine.engine;
        let (component, outcome) =
            self.cache.get_or_compile(engine, &sha256, &src.bytes).map_err(|m| load_failed(format!("compiling: {m}")))?;

        // Interface check from the component type (no instantiation needed).
        let ty = component.component_type();
        let incompatible = |m: String| Error::IncompatibleInterface { plugin: label.clone(), message: m };
        let exported: Vec<&str> = ty.exports(engine).map(|(n, _)| n).collect();
        let guest = exported.iter().find(|n| n.starts_with(GUEST_EXPORT)).ok_or_else(|| {
            incompatible(format!("does not export {GUEST_EXPORT}{WIT_VERSION} (exports: {exported:?})"))
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
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| incompatible(format!("linking: {e:#}")))?;
        let pre = PluginPre::new(pre).map_err(|e| incompatible(format!("exports do not match the WIT: {e:#}")))?;

        let limits = src.limits.unwrap_or(self.config.limits);
        let boot = Arc::new(PluginContext {
            name: label.clone(),
            reads: BTreeSet::new(),
            random: false,
            clock: false,
            limits,
        });
        let objects = src.objects.clone();
        let descriptor = with_instance(engine, self.config.epoch_tick, &pre, &boot, &objects, "describe", |s, p| {
            p.trainforge_plugin_guest().call_describe(s)
        })
        .map(descriptor_from_wit)?;
        if !wit_compatible(&descriptor.wit_version) {
            return Err(incompatible(format!(
                "describe() reports WIT version {:?}; this host serves {WIT_VERSION}",
                descriptor.wit_version
            )));
        }
        if descriptor.name.is_empty() {
            return Err(Error::invalid_output(&label, Phase::Validate, "describe() returned an empty name"));
        }
        for p in &descriptor.phases {
            if Phase::parse(p).is_none() {
                tracing::info!(plugin = %descriptor.name, phase = %p, "ignoring phase unknown to this host");
            }
        }
        let wants = |c: &str| descriptor.capabilities.iter().any(|x| x == c);
        let ctx = Arc::new(PluginContext {
            name: descriptor.name.clone(),
            reads: descriptor.reads.iter().cloned().collect(),
            random: wants("random") && src.grants.random,
            clock: wants("clock") && src.grants.clock,
            limits,
        });
        let emits = descriptor.emits.iter().cloned().collect();
        Ok((
            LoadedPlugin {
                inner: Arc::new(Inner {
                    engine: engine.clone(),
                    tick: self.config.epoch_tick,
                    pre,
                    descriptor,
                    sha256,
                    config: src.config,
                    emits,
                    ctx,
                    objects,
                }),
            },
            outcome,
        ))
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
}

/// An ordered set of plugins run as the Trainer framework pipeline.
#[derive(Debug, Clone, Default)]
pub struct PluginSet {
    plugins: Vec<LoadedPlugin>,
}

impl PluginSet {
    /// A set; order within a phase is the order given. At most one plugin
    /// may implement `status`, and names must be unique.
    pub fn new(plugins: Vec<LoadedPlugin>) -> Result<Self, Error> {
        let mut names = BTreeSet::new();
        for p in &plugins {
            if !names.insert(p.name().to_owned()) {
                return Err(Error::LoadFailed { plugin: p.name().to_owned(), message: "duplicate plugin name".into() });
            }
        }
        let status: Vec<&str> =
            plugins.iter().filter(|p| p.implements(Phase::Status)).map(LoadedPlugin::name).collect();
        if status.len() > 1 {
            return Err(Error::LoadFailed {
                plugin: status.join(","),
                message: "too many plugins implement the status phase".into(),
            });
        }
        Ok(PluginSet { plugins })
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// Run enforce-ml-policy → enforce-pod-group-policy → enforce-pod-spec →
    /// pre-build → build, threading the TrainJob and info through every
    /// plugin. Any plugin failure stops the pass.
    pub fn reconcile(&self, trainjob: &Value, info: &Info) -> Result<ReconcileOutput, Error> {
        let mut input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: serde_json::to_string(info).map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut last_info_writer: Option<&str> = None;
        for phase in [Phase::EnforceMlPolicy, Phase::EnforcePodGroupPolicy, Phase::EnforcePodSpec, Phase::PreBuild] {
            for p in self.plugins.iter().filter(|p| p.implements(phase)) {
                let m = p.enforce(phase, &input)?;
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
        for p in self.plugins.iter().filter(|p| p.implements(Phase::Build)) {
            objects.extend(p.build(&input)?);
        }
        let info: Info = serde_json::from_str(&input.info).map_err(|e| {
            Error::invalid_output(last_info_writer.unwrap_or("host"), Phase::PreBuild, format!("info does not match the info model: {e}"))
        })?;
        let trainjob = serde_json::from_str(&input.trainjob)
            .map_err(|e| Error::Host(format!("TrainJob JSON: {e}")))?;
        Ok(ReconcileOutput { trainjob, info, objects })
    }

    /// Run every `validate`, concatenating warnings and errors.
    pub fn validate(&self, trainjob: &Value, old: Option<&Value>, info: &Info) -> Result<Validation, Error> {
        let input = ValidateInput {
            trainjob: trainjob.to_string(),
            old_trainjob: old.map(Value::to_string),
            info: serde_json::to_string(info).map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut out = Validation::default();
        for p in self.plugins.iter().filter(|p| p.implements(Phase::Validate)) {
            let v = p.validate(&input)?;
            out.warnings.extend(v.warnings);
            out.errors.extend(v.errors);
        }
        Ok(out)
    }

    /// Run the (single) `status` plugin, if any.
    pub fn status(&self, trainjob: &Value, info: &Info) -> Result<Option<Value>, Error> {
        match self.plugins.iter().find(|p| p.implements(Phase::Status)) {
            None => Ok(None),
            Some(p) => p.status(&PhaseInput {
                trainjob: trainjob.to_string(),
                info: serde_json::to_string(info).map_err(|e| Error::Host(format!("serialising info: {e}")))?,
            }),
        }
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
        let e = rt.load(PluginSource::new("junk.wasm", b"\0asm garbage".to_vec())).unwrap_err();
        assert_eq!(e.reason(), "LoadFailed", "{e}");
        assert!(e.to_string().contains("junk.wasm"));
    }

    #[test]
    fn digest_is_checked_before_compiling() {
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let mut src = PluginSource::new("x.wasm", b"whatever".to_vec());
        src.sha256 = Some("00".repeat(32));
        assert_eq!(rt.load(src).unwrap_err().reason(), "DigestMismatch");
    }
}
