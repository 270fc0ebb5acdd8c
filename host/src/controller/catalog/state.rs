//! [`PluginCatalog`]: the plugin set in service and the per-CR state behind
//! it (the latest attempt and the version serving).
//!
//! The set is an `ArcSwap<PluginSet>`: readers take an `Arc` snapshot and
//! keep it for their whole reconcile; a swap publishes a complete new set in
//! one store, so nobody ever sees a half-loaded set. Every swap bumps a
//! generation number on a `watch` channel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::watch;
use trainforge_api::plugin::{KindRef, Phase};
use trainforge_api::trainforge::v1alpha1::{
    ClusterTrainerPluginSpec, DescribedPlugin, condition, reason,
};

use crate::plugin::{LoadedPlugin, ObjectSource, PluginRuntime, PluginSet};

/// A stage of serving a CR's spec: the three of an attempt
/// ([`StageName::ATTEMPT`]), then `Ready`. Each is written as the condition
/// of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StageName {
    /// The plugin's bytes were fetched.
    Fetched,
    /// They match the pinned digest (and a trusted signature, if asked).
    Verified,
    /// They compiled into a plugin that describes itself.
    Compiled,
    /// A version of the plugin is in service.
    Ready,
}

impl StageName {
    /// The stages of an attempt, in order ([`Attempt::stages`]).
    pub(crate) const ATTEMPT: [StageName; 3] =
        [StageName::Fetched, StageName::Verified, StageName::Compiled];

    /// The condition type.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StageName::Fetched => condition::FETCHED,
            StageName::Verified => condition::VERIFIED,
            StageName::Compiled => condition::COMPILED,
            StageName::Ready => condition::READY,
        }
    }
}

/// How a stage (or another condition of the status) stands, written as
/// the condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StageStatus {
    /// Passed (for `Degraded`: the current spec failed).
    True,
    /// Failed (for `Degraded`: the current spec is serving).
    False,
    /// Not reached: an earlier stage failed.
    Unknown,
}

/// Outcome of one stage of an attempt ([`StageName::ATTEMPT`]), or of
/// another condition of the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stage {
    /// How it stands.
    pub(crate) status: StageStatus,
    /// Condition reason.
    pub(crate) reason: String,
    /// Condition message.
    pub(crate) message: String,
}

