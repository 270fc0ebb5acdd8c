//! Per-call store state: a deny-all WASI context, the memory limiter, and
//! the `host` imports (log, get-object, random-bytes) with their budgets.
//!
//! Rules of the imports, whatever the guest asks:
//! - `get-object` serves only kinds the plugin may read (declared, narrowed
//!   by the administrator), namespaced objects only from the namespace of
//!   the TrainJob the call is for, cluster-scoped kinds and Secrets only
//!   when the administrator listed them, at most
//!   [`MAX_READS_PER_CALL`](super::bounded::MAX_READS_PER_CALL) per call;
//!   an object another TrainJob controls reads as absent (a plugin never
//!   sees, say, a JobSet squatting its TrainJob's name as that TrainJob's);
//! - `log` lines are sanitised (no control characters, so no forged lines)
//!   and bounded per line and per call;
//! - nothing can wait: WASI `poll` and `pollable.block` trap at once
//!   ([`deny_waiting`]), so sleeping cannot hold a host thread past the
//!   call's deadline (epoch interruption only stops guest code).

use super::bindings::trainforge::plugin::{host, types as wit};
use super::bounded::{self, MAX_LOG_LINE_BYTES, MAX_READS_PER_CALL};
use super::engine::Limits;
use super::kinds;
use super::output_check::Owner;
use super::source::ObjectSource;
use std::collections::BTreeSet;
use std::sync::Arc;
use trainforge_api::plugin::KindRef;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{ResourceLimiter, StoreContextMut};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// What a store needs to know about its plugin.
#[derive(Debug)]
pub(crate) struct PluginContext {
    pub(crate) name: String,
    /// Kinds `get-object` serves (declared, narrowed by the administrator).
    pub(crate) reads: BTreeSet<KindRef>,
    /// Kinds the administrator listed in `allowedReads` (the explicit grant
    /// Secrets and cluster-scoped kinds need).
    pub(crate) explicit_reads: BTreeSet<KindRef>,
    /// Declared in `describe().capabilities` *and* granted.
    pub(crate) random: bool,
    pub(crate) clock: bool,
    pub(crate) limits: Limits,
}

/// What one call is for: the namespace of its TrainJob (`None` for calls
/// not about a TrainJob, such as `describe`: no namespaced reads at all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallScope {
    /// The TrainJob's namespace, from the stored object.
    pub namespace: Option<String>,
    /// The TrainJob, from the stored object: objects another TrainJob
    /// controls are not served.
    pub owner: Option<Owner>,
}

impl CallScope {
    /// The scope of a call about the TrainJob `owner`.
    pub fn of(owner: &Owner) -> Self {
        CallScope {
            namespace: Some(owner.namespace.clone()),
            owner: Some(owner.clone()),
        }
    }
}

/// Store data of one call.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) plugin: Arc<PluginContext>,
    pub(crate) objects: Arc<dyn ObjectSource>,
    pub(crate) stderr: MemoryOutputPipe,
    scope: CallScope,
    log_bytes: usize,
    random_bytes: usize,
    reads: usize,
    /// Set when the guest tried to wait (see [`deny_waiting`]).
    pub(crate) waited: bool,
}

impl CallState {
    pub(crate) fn new(
        plugin: Arc<PluginContext>,
        objects: Arc<dyn ObjectSource>,
        scope: CallScope,
    ) -> Self {
        let stderr = MemoryOutputPipe::new(plugin.limits.max_stderr_bytes);
        let mut b = WasiCtxBuilder::new();
        // Default-deny: no args, env or preopens (builder defaults); stdin
        // closed; stdout discarded; stderr captured (bounded) for trap
        // messages; no sockets at all; no DNS.
        b.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        // WASI random is deterministic: real randomness only via the host
        // import (the standard library still needs *some* bytes for hash seeds).
        b.secure_random(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0));
        b.insecure_random(<rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1));
        b.insecure_random_seed(0);
        // WASI random hands out host-allocated buffers: keep them small.
        b.max_random_size(4096);
        if plugin.clock {
            // The real clock is an input the host cannot see being read.
            note_opaque();
        } else {
            b.wall_clock(FrozenClock);
            b.monotonic_clock(FrozenClock);
        }
        let limiter = MemoryLimiter {
            cap: plugin.limits.memory_bytes,
            exceeded: false,
            high_water: 0,
        };
        CallState {
            wasi: b.build(),
            table: ResourceTable::new(),
            limiter,
            plugin,
            objects,
            stderr,
            scope,
            log_bytes: 0,
            random_bytes: 0,
            reads: 0,
            waited: false,
        }
    }

    /// Captured guest stderr (lossy UTF-8, bounded).
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents())
            .trim()
            .to_owned()
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// What plugins called on one thread took from outside their arguments,
/// while [`record_host_inputs`] runs.
#[derive(Debug, Default)]
pub struct HostInputs {
    /// Objects read through `get-object`: `(kind, namespace, name)`, each
    /// once however often it was read. Reads refused by the sandbox are not
    /// here: they returned nothing of the object.
    pub reads: BTreeSet<(KindRef, String, String)>,
    /// Random bytes, or a granted real clock, were handed out.
    pub opaque: bool,
}

