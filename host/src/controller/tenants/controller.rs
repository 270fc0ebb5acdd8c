//! The kube-runtime controller on `TrainerPlugin`: one reconcile per object
//! checks its spec against the ceiling, fetches, verifies and loads its
//! component as a tenant plugin, checks what the loaded plugin declares,
//! commits it to [`TenantPlugins`] and writes its status.
//!
//! A change of the `TrainerPluginPolicy` named `default` or of any
//! namespace's labels reconciles every `TrainerPlugin` again: one that no
//! longer fits is taken out of service at once (its last good version does
//! not keep serving past the ceiling), with `WithinPolicy=False` naming why.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::core::Selector;
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use trainforge_api::trainforge::v1alpha1::{
    ClusterTrainerPluginStatus, POLICY_NAME, TRAINER_PLUGIN_KIND, TrainerPlugin,
    TrainerPluginPolicy, condition, reason,
};

use super::ceiling::Ceiling;
use super::state::{TenantEntry, TenantPlugins};
use crate::controller::catalog::fetch::{FetchOptions, Fetcher};
use crate::controller::catalog::{
    Attempt, Entry, Loader, Pin, PluginCatalog, Stage, Tenancy, attempt, restore_with, status,
};
use crate::ops::events::{EventType, Recorder, Reporter};
use crate::plugin::CompilePlace;

/// How soon a failed attempt (not a policy refusal) is retried.
pub const RETRY_FAILED: std::time::Duration = std::time::Duration::from_secs(30);

/// How soon a reconcile that hit an API error is retried.
pub const RETRY_ERROR: std::time::Duration = std::time::Duration::from_secs(5);

/// Errors of the `TrainerPlugin` controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The status could not be written (the source names the object).
    #[error("namespace {namespace}: {source}")]
    Status {
        /// The object's namespace.
        namespace: String,
        /// The cause.
        #[source]
        source: crate::controller::catalog::Error,
    },
    /// The HTTPS client for `https://` sources could not be built.
    #[error("building the fetcher: {0}")]
    Fetcher(#[source] crate::controller::catalog::Error),
}

/// Whether a failure reason is the ceiling's (`WithinPolicy=False`).
pub(crate) fn is_policy_refusal(r: &str) -> bool {
    matches!(
        r,
        reason::EXCEEDS_POLICY | reason::NAMESPACE_NOT_ALLOWED | reason::FOREIGN_SOURCE
    )
}

/// Whether `a` arrived before `b`: created earlier, or in the same second
/// with a name that sorts first (an object without a creation time counts
/// as the newest). `maxPluginsPerNamespace` admits the first arrivals, so a
/// newcomer never takes a serving plugin out of service, whatever its name,
/// and the same plugins serve after a restart.
fn arrived_before(a: &TrainerPlugin, b: &TrainerPlugin) -> bool {
    let key = |p: &TrainerPlugin| {
        (
            p.metadata.creation_timestamp.is_none(),
            p.metadata.creation_timestamp.clone(),
            p.metadata.name.clone(),
        )
    };
    key(a) < key(b)
}

/// How many of `all` in `obj`'s namespace arrived before it.
fn arrival_rank<'a>(all: impl Iterator<Item = &'a TrainerPlugin>, obj: &TrainerPlugin) -> usize {
    all.filter(|p| p.metadata.namespace == obj.metadata.namespace)
        .filter(|p| arrived_before(p, obj))
        .count()
}

/// The Event reporter of this controller.
pub const EVENT_REPORTER: &str = "trainforge-trainerplugin-controller";

/// The compile in progress of each `TrainerPlugin` (by namespace and name):
/// the generation it is for, and what cancels it.
#[derive(Default)]
struct Compiles(std::sync::Mutex<BTreeMap<(String, String), (i64, CancellationToken)>>);