impl Stage {
    /// Passed, with this reason and message.
    pub(crate) fn ok(reason: &str, message: impl Into<String>) -> Self {
        Stage {
            status: StageStatus::True,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// Failed, with this reason and message.
    pub(crate) fn failed(reason: &str, message: impl Into<String>) -> Self {
        Stage {
            status: StageStatus::False,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// Not reached: an earlier stage failed.
    pub(crate) fn not_reached() -> Self {
        Stage {
            status: StageStatus::Unknown,
            reason: reason::NOT_REACHED.to_owned(),
            message: "an earlier stage failed".to_owned(),
        }
    }
}

/// The latest attempt to serve a CR's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// `metadata.generation` attempted.
    pub(crate) generation: i64,
    /// The stages of [`StageName::ATTEMPT`], in that order.
    pub(crate) stages: [Stage; 3],
    /// `(reason, message)` when the attempt failed.
    pub(crate) failure: Option<(String, String)>,
}

impl Attempt {
    /// A failed attempt: the stages in `done` passed, the next one failed
    /// with `reason`, later ones were not reached.
    pub(crate) fn failed(
        generation: i64,
        mut done: Vec<Stage>,
        reason: &str,
        message: String,
    ) -> Self {
        done.push(Stage::failed(reason, message.clone()));
        Attempt {
            generation,
            stages: stages(done),
            failure: Some((reason.to_owned(), message)),
        }
    }

    /// A successful attempt with the three stages in `done`.
    pub(crate) fn succeeded(generation: i64, done: Vec<Stage>) -> Self {
        Attempt {
            generation,
            stages: stages(done),
            failure: None,
        }
    }

    /// The stages of this attempt before `stage` (all of them for
    /// `Ready`), as they passed or failed: what an attempt failing at
    /// `stage` for another cause keeps.
    pub(crate) fn stages_before(&self, stage: StageName) -> Vec<Stage> {
        let n = StageName::ATTEMPT
            .iter()
            .position(|s| *s == stage)
            .unwrap_or(StageName::ATTEMPT.len());
        self.stages.iter().take(n).cloned().collect()
    }
}

/// The first three of `done`, padded with not-reached stages.
fn stages(done: Vec<Stage>) -> [Stage; 3] {
    let mut it = done.into_iter();
    let mut next = || it.next().unwrap_or_else(Stage::not_reached);
    [next(), next(), next()]
}

/// A version of a plugin that is (or is about to be) in service.
#[derive(Debug, Clone)]
pub(crate) struct Serving {
    pub(crate) plugin: LoadedPlugin,
    /// The spec it was loaded from.
    pub(crate) spec: ClusterTrainerPluginSpec,
    pub(crate) generation: i64,
    pub(crate) order: i32,
    pub(crate) described: DescribedPlugin,
    /// Emitted (after narrowing) and read kinds.
    pub(crate) kinds: BTreeSet<KindRef>,
    /// Whether `status` is among the phases called.
    pub(crate) status_phase: bool,
}

impl Serving {
    /// Describe `plugin` as served with `phases` narrowing; its kinds are
    /// what the runtime allows it (declared, narrowed by the administrator).
    pub(crate) fn new(
        plugin: LoadedPlugin,
        spec: ClusterTrainerPluginSpec,
        generation: i64,
        order: i32,
        phases: Option<&[Phase]>,
    ) -> Self {
        let d = plugin.descriptor();
        let called: Vec<Phase> = d
            .known_phases()
            .into_iter()
            .filter(|p| phases.is_none_or(|only| only.contains(p)))
            .collect();
        let emits = plugin.allowed_emits();
        let reads = plugin.allowed_reads();
        let kinds = emits
            .iter()
            .chain(reads)
            .chain(&d.watches)
            .cloned()
            .collect();
        let described = DescribedPlugin {
            name: d.name.clone(),
            version: d.version.clone(),
            wit_version: d.wit_version.clone(),
            phases: called.iter().map(|p| p.as_str().to_owned()).collect(),
            emits: emits.iter().cloned().collect(),
            reads: reads.iter().cloned().collect(),
        };
        Serving {
            status_phase: called.contains(&Phase::Status),
            plugin,
            spec,
            generation,
            order,
            described,
            kinds,
        }
    }

    pub(crate) fn digest(&self) -> &str {
        self.plugin.sha256()
    }
}

/// What the catalog knows about one `ClusterTrainerPlugin`.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) uid: String,
    pub(crate) attempt: Option<Attempt>,
    pub(crate) serving: Option<Serving>,
}

#[derive(Default)]
struct State {
    /// By CR name.
    entries: BTreeMap<String, Entry>,
    /// UIDs of the CRs in the initial list, until each has been attempted.
    initial: Option<BTreeSet<String>>,
    /// UIDs of deleted CRs: a reconcile still loading one when it was
    /// deleted must not put it back.
    deleted: BTreeSet<String>,
    kinds: BTreeSet<KindRef>,
}

/// What the catalog knows about one `ClusterTrainerPlugin`, read-only
/// ([`PluginCatalog::reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginReport {
    /// The `ClusterTrainerPlugin`'s name.
    pub name: String,
    /// Whether a version of it is in service.
    pub serving: bool,
    /// The `metadata.generation` whose spec is in service.
    pub serving_generation: Option<i64>,
    /// Whether the version in service builds JobSets
    /// ([`LoadedPlugin::builds_jobsets`]).
    pub builds: bool,
    /// `(reason, message)` of its latest attempt, when that attempt failed.
    pub failure: Option<(String, String)>,
}

/// The plugin set in service, built from every `Ready` `ClusterTrainerPlugin`
/// sorted by `(spec.order, metadata.name)`.
pub struct PluginCatalog {
    runtime: Arc<PluginRuntime>,
    objects: Arc<dyn ObjectSource>,
    kicks: UnboundedSender<String>,
    kick_receiver: Mutex<Option<UnboundedReceiver<String>>>,
    set: ArcSwap<PluginSet>,
    generation: watch::Sender<u64>,
    state: Mutex<State>,
    synced: AtomicBool,
    status_writes: AtomicU64,
    loads: AtomicU64,
}

impl std::fmt::Debug for PluginCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCatalog")
            .field("generation", &*self.generation.borrow())
            .field("plugins", &self.set.load().plugins().len())
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

impl PluginCatalog {
    /// An empty catalog; `objects` serves `host.get-object` for every plugin
    /// it loads.
    pub fn new(runtime: Arc<PluginRuntime>, objects: Arc<dyn ObjectSource>) -> Self {
        let (generation, _) = watch::channel(0);
        let (kicks, kick_receiver) = unbounded_channel();
        PluginCatalog {
            runtime,
            objects,
            kicks,
            kick_receiver: Mutex::new(Some(kick_receiver)),
            set: ArcSwap::from_pointee(PluginSet::default()),
            generation,
            state: Mutex::new(State::default()),
            synced: AtomicBool::new(false),
            status_writes: AtomicU64::new(0),
            loads: AtomicU64::new(0),
        }
    }

