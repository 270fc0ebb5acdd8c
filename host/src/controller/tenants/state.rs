//! [`TenantPlugins`]: the tenant plugins in service, by namespace, and the
//! plugin set each TrainJob gets.
//!
//! A TrainJob's set is the cluster's set with the tenant plugins of its
//! namespace whose selector matches its labels appended: tenant plugins run
//! after the cluster's plugins in every phase, among themselves by
//! `(spec.order, name)`. A tenant plugin never joins another namespace's
//! set. Which tenant plugins a namespace has changes only through
//! [`TenantPlugins::commit`] and [`TenantPlugins::remove`]; each change
//! bumps a generation on a `watch` channel.
//!
//! Per-namespace fairness: a TrainJob whose set has tenant plugins is
//! reconciled only while it holds one of its namespace's permits
//! ([`TenantPlugins::permit`]); a namespace whose plugins are slow uses at
//! most that many reconcile workers (and cores) at once, and the others
//! stay free for every other namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::core::{Selector, SelectorExt};
use tokio::sync::watch;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use trainforge_api::plugin::{KindRef, Phase};
use trainforge_api::trainforge::v1alpha1::reason;

use crate::controller::catalog::{Entry, Serving, StageName};
use crate::plugin::{LoadedPlugin, PluginSet};

/// How long after start TrainJobs wait, at most, for the first list of
/// `TrainerPlugin`s (it never comes when the CRD is not installed or the
/// operator may not list them; TrainJobs then go on without tenant plugins).
pub const FIRST_LIST_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a TrainJob's plugin set could not be put together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// The namespace's tenant plugins are not all loaded (or refused) yet,
    /// after a start: building without them would build something else.
    /// Not a failure: the TrainJob comes back shortly.
    #[error("the tenant plugins of namespace {namespace} are still loading")]
    NotLoaded {
        /// The namespace.
        namespace: String,
    },
    /// A tenant plugin clashes with a plugin already in the set (same
    /// plugin name, or a second `status` plugin).
    #[error("TrainerPlugin {namespace}/{name}: {message}")]
    Clash {
        /// The `TrainerPlugin`'s namespace.
        namespace: String,
        /// The `TrainerPlugin`'s name.
        name: String,
        /// What clashes.
        message: String,
    },
}

/// One `TrainerPlugin` as the store knows it.
#[derive(Debug, Clone)]
pub(crate) struct TenantEntry {
    pub(crate) entry: Entry,
    /// TrainJobs it applies to (`None`: every TrainJob of its namespace).
    pub(crate) selector: Option<Selector>,
    /// The options the ceiling allowed when it was loaded (`None` when the
    /// ceiling refused it before loading).
    pub(crate) options: Option<crate::controller::catalog::spec::PluginOptions>,
}

#[derive(Default)]
struct State {
    /// By namespace, then `TrainerPlugin` name.
    namespaces: BTreeMap<String, BTreeMap<String, TenantEntry>>,
    /// UIDs of deleted `TrainerPlugin`s (a late commit must not revive one).
    deleted: BTreeSet<String>,
    /// Whether the first list of `TrainerPlugin`s was read.
    listed: bool,
    /// UIDs of the first list not attempted yet, by namespace: those
    /// namespaces' TrainJobs wait for them.
    pending: BTreeMap<String, BTreeSet<String>>,
}

/// Tenant plugins in service, and per-namespace reconcile permits.
pub struct TenantPlugins {
    state: Mutex<State>,
    generation: watch::Sender<u64>,
    permits: Mutex<BTreeMap<String, Arc<Semaphore>>>,
    per_namespace: usize,
    started: std::time::Instant,
}

impl std::fmt::Debug for TenantPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPlugins")
            .field("generation", &*self.generation.borrow())
            .field("per_namespace", &self.per_namespace)
            .finish_non_exhaustive()
    }
}

/// A TrainJob's plugin set and the `TrainerPlugin`s in it.
#[derive(Debug, Clone)]
pub struct Composed {
    /// Cluster plugins, then the tenant plugins that apply.
    pub set: Arc<PluginSet>,
    /// The `TrainerPlugin`s (of the TrainJob's namespace) in the set.
    pub tenants: Vec<TenantRef>,
}

/// One `TrainerPlugin` in a TrainJob's set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRef {
    /// The `TrainerPlugin`'s name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The name its plugin described itself with.
    pub plugin: String,
}