impl Compiles {
    /// A token for compiling generation `generation` of `ns/name`; an
    /// earlier one of the same plugin is cancelled.
    fn start(&self, ns: &str, name: &str, generation: i64) -> CancellationToken {
        let token = CancellationToken::new();
        if let Ok(mut m) = self.0.lock()
            && let Some((_, old)) = m.insert(
                (ns.to_owned(), name.to_owned()),
                (generation, token.clone()),
            )
        {
            old.cancel();
        }
        token
    }

    /// The compile with `token` is over.
    fn finish(&self, ns: &str, name: &str, token: &CancellationToken) {
        if let Ok(mut m) = self.0.lock() {
            let key = (ns.to_owned(), name.to_owned());
            if m.get(&key).is_some_and(|(_, t)| t.eq(token)) {
                m.remove(&key);
            }
        }
    }

    /// Cancel the compile of `ns/name` when it is for a generation before
    /// `generation` (`None`: the plugin is gone, cancel any).
    fn cancel(&self, ns: &str, name: &str, generation: Option<i64>) {
        if let Ok(mut m) = self.0.lock() {
            let key = (ns.to_owned(), name.to_owned());
            if m.get(&key)
                .is_some_and(|(g, _)| generation.is_none_or(|n| *g < n))
                && let Some((g, token)) = m.remove(&key)
            {
                tracing::info!(namespace = %ns, plugin = %name, generation = g, "cancelling the compile of a deleted or changed TrainerPlugin");
                token.cancel();
            }
        }
    }
}

