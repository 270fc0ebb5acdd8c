//! Per-call store state: a deny-all WASI context, the memory limiter, and
//! the `host` imports (log, get-object, random-bytes) with their budgets.

use super::bindings::trainforge::plugin::{host, types as wit};
use super::engine::Limits;
use super::source::ObjectSource;
use std::collections::BTreeSet;
use std::sync::Arc;
use trainforge_api::plugin::KindRef;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Capability grants from a plugin's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// `random`: serve `host.random-bytes`.
    pub random: bool,
    /// `clock`: expose the real WASI wall and monotonic clocks (otherwise
    /// both are frozen at zero).
    pub clock: bool,
}

impl Grants {
    /// Parse capability names (`random`, `clock`); unknown ones are returned.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> (Grants, Vec<String>) {
        let mut g = Grants::default();
        let mut unknown = Vec::new();
        for n in names {
            match n {
                "random" => g.random = true,
                "clock" => g.clock = true,
                other => unknown.push(other.to_owned()),
            }
        }
        (g, unknown)
    }
}

/// What a store needs to know about its plugin.
#[derive(Debug)]
pub(crate) struct PluginContext {
    pub(crate) name: String,
    pub(crate) reads: BTreeSet<KindRef>,
    /// Declared in `describe().capabilities` *and* granted.
    pub(crate) random: bool,
    pub(crate) clock: bool,
    pub(crate) limits: Limits,
}

/// Store data of one call.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) plugin: Arc<PluginContext>,
    pub(crate) objects: Arc<dyn ObjectSource>,
    pub(crate) stderr: MemoryOutputPipe,
    log_bytes: usize,
    random_bytes: usize,
}

impl CallState {
    pub(crate) fn new(plugin: Arc<PluginContext>, objects: Arc<dyn ObjectSource>) -> Self {
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
        if !plugin.clock {
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
            log_bytes: 0,
            random_bytes: 0,
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
        let mut msg = message;
        if msg.len() > room {
            let mut cut = room;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push_str(" …[truncated]");
        }
        self.log_bytes += msg.len();
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
        if !self.plugin.reads.contains(&kind) {
            tracing::warn!(plugin = %self.plugin.name, %kind, "get-object denied: kind not declared in reads");
            return Err(wit::HostError::Denied(format!(
                "{kind} is not declared in reads"
            )));
        }
        self.objects
            .get(&kind, &namespace, &name)
            .map_err(wit::HostError::Unavailable)
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
        let mut buf = vec![0u8; len];
        getrandom::fill(&mut buf).map_err(|e| wit::HostError::Unavailable(e.to_string()))?;
        Ok(buf)
    }
}
