//! Loading a plugin: digest pin → compile (or take from the artifact
//! cache) → interface check → link → `describe` → [`LoadedPlugin`].

use super::Error;
use super::bindings::with_names::PluginWithNamesPre;
use super::bindings::{Plugin as WitPlugin, PluginPre};
use super::cache::{ArtifactCache, CacheOutcome, TenantCompile};
use super::call::{
    CallEnv, Inner, LoadedPlugin, descriptor_from_wit, with_instance, with_instance_of,
};
use super::code::{Code, OnDemand, OnDemandSlots, Reload};
use super::compile::{CompileError, compile};
use super::descriptor::{compat_line, wit_compatible};
use super::engine::{EngineHandle, RuntimeConfig};
use super::lru_cache::BoundedLru;
use super::observe::{CallObserver, ObserverSlot};
use super::sandbox::{CallScope, CallState, PluginContext, deny_waiting};
use super::source::{ObjectSource, PluginSource};
use super::{bounded, builtin, descriptor, kinds};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trainforge_api::plugin::{Descriptor, OBJECT_NAMES, ObjectName, Phase, WIT_VERSION};
use wasmtime::component::{Component, HasSelf, Linker};

/// Deadline of `describe` (it must be pure and cheap).
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The plugin runtime: one engine (epoch ticker on its own thread), one
/// linker, the artifact cache. Create once per process; `Send + Sync`, so
/// share it as `Arc<PluginRuntime>` (loads and calls are synchronous: run
/// them from `spawn_blocking`).
pub struct PluginRuntime {
    engine: EngineHandle,
    linker: Arc<Linker<CallState>>,
    cache: Arc<ArtifactCache>,
    config: RuntimeConfig,
    observer: Arc<ObserverSlot>,
    /// Linked (`InstancePre`) components by cache key: linking type-checks
    /// every import, so a reload of a known digest skips it. Builtins whose
    /// code is mapped on demand are not kept here. Bounded like the
    /// compiled code in memory ([`super::cache::MEMORY_COMPONENTS`],
    /// [`super::cache::MEMORY_CODE_BYTES`]).
    linked: Mutex<BoundedLru<PluginPre<CallState>>>,
    /// The code of builtins mapped while in use (see [`super::code`]).
    on_demand: OnDemandSlots,
}

const GUEST_EXPORT: &str = "trainforge:plugin/guest@";
const OUR_IMPORTS: [&str; 2] = ["trainforge:plugin/host@", "trainforge:plugin/types@"];

impl PluginRuntime {
    /// Load every builtin plugin with what it needs granted
    /// ([`builtin::needs`]), reading cluster objects from `objects` (`None`:
    /// no objects, as in `render`).
    pub fn load_trusted_builtins(
        &self,
        objects: Option<Arc<dyn ObjectSource>>,
    ) -> Result<Vec<LoadedPlugin>, Error> {
        builtin::all()
            .iter()
            .map(|b| {
                let mut src = b.trusted_source();
                if let Some(objects) = &objects {
                    src.objects = objects.clone();
                }
                self.load(src)
            })
            .collect()
    }

