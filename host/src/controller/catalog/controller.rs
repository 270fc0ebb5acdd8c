//! The kube-runtime controller on `ClusterTrainerPlugin`: one reconcile per
//! object fetches, verifies and loads its component and commits it to the
//! [`PluginCatalog`]; deleted objects leave the catalog when they leave the
//! reflector.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use trainforge_api::trainforge::v1alpha1::{
    ClusterTrainerPlugin, ClusterTrainerPluginSpec, ClusterTrainerPluginStatus, PluginSourceSpec,
    reason,
};

use super::fetch::{FetchError, Fetched, Fetcher};
use super::spec::{options, plugin_source};
use super::state::{Attempt, PluginCatalog, Serving, Stage};
use super::{Error, status};

use crate::oci::cosign::{self, Subject, TrustedKey};
use crate::plugin::builtin;

/// How soon a failed attempt is retried (the ConfigMap or URL may be fixed
/// without the CR changing).
pub const RETRY_FAILED: Duration = Duration::from_secs(30);

/// How soon a reconcile that hit an API error is retried.
pub const RETRY_ERROR: Duration = Duration::from_secs(5);

/// Options of [`run_with`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only `ClusterTrainerPlugin`s matching this label selector (all when
    /// `None`); lets several operators (or tests) share a cluster.
    pub label_selector: Option<String>,
    /// Whether this replica may write statuses (it leads). `None`: always.
    /// Every replica loads the plugins (each one serves admission); only the
    /// leader reports on them. When this turns `true`, every object is
    /// reconciled again so the new leader writes what the old one did not.
    pub status_writes: Option<tokio::sync::watch::Receiver<bool>>,
    /// How `https://` sources are fetched (reachable networks, extra CAs).
    pub fetch: super::fetch::FetchOptions,
}

/// What loading a plugin version needs: the client (discovery, access
/// reviews, ConfigMap reads), the catalog (runtime, object source,
/// counters) and the fetcher. Shared with the tenant plugin controller.
pub(crate) struct Loader {
    pub(crate) client: kube::Client,
    pub(crate) catalog: Arc<PluginCatalog>,
    pub(crate) fetcher: Fetcher,
}

/// The ceiling's check of a loaded tenant plugin: `(reason, message)` when
/// it declares more than allowed.
pub(crate) type TenantCheck<'a> =
    dyn Fn(&crate::plugin::LoadedPlugin) -> Result<(), (&'static str, String)> + Sync + 'a;

/// How a tenant plugin's load differs from a cluster plugin's: the ceiling
/// decided its options, and checks the loaded plugin before it serves.
pub(crate) struct Tenancy<'a> {
    /// The `TrainerPlugin`'s namespace (metrics and logs name it).
    pub(crate) namespace: &'a str,
    /// The options the ceiling allows (replacing the spec's own).
    pub(crate) options: super::spec::PluginOptions,
    /// Refuses a loaded plugin that declares more than the ceiling allows.
    pub(crate) check: &'a TenantCheck<'a>,
    /// Cancels the compile when the `TrainerPlugin` is deleted or changed.
    pub(crate) cancel: Option<tokio_util::sync::CancellationToken>,
    /// Told the compile's place in the tenants' compile slot.
    pub(crate) place: Option<tokio::sync::watch::Sender<crate::plugin::CompilePlace>>,
}

struct Ctx {
    loader: Loader,
    api: Api<ClusterTrainerPlugin>,
    status_writes: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Ctx {
    /// Whether this replica writes statuses now.
    fn writes_status(&self) -> bool {
        self.status_writes.as_ref().is_none_or(|rx| *rx.borrow())
    }
}

/// Run the controller until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    catalog: Arc<PluginCatalog>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    run_with(client, catalog, shutdown, Options::default()).await
}