struct Ctx {
    compiles: Arc<Compiles>,
    loader: Loader,
    recorder: Recorder,
    tenants: Arc<TenantPlugins>,
    policies: Store<TrainerPluginPolicy>,
    plugins: Store<TrainerPlugin>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    status_writes: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Ctx {
    fn ceiling(&self) -> Ceiling {
        let policy = self
            .policies
            .get(&ObjectRef::new(POLICY_NAME))
            .map(|p| p.spec.clone());
        Ceiling::new(
            policy.as_ref(),
            &self.loader.catalog.runtime().config().limits,
        )
    }

    fn labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// How many `TrainerPlugin`s of `obj`'s namespace arrived before it
    /// ([`arrived_before`]).
    fn rank_in_namespace(&self, obj: &TrainerPlugin) -> usize {
        let state = self.plugins.state();
        arrival_rank(state.iter().map(|p| p.as_ref()), obj)
    }

    fn writes_status(&self) -> bool {
        self.status_writes.as_ref().is_none_or(|rx| *rx.borrow())
    }
}

/// Run the controller until `shutdown`. `status_writes` as for the
/// `ClusterTrainerPlugin` controller: every replica loads, only the leader
/// writes statuses; `fetch` as for cluster plugins.
pub async fn run(
    client: kube::Client,
    catalog: Arc<PluginCatalog>,
    tenants: Arc<TenantPlugins>,
    shutdown: CancellationToken,
    status_writes: Option<tokio::sync::watch::Receiver<bool>>,
    fetch: &FetchOptions,
) -> Result<(), Error> {
    let fetcher = Fetcher::with_options(
        client.clone(),
        catalog.runtime().config().max_component_bytes,
        fetch,
    )
    .map_err(Error::Fetcher)?;

    // The ceiling and the namespaces' labels: any change re-reconciles
    // every TrainerPlugin.
    let (policies, policy_writer) = reflector::store::<TrainerPluginPolicy>();
    let (namespaces, ns_writer) = reflector::store::<PartialObjectMeta<Namespace>>();
    let (changed_tx, changed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    {
        let tx = changed_tx.clone();
        let api: Api<TrainerPluginPolicy> = Api::all(client.clone());
        let wc = watcher::Config::default().fields(&format!("metadata.name={POLICY_NAME}"));
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut s = reflector(policy_writer, watcher(api, wc))
                .default_backoff()
                .boxed();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = s.next() => match ev {
                        None => return,
                        Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) => {
                            let _ = tx.send(());
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => tracing::warn!(error = %e, "TrainerPluginPolicy watch error (retried)"),
                    }
                }
            }
        });
    }
    {
        let tx = changed_tx.clone();
        // Metadata only: labels are all the ceiling needs.
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(client.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut s = reflector(ns_writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .boxed();
            let mut seen: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ev = s.next() => match ev {
                        None => return,
                        // Only a label change matters (a new namespace has
                        // no TrainerPlugin yet).
                        Some(Ok(watcher::Event::Apply(n))) => {
                            let name = n.metadata.name.clone().unwrap_or_default();
                            let labels = n.metadata.labels.clone().unwrap_or_default();
                            let before = seen.insert(name, labels.clone());
                            if before.is_some_and(|b| b != labels) {
                                let _ = tx.send(());
                            }
                        }
                        Some(Ok(watcher::Event::InitApply(n))) => {
                            let name = n.metadata.name.clone().unwrap_or_default();
                            seen.insert(name, n.metadata.labels.clone().unwrap_or_default());
                        }
                        Some(Ok(watcher::Event::InitDone)) => { let _ = tx.send(()); }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => tracing::warn!(error = %e, "Namespace watch error (retried)"),
                    }
                }
            }
        });
    }

    // No TrainerPlugin is judged before the ceiling and the namespaces'
    // labels are known: a restart must not take plugins out of service
    // because the policy had not been read yet.
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        ready = async { tokio::try_join!(policies.wait_until_ready(), namespaces.wait_until_ready()) } => {
            if ready.is_err() {
                return Ok(());
            }
        }
    }
    let api: Api<TrainerPlugin> = Api::all(client.clone());
    let (store, writer) = reflector::store::<TrainerPlugin>();
    let compiles = Arc::new(Compiles::default());
    let events = {
        let compiles = compiles.clone();
        let tenants = tenants.clone();
        let store = store.clone();
        // A deletion can let a plugin past maxPluginsPerNamespace serve, a
        // creation can push one over it.
        let deleted = changed_tx.clone();
        reflector(writer, watcher(api, watcher::Config::default().any_semantic()))
            .default_backoff()
            .inspect(move |event| match event {
                Ok(watcher::Event::Delete(obj)) => {
                    let ns = obj.metadata.namespace.clone().unwrap_or_default();
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    tracing::info!(namespace = %ns, plugin = %name, "TrainerPlugin deleted; taking its plugin out of service");
                    tenants.remove(&ns, &name, obj.metadata.uid.as_deref());
                    compiles.cancel(&ns, &name, None);
                    let _ = deleted.send(());
                }
                // A new spec: a compile of an older one is of no use.
                Ok(watcher::Event::Apply(obj)) if obj.status.is_some() => {
                    let ns = obj.metadata.namespace.clone().unwrap_or_default();
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    compiles.cancel(&ns, &name, obj.metadata.generation);
                }
                // A newcomer (no status yet) created in the same second as
                // a serving plugin may rank before it (by name): every
                // TrainerPlugin is decided again so that the cap holds.
                Ok(watcher::Event::Apply(obj)) if obj.status.is_none() => {
                    let _ = deleted.send(());
                }
                Ok(watcher::Event::InitDone) => {
                    let state = store.state();
                    let ns = |o: &TrainerPlugin| o.metadata.namespace.clone().unwrap_or_default();
                    let present = state
                        .iter()
                        .map(|o| (ns(o), o.metadata.name.clone().unwrap_or_default()))
                        .collect();
                    tenants.retain(&present);
                    tenants.set_initial(
                        state
                            .iter()
                            .map(|o| (ns(o), o.metadata.uid.clone().unwrap_or_default())),
                    );
                }
                _ => {}
            })
            .applied_objects()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: EVENT_REPORTER.into(),
            instance: None,
        },
    );
    // A swap of the cluster's plugins re-decides every TrainerPlugin: one
    // that now clashes with a cluster plugin is refused, one that no
    // longer does serves again.
    let swaps = futures::stream::unfold(catalog.subscribe(), |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    });
    let ctx = Arc::new(Ctx {
        compiles,
        recorder,
        loader: Loader {
            client: client.clone(),
            catalog,
            fetcher,
        },
        tenants,
        policies,
        plugins: store.clone(),
        namespaces,
        status_writes: status_writes.clone(),
    });
    let changes = futures::stream::unfold(changed_rx, |mut rx| async move {
        rx.recv().await.map(|()| ((), rx))
    });
    let before_first_list =
        crate::controller::stopped_before_ready(store.clone(), shutdown.clone());
    let mut controller = Controller::for_stream(events, store)
        .reconcile_all_on(changes)
        .reconcile_all_on(swaps);
    if let Some(rx) = status_writes {
        controller = controller.reconcile_all_on(crate::controller::catalog::rises(rx));
    }
    let stop = shutdown.clone();
    let mut results = controller
        .graceful_shutdown_on(async move { stop.cancelled_owned().await })
        .run(reconcile, error_policy, ctx.clone())
        .take_until(before_first_list)
        .boxed();
    while let Some(result) = results.next().await {
        match result {
            Ok(_) => {}
            Err(ControllerError::ObjectNotFound(obj)) => {
                let ns = obj.namespace.clone().unwrap_or_default();
                ctx.tenants.remove(&ns, &obj.name, None);
            }
            Err(ControllerError::ReconcilerFailed(e, obj)) => {
                tracing::warn!(plugin = %obj.name, error = %e, "TrainerPlugin reconcile failed");
            }
            Err(e) => tracing::warn!(error = %e, "TrainerPlugin controller error (retried)"),
        }
    }
    Ok(())
}

