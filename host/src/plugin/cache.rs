//! Compiled-component cache: in memory, and optionally on disk as
//! precompiled artifacts. Keyed by sha256 of the component bytes plus the
//! engine's `precompile_compatibility_hash` (wasmtime version + `Config`).

use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use wasmtime::Engine;
use wasmtime::component::Component;

use super::compile::CompileError;
use super::lru_cache::BoundedLru;
use std::num::NonZeroUsize;

/// Where a component came from on this load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Found in the in-memory cache.
    Memory,
    /// Loaded from a precompiled artifact on disk.
    Disk,
    /// Loaded from an artifact shipped with the operator (precompiled when
    /// the binary was packaged: `trainforge plugin precompile`).
    Shipped,
    /// Compiled now (and written to the caches).
    Compiled,
}

impl CacheOutcome {
    /// The outcome as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Memory => "memory",
            CacheOutcome::Disk => "disk",
            CacheOutcome::Shipped => "shipped",
            CacheOutcome::Compiled => "compiled",
        }
    }
}

/// sha256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Feeds `Hash` output into sha256.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex digest of the engine's precompile compatibility hash.
pub(crate) fn engine_hash(engine: &Engine) -> String {
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(h.0.finalize())
}

/// Counting permits (compilations running at once).
struct Permits {
    free: Mutex<usize>,
    returned: Condvar,
}

struct Permit<'a>(&'a Permits);

impl Permits {
    fn new(n: usize) -> Self {
        Permits {
            free: Mutex::new(n.max(1)),
            returned: Condvar::new(),
        }
    }

    fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.returned.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += 1;
        self.0.returned.notify_one();
    }
}

/// Where a tenant's compile stands in the tenants' compile slot (told to
/// the `TrainerPlugin`'s status while it waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompilePlace {
    /// Waiting for the slot: `ahead` compiles go first (the running one
    /// included).
    Queued {
        /// Compiles that take the slot before this one.
        ahead: usize,
    },
    /// Compiling now.
    Compiling,
}

/// A tenant's compile, as the tenants' slot sees it.
#[derive(Clone, Copy, Default)]
pub(crate) struct TenantCompile<'a> {
    /// Its namespace: whose turn it takes.
    pub(crate) namespace: &'a str,
    /// Fires when its plugin is deleted or changed: a queued compile leaves
    /// the queue, a running one's worker is killed.
    pub(crate) cancel: Option<&'a CancellationToken>,
    /// Told the compile's place while it waits, then that it compiles.
    pub(crate) place: Option<&'a tokio::sync::watch::Sender<CompilePlace>>,
}

impl TenantCompile<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(CancellationToken::is_cancelled)
    }

    /// Tell `place` unless it was the last told (`told`): the first place
    /// is always told, whatever the channel held before.
    fn tell(&self, told: &mut Option<CompilePlace>, place: CompilePlace) {
        if let Some(p) = self.place
            && *told != Some(place)
        {
            p.send_replace(place);
            *told = Some(place);
        }
    }
}

/// The one compile slot tenants share, handed out in turn by namespace: a
/// namespace's next waiting compile goes after the next one of every other
/// namespace waiting, so a tenant with many (or crafted slow) components
/// queued costs another tenant at most one of its compiles per turn, not
/// all of them. Within a namespace, first come first served.
struct TenantSlot {
    state: Mutex<TenantQueue>,
    changed: Condvar,
}

#[derive(Default)]
struct TenantQueue {
    busy: bool,
    /// The ticket that may take the slot now.
    granted: Option<u64>,
    next_ticket: u64,
    /// Namespaces with compiles waiting, in turn order, each with its
    /// tickets in arrival order.
    turns: VecDeque<(String, VecDeque<u64>)>,
}

impl TenantQueue {
    /// Grant the slot to the next namespace's first ticket; that
    /// namespace goes to the back of the line if it has more.
    fn grant_next(&mut self) {
        if self.busy || self.granted.is_some() {
            return;
        }
        let Some((ns, mut tickets)) = self.turns.pop_front() else {
            return;
        };
        self.granted = tickets.pop_front();
        if !tickets.is_empty() {
            self.turns.push_back((ns, tickets));
        }
    }