/// [`run`] with options.
pub async fn run_with(
    client: kube::Client,
    catalog: Arc<PluginCatalog>,
    shutdown: CancellationToken,
    opts: Options,
) -> Result<(), Error> {
    let api: Api<ClusterTrainerPlugin> = Api::all(client.clone());
    let mut wc = watcher::Config::default().any_semantic();
    if let Some(sel) = &opts.label_selector {
        wc = wc.labels(sel);
    }
    let fetcher = Fetcher::with_options(
        client.clone(),
        catalog.runtime().config().max_component_bytes,
        &opts.fetch,
    )?;
    let (store, writer) = reflector::store::<ClusterTrainerPlugin>();

    // Deletions leave the catalog straight from the watch (the controller
    // itself only triggers on applied objects). After every (re)list the
    // store is the truth: anything else was deleted while the watch was
    // down; the first list is what the catalog must load to be synced.
    let events = {
        let catalog = catalog.clone();
        let store = store.clone();
        reflector(writer, watcher(api.clone(), wc))
            .default_backoff()
            .inspect(move |event| match event {
                Ok(watcher::Event::Delete(obj)) => {
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    tracing::info!(plugin = %name, "ClusterTrainerPlugin deleted; taking its plugin out of service");
                    catalog.remove(&name, obj.metadata.uid.as_deref());
                }
                Ok(watcher::Event::InitDone) => {
                    let state = store.state();
                    catalog.retain(&state.iter().filter_map(|o| o.metadata.name.clone()).collect());
                    catalog.set_initial(state.iter().filter_map(|o| o.metadata.uid.clone()).collect());
                }
                _ => {}
            })
            .applied_objects()
    };

    let ctx = Arc::new(Ctx {
        loader: Loader {
            client: client.clone(),
            catalog: catalog.clone(),
            fetcher,
        },
        api,
        status_writes: opts.status_writes.clone(),
    });
    let stop = shutdown.clone();
    // CRs displaced by a plugin with precedence are reconciled again so
    // their status says so (and they retry while the winner serves).
    let kicks = catalog.take_kicks().map(|rx| {
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|name| (ObjectRef::<ClusterTrainerPlugin>::new(&name), rx))
        })
    });
    let before_first_list =
        crate::controller::stopped_before_ready(store.clone(), shutdown.clone());
    let controller = Controller::for_stream(events, store);
    let controller = match kicks {
        Some(k) => controller.reconcile_on(k),
        None => controller,
    };
    // Gaining the right to write statuses: everything once more.
    let controller = match opts.status_writes {
        Some(rx) => controller.reconcile_all_on(rises(rx)),
        None => controller,
    };
    let mut results = controller
        .graceful_shutdown_on(async move { stop.cancelled_owned().await })
        .run(reconcile, error_policy, ctx)
        .take_until(before_first_list)
        .boxed();
    while let Some(result) = results.next().await {
        match result {
            Ok(_) => {}
            Err(ControllerError::ObjectNotFound(obj)) => {
                tracing::debug!(plugin = %obj.name, "ClusterTrainerPlugin gone before its reconcile");
                catalog.remove(&obj.name, None);
            }
            Err(ControllerError::ReconcilerFailed(e, obj)) => {
                tracing::warn!(plugin = %obj.name, error = %e, "reconcile failed");
            }
            Err(ControllerError::QueueError(e)) => {
                tracing::warn!(error = %e, "watch error (retried with backoff)")
            }
            Err(e) => tracing::warn!(error = %e, "controller error"),
        }
    }
    Ok(())
}

/// A stream with one item each time `rx` turns from `false` to `true`.
pub(crate) fn rises(
    rx: tokio::sync::watch::Receiver<bool>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((rx, false), |(mut rx, mut was)| async move {
        loop {
            let now = *rx.borrow_and_update();
            if now && !was {
                return Some(((), (rx, true)));
            }
            was = now;
            rx.changed().await.ok()?;
        }
    })
}

fn error_policy(_: Arc<ClusterTrainerPlugin>, _: &Error, _: Arc<Ctx>) -> Action {
    Action::requeue(RETRY_ERROR)
}