thread_local! {
    static HOST_INPUTS: std::cell::RefCell<Option<HostInputs>> = const { std::cell::RefCell::new(None) };
}

fn note_read(kind: &KindRef, namespace: &str, name: &str) {
    HOST_INPUTS.with(|c| {
        if let Some(h) = c.borrow_mut().as_mut() {
            h.reads
                .insert((kind.clone(), namespace.to_owned(), name.to_owned()));
        }
    });
}

fn note_opaque() {
    HOST_INPUTS.with(|c| {
        if let Some(h) = c.borrow_mut().as_mut() {
            h.opaque = true;
        }
    });
}

/// Run `f` and return, with its result, what the plugins it called on this
/// thread took from outside their arguments. Plugin calls are synchronous
/// on the caller's thread, so this sees every call `f` makes.
pub fn record_host_inputs<T>(f: impl FnOnce() -> T) -> (T, HostInputs) {
    let previous = HOST_INPUTS.with(|c| c.replace(Some(HostInputs::default())));
    let out = f();
    let taken = HOST_INPUTS
        .with(|c| c.replace(previous))
        .unwrap_or_default();
    (out, taken)
}

/// A clock stuck at zero: plugins get no time unless granted `clock`.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Caps linear memory and tables; remembers that the cap was hit so the
/// resulting trap is reported as `MemoryLimit`; records the largest
/// linear memory granted (the call's memory high-water mark).
pub(crate) struct MemoryLimiter {
    cap: usize,
    pub(crate) exceeded: bool,
    pub(crate) high_water: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.exceeded = true;
            return Err(wasmtime::Error::msg("memory limit exceeded"));
        }
        self.high_water = self.high_water.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > 100_000 {
            self.exceeded = true;
            return Err(wasmtime::Error::msg("table limit exceeded"));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        100
    }
    fn tables(&self) -> usize {
        100
    }
    fn memories(&self) -> usize {
        100
    }
}

impl wit::Host for CallState {}

impl host::Host for CallState {
    fn log(&mut self, level: wit::LogLevel, message: String) {
        let room = self
            .plugin
            .limits
            .max_log_bytes
            .saturating_sub(self.log_bytes);
        if room == 0 {
            return;
        }
        let msg = bounded::sanitize(&message, room.min(MAX_LOG_LINE_BYTES));
        self.log_bytes += msg.len().max(1);
        let plugin = self.plugin.name.as_str();
        match level {
            wit::LogLevel::Trace => tracing::trace!(plugin, "{msg}"),
            wit::LogLevel::Debug => tracing::debug!(plugin, "{msg}"),
            wit::LogLevel::Info => tracing::info!(plugin, "{msg}"),
            wit::LogLevel::Warn => tracing::warn!(plugin, "{msg}"),
            wit::LogLevel::Error => tracing::error!(plugin, "{msg}"),
        }
    }