    /// Create the runtime (engine, ticker thread, linker with deny-all WASI).
    pub fn new(config: RuntimeConfig) -> Result<Self, Error> {
        let engine = EngineHandle::new(config.epoch_tick, config.max_concurrent_calls)?;
        let mut linker = Linker::<CallState>::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| Error::Host(format!("linking WASI: {e:#}")))?;
        deny_waiting(&mut linker).map_err(|e| Error::Host(format!("linking WASI poll: {e:#}")))?;
        WitPlugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| Error::Host(format!("linking host imports: {e:#}")))?;
        let cache = Arc::new(ArtifactCache::new(
            &engine.engine,
            config.cache_dir.clone(),
            config.shipped_artifacts.clone(),
            config.compiler.parallelism(),
        ));
        let observer = Arc::new(ObserverSlot::new(config.observer.clone()));
        Ok(PluginRuntime {
            engine,
            linker: Arc::new(linker),
            cache,
            config,
            observer,
            linked: Mutex::new(super::cache::memory_cache()),
            on_demand: OnDemandSlots::default(),
        })
    }

    /// Release the code of builtins not called for at least `idle` (it is
    /// mapped again by their next call; see the `code` module). Returns how
    /// many were released. The operator calls this periodically.
    pub fn release_idle(&self, idle: Duration) -> usize {
        self.on_demand.release_idle(idle)
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

    /// Forget everything cached about the component with digest `sha256`
    /// (compiled code in memory and on disk, its linked form). Called for
    /// components refused after compiling, so a refused module leaves
    /// nothing behind.
    pub fn evict(&self, sha256: &str) {
        let key = self.cache.key(sha256);
        self.cache.evict(&key);
        if let Ok(mut m) = self.linked.lock() {
            m.remove(&key);
        }
    }

    /// Whether compiled code of the component with digest `sha256` is cached.
    pub fn is_cached(&self, sha256: &str) -> bool {
        self.cache.contains(&self.cache.key(sha256))
    }

    /// Verify, compile (or load from cache), check the interface, call
    /// `describe`, check what it declares, and return a plugin ready to call.
    pub fn load(&self, src: PluginSource) -> Result<LoadedPlugin, Error> {
        self.load_traced(src).map(|(p, _)| p)
    }

    /// Like [`PluginRuntime::load`], also telling where the compiled code
    /// came from. A component refused after compiling is evicted from the
    /// caches. The observer hears of every load, failed or not.
    pub fn load_traced(&self, src: PluginSource) -> Result<(LoadedPlugin, CacheOutcome), Error> {
        let started = std::time::Instant::now();
        let label = bounded::sanitize(&src.label, 253);
        let loaded = self.load_unobserved(src);
        let (outcome, failure) = match &loaded {
            Ok((_, o)) => (o.as_str(), None),
            Err(e) => ("failed", Some(e.reason())),
        };
        self.observer
            .notify_load(&label, outcome, failure, started.elapsed());
        loaded
    }

    fn load_unobserved(&self, src: PluginSource) -> Result<(LoadedPlugin, CacheOutcome), Error> {
        let label = bounded::sanitize(&src.label, 253);
        if src.bytes.len() > self.config.max_component_bytes {
            return Err(Error::LoadFailed {
                plugin: label,
                message: format!(
                    "component is {} bytes; the limit is {}",
                    src.bytes.len(),
                    self.config.max_component_bytes
                ),
            });
        }
        let sha256 = builtin::component_digest(&src.bytes);
        if let Some(expected) = &src.sha256 {
            let expected = expected
                .trim()
                .trim_start_matches("sha256:")
                .to_ascii_lowercase();
            if expected != sha256 {
                return Err(Error::DigestMismatch {
                    plugin: label,
                    expected: bounded::sanitize(&expected, 80),
                    actual: sha256,
                });
            }
        }
        // A builtin can be mapped again from its artifact at any time: it
        // is not kept in memory (see `super::code`).
        let on_demand = src.builtin && self.cache.has_disk();
        let (component, outcome) = compiled_with(
            &self.compile_env(),
            &label,
            &sha256,
            &src.bytes,
            src.tenant.as_deref().map(|namespace| TenantCompile {
                namespace,
                cancel: src.cancel.as_ref(),
                place: src.compile_place.as_ref(),
            }),
            !on_demand,
        )?;
        let loaded = self.finish_load(&label, &sha256, component, src, on_demand);
        if loaded.is_err() {
            self.evict(&sha256);
        }
        loaded.map(|p| (p, outcome))
    }

    /// What compiling needs, owned.
    fn compile_env(&self) -> CompileEnv {
        CompileEnv {
            engine: self.engine.engine.clone(),
            compiler_config: self.engine.compiler_config.clone(),
            compiler: self.config.compiler.clone(),
            limits: self.config.compile_limits,
            cache: self.cache.clone(),
        }
    }

    /// How a builtin's code is mapped again after it was released: from its
    /// artifact, else compiled from its (embedded) bytes; then linked.
    fn reload(&self, label: &str, sha256: &str, bytes: bytes::Bytes) -> Reload {
        let env = self.compile_env();
        let linker = self.linker.clone();
        let (label, sha256) = (label.to_owned(), sha256.to_owned());
        Box::new(move || {
            let _span = tracing::debug_span!("map_plugin_code", plugin = %label).entered();
            let (component, _) = compiled_with(&env, &label, &sha256, &bytes, None, false)?;
            link(&linker, &component).map_err(|message| Error::LoadFailed {
                plugin: label.clone(),
                message: bounded::message(&format!("mapping its code again: {message}")),
            })
        })
    }

    /// Everything after compiling: interface, link, `describe`, declaration
    /// checks. With `on_demand`, the code of a component whose artifact is
    /// on disk is released after `describe` (see [`super::code`]).
    fn finish_load(
        &self,
        label: &str,
        sha256: &str,
        component: Component,
        src: PluginSource,
        on_demand: bool,
    ) -> Result<LoadedPlugin, Error> {
        let engine = &self.engine.engine;
        // Interface check from the component type (no instantiation needed).
        let ty = component.component_type();
        let incompatible = |m: String| Error::IncompatibleInterface {
            plugin: label.to_owned(),
            message: bounded::message(&m),
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
        let key = self.cache.key(sha256);
        let on_demand = on_demand && self.cache.on_disk(&key);
        let cached_pre = self.linked.lock().ok().and_then(|mut m| m.get(&key));
        let pre = match cached_pre {
            Some(pre) => pre,
            None => {
                let pre = link(&self.linker, &component).map_err(incompatible)?;
                if !on_demand && let Ok(mut m) = self.linked.lock() {
                    m.insert(key, pre.clone(), super::cache::code_bytes(&component));
                }
                pre
            }
        };
        drop(component);

        let limits = src.limits.unwrap_or(self.config.limits);
        let boot = CallEnv {
            engine: engine.clone(),
            tick: self.config.epoch_tick,
            _ticker: self.engine.ticker.clone(),
            code: Code::Resident(pre),
            ctx: Arc::new(PluginContext {
                name: label.to_owned(),
                reads: BTreeSet::new(),
                explicit_reads: BTreeSet::new(),
                random: false,
                clock: false,
                limits,
            }),
            objects: src.objects.clone(),
            observer: self.observer.clone(),
        };
        let start = std::time::Instant::now();
        // `describe` must be pure and cheap: a short deadline whatever the
        // configured call limit, and no TrainJob scope.
        let (described, high_water, _) = with_instance(
            &boot,
            "describe",
            &CallScope::default(),
            limits.timeout.min(DESCRIBE_TIMEOUT),
            |s, p| p.trainforge_plugin_guest().call_describe(s),
        );
        let descriptor = described.map(descriptor_from_wit).and_then(|mut d| {
            let reserved = if src.reserve_builtin_names {
                builtin::names()
            } else {
                Vec::new()
            };
            descriptor::check(label, &d, src.builtin, &reserved)?;
            if d.phases.iter().any(|p| p == OBJECT_NAMES) {
                d.object_names = object_names(&boot, &d, limits.timeout.min(DESCRIBE_TIMEOUT))?;
            }
            Ok(d)
        });
        let observed_name = descriptor.as_ref().map_or(label, |d| d.name.as_str());
        self.observer.notify(
            observed_name,
            "describe",
            start.elapsed(),
            descriptor.as_ref().err().map(Error::reason),
            high_water,
        );
        let descriptor = descriptor?;
        for p in &descriptor.phases {
            if Phase::parse(p).is_none() && p != OBJECT_NAMES {
                tracing::info!(plugin = %descriptor.name, phase = %bounded::sanitize(p, 64), "ignoring phase unknown to this host");
            }
        }
        let forbidden = |message: String| Error::ForbiddenKind {
            plugin: descriptor.name.clone(),
            message,
        };
        // A builtin without `allowedKinds` may emit the kinds it needs to do
        // what upstream does (the elastic policy's autoscaler): it is our
        // own code, and a configuration written before the default
        // allow-list keeps working.
        let builtin_kinds = src
            .builtin
            .then(|| super::builtin::needs(&descriptor.name).allowed_kinds)
            .flatten();
        let allowed_emits = src.allowed_emits.as_deref().or(builtin_kinds.as_deref());
        let emits = kinds::effective_emits(&descriptor.emits, allowed_emits).map_err(forbidden)?;
        let reads = kinds::effective_reads(&descriptor.reads, src.allowed_reads.as_deref())
            .map_err(forbidden)?;
        let wants = |c: &str| descriptor.capabilities.iter().any(|x| x == c);
        let ctx = Arc::new(PluginContext {
            name: descriptor.name.clone(),
            reads: reads.into_iter().collect(),
            explicit_reads: src.allowed_reads.iter().flatten().cloned().collect(),
            random: wants("random") && src.grants.random,
            clock: wants("clock") && src.grants.clock,
            limits,
        });
        // Described and checked: a builtin mapped on demand lets its code go
        // now (the last reference to it is in `boot`).
        let code = if on_demand {
            let slot = Arc::new(OnDemand::new(self.reload(
                &descriptor.name,
                sha256,
                src.bytes.clone(),
            )));
            self.on_demand.register(&slot);
            Code::OnDemand(slot)
        } else {
            boot.code
        };
        Ok(LoadedPlugin {
            inner: Arc::new(Inner {
                env: CallEnv { ctx, code, ..boot },
                sha256: sha256.to_owned(),
                config: src.config,
                facts: (wants(super::facts::CAPABILITY_STATUS_SERVER) && src.grants.status_server)
                    .then(|| self.config.facts.clone()),
                emits: emits.into_iter().collect(),
                pod_grants: src.grants.pod,
                builtin: src.builtin,
                failure_policy: src.failure_policy,
                phases: src.phases.map(|p| p.into_iter().collect()),
                observed_name: match &src.tenant {
                    Some(ns) => format!("{ns}/{}", descriptor.name),
                    None => descriptor.name.clone(),
                },
                slots: limits.concurrency.map(super::call::Slots::new),
                descriptor,
            }),
        })
    }
}

/// What compiling (or loading from the artifact cache) needs, owned so
/// that an on-demand builtin can do it again later.
struct CompileEnv {
    engine: wasmtime::Engine,
    compiler_config: wasmtime::Config,
    compiler: super::compile::Compiler,
    limits: super::compile::CompileLimits,
    cache: Arc<ArtifactCache>,
}

/// The compiled component for `bytes` from the cache, or compiled within
/// the limits; errors name `label`.
fn compiled_with(
    env: &CompileEnv,
    label: &str,
    sha256: &str,
    bytes: &[u8],
    tenant: Option<TenantCompile<'_>>,
    remember: bool,
) -> Result<(Component, CacheOutcome), Error> {
    let cancel = tenant.and_then(|t| t.cancel);
    env.cache
        .get_or_compile(&env.engine, sha256, bytes, tenant, remember, |bytes| {
            compile(
                &env.compiler,
                env.limits,
                &env.engine,
                &env.compiler_config,
                bytes,
                cancel,
            )
        })
        .map_err(|e| match e {
            CompileError::Timeout(_) | CompileError::Memory(_) => Error::CompileLimit {
                plugin: label.to_owned(),
                message: e.to_string(),
            },
            e => Error::LoadFailed {
                plugin: label.to_owned(),
                message: bounded::message(&format!("compiling: {e}")),
            },
        })
}

/// The naming rules of the plugin `d` describes (WIT `naming`, which it
/// announced): one call, as bounded as `describe`; the rules checked
/// ([`descriptor::check_object_names`]). A plugin that announces the call
/// but does not export `naming` is refused, naming what is missing.
fn object_names(
    boot: &CallEnv,
    d: &Descriptor,
    timeout: Duration,
) -> Result<Vec<ObjectName>, Error> {
    let pre = boot.code.pre()?;
    let named = PluginWithNamesPre::new(pre.instance_pre().clone()).map_err(|e| {
        Error::InvalidDescriptor {
            plugin: d.name.clone(),
            message: bounded::message(&format!(
                "describe() lists {OBJECT_NAMES:?} but the component does not export trainforge:plugin/naming: {e:#}"
            )),
        }
    })?;
    // Failures name the plugin as it described itself.
    let env = CallEnv {
        engine: boot.engine.clone(),
        tick: boot.tick,
        _ticker: boot._ticker.clone(),
        code: Code::Resident(pre),
        ctx: Arc::new(PluginContext {
            name: d.name.clone(),
            reads: BTreeSet::new(),
            explicit_reads: BTreeSet::new(),
            random: false,
            clock: false,
            limits: boot.ctx.limits,
        }),
        objects: boot.objects.clone(),
        observer: boot.observer.clone(),
    };
    let (answer, _, _) = with_instance_of(
        &env,
        OBJECT_NAMES,
        &CallScope::default(),
        timeout,
        |_, s| named.instantiate(s),
        |s, p| p.trainforge_plugin_naming().call_object_names(s),
    );
    let rules: Vec<ObjectName> = answer?
        .into_iter()
        .map(|n| {
            ObjectName::new(
                trainforge_api::plugin::KindRef::new(n.kind.api_version, n.kind.kind),
                n.suffix,
            )
        })
        .collect();
    descriptor::check_object_names(d, &rules)?;
    Ok(rules)
}

/// Link `component` against the host's imports, checked against the WIT.
fn link(linker: &Linker<CallState>, component: &Component) -> Result<PluginPre<CallState>, String> {
    let pre = linker
        .instantiate_pre(component)
        .map_err(|e| format!("linking: {e:#}"))?;
    PluginPre::new(pre).map_err(|e| format!("exports do not match the WIT: {e:#}"))
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
    #[allow(clippy::panic)]
    fn the_observer_hears_of_every_load_and_where_its_code_came_from() {
        use std::sync::Mutex;
        #[derive(Default)]
        struct Loads(Mutex<Vec<(String, &'static str, Option<&'static str>)>>);
        impl CallObserver for Loads {
            fn on_call(&self, _: &str, _: &str, _: Duration, _: Option<&'static str>, _: usize) {}
            fn on_load(
                &self,
                plugin: &str,
                outcome: &'static str,
                failure: Option<&'static str>,
                _: Duration,
            ) {
                if let Ok(mut v) = self.0.lock() {
                    v.push((plugin.to_owned(), outcome, failure));
                }
            }
        }
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let loads = Arc::new(Loads::default());
        rt.set_observer(loads.clone());
        let Some(b) = builtin::all().first() else {
            panic!("no builtin plugins embedded");
        };
        rt.load(b.trusted_source()).unwrap();
        rt.load(b.trusted_source()).unwrap();
        rt.load(PluginSource::new("junk.wasm", b"\0asm garbage".to_vec()))
            .unwrap_err();
        let seen = loads.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!((seen[0].1, seen[0].2), ("compiled", None), "{seen:?}");
        assert_eq!((seen[1].1, seen[1].2), ("memory", None), "{seen:?}");
        assert_eq!(
            seen[2],
            ("junk.wasm".to_owned(), "failed", Some("LoadFailed"))
        );
    }

    #[test]
    fn runtime_set_and_plugin_are_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PluginRuntime>();
        assert_send_sync::<super::super::PluginSet>();
        assert_send_sync::<LoadedPlugin>();
        assert_send_sync::<PluginSource>();
    }

    #[test]
    fn digest_is_checked_before_compiling() {
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let mut src = PluginSource::new("x.wasm", b"whatever".to_vec());
        src.sha256 = Some("00".repeat(32));
        assert_eq!(rt.load(src).unwrap_err().reason(), "DigestMismatch");
    }
}