fn error_policy(_: Arc<TrainerPlugin>, _: &Error, _: Arc<Ctx>) -> Action {
    Action::requeue(RETRY_ERROR)
}

async fn reconcile(obj: Arc<TrainerPlugin>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or(0);
    let span =
        tracing::info_span!("reconcile_trainerplugin", namespace = %ns, plugin = %name, generation);
    reconcile_inner(obj, ctx, ns, name, generation)
        .instrument(span)
        .await
}

/// An entry refused before anything was fetched (out of service).
fn refused(
    uid: &str,
    generation: i64,
    selector: Option<Selector>,
    r: &str,
    m: String,
) -> TenantEntry {
    TenantEntry {
        entry: Entry {
            uid: uid.to_owned(),
            attempt: Some(Attempt {
                generation,
                stages: [
                    Stage::not_reached(),
                    Stage::not_reached(),
                    Stage::not_reached(),
                ],
                failure: Some((r.to_owned(), m)),
            }),
            serving: None,
        },
        selector,
        options: None,
    }
}

async fn reconcile_inner(
    obj: Arc<TrainerPlugin>,
    ctx: Arc<Ctx>,
    ns: String,
    name: String,
    generation: i64,
) -> Result<Action, Error> {
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let mut shown = obj.status.clone();
    let entry = decide(&obj, &ctx, &ns, &name, &uid, generation, &mut shown).await;
    finish(&ctx, &obj, shown.as_ref(), &ns, &name, entry).await
}