    fn get_object(
        &mut self,
        kind: wit::KindRef,
        namespace: String,
        name: String,
    ) -> Result<Option<String>, wit::HostError> {
        let kind = KindRef {
            api_version: kind.api_version,
            kind: kind.kind,
        };
        let denied = |why: String| {
            let why = bounded::message(&why);
            tracing::warn!(plugin = %self.plugin.name, reason = %why, "get-object denied");
            Err(wit::HostError::Denied(why))
        };
        if self.reads >= MAX_READS_PER_CALL {
            return denied(format!(
                "more than {MAX_READS_PER_CALL} get-object calls in one call"
            ));
        }
        self.reads += 1;
        if !self.plugin.reads.contains(&kind) {
            return denied(format!(
                "{kind} is not among the kinds this plugin may read"
            ));
        }
        let namespaced = self
            .objects
            .namespaced(&kind)
            .unwrap_or_else(|| !kinds::known_cluster_scoped(&kind));
        if let Some(why) = kinds::read_needs_explicit_grant(&kind, namespaced)
            && !self.plugin.explicit_reads.contains(&kind)
        {
            return denied(format!(
                "{kind}: {why}; reading it needs spec.allowedReads to list it"
            ));
        }
        let namespace = if namespaced {
            match &self.scope.namespace {
                Some(ns) if *ns == namespace => namespace,
                Some(ns) => {
                    return denied(format!(
                        "{kind} {namespace}/{name}: reads are limited to the TrainJob's namespace {ns:?}"
                    ));
                }
                None => return denied(format!("{kind}: this call is not about a TrainJob")),
            }
        } else {
            String::new()
        };
        note_read(&kind, &namespace, &name);
        let text = self
            .objects
            .get(&kind, &namespace, &name)
            .map_err(|e| wit::HostError::Unavailable(bounded::message(&e)))?;
        Ok(text.filter(|t| !self.foreign(&kind, &namespace, &name, t)))
    }

    fn random_bytes(&mut self, len: u32) -> Result<Vec<u8>, wit::HostError> {
        if !self.plugin.random {
            return Err(wit::HostError::Denied(
                "capability `random` not declared or not granted".into(),
            ));
        }
        let len = len as usize;
        if len > 4096 || self.random_bytes + len > self.plugin.limits.max_random_bytes {
            return Err(wit::HostError::Denied(
                "random-bytes budget exceeded".into(),
            ));
        }
        self.random_bytes += len;
        note_opaque();
        let mut buf = vec![0u8; len];
        getrandom::fill(&mut buf).map_err(|e| wit::HostError::Unavailable(e.to_string()))?;
        Ok(buf)
    }
}

impl CallState {
    /// Whether the object read (`text`) is controlled by a TrainJob other
    /// than the call's: such an object reads as absent.
    fn foreign(&self, kind: &KindRef, namespace: &str, name: &str, text: &str) -> bool {
        let Some(owner) = &self.scope.owner else {
            return false;
        };
        /// Only the owner references are parsed.
        #[derive(serde::Deserialize)]
        struct Refs {
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Default, serde::Deserialize)]
        struct Meta {
            #[serde(default, rename = "ownerReferences")]
            owner_references: serde_json::Value,
        }
        let Ok(refs) = serde_json::from_str::<Refs>(text) else {
            return false;
        };
        match owner.foreign_among(&refs.metadata.owner_references) {
            Some(holder) => {
                tracing::warn!(
                    plugin = %self.plugin.name,
                    object = %format!("{kind} {namespace}/{name}"),
                    controller = %holder,
                    "get-object: the object is controlled by another TrainJob; read as absent"
                );
                true
            }
            None => false,
        }
    }
}

/// The WASI interface holding `poll` and `pollable.block` (the version
/// wasmtime-wasi registers; guests importing any 0.2.x resolve to it).
const WASI_POLL: &str = "wasi:io/poll@0.2.12";

/// Why a call that tried to wait was stopped (recognised by the caller to
/// name it in the error).
#[derive(Debug)]
pub(crate) struct WaitDenied;

impl std::fmt::Display for WaitDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the plugin tried to wait (wasi:io/poll: a sleep or blocking I/O); plugins cannot wait",
        )
    }
}

impl std::error::Error for WaitDenied {}

/// Replace `poll` and `pollable.block` with functions that trap at once.
///
/// Epoch deadlines stop guest code, not host functions: a guest sleeping in
/// `pollable.block` would hold the calling thread for as long as it asked.
/// Plugins have nothing to wait for (no sockets, files or real clocks), so
/// every wait ends the call.
pub(crate) fn deny_waiting(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(WASI_POLL)?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, CallState>,
         (_pollables,): (Vec<Resource<DynPollable>>,)|
         -> wasmtime::Result<(Vec<u32>,)> {
            store.data_mut().waited = true;
            Err(wasmtime::Error::new(WaitDenied))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, CallState>,
         (_pollable,): (Resource<DynPollable>,)|
         -> wasmtime::Result<()> {
            store.data_mut().waited = true;
            Err(wasmtime::Error::new(WaitDenied))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