    /// The set in service (a snapshot: later swaps do not change it).
    pub fn current(&self) -> Arc<PluginSet> {
        self.set.load_full()
    }

    /// The swap generation; bumps on every swap.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The kinds the set in service emits or reads (what the TrainJob
    /// controller should watch).
    pub fn kinds(&self) -> BTreeSet<KindRef> {
        self.lock().kinds.clone()
    }

    /// Whether every `ClusterTrainerPlugin` of the initial list has been
    /// attempted (loaded or refused).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The plugin runtime.
    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    /// The object source given to every plugin.
    pub fn objects(&self) -> &Arc<dyn ObjectSource> {
        &self.objects
    }

    /// The digest serving for the `ClusterTrainerPlugin` called `name`.
    pub fn serving_digest(&self, name: &str) -> Option<String> {
        self.lock()
            .entries
            .get(name)
            .and_then(|e| e.serving.as_ref())
            .map(|s| s.digest().to_owned())
    }

    /// Every `ClusterTrainerPlugin` known, by name: whether it serves, and
    /// why its latest attempt failed.
    pub fn reports(&self) -> Vec<PluginReport> {
        self.lock()
            .entries
            .iter()
            .map(|(name, e)| PluginReport {
                name: name.clone(),
                serving: e.serving.is_some(),
                serving_generation: e.serving.as_ref().map(|s| s.generation),
                builds: e
                    .serving
                    .as_ref()
                    .is_some_and(|s| s.plugin.builds_jobsets()),
                failure: e.attempt.as_ref().and_then(|a| a.failure.clone()),
            })
            .collect()
    }

    /// Status writes made so far (a resync that changes nothing makes none).
    pub fn status_writes(&self) -> u64 {
        self.status_writes.load(Ordering::Relaxed)
    }