/// What `obj` serves now: refused by the ceiling, kept, or loaded anew.
/// `shown` is the status the object shows, updated when a compile's place
/// was written meanwhile.
async fn decide(
    obj: &TrainerPlugin,
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: &str,
    generation: i64,
    shown: &mut Option<ClusterTrainerPluginStatus>,
) -> TenantEntry {
    let ceiling = ctx.ceiling();
    let previous = ctx.tenants.entry(ns, name, uid);
    let selector = match obj
        .spec
        .selector
        .clone()
        .map(Selector::try_from)
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            let m = format!("spec.selector: {e}");
            return refused(uid, generation, None, reason::INVALID_SPEC, m);
        }
    };
    // Out of service at once when the ceiling does not allow it.
    let rank = ctx.rank_in_namespace(obj);
    if let Err((r, m)) = ceiling.admit_count(ns, rank) {
        return refused(uid, generation, selector, r, m);
    }
    let options = match ceiling.options(ns, &ctx.labels(ns), &obj.spec.plugin) {
        Ok(o) => o,
        Err((r, m)) => return refused(uid, generation, selector, r, m),
    };
    let required = ctx.loader.fetcher.require_signatures();
    if let Err((r, m)) = ceiling.admit_keys(&obj.spec.plugin, required) {
        return refused(uid, generation, selector, r, m);
    }
    let check = |p: &crate::plugin::LoadedPlugin| ceiling.check_plugin(p);
    // Serving this generation with these options: nothing to load, but
    // what it declares is checked against the ceiling again.
    if let Some(prev) = &previous
        && let (Some(a), Some(s)) = (&prev.entry.attempt, &prev.entry.serving)
        && a.generation == generation
        && a.failure.is_none()
        && prev.options.as_ref() == Some(&options)
    {
        return match check(&s.plugin) {
            Ok(()) => TenantEntry {
                selector,
                ..prev.clone()
            },
            Err((r, m)) => {
                let m = format!("plugin {}: {m}", s.plugin.name());
                refused(uid, generation, selector, r, m)
            }
        };
    }
    let label = format!("{ns}/{name}");
    let cancel = ctx.compiles.start(ns, name, generation);
    let (place, told) = tokio::sync::watch::channel(CompilePlace::Compiling);
    let done = CancellationToken::new();
    // Only this generation's first attempt here tells its place: a retry's
    // interim status would make its final one a change again, which
    // reconciles again, and so on.
    let first_try = previous
        .as_ref()
        .and_then(|p| p.entry.attempt.as_ref())
        .is_none_or(|a| a.generation != generation);
    let teller = (ctx.writes_status() && first_try).then(|| {
        tokio::spawn(tell_compiling(
            Api::namespaced(ctx.loader.client.clone(), ns),
            name.to_owned(),
            shown.clone(),
            generation,
            told,
            done.clone(),
        ))
    });
    let tenancy = Tenancy {
        namespace: ns,
        options: options.clone(),
        check: &check,
        cancel: Some(cancel.clone()),
        place: Some(place),
    };
    let pin = Pin::recorded(obj.status.as_ref(), Some(generation));
    let (a, candidate) = attempt(
        &label,
        &obj.spec.plugin,
        &ctx.loader,
        generation,
        pin,
        Some(tenancy),
    )
    .await;
    ctx.compiles.finish(ns, name, &cancel);
    // The compile's interim status ends before the attempt's is written.
    done.cancel();
    if let Some(teller) = teller
        && let Ok(Some(written)) = teller.await
    {
        *shown = Some(written);
    }
    let serving = match (&a.failure, candidate) {
        (None, c) => c,
        (Some((r, _)), _) if is_policy_refusal(r) => None,
        // The last good version keeps serving if it was loaded under the
        // same options (a tightened ceiling never keeps an old version);
        // after a restart it is brought back from the status, under
        // today's ceiling.
        (Some(_), _) => match previous.as_ref().and_then(|p| p.entry.serving.clone()) {
            Some(s) => previous
                .as_ref()
                .filter(|p| p.options.as_ref() == Some(&options))
                .map(|_| s),
            None => restore(obj, ctx, ns, &label, &ceiling).await,
        },
    };
    TenantEntry {
        entry: Entry {
            uid: uid.to_owned(),
            attempt: Some(a),
            serving,
        },
        selector,
        options: Some(options),
    }
}