async fn reconcile(obj: Arc<ClusterTrainerPlugin>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or(0);
    let span = tracing::info_span!("reconcile_plugin", plugin = %name, generation);
    reconcile_inner(obj, ctx, name, generation)
        .instrument(span)
        .await
}

async fn reconcile_inner(
    obj: Arc<ClusterTrainerPlugin>,
    ctx: Arc<Ctx>,
    name: String,
    generation: i64,
) -> Result<Action, Error> {
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let catalog = &ctx.loader.catalog;
    let entry = match catalog.entry(&name, &uid) {
        // Already serving this generation: nothing to load.
        Some(e)
            if e.attempt
                .as_ref()
                .is_some_and(|a| a.generation == generation && a.failure.is_none()) =>
        {
            e
        }
        previous => {
            // After a restart, the generation that served loads exactly
            // what it served (a tag is not resolved again).
            let pin = Pin::recorded(obj.status.as_ref(), Some(generation));
            let (attempt, candidate) =
                attempt(&name, &obj.spec, &ctx.loader, generation, pin, None).await;
            match (&attempt.failure, candidate) {
                (None, candidate) => catalog.commit(&name, &uid, attempt, candidate),
                (Some((r, m)), _) => {
                    let again = previous
                        .as_ref()
                        .and_then(|e| e.attempt.as_ref())
                        .is_some_and(|a| a.failure == attempt.failure);
                    if again {
                        tracing::debug!(reason = %r, "retried plugin version refused again");
                    } else {
                        tracing::warn!(reason = %r, message = %m, "plugin version refused; the previous version (if any) keeps serving");
                    }
                    let serving = previous.as_ref().is_some_and(|e| e.serving.is_some());
                    let restored = if serving {
                        None
                    } else {
                        restore(&name, &obj, &ctx.loader).await
                    };
                    match restored {
                        Some(last_good) => catalog.commit_restored(&name, &uid, attempt, last_good),
                        None => catalog.commit(&name, &uid, attempt, None),
                    }
                }
            }
        }
    };
    let desired = status::desired(&entry, obj.status.as_ref());
    if ctx.writes_status() && status::write(&ctx.api, &obj, &desired).await? {
        catalog.count_status_write();
    }
    let failed = entry.attempt.as_ref().is_some_and(|a| a.failure.is_some());
    Ok(if failed {
        Action::requeue(RETRY_FAILED)
    } else {
        Action::await_change()
    })
}

/// The last good version recorded in `obj`'s status (`servingSpec`,
/// pinned to `servingDigest`), loaded again: after a restart, a CR whose
/// current spec fails keeps serving what it served before.
async fn restore(name: &str, obj: &ClusterTrainerPlugin, ctx: &Loader) -> Option<Serving> {
    restore_with(name, obj.status.as_ref()?, ctx, None).await
}

/// [`restore`] from `status`, as a tenant plugin when `tenancy` is given
/// (its options decided by the ceiling for the serving spec).
pub(crate) async fn restore_with(
    name: &str,
    status: &trainforge_api::trainforge::v1alpha1::ClusterTrainerPluginStatus,
    ctx: &Loader,
    tenancy: Option<Tenancy<'_>>,
) -> Option<Serving> {
    let (spec, digest, generation) = (
        status.serving_spec.as_ref()?,
        status.serving_digest.as_deref()?,
        status.serving_generation?,
    );
    let pin = Pin::recorded(Some(status), None);
    let (attempt, serving) = attempt(name, spec, ctx, generation, pin, tenancy).await;
    match (&attempt.failure, serving) {
        (None, Some(s)) => {
            tracing::info!(digest, generation, "last good version restored from status");
            Some(s)
        }
        (failure, _) => {
            tracing::warn!(digest, generation, failure = ?failure, "last good version could not be restored");
            None
        }
    }
}

/// What a version was pinned to when it served: its source with any tag
/// replaced by the manifest digest, and the component's sha256. Loading
/// from a pin never resolves a tag again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pin<'a> {
    pub(crate) source: &'a PluginSourceSpec,
    pub(crate) sha256: &'a str,
}