    /// Components fetched and loaded so far (skipped reconciles load none).
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    pub(crate) fn count_status_write(&self) {
        self.status_writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_load(&self) {
        self.loads.fetch_add(1, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated
        // in a way later readers care about: every update is a single insert
        // or remove followed by a rebuild.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry of `name` if it belongs to the object with `uid`; an entry
    /// of an earlier object with the same name is dropped (and the set
    /// rebuilt without it).
    pub(crate) fn entry(&self, name: &str, uid: &str) -> Option<Entry> {
        let mut state = self.lock();
        match state.entries.get(name) {
            Some(e) if e.uid == uid => Some(e.clone()),
            Some(_) => {
                state.entries.remove(name);
                self.publish(&mut state);
                None
            }
            None => None,
        }
    }

    /// Record an attempt for CR `name`. With `candidate`, try to put it in
    /// service: if it clashes with the rest of the set (duplicate plugin
    /// name, second status plugin, anything [`PluginSet::new`] refuses) the
    /// attempt becomes a `Compiled=False` failure and the previous version
    /// keeps serving. Returns the entry as recorded.
    pub(crate) fn commit(
        &self,
        name: &str,
        uid: &str,
        attempt: Attempt,
        candidate: Option<Serving>,
    ) -> Entry {
        self.commit_with(name, uid, attempt, candidate, false)
    }

    /// Record a failed `attempt` together with `restored`, the last good
    /// version brought back from the CR's status (after a restart); if it
    /// no longer fits the set it is dropped and the attempt stands.
    pub(crate) fn commit_restored(
        &self,
        name: &str,
        uid: &str,
        attempt: Attempt,
        restored: Serving,
    ) -> Entry {
        self.commit_with(name, uid, attempt, Some(restored), true)
    }

    fn commit_with(
        &self,
        name: &str,
        uid: &str,
        mut attempt: Attempt,
        candidate: Option<Serving>,
        restored: bool,
    ) -> Entry {
        let mut state = self.lock();
        if state.deleted.contains(uid) {
            return Entry {
                uid: uid.to_owned(),
                attempt: Some(attempt),
                serving: None,
            };
        }
        let previous = state
            .entries
            .get(name)
            .filter(|e| e.uid == uid)
            .and_then(|e| e.serving.clone());
        let mut serving = previous;
        if let Some(c) = candidate {
            // A clash is decided by precedence, not by who loaded first:
            // the loser is refused (or, if it was serving, displaced and
            // told to reconcile again), so the outcome is the same after
            // every restart.
            let mut displaced = false;
            let outcome = loop {
                match clash(&state, name, &c) {
                    Ok(()) => break Ok(()),
                    Err(Clash {
                        other,
                        reason,
                        message,
                    }) if !displaced && precedence(name, &c) < state.precedence_of(&other) => {
                        self.displace(&mut state, &other, name, &c, reason, &message);
                        displaced = true;
                    }
                    Err(Clash {
                        reason, message, ..
                    }) => break Err((reason, message)),
                }
            };
            match outcome {
                Ok(()) => serving = Some(c),
                Err((r, m)) if restored => {
                    tracing::warn!(reason = %r, message = %m, "last good version not restored");
                }
                Err((r, m)) => {
                    let done = attempt.stages_before(StageName::Compiled);
                    attempt = Attempt::failed(attempt.generation, done, r, m);
                }
            }
        }
        let key = |s: &Serving| (s.digest().to_owned(), s.generation, s.order);
        let old = state
            .entries
            .get(name)
            .and_then(|e| e.serving.as_ref())
            .map(key);
        let swapped = old != serving.as_ref().map(key);
        let entry = Entry {
            uid: uid.to_owned(),
            attempt: Some(attempt),
            serving,
        };
        state.entries.insert(name.to_owned(), entry.clone());
        if swapped {
            self.publish(&mut state);
        }
        self.update_synced(&mut state);
        entry
    }

    /// Take CR `other`'s plugin out of service because `winner` (CR
    /// `winner_cr`) has precedence; its attempt records why, and its
    /// controller is asked to reconcile it again.
    fn displace(
        &self,
        state: &mut State,
        other: &str,
        winner_cr: &str,
        winner: &Serving,
        why: &str,
        clash: &str,
    ) {
        let Some(entry) = state.entries.get_mut(other) else {
            return;
        };
        let Some(lost) = entry.serving.take() else {
            return;
        };
        let message = format!(
            "{why}: plugin {} of ClusterTrainerPlugin {winner_cr} has precedence ({}) and took the place of plugin {}: {clash}",
            winner.plugin.name(),
            if winner.plugin.is_builtin() {
                "builtin"
            } else {
                "earlier name"
            },
            lost.plugin.name()
        );
        tracing::warn!(plugin = %other, %message, "plugin displaced");
        let generation = entry
            .attempt
            .as_ref()
            .map_or(lost.generation, |a| a.generation);
        let done = entry
            .attempt
            .as_ref()
            .map(|a| a.stages_before(StageName::Compiled))
            .unwrap_or_default();
        entry.attempt = Some(Attempt::failed(
            generation,
            done,
            reason::DISPLACED,
            message,
        ));
        let _ = self.kicks.send(other.to_owned());
    }

    /// CR names whose state changed because of another CR (displaced):
    /// the controller reconciles them again. Taken once.
    pub(crate) fn take_kicks(&self) -> Option<UnboundedReceiver<String>> {
        self.kick_receiver.lock().ok().and_then(|mut r| r.take())
    }

    /// Forget CR `name` (deleted; `uid` when known) and take its plugin out
    /// of service.
    pub(crate) fn remove(&self, name: &str, uid: Option<&str>) {
        let mut state = self.lock();
        if let Some(uid) = uid {
            state.deleted.insert(uid.to_owned());
            if let Some(initial) = state.initial.as_mut() {
                initial.remove(uid);
            }
        }
        if state
            .entries
            .get(name)
            .is_some_and(|e| uid.is_none_or(|u| u == e.uid))
            && let Some(e) = state.entries.remove(name)
        {
            state.deleted.insert(e.uid.clone());
            if let Some(initial) = state.initial.as_mut() {
                initial.remove(&e.uid);
            }
            if e.serving.is_some() {
                self.publish(&mut state);
            }
        }
        self.update_synced(&mut state);
    }

    /// Forget every CR whose name is not in `present` (deleted while we
    /// were not looking).
    pub(crate) fn retain(&self, present: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .lock()
            .entries
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&name, None);
        }
    }

    /// The initial list has been read: `uids` are the CRs that must be
    /// attempted before the catalog counts as synced (later lists change
    /// nothing).
    pub(crate) fn set_initial(&self, uids: BTreeSet<String>) {
        let mut state = self.lock();
        if state.initial.is_some() {
            return;
        }
        state.initial = Some(uids);
        self.update_synced(&mut state);
    }

    fn update_synced(&self, state: &mut State) {
        let Some(initial) = &state.initial else {
            return;
        };
        let attempted: BTreeSet<&str> = state
            .entries
            .values()
            .filter(|e| e.attempt.is_some())
            .map(|e| e.uid.as_str())
            .collect();
        if initial.iter().all(|u| attempted.contains(u.as_str()))
            && !self.synced.swap(true, Ordering::AcqRel)
        {
            tracing::info!(
                plugins = self.set.load().plugins().len(),
                "plugin catalog synced"
            );
        }
    }

    /// Build the set from every serving entry and swap it in.
    fn publish(&self, state: &mut State) {
        match build(
            state
                .entries
                .iter()
                .filter_map(|(n, e)| e.serving.as_ref().map(|s| (n.as_str(), s))),
        ) {
            Ok(set) => {
                let names: Vec<&str> = set.plugins().iter().map(LoadedPlugin::name).collect();
                tracing::info!(plugins = ?names, "plugin set swapped");
                state.kinds = state
                    .entries
                    .values()
                    .filter_map(|e| e.serving.as_ref())
                    .flat_map(|s| s.kinds.iter().cloned())
                    .collect();
                self.set.store(Arc::new(set));
                self.generation.send_modify(|g| *g += 1);
            }
            // Unreachable in practice: every entry passed `clash` against the
            // others when it went into service, and removing one cannot make
            // a valid set invalid.
            Err((r, m)) => tracing::error!(reason = %r, message = %m, "plugin set not rebuilt"),
        }
    }
}

/// Sort serving plugins by `(order, CR name)` into a set.
fn build<'a>(
    serving: impl Iterator<Item = (&'a str, &'a Serving)>,
) -> Result<PluginSet, (String, String)> {
    let mut sorted: Vec<(&str, &Serving)> = serving.collect();
    sorted.sort_by(|a, b| (a.1.order, a.0).cmp(&(b.1.order, b.0)));
    PluginSet::new(sorted.into_iter().map(|(_, s)| s.plugin.clone()).collect())
        .map_err(|e| (e.reason().to_owned(), e.to_string()))
}

/// Who wins when two plugins cannot serve together: builtin components
/// first, then the `ClusterTrainerPlugin` name (lower first). Smaller wins.
fn precedence<'a>(cr_name: &'a str, s: &Serving) -> (bool, &'a str) {
    (!s.plugin.is_builtin(), cr_name)
}