impl TenantPlugins {
    /// An empty store; a namespace's TrainJobs with tenant plugins are
    /// reconciled at most `per_namespace` at a time (at least one).
    pub fn new(per_namespace: usize) -> Self {
        let (generation, _) = watch::channel(0);
        TenantPlugins {
            state: Mutex::new(State::default()),
            generation,
            permits: Mutex::new(BTreeMap::new()),
            per_namespace: per_namespace.max(1),
            started: std::time::Instant::now(),
        }
    }

    /// The first list of `TrainerPlugin`s, as `(namespace, uid)`: until
    /// each is attempted, its namespace's TrainJobs wait (later lists
    /// change nothing).
    pub(crate) fn set_initial(&self, present: impl IntoIterator<Item = (String, String)>) {
        let mut state = self.lock();
        if state.listed {
            return;
        }
        state.listed = true;
        for (ns, uid) in present {
            let attempted = state
                .namespaces
                .get(&ns)
                .is_some_and(|m| m.values().any(|e| e.entry.uid == uid));
            if !attempted && !state.deleted.contains(&uid) {
                state.pending.entry(ns).or_default().insert(uid);
            }
        }
    }

    /// Whether `namespace`'s tenant plugins are all attempted since start.
    fn loaded(&self, state: &State, namespace: &str) -> bool {
        if !state.listed {
            return self.started.elapsed() >= FIRST_LIST_GRACE;
        }
        !state.pending.contains_key(namespace)
    }