impl<'a> Pin<'a> {
    /// The pin `status` records for `generation` (the last good version,
    /// or the current spec's after a restart), if it records one.
    pub(crate) fn recorded(
        status: Option<&'a ClusterTrainerPluginStatus>,
        generation: Option<i64>,
    ) -> Option<Self> {
        let s = status?;
        if generation.is_some() && s.serving_generation != generation {
            return None;
        }
        Some(Pin {
            source: &s.serving_spec.as_ref()?.source,
            sha256: s.serving_digest.as_deref()?,
        })
    }
}

/// Fetch → verify → load `spec` (of CR `name` at `generation`); the
/// attempt's stages and, on success, the version to put in service. `pin`
/// replaces the spec's source and `sha256`; `tenancy` loads it as a tenant
/// plugin.
pub(crate) async fn attempt(
    name: &str,
    spec: &ClusterTrainerPluginSpec,
    ctx: &Loader,
    generation: i64,
    pin: Option<Pin<'_>>,
    tenancy: Option<Tenancy<'_>>,
) -> (Attempt, Option<Serving>) {
    let catalog = &ctx.catalog;
    let mut done = Vec::new();

    let source = pin.map_or(&spec.source, |p| p.source);
    let fetched = match ctx.fetcher.fetch(source, spec.verification.is_some()).await {
        Ok(f) => f,
        Err(e) => return (fetch_failed(generation, &e), None),
    };
    catalog.count_load();
    let digest = builtin::component_digest(&fetched.bytes);
    done.push(Stage::ok(
        reason::FETCHED,
        format!("{} bytes from {}", fetched.bytes.len(), fetched.origin),
    ));
    let verified = match verify(
        spec,
        pin,
        &fetched,
        &digest,
        ctx.fetcher.require_signatures(),
    ) {
        Ok(stage) => stage,
        Err((r, m)) => return (Attempt::failed(generation, done, r, m), None),
    };
    done.push(verified);
    // What serves names the artifact by digest, never by a tag.
    let mut spec = spec.clone();
    if let Some((url, _)) = &fetched.pinned {
        spec.source.url = Some(url.clone());
    }
    let spec = &spec;

    let opts = match &tenancy {
        Some(t) => t.options.clone(),
        None => match options(spec, &catalog.runtime().config().limits) {
            Ok(o) => o,
            Err(e) => {
                return (
                    Attempt::failed(generation, done, reason::INVALID_SPEC, e.to_string()),
                    None,
                );
            }
        },
    };
    let mut src = plugin_source(
        name.to_owned(),
        fetched.bytes.clone(),
        Some(digest.clone()),
        fetched.builtin,
        &opts,
        catalog.objects().clone(),
    );
    src.tenant = tenancy.as_ref().map(|t| t.namespace.to_owned());
    src.cancel = tenancy.as_ref().and_then(|t| t.cancel.clone());
    src.compile_place = tenancy.as_ref().and_then(|t| t.place.clone());
    let runtime = catalog.runtime().clone();
    let loaded = tokio::task::spawn_blocking(move || runtime.load(src)).await;
    let plugin = match loaded {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            return (
                Attempt::failed(generation, done, e.reason(), e.to_string()),
                None,
            );
        }
        Err(join) => {
            let m = format!("loading task failed: {join}");
            return (Attempt::failed(generation, done, "LoadFailed", m), None);
        }
    };
    if let Some(Err((r, m))) = tenancy.as_ref().map(|t| (t.check)(&plugin)) {
        let m = format!("plugin {}: {m}", plugin.name());
        return (Attempt::failed(generation, done, r, m), None);
    }
    let explicit_reads = opts.allowed_reads.clone().unwrap_or_default();
    let notes = match super::kinds::admit(&ctx.client, &plugin, &explicit_reads).await {
        Ok(notes) => notes,
        Err((r, m)) => {
            let m = format!("plugin {}: {m}", plugin.name());
            return (Attempt::failed(generation, done, r, m), None);
        }
    };
    let serving = Serving::new(
        plugin,
        spec.clone(),
        generation,
        opts.order,
        opts.phases.as_deref(),
    );
    let mut message = format!(
        "plugin {} {} (WIT {})",
        serving.described.name, serving.described.version, serving.described.wit_version
    );
    if !notes.is_empty() {
        message.push_str("; ");
        message.push_str(&notes.join("; "));
    }
    done.push(Stage::ok(reason::COMPILED, message));
    (Attempt::succeeded(generation, done), Some(serving))
}