impl State {
    fn precedence_of<'a>(&self, cr_name: &'a str) -> (bool, &'a str) {
        match self.entries.get(cr_name).and_then(|e| e.serving.as_ref()) {
            Some(s) => precedence(cr_name, s),
            None => (true, cr_name),
        }
    }
}

/// Why a candidate cannot serve next to plugin `other` (a CR name).
struct Clash {
    other: String,
    reason: &'static str,
    message: String,
}

/// Whether `candidate` (for CR `name`) fits with every other serving plugin.
fn clash(state: &State, name: &str, candidate: &Serving) -> Result<(), Clash> {
    let others = state
        .entries
        .iter()
        .filter(|(n, _)| n.as_str() != name)
        .filter_map(|(n, e)| e.serving.as_ref().map(|s| (n.as_str(), s)));
    for (other, s) in others.clone() {
        if s.plugin.name() == candidate.plugin.name() {
            return Err(Clash {
                other: other.to_owned(),
                reason: reason::DUPLICATE_NAME,
                message: format!(
                    "plugin name {:?} is also served by ClusterTrainerPlugin {other}",
                    s.plugin.name()
                ),
            });
        }
        if s.status_phase && candidate.status_phase {
            return Err(Clash {
                other: other.to_owned(),
                reason: reason::STATUS_CONFLICT,
                message: format!(
                    "plugin {} implements the status phase, as does plugin {} (ClusterTrainerPlugin {other}); narrow spec.phases on one of them",
                    candidate.plugin.name(),
                    s.plugin.name()
                ),
            });
        }
    }
    build(others.chain(std::iter::once((name, candidate))))
        .map(drop)
        .map_err(|(_, message)| Clash {
            other: String::new(),
            reason: reason::INVALID_SPEC,
            message,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::plugin::builtin::find as find_builtin;
    use crate::plugin::{NoObjects, RuntimeConfig};

    fn catalog() -> PluginCatalog {
        PluginCatalog::new(
            Arc::new(PluginRuntime::new(RuntimeConfig::default()).unwrap()),
            Arc::new(NoObjects),
        )
    }

    /// A builtin loaded as CR generation 1 with `order`. A build with
    /// `TRAINFORGE_SKIP_BUILTIN_PLUGINS` embeds none, and these tests then
    /// fail rather than pass without checking anything.
    fn serving(c: &PluginCatalog, builtin: &str, order: i32) -> Serving {
        let b = find_builtin(builtin)
            .unwrap_or_else(|| panic!("builtin plugin {builtin:?} is not embedded"));
        let p = c.runtime().load(b.trusted_source()).unwrap();
        Serving::new(p, ClusterTrainerPluginSpec::default(), 1, order, None)
    }

    fn ok() -> Attempt {
        Attempt::succeeded(
            1,
            vec![
                Stage::ok("Fetched", ""),
                Stage::ok("Verified", ""),
                Stage::ok("Compiled", ""),
            ],
        )
    }

    fn names(c: &PluginCatalog) -> Vec<String> {
        c.current()
            .plugins()
            .iter()
            .map(|p| p.name().to_owned())
            .collect()
    }

    #[test]
    fn an_attempt_keeps_the_stages_before_one() {
        let attempt = Attempt::succeeded(
            1,
            vec![
                Stage::ok(reason::FETCHED, "1 bytes"),
                Stage::ok(reason::DIGEST_MATCHED, "sha256 aa"),
                Stage::ok(reason::COMPILED, "plugin p"),
            ],
        );
        assert_eq!(
            attempt.stages_before(StageName::Compiled),
            attempt.stages[..2].to_vec()
        );
        assert!(attempt.stages_before(StageName::Fetched).is_empty());
        assert_eq!(
            attempt.stages_before(StageName::Ready),
            attempt.stages.to_vec()
        );
        let names: Vec<&str> = StageName::ATTEMPT.iter().map(|n| n.as_str()).collect();
        assert_eq!(names, ["Fetched", "Verified", "Compiled"]);
        assert_eq!(StageName::Ready.as_str(), "Ready");
        let failed = Attempt::failed(2, Vec::new(), reason::NOT_FOUND, "gone".into());
        let statuses: Vec<StageStatus> = failed.stages.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StageStatus::False,
                StageStatus::Unknown,
                StageStatus::Unknown
            ]
        );
    }

    #[test]
    fn swaps_sort_by_order_then_name_and_refuse_clashes() {
        let c = catalog();
        let jax = serving(&c, "jax", 5);
        let plainml = serving(&c, "plainml", 5);
        let twin = serving(&c, "plainml", 0);
        let rx = c.subscribe();
        c.set_initial(["u1".to_owned(), "u2".to_owned()].into());
        c.commit("zeta", "u1", ok(), Some(jax));
        assert!(!c.is_synced(), "one of two initial CRs attempted");
        c.commit("alpha", "u2", ok(), Some(plainml));
        assert!(c.is_synced());
        // Same order: by CR name ("alpha" before "zeta").
        assert_eq!(names(&c), ["plainml", "jax"]);
        assert_eq!(*rx.borrow(), 2);
        let declared = |c: &PluginCatalog| -> BTreeSet<KindRef> {
            let set = c.current();
            set.plugins()
                .iter()
                .flat_map(|p| {
                    p.descriptor()
                        .emits
                        .iter()
                        .chain(&p.descriptor().reads)
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert_eq!(c.kinds(), declared(&c));

        // A second CR with an already-served plugin name: refused, set unchanged.
        let e = c.commit("beta", "u3", ok(), Some(twin));
        assert!(e.serving.is_none());
        let a = e.attempt.unwrap();
        assert_eq!(a.failure.as_ref().unwrap().0, reason::DUPLICATE_NAME);
        assert_eq!(a.stages[2].status, StageStatus::False);
        assert_eq!(names(&c), ["plainml", "jax"]);
        assert_eq!(*rx.borrow(), 2, "no swap");

        // Deleting takes the plugin out; a late commit for a deleted CR is dropped.
        c.remove("alpha", Some("u2"));
        assert_eq!(names(&c), ["jax"]);
        assert_eq!(c.kinds(), declared(&c));
        let late = serving(&c, "plainml", 0);
        c.commit("alpha", "u2", ok(), Some(late));
        assert_eq!(names(&c), ["jax"]);
        assert_eq!(c.serving_digest("alpha"), None);
    }

    /// Which of two clashing plugins serves does not depend on which was
    /// loaded first: the lower-precedence one is refused, or displaced (and
    /// its controller told to reconcile it again).
    #[test]
    fn clashes_are_decided_by_precedence_not_arrival() {
        for first_is_winner in [true, false] {
            let c = catalog();
            let mut kicks = c.take_kicks().unwrap();
            let (a, z) = (serving(&c, "plainml", 0), serving(&c, "plainml", 0));
            let order = if first_is_winner {
                [("aaa", "u1", a), ("zzz", "u2", z)]
            } else {
                [("zzz", "u2", z), ("aaa", "u1", a)]
            };
            for (name, uid, s) in order {
                c.commit(name, uid, ok(), Some(s));
            }
            assert!(c.serving_digest("aaa").is_some(), "{first_is_winner}");
            assert_eq!(c.serving_digest("zzz"), None, "{first_is_winner}");
            assert_eq!(names(&c), ["plainml"]);
            let loser = c.entry("zzz", "u2").unwrap();
            let reason = &loser.attempt.unwrap().failure.unwrap().0;
            if first_is_winner {
                assert_eq!(reason, reason::DUPLICATE_NAME);
                assert!(kicks.try_recv().is_err(), "nobody displaced");
            } else {
                assert_eq!(reason, reason::DISPLACED);
                assert_eq!(kicks.try_recv().unwrap(), "zzz");
            }
        }
    }

    #[test]
    fn reports_name_each_plugin_with_its_latest_failure() {
        let c = catalog();
        assert!(c.reports().is_empty());
        let refused = Attempt::failed(
            3,
            vec![Stage::ok("Fetched", "")],
            reason::DIGEST_MISMATCH,
            "expected sha256 00, got 11".into(),
        );
        c.commit("jobset", "u1", refused, None);
        assert_eq!(
            c.reports(),
            [PluginReport {
                name: "jobset".into(),
                serving: false,
                serving_generation: None,
                builds: false,
                failure: Some((
                    reason::DIGEST_MISMATCH.into(),
                    "expected sha256 00, got 11".into()
                )),
            }]
        );
        c.remove("jobset", Some("u1"));
        assert!(c.reports().is_empty());
    }
}