    fn settle(state: &mut State, namespace: &str, uid: &str) {
        if let Some(p) = state.pending.get_mut(namespace) {
            p.remove(uid);
            if p.is_empty() {
                state.pending.remove(namespace);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is one insert or remove: a panic cannot leave a
        // half-updated state behind.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bumps whenever a namespace's tenant plugins change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// What the store knows about `TrainerPlugin` `namespace/name` if it
    /// belongs to the object with `uid`.
    pub(crate) fn entry(&self, namespace: &str, name: &str, uid: &str) -> Option<TenantEntry> {
        self.lock()
            .namespaces
            .get(namespace)
            .and_then(|m| m.get(name))
            .filter(|e| e.entry.uid == uid)
            .cloned()
    }

    /// Record `entry` for `TrainerPlugin` `namespace/name`. A candidate
    /// that clashes with the `cluster`'s plugins ([`cluster_clash`]) is
    /// refused and serves nothing: the cluster's plugin wins, the
    /// namespace's TrainJobs go on without the tenant's, and the
    /// `TrainerPlugin` says why. One that clashes with another serving
    /// tenant plugin of the namespace (same plugin name, or both call
    /// `status`) is refused, the earlier `TrainerPlugin` name keeping its
    /// place. Returns the entry recorded.
    pub(crate) fn commit(
        &self,
        namespace: &str,
        name: &str,
        mut e: TenantEntry,
        cluster: &PluginSet,
    ) -> TenantEntry {
        let mut state = self.lock();
        Self::settle(&mut state, namespace, &e.entry.uid);
        if state.deleted.contains(&e.entry.uid) {
            e.entry.serving = None;
            return e;
        }
        if let Some((r, message)) = e
            .entry
            .serving
            .as_ref()
            .and_then(|s| cluster_clash(cluster, &s.plugin))
        {
            refuse(&mut e, r, message);
            e.entry.serving = None;
        }
        if let Some(s) = &e.entry.serving
            && let Some(peers) = state.namespaces.get(namespace)
        {
            let clash = peers
                .iter()
                .filter(|(n, _)| n.as_str() != name)
                .filter_map(|(n, p)| p.entry.serving.as_ref().map(|ps| (n, ps)))
                .find_map(|(n, ps)| clash_message(s, ps).map(|m| (n.clone(), m)));
            if let Some((other, message)) = clash {
                let message = format!("{message} (TrainerPlugin {other})");
                refuse(&mut e, reason::DUPLICATE_NAME, message);
                e.entry.serving = state
                    .namespaces
                    .get(namespace)
                    .and_then(|m| m.get(name))
                    .filter(|old| old.entry.uid == e.entry.uid)
                    .and_then(|old| old.entry.serving.clone());
            }
        }
        let key = |x: Option<&TenantEntry>| {
            x.and_then(|t| t.entry.serving.as_ref())
                .map(|s| (s.digest().to_owned(), s.generation, s.order))
        };
        let before = key(state.namespaces.get(namespace).and_then(|m| m.get(name)));
        let after = key(Some(&e));
        state
            .namespaces
            .entry(namespace.to_owned())
            .or_default()
            .insert(name.to_owned(), e.clone());
        if before != after {
            self.generation.send_modify(|g| *g += 1);
        }
        e
    }

    /// Forget `TrainerPlugin` `namespace/name` (deleted) and take its
    /// plugin out of service.
    pub(crate) fn remove(&self, namespace: &str, name: &str, uid: Option<&str>) {
        let mut state = self.lock();
        if let Some(uid) = uid {
            state.deleted.insert(uid.to_owned());
            Self::settle(&mut state, namespace, uid);
        }
        let Some(m) = state.namespaces.get_mut(namespace) else {
            return;
        };
        if m.get(name)
            .is_some_and(|e| uid.is_none_or(|u| u == e.entry.uid))
            && let Some(e) = m.remove(name)
        {
            if m.is_empty() {
                state.namespaces.remove(namespace);
            }
            Self::settle(&mut state, namespace, &e.entry.uid);
            state.deleted.insert(e.entry.uid);
            if e.entry.serving.is_some() {
                self.generation.send_modify(|g| *g += 1);
            }
        }
    }

    /// Forget every `TrainerPlugin` not in `present` (`(namespace, name)`).
    pub(crate) fn retain(&self, present: &BTreeSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .lock()
            .namespaces
            .iter()
            .flat_map(|(ns, m)| m.keys().map(move |n| (ns.clone(), n.clone())))
            .filter(|k| !present.contains(k))
            .collect();
        for (ns, n) in gone {
            self.remove(&ns, &n, None);
        }
    }

    /// Kinds the serving tenant plugins emit, read or watch.
    pub fn kinds(&self) -> BTreeSet<KindRef> {
        self.lock()
            .namespaces
            .values()
            .flat_map(|m| m.values())
            .filter_map(|e| e.entry.serving.as_ref())
            .flat_map(|s| s.kinds.iter().cloned())
            .collect()
    }

    /// The set for a TrainJob of `namespace` with `labels`: `cluster` with
    /// the tenant plugins that apply appended. `cluster` itself (no copy)
    /// when none does.
    pub fn compose(
        &self,
        cluster: Arc<PluginSet>,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Composed, ComposeError> {
        let mut tenants: Vec<(i32, String, LoadedPlugin, String)> = {
            let state = self.lock();
            if !self.loaded(&state, namespace) {
                return Err(ComposeError::NotLoaded {
                    namespace: namespace.to_owned(),
                });
            }
            let Some(m) = state.namespaces.get(namespace) else {
                return Ok(Composed {
                    set: cluster,
                    tenants: Vec::new(),
                });
            };
            m.iter()
                .filter(|(_, e)| e.selector.as_ref().is_none_or(|s| s.matches(labels)))
                .filter_map(|(n, e)| {
                    e.entry
                        .serving
                        .as_ref()
                        .map(|s| (s.order, n.clone(), s.plugin.clone(), e.entry.uid.clone()))
                })
                .collect()
        };
        if tenants.is_empty() {
            return Ok(Composed {
                set: cluster,
                tenants: Vec::new(),
            });
        }
        tenants.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        // Tenant plugins that clash are refused when committed; a cluster
        // plugin that arrived since blocks the namespace until they are
        // reconciled again (on the catalog's swap).
        for (_, name, p, _) in &tenants {
            if let Some((_, message)) = cluster_clash(&cluster, p) {
                return Err(ComposeError::Clash {
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                    message,
                });
            }
        }
        let names = tenants
            .iter()
            .map(|t| TenantRef {
                name: t.1.clone(),
                uid: t.3.clone(),
                plugin: t.2.name().to_owned(),
            })
            .collect();
        let all: Vec<LoadedPlugin> = cluster
            .plugins()
            .iter()
            .cloned()
            .chain(tenants.into_iter().map(|t| t.2))
            .collect();
        let set = PluginSet::new(all).map_err(|e| ComposeError::Clash {
            namespace: namespace.to_owned(),
            name: String::new(),
            message: e.to_string(),
        })?;
        Ok(Composed {
            set: Arc::new(set),
            tenants: names,
        })
    }

    /// A reconcile permit for a TrainJob of `namespace` whose set has
    /// tenant plugins, or `None` when that namespace already uses all of
    /// its permits (the reconcile is retried shortly).
    pub fn permit(&self, namespace: &str) -> Option<OwnedSemaphorePermit> {
        let mut permits = self
            .permits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Namespaces with no permit in use are dropped, so the map holds
        // only namespaces reconciling now.
        permits.retain(|_, s| s.available_permits() < self.per_namespace);
        permits
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_namespace)))
            .clone()
            .try_acquire_owned()
            .ok()
    }
}

/// Mark `e`'s attempt failed at the `Compiled` stage with `r` and `message`
/// (the stages before it keep their outcome).
fn refuse(e: &mut TenantEntry, r: &str, message: String) {
    let attempt = e.entry.attempt.as_ref();
    let done = attempt
        .map(|a| a.stages_before(StageName::Compiled))
        .unwrap_or_default();
    let generation = attempt.map_or(0, |a| a.generation);
    e.entry.attempt = Some(crate::controller::catalog::Attempt::failed(
        generation, done, r, message,
    ));
}

/// Why tenant plugin `p` cannot serve beside the cluster's plugins, if it
/// cannot: `(reason, message)`, the same name as a cluster plugin
/// (`DuplicateName`) or both implementing `status` (`StatusConflict`).
pub(crate) fn cluster_clash(
    cluster: &PluginSet,
    p: &LoadedPlugin,
) -> Option<(&'static str, String)> {
    cluster.plugins().iter().find_map(|c| {
        if c.name() == p.name() {
            Some((
                reason::DUPLICATE_NAME,
                format!(
                    "plugin name {:?} is also served by a ClusterTrainerPlugin",
                    p.name()
                ),
            ))
        } else if c.calls(Phase::Status) && p.calls(Phase::Status) {
            Some((
                reason::STATUS_CONFLICT,
                format!(
                    "plugin {} implements the status phase, as does the cluster's plugin {}",
                    p.name(),
                    c.name()
                ),
            ))
        } else {
            None
        }
    })
}

/// Why `a` cannot serve beside `b` in one namespace, if it cannot.
fn clash_message(a: &Serving, b: &Serving) -> Option<String> {
    if a.plugin.name() == b.plugin.name() {
        return Some(format!(
            "plugin name {:?} is already served",
            a.plugin.name()
        ));
    }
    if a.status_phase && b.status_phase {
        return Some(format!(
            "plugin {} implements the status phase, as does plugin {}",
            a.plugin.name(),
            b.plugin.name()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::controller::catalog::{Attempt, Serving};
    use crate::plugin::builtin::find as find_builtin;
    use crate::plugin::{PluginRuntime, RuntimeConfig};
    use trainforge_api::trainforge::v1alpha1::{ClusterTrainerPluginSpec, reason};

    /// A builtin as the serving version of a `TrainerPlugin` (a build
    /// without embedded builtins fails here rather than passing vacuously).
    fn entry(
        rt: &PluginRuntime,
        builtin: &str,
        uid: &str,
        order: i32,
        selector: Option<Selector>,
    ) -> TenantEntry {
        let b = find_builtin(builtin).unwrap_or_else(|| panic!("builtin {builtin} not embedded"));
        let p = rt.load(b.trusted_source()).unwrap();
        TenantEntry {
            entry: Entry {
                uid: uid.into(),
                attempt: Some(Attempt::succeeded(1, Vec::new())),
                serving: Some(Serving::new(
                    p,
                    ClusterTrainerPluginSpec::default(),
                    1,
                    order,
                    None,
                )),
            },
            selector,
            options: None,
        }
    }

    fn names(set: &PluginSet) -> Vec<&str> {
        set.plugins().iter().map(LoadedPlugin::name).collect()
    }

    #[test]
    fn a_trainjob_gets_its_namespaces_matching_plugins_after_the_clusters() {
        let rt = PluginRuntime::new(RuntimeConfig::default()).unwrap();
        let cluster = Arc::new(
            PluginSet::new(vec![
                rt.load(find_builtin("plainml").unwrap().trusted_source())
                    .unwrap(),
            ])
            .unwrap(),
        );
        let t = TenantPlugins::new(1);
        let gen0 = *t.subscribe().borrow();
        let none = BTreeMap::new();
        // Before the first list, TrainJobs wait; then only namespaces whose
        // plugins are not attempted yet do.
        assert!(matches!(
            t.compose(cluster.clone(), "a", &none),
            Err(ComposeError::NotLoaded { .. })
        ));
        t.set_initial([
            ("a".to_owned(), "u1".to_owned()),
            ("b".to_owned(), "u4".to_owned()),
        ]);
        assert!(
            t.compose(cluster.clone(), "c", &none).is_ok(),
            "no plugin in c"
        );
        assert!(
            t.compose(cluster.clone(), "a", &none).is_err(),
            "u1 not attempted"
        );
        let only_gpu: Selector = [("gpu", "yes")].into_iter().collect();
        t.commit("a", "z-late", entry(&rt, "jax", "u1", 0, None), &cluster);
        t.commit(
            "a",
            "b-first",
            entry(&rt, "xgboost", "u2", 0, None),
            &cluster,
        );
        t.commit(
            "a",
            "gpu",
            entry(&rt, "mpi", "u3", -5, Some(only_gpu)),
            &cluster,
        );
        t.commit("b", "other", entry(&rt, "torch", "u4", 0, None), &cluster);
        assert!(
            *t.subscribe().borrow() > gen0,
            "commits bump the generation"
        );

        let none = BTreeMap::new();
        let c = t.compose(cluster.clone(), "a", &none).unwrap();
        // Cluster first; tenants by (order, name); the selector left one out.
        assert_eq!(names(&c.set), ["plainml", "xgboost", "jax"]);
        let tenants: Vec<&str> = c.tenants.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(tenants, ["b-first", "z-late"]);
        let gpu = BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]);
        assert_eq!(
            names(&t.compose(cluster.clone(), "a", &gpu).unwrap().set),
            ["plainml", "mpi", "xgboost", "jax"]
        );
        // Another namespace: its own plugins only; none: the cluster's set itself.
        assert_eq!(
            names(&t.compose(cluster.clone(), "b", &none).unwrap().set),
            ["plainml", "torch"]
        );
        let c = t.compose(cluster.clone(), "c", &none).unwrap();
        assert!(Arc::ptr_eq(&c.set, &cluster) && c.tenants.is_empty());

        // A second plugin of the same name in a namespace is refused there;
        // the same name in another namespace is fine.
        let e = t.commit("a", "twin", entry(&rt, "jax", "u5", 0, None), &cluster);
        assert!(e.entry.serving.is_none());
        assert_eq!(
            e.entry.attempt.unwrap().failure.unwrap().0,
            reason::DUPLICATE_NAME
        );
        let e = t.commit("b", "jax-too", entry(&rt, "jax", "u6", 0, None), &cluster);
        assert!(e.entry.serving.is_some());

        // A clash with the cluster's plugins refuses the tenant's plugin:
        // its namespace goes on without it, the TrainerPlugin says why.
        let e = t.commit(
            "b",
            "shadow",
            entry(&rt, "plainml", "u7", 0, None),
            &cluster,
        );
        assert!(e.entry.serving.is_none());
        let (r, m) = e.entry.attempt.unwrap().failure.unwrap();
        assert_eq!(r, reason::DUPLICATE_NAME);
        assert!(m.contains("also served by a ClusterTrainerPlugin"), "{m}");
        // (tenants by TrainerPlugin name: jax-too, other)
        assert_eq!(
            names(&t.compose(cluster.clone(), "b", &none).unwrap().set),
            ["plainml", "jax", "torch"]
        );
        // A cluster plugin that arrives later blocks only the namespace
        // whose tenant plugin it clashes with, until that is committed
        // again (the controller re-decides every TrainerPlugin on a swap).
        let grown = Arc::new(
            PluginSet::new(vec![
                rt.load(find_builtin("plainml").unwrap().trusted_source())
                    .unwrap(),
                rt.load(find_builtin("torch").unwrap().trusted_source())
                    .unwrap(),
            ])
            .unwrap(),
        );
        let err = t.compose(grown.clone(), "b", &none).unwrap_err();
        assert!(err.to_string().contains("TrainerPlugin b/other"), "{err}");
        assert!(t.compose(grown.clone(), "a", &none).is_ok());
        let e = t.commit("b", "other", entry(&rt, "torch", "u4", 0, None), &grown);
        assert!(e.entry.serving.is_none());
        let mut served = names(&t.compose(grown.clone(), "b", &none).unwrap().set)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        served.sort();
        assert_eq!(served, ["jax", "plainml", "torch"], "the cluster's torch");

        // Deleting takes a plugin out; a late commit of it does not return.
        t.remove("a", "z-late", Some("u1"));
        assert_eq!(
            names(&t.compose(cluster.clone(), "a", &none).unwrap().set),
            ["plainml", "xgboost"]
        );
        t.commit("a", "z-late", entry(&rt, "jax", "u1", 0, None), &cluster);
        assert_eq!(
            names(&t.compose(cluster, "a", &none).unwrap().set),
            ["plainml", "xgboost"]
        );
    }

    #[test]
    fn permits_are_per_namespace() {
        let t = TenantPlugins::new(1);
        let held = t.permit("a").unwrap();
        assert!(t.permit("a").is_none(), "a's only permit is held");
        let other = t.permit("b");
        assert!(other.is_some(), "b is not held back by a");
        drop(held);
        assert!(t.permit("a").is_some());
        let two = TenantPlugins::new(2);
        let (_x, _y) = (two.permit("a").unwrap(), two.permit("a").unwrap());
        assert!(two.permit("a").is_none());
    }
}