    /// How many compiles take the slot before `ticket`: the running one,
    /// one granted and not yet taken, and those [`Self::grant_next`] hands
    /// out first, in turn by namespace.
    fn ahead_of(&self, ticket: u64) -> usize {
        let mut ahead =
            usize::from(self.busy) + usize::from(self.granted.is_some_and(|g| g != ticket));
        let mut turns: VecDeque<VecDeque<u64>> =
            self.turns.iter().map(|(_, t)| t.clone()).collect();
        while let Some(mut tickets) = turns.pop_front() {
            match tickets.pop_front() {
                Some(t) if t == ticket => return ahead,
                Some(_) => ahead += 1,
                None => continue,
            }
            if !tickets.is_empty() {
                turns.push_back(tickets);
            }
        }
        ahead
    }
}

struct TenantPermit<'a>(&'a TenantSlot);

impl TenantSlot {
    fn new() -> Self {
        TenantSlot {
            state: Mutex::new(TenantQueue::default()),
            changed: Condvar::new(),
        }
    }

    /// Wait for the slot on behalf of `tenant`'s compile, telling it its
    /// place as that changes; `None` when its cancel fires first (the turn
    /// passes on).
    fn acquire(&self, tenant: TenantCompile<'_>) -> Option<TenantPermit<'_>> {
        let mut q = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        match q.turns.iter_mut().find(|(ns, _)| ns == tenant.namespace) {
            Some((_, tickets)) => tickets.push_back(ticket),
            None => q
                .turns
                .push_back((tenant.namespace.to_owned(), VecDeque::from([ticket]))),
        }
        q.grant_next();
        let mut told = None;
        while q.granted != Some(ticket) {
            tenant.tell(
                &mut told,
                CompilePlace::Queued {
                    ahead: q.ahead_of(ticket),
                },
            );
            if tenant.cancelled() {
                for (_, tickets) in &mut q.turns {
                    tickets.retain(|t| *t != ticket);
                }
                q.turns.retain(|(_, tickets)| !tickets.is_empty());
                return None;
            }
            // Woken by a release, or every 50 ms to look at `cancel`.
            q = self
                .changed
                .wait_timeout(q, Duration::from_millis(50))
                .map(|(q, _)| q)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        q.granted = None;
        if tenant.cancelled() {
            q.grant_next();
            self.changed.notify_all();
            return None;
        }
        q.busy = true;
        tenant.tell(&mut told, CompilePlace::Compiling);
        Some(TenantPermit(self))
    }

    /// How many compiles wait for the slot.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        let q = self.state.lock().unwrap_or_else(|p| p.into_inner());
        q.turns.iter().map(|(_, t)| t.len()).sum::<usize>() + usize::from(q.granted.is_some())
    }
}

impl Drop for TenantPermit<'_> {
    fn drop(&mut self) {
        let mut q = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        q.busy = false;
        q.grant_next();
        self.0.changed.notify_all();
    }
}

/// At most this many compiled components are kept in memory for the next
/// load (plugins in service hold their own code, whatever the bound).
pub const MEMORY_COMPONENTS: usize = 64;
/// At most this many bytes of compiled code are kept in memory for the
/// next load (see [`MEMORY_COMPONENTS`]).
pub const MEMORY_CODE_BYTES: usize = 256 << 20;

/// An empty cache of compiled (or linked) code within [`MEMORY_COMPONENTS`]
/// and [`MEMORY_CODE_BYTES`].
pub(crate) fn memory_cache<V: Clone>() -> BoundedLru<V> {
    BoundedLru::new(
        NonZeroUsize::new(MEMORY_COMPONENTS).unwrap_or(NonZeroUsize::MIN),
        MEMORY_CODE_BYTES,
    )
}

/// The size of a compiled component's code image.
pub(crate) fn code_bytes(c: &Component) -> usize {
    let r = c.image_range();
    (r.end as usize).saturating_sub(r.start as usize)
}

/// The compiled-component cache.
pub(crate) struct ArtifactCache {
    dir: Option<PathBuf>,
    /// Artifacts shipped beside the binary: read, never written or evicted.
    shipped: Option<PathBuf>,
    engine_hash: String,
    /// Recently used compiled components (bounded: [`MEMORY_COMPONENTS`],
    /// [`MEMORY_CODE_BYTES`]).
    memory: Mutex<BoundedLru<Component>>,
    /// Compilations that may run at once (see `get_or_compile`).
    compiling: Permits,
    /// The one compilation of a tenant plugin that may run at once, apart
    /// from the others: tenants' components (crafted to be slow, or many)
    /// never make a cluster plugin wait to compile, and take turns by
    /// namespace.
    tenant_compiling: TenantSlot,
}