/// The `Verified` stage: the bytes match the pinned sha256 (the spec's or
/// `pin`'s), an OCI reference by digest pinned the manifest, and a trusted
/// key signed the artifact when the spec (or the operator) asks for it.
fn verify(
    spec: &ClusterTrainerPluginSpec,
    pin: Option<Pin<'_>>,
    fetched: &Fetched,
    digest: &str,
    require_signatures: bool,
) -> Result<Stage, (&'static str, String)> {
    // The pin is enforced whatever it came from; the message names only
    // what the spec asked for, so a restart that loads from the recorded
    // pin reports the same as the first load.
    let pinned = pin
        .map(|p| p.sha256)
        .or(spec.sha256.as_deref())
        .map(|s| s.trim().to_ascii_lowercase());
    if let Some(want) = &pinned
        && *want != digest
    {
        return Err((
            reason::DIGEST_MISMATCH,
            format!(
                "expected sha256 {want}, got {digest} from {}",
                fetched.origin
            ),
        ));
    }
    let mut facts = Vec::new();
    if spec.sha256.is_some() {
        facts.push(format!("sha256 {digest}"));
    }
    let by_digest = fetched.pinned.as_ref().filter(|_| {
        spec.source
            .url
            .as_deref()
            .is_some_and(|u| u.contains("@sha256:"))
    });
    if let Some((_, manifest)) = by_digest {
        facts.push(format!("manifest {manifest}"));
    }
    let mut reason_ok = reason::DIGEST_MATCHED;
    match &spec.verification {
        // Builtins are part of the operator: trusted as such.
        Some(_) if fetched.builtin => {}
        Some(v) => {
            let keys = v
                .keys
                .iter()
                .map(|k| TrustedKey::from_pem(&k.name, &k.public_key))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| (reason::INVALID_KEY, format!("spec.verification.keys: {e}")))?;
            let found = fetched.signatures.as_deref().unwrap_or_default();
            let subject = match &fetched.pinned {
                Some((_, manifest)) => Subject::Manifest(manifest),
                None => Subject::Blob(&fetched.bytes),
            };
            let signer = cosign::verify(&keys, subject, found)
                .map_err(|(r, m)| (r, format!("{}: {m}", fetched.origin)))?;
            facts.push(format!("signed by key {signer:?}"));
            reason_ok = reason::SIGNATURE_VERIFIED;
        }
        None if require_signatures && !fetched.builtin => {
            return Err((
                reason::SIGNATURE_REQUIRED,
                "the operator requires a signature on every plugin that is not builtin; add spec.verification with the signer's public key".to_owned(),
            ));
        }
        None => {}
    }
    if facts.is_empty() {
        if fetched.builtin {
            return Ok(Stage::ok(
                reason::BUILTIN,
                format!("builtin, sha256 {digest}"),
            ));
        }
        if pinned.is_some() {
            return Ok(Stage::ok(reason_ok, format!("sha256 {digest}")));
        }
        // The CRD requires a pin for anything not builtin.
        return Err((
            reason::DIGEST_MISMATCH,
            "spec.sha256 is required for a component that is not builtin (or an oci:// reference by @sha256:, or spec.verification)".to_owned(),
        ));
    }
    Ok(Stage::ok(reason_ok, facts.join("; ")))
}

fn fetch_failed(generation: i64, e: &FetchError) -> Attempt {
    Attempt::failed(generation, Vec::new(), e.reason(), e.to_string())
}