/// While a tenant's compile waits for the tenants' compile slot, its status
/// says so and where it stands (`Compiled=Unknown`, reason `Compiling`, the
/// compiles going first), updated as that changes; once it compiles, too,
/// if that takes over a second. Ends when `done` fires: the attempt's own
/// status follows. Writes nothing for a component found in the cache.
/// Returns the last status it wrote, if any.
async fn tell_compiling(
    api: Api<TrainerPlugin>,
    name: String,
    mut current: Option<ClusterTrainerPluginStatus>,
    generation: i64,
    mut place: tokio::sync::watch::Receiver<CompilePlace>,
    done: CancellationToken,
) -> Option<ClusterTrainerPluginStatus> {
    let mut written = None;
    loop {
        tokio::select! {
            () = done.cancelled() => return written,
            changed = place.changed() => if changed.is_err() { return written },
        }
        let now = *place.borrow_and_update();
        let message = match now {
            CompilePlace::Queued { ahead } => format!(
                "waiting for the tenants' compile slot (shared by every namespace, in turn by namespace): {ahead} compile{} go{} first",
                if ahead == 1 { "" } else { "s" },
                if ahead == 1 { "es" } else { "" },
            ),
            CompilePlace::Compiling => {
                tokio::select! {
                    () = done.cancelled() => return written,
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
                "compiling in the tenants' compile slot".to_owned()
            }
        };
        let desired = status::compiling(current.as_ref(), generation, &message);
        match status::write_to(&api, &name, TRAINER_PLUGIN_KIND, current.as_ref(), &desired).await {
            Ok(true) => {
                written = Some(desired.clone());
                current = Some(desired);
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(plugin = %name, error = %e, "writing the compile's place to the status failed")
            }
        }
    }
}

/// The last good version recorded in `obj`'s status, loaded again (pinned
/// to its digest) if the ceiling allows it today.
async fn restore(
    obj: &TrainerPlugin,
    ctx: &Ctx,
    ns: &str,
    label: &str,
    ceiling: &Ceiling,
) -> Option<crate::controller::catalog::Serving> {
    let status = obj.status.as_ref()?;
    let options = ceiling
        .options(ns, &ctx.labels(ns), status.serving_spec.as_ref()?)
        .ok()?;
    let check = |p: &crate::plugin::LoadedPlugin| ceiling.check_plugin(p);
    let tenancy = Tenancy {
        namespace: ns,
        options,
        check: &check,
        cancel: None,
        place: None,
    };
    restore_with(label, status, &ctx.loader, Some(tenancy)).await
}

/// An Event on the `TrainerPlugin` when what it serves or why it fails
/// changed: Normal `Serving` for a new version in service, Warning with the
/// refusal's reason for a new failure.
async fn announce(ctx: &Ctx, obj: &TrainerPlugin, before: Option<&TenantEntry>, now: &TenantEntry) {
    let digest = |e: Option<&TenantEntry>| {
        e.and_then(|e| e.entry.serving.as_ref())
            .map(|s| s.digest().to_owned())
    };
    let failure = |e: Option<&TenantEntry>| {
        e.and_then(|e| e.entry.attempt.as_ref())
            .and_then(|a| a.failure.clone())
    };
    let mut events = Vec::new();
    if let Some((r, m)) = failure(Some(now)).filter(|f| failure(before) != Some(f.clone())) {
        events.push((EventType::Warning, r, m));
    }
    if let Some(d) = digest(Some(now)).filter(|d| digest(before).as_ref() != Some(d)) {
        let plugin = now
            .entry
            .serving
            .as_ref()
            .map(|s| s.described.name.clone())
            .unwrap_or_default();
        events.push((
            EventType::Normal,
            "Serving".to_owned(),
            format!("serving plugin {plugin} (sha256 {d})"),
        ));
    }
    if events.is_empty() {
        return;
    }
    let regarding = obj.object_ref(&());
    for (event_type, r, note) in events {
        if let Err(e) = ctx
            .recorder
            .record_about(&regarding, event_type, &r, "Loading", &note)
            .await
        {
            tracing::warn!(error = %e, "publishing Event on the TrainerPlugin failed");
        }
    }
}

/// Commit `entry`, write the status it implies, and decide the next
/// reconcile.
async fn finish(
    ctx: &Ctx,
    obj: &TrainerPlugin,
    shown: Option<&ClusterTrainerPluginStatus>,
    ns: &str,
    name: &str,
    entry: TenantEntry,
) -> Result<Action, Error> {
    let uid = entry.entry.uid.clone();
    let before = ctx.tenants.entry(ns, name, &uid);
    let cluster = ctx.loader.catalog.current();
    let entry = ctx.tenants.commit(ns, name, entry, &cluster);
    let failure = entry.entry.attempt.as_ref().and_then(|a| a.failure.clone());
    let within = match &failure {
        Some((r, m)) if is_policy_refusal(r) => Stage::failed(r, m.clone()),
        _ => Stage::ok(
            reason::WITHIN_POLICY,
            "the spec and the plugin fit the TrainerPluginPolicy",
        ),
    };
    if let Some((r, m)) = &failure {
        tracing::warn!(reason = %r, message = %m, "TrainerPlugin not served as specified");
    }
    let desired = status::desired_with(&entry.entry, shown, &[(condition::WITHIN_POLICY, within)]);
    if ctx.writes_status() {
        let api: Api<TrainerPlugin> = Api::namespaced(ctx.loader.client.clone(), ns);
        let wrote = status::write_to(&api, name, TRAINER_PLUGIN_KIND, shown, &desired)
            .await
            .map_err(|source| Error::Status {
                namespace: ns.to_owned(),
                source,
            })?;
        if wrote {
            ctx.loader.catalog.count_status_write();
        }
        announce(ctx, obj, before.as_ref(), &entry).await;
    }
    Ok(match failure {
        Some((r, _)) if is_policy_refusal(&r) => Action::await_change(),
        Some(_) => Action::requeue(RETRY_FAILED),
        None => Action::await_change(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(ns: &str, name: &str, created: Option<&str>) -> TrainerPlugin {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "trainforge.dev/v1alpha1",
            "kind": "TrainerPlugin",
            "metadata": {"namespace": ns, "name": name, "creationTimestamp": created},
            "spec": {"source": {"builtin": "torch"}},
        }))
        .unwrap()
    }

    /// The cap counts arrivals, not names: a newcomer whose name sorts
    /// first still ranks after every plugin created before it, so it is
    /// the one refused; within one second names decide; other namespaces
    /// do not count.
    #[test]
    fn newcomers_rank_last_whatever_their_name() {
        let old_z = plugin("a", "z", Some("2026-11-01T00:00:00Z"));
        let old_y = plugin("a", "y", Some("2026-11-01T00:00:05Z"));
        let same_second_b = plugin("a", "b", Some("2026-11-01T00:00:05Z"));
        let new_a = plugin("a", "a", Some("2026-11-02T00:00:00Z"));
        let unstamped = plugin("a", "0", None);
        let elsewhere = plugin("b", "0", Some("2026-10-01T00:00:00Z"));
        let all = [
            &old_z,
            &old_y,
            &same_second_b,
            &new_a,
            &unstamped,
            &elsewhere,
        ];
        let rank = |p: &TrainerPlugin| arrival_rank(all.iter().copied(), p);
        assert_eq!(rank(&old_z), 0);
        assert_eq!(
            rank(&same_second_b),
            1,
            "b sorts before y within the second"
        );
        assert_eq!(rank(&old_y), 2);
        assert_eq!(rank(&new_a), 3, "the newcomer ranks after all older ones");
        assert_eq!(rank(&unstamped), 4, "no creation time: the newest");
        assert_eq!(rank(&elsewhere), 0, "only its own namespace counts");
        let cap = Ceiling::new(
            Some(
                &serde_json::from_value(
                    serde_json::json!({"namespaceSelector": {}, "maxPluginsPerNamespace": 3}),
                )
                .unwrap(),
            ),
            &crate::plugin::Limits::default(),
        );
        assert!(cap.admit_count("a", rank(&old_y)).is_ok());
        let (reason, message) = cap.admit_count("a", rank(&new_a)).unwrap_err();
        assert_eq!(reason, reason::EXCEEDS_POLICY);
        assert!(message.contains("maxPluginsPerNamespace (3)"), "{message}");
    }
}