impl ArtifactCache {
    pub(crate) fn new(
        engine: &Engine,
        dir: Option<PathBuf>,
        shipped: Option<PathBuf>,
        parallel_compiles: usize,
    ) -> Self {
        ArtifactCache {
            dir,
            shipped,
            engine_hash: engine_hash(engine),
            memory: Mutex::new(memory_cache()),
            compiling: Permits::new(parallel_compiles),
            tenant_compiling: TenantSlot::new(),
        }
    }

    /// Cache key of a component with digest `sha256`.
    pub(crate) fn key(&self, sha256: &str) -> String {
        // 16 hex chars of the engine hash are plenty to separate configs.
        format!(
            "{sha256}-{}",
            &self.engine_hash[..16.min(self.engine_hash.len())]
        )
    }

    /// Get the compiled component for `bytes` (digest `sha256`): from
    /// memory, from a shipped artifact, from a disk artifact, or by calling
    /// `compile` (which returns
    /// the component and its artifact) and caching the result. A tenant's
    /// component (`tenant`) compiles in the tenants' own slot, in turn with
    /// other namespaces, and is told its place there. With `remember` false
    /// the component is not kept in memory (its code is mapped only while
    /// the caller holds it; see `super::code`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_or_compile(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
        tenant: Option<TenantCompile<'_>>,
        remember: bool,
        compile: impl FnOnce(&[u8]) -> Result<(Component, Vec<u8>), CompileError>,
    ) -> Result<(Component, CacheOutcome), CompileError> {
        let remember = |key: &str, c: &Component| {
            if remember {
                self.remember(key, c);
            }
        };
        let key = self.key(sha256);
        if let Some(c) = self.memory.lock().ok().and_then(|mut m| m.get(&key)) {
            return Ok((c, CacheOutcome::Memory));
        }
        // Shipped artifacts are keyed like the cache (component digest and
        // engine configuration), so only the very component compiled by
        // this wasmtime configuration matches; wasmtime also refuses one
        // built for other CPU features, and then it is compiled here.
        if let Some(dir) = &self.shipped {
            match trainforge_precompiled::load(engine, dir, &key) {
                Ok(c) => {
                    remember(&key, &c);
                    return Ok((c, CacheOutcome::Shipped));
                }
                Err(trainforge_precompiled::LoadError::Missing) => {}
                Err(e) => tracing::warn!(key, error = %e, "ignoring shipped artifact"),
            }
        }
        if let Some(dir) = &self.dir {
            match trainforge_precompiled::load(engine, dir, &key) {
                Ok(c) => {
                    remember(&key, &c);
                    return Ok((c, CacheOutcome::Disk));
                }
                Err(trainforge_precompiled::LoadError::Missing) => {}
                Err(e) => tracing::warn!(key, error = %e, "ignoring cached artifact; recompiling"),
            }
        }
        // A bounded number of compilations at once: in process, Cranelift's
        // memory grows with the functions compiled at once (an operator
        // starting with a dozen plugins compiled together peaked at 1.8 GB);
        // in children, each is capped but still costs a core.
        let (_cluster_permit, _tenant_permit) = match tenant {
            Some(t) => match self.tenant_compiling.acquire(t) {
                Some(p) => (None, Some(p)),
                None => return Err(CompileError::Cancelled),
            },
            None => (Some(self.compiling.acquire()), None),
        };
        // Whoever held a permit may just have compiled this very module.
        if let Some(c) = self.memory.lock().ok().and_then(|mut m| m.get(&key)) {
            return Ok((c, CacheOutcome::Memory));
        }
        let (component, artifact) = compile(bytes)?;
        let component = match &self.dir {
            Some(dir) => {
                if let Err(e) = trainforge_precompiled::store(dir, &key, &artifact) {
                    tracing::warn!(key, error = %e, "could not write artifact cache");
                }
                // The mapped file shares the page cache; the component
                // deserialised from memory holds a private copy.
                trainforge_precompiled::load(engine, dir, &key).unwrap_or(component)
            }
            None => component,
        };
        remember(&key, &component);
        Ok((component, CacheOutcome::Compiled))
    }

    /// Forget the component with cache key `key`, in memory and on disk
    /// (it was refused after compiling: keep nothing of it).
    pub(crate) fn evict(&self, key: &str) {
        if let Ok(mut m) = self.memory.lock() {
            m.remove(key);
        }
        if let Some(dir) = &self.dir {
            let (artifact, sidecar) = trainforge_precompiled::paths(dir, key);
            for p in [sidecar, artifact] {
                if let Err(e) = std::fs::remove_file(&p)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %p.display(), error = %e, "could not evict cached artifact");
                }
            }
        }
    }

    /// Whether a component with cache key `key` is cached (memory, shipped
    /// or disk).
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.memory.lock().is_ok_and(|m| m.contains(key)) || self.on_disk(key)
    }

    /// Whether artifacts can be on disk at all (a shipped or cache dir).
    pub(crate) fn has_disk(&self) -> bool {
        self.dir.is_some() || self.shipped.is_some()
    }

    /// Whether the artifact with cache key `key` is on disk (shipped or in
    /// the cache dir).
    pub(crate) fn on_disk(&self, key: &str) -> bool {
        [&self.shipped, &self.dir]
            .into_iter()
            .flatten()
            .any(|d| trainforge_precompiled::paths(d, key).0.exists())
    }

    fn remember(&self, key: &str, c: &Component) {
        if let Ok(mut m) = self.memory.lock() {
            m.insert(key.to_owned(), c.clone(), code_bytes(c));
        }
    }

    /// Drop the in-memory entries (the disk cache stays). For benchmarks.
    pub(crate) fn clear_memory(&self) {
        if let Ok(mut m) = self.memory.lock() {
            m.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn tenant(namespace: &str) -> TenantCompile<'_> {
        TenantCompile {
            namespace,
            ..TenantCompile::default()
        }
    }

    /// Components loaded one after another (new plugin versions, tenants'
    /// plugins) are not all kept: the memory cache stays within its entry
    /// bound, keeps the most recent and evicts the oldest; a component
    /// compiled again after eviction is cached again.
    #[test]
    #[allow(clippy::panic)]
    fn compiled_components_in_memory_stay_within_their_bound() {
        // The smallest component there is: the component-model preamble.
        const EMPTY: &[u8] = b"\0asm\x0d\x00\x01\x00";
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap_or_else(|e| panic!("engine: {e}"));
        let cache = ArtifactCache::new(&engine, None, None, 1);
        let load = |i: usize| {
            cache
                .get_or_compile(&engine, &format!("{i:064x}"), EMPTY, None, true, |b| {
                    let c = Component::new(&engine, b)
                        .map_err(|e| CompileError::Invalid(e.to_string()))?;
                    Ok((c, Vec::new()))
                })
                .map(|(_, outcome)| outcome)
                .unwrap_or_else(|e| panic!("component {i}: {e}"))
        };
        let kept = || cache.memory.lock().map_or(usize::MAX, |m| m.len());
        for i in 0..MEMORY_COMPONENTS + 10 {
            assert_eq!(load(i), CacheOutcome::Compiled);
            assert!(kept() <= MEMORY_COMPONENTS, "{} kept after {i}", kept());
            let bytes = cache.memory.lock().map_or(usize::MAX, |m| m.bytes());
            assert!(bytes <= MEMORY_CODE_BYTES, "{bytes} bytes after {i}");
        }
        assert_eq!(kept(), MEMORY_COMPONENTS);
        let last = MEMORY_COMPONENTS + 9;
        assert_eq!(load(last), CacheOutcome::Memory);
        assert!(!cache.contains(&cache.key(&format!("{:064x}", 0))));
        assert_eq!(load(0), CacheOutcome::Compiled);
        assert_eq!(load(0), CacheOutcome::Memory);
        assert_eq!(kept(), MEMORY_COMPONENTS);
    }

    /// Wait until `n` compiles wait for the slot.
    fn until_waiting(slot: &TenantSlot, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while slot.waiting() < n {
            assert!(Instant::now() < deadline, "{n} waiters never queued");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Tenant A queues three compiles behind its running one, then tenant
    /// B queues one: B's goes second, not last (first come first served
    /// would put it behind all of A's).
    #[test]
    fn tenants_take_turns_for_their_compile_slot() {
        let slot = Arc::new(TenantSlot::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let running = slot.acquire(tenant("team-a")).unwrap();
        let mut threads = Vec::new();
        for (i, (ns, label)) in [
            ("team-a", "a2"),
            ("team-a", "a3"),
            ("team-a", "a4"),
            ("team-b", "b1"),
        ]
        .into_iter()
        .enumerate()
        {
            let (theirs, order) = (slot.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                let _p = theirs.acquire(tenant(ns)).unwrap();
                order.lock().unwrap().push(label);
            }));
            until_waiting(&slot, i + 1);
        }
        drop(running);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a2", "b1", "a3", "a4"]);
        assert_eq!(slot.waiting(), 0);
        // Free again: a new compile takes it at once.
        drop(slot.acquire(tenant("team-c")).unwrap());
    }

    /// A queued compile whose plugin is gone leaves the queue: cancelled
    /// while waiting it gets no slot, and the next one gets its turn.
    #[test]
    fn a_cancelled_compile_leaves_the_queue() {
        let slot = Arc::new(TenantSlot::new());
        let running = slot.acquire(tenant("team-a")).unwrap();
        let cancel = CancellationToken::new();
        let waiter = {
            let (slot, cancel) = (slot.clone(), cancel.clone());
            std::thread::spawn(move || {
                slot.acquire(TenantCompile {
                    cancel: Some(&cancel),
                    ..tenant("team-a")
                })
                .is_none()
            })
        };
        until_waiting(&slot, 1);
        let next = {
            let slot = slot.clone();
            std::thread::spawn(move || drop(slot.acquire(tenant("team-b")).unwrap()))
        };
        until_waiting(&slot, 2);
        cancel.cancel();
        assert!(waiter.join().unwrap(), "the cancelled compile got the slot");
        assert_eq!(slot.waiting(), 1);
        drop(running);
        next.join().unwrap();
        assert_eq!(slot.waiting(), 0);
    }

    /// Each queued compile is told how many go before it — turns by
    /// namespace counted, the running one included — and updated as that
    /// changes, then told it compiles.
    #[test]
    fn a_queued_compile_is_told_its_place() {
        use tokio::sync::watch;
        let slot = Arc::new(TenantSlot::new());
        let running = slot.acquire(tenant("team-a")).unwrap();
        let mut places = Vec::new();
        let mut threads = Vec::new();
        let release = Arc::new(Mutex::new(()));
        let hold = release.lock().unwrap();
        for (i, ns) in ["team-a", "team-a", "team-b"].into_iter().enumerate() {
            let (tx, rx) = watch::channel(CompilePlace::Queued { ahead: usize::MAX });
            places.push(rx);
            let (slot2, release) = (slot.clone(), release.clone());
            threads.push(std::thread::spawn(move || {
                let _p = slot2
                    .acquire(TenantCompile {
                        place: Some(&tx),
                        ..tenant(ns)
                    })
                    .unwrap();
                // Hold the slot until the test has read every place.
                drop(release.lock().unwrap());
            }));
            until_waiting(&slot, i + 1);
        }
        let until = |rx: &watch::Receiver<CompilePlace>, want: CompilePlace| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while *rx.borrow() != want {
                assert!(
                    Instant::now() < deadline,
                    "{:?}, not {want:?}",
                    *rx.borrow()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // a2 goes after the running one; b1 takes its turn before a3.
        until(&places[0], CompilePlace::Queued { ahead: 1 });
        until(&places[1], CompilePlace::Queued { ahead: 3 });
        until(&places[2], CompilePlace::Queued { ahead: 2 });
        drop(running);
        until(&places[0], CompilePlace::Compiling);
        until(&places[2], CompilePlace::Queued { ahead: 1 });
        until(&places[1], CompilePlace::Queued { ahead: 2 });
        drop(hold);
        for t in threads {
            t.join().unwrap();
        }
        for rx in &places {
            assert_eq!(*rx.borrow(), CompilePlace::Compiling);
        }

        // The slot free: told it compiles, whatever the channel held.
        let (tx, mut rx) = watch::channel(CompilePlace::Compiling);
        let p = slot.acquire(TenantCompile {
            place: Some(&tx),
            ..tenant("team-c")
        });
        assert!(p.is_some());
        assert!(rx.has_changed().unwrap(), "the first place was not told");
        assert_eq!(*rx.borrow_and_update(), CompilePlace::Compiling);
    }
}
