//! Admitting the kinds a loaded plugin may emit, read or watch against the
//! cluster, before it serves (the last step of `Compiled`).
//!
//! For every such kind (at most the runtime's bound per plugin):
//! - API discovery decides its scope: a cluster-scoped kind is refused for
//!   `emits`, and for reads and watches unless `spec.allowedReads` lists it;
//! - the operator must be allowed to list and watch it (and, for what the
//!   plugin emits, to create and patch it), checked with
//!   `SelfSubjectAccessReview`: a plugin declaring a kind the operator
//!   cannot watch is refused here instead of leaving a watch that never
//!   syncs (which would keep the operator from ever becoming ready);
//! - a kind the API server does not serve (yet) is accepted with a note: its
//!   objects fail to apply until it is installed, and the operator retries
//!   the watch.
//!
//! Every request is bounded by [`REQUEST_TIMEOUT`].

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use trainforge_api::plugin::KindRef;
use trainforge_api::trainforge::v1alpha1::reason;

use crate::plugin::kinds::gvk;
use crate::plugin::{LoadedPlugin, bounded};

/// Bound of each discovery or access-review request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a plugin's kinds were refused: `(reason, message)`.
pub(crate) type Refusal = (&'static str, String);

/// Check every kind `plugin` may emit, read or watch. `explicit_reads` is
/// the administrator's `allowedReads`. Returns notes for the status (kinds
/// not served yet) or the refusal.
pub(crate) async fn admit(
    client: &kube::Client,
    plugin: &LoadedPlugin,
    explicit_reads: &[KindRef],
) -> Result<Vec<String>, Refusal> {
    let emits = plugin.allowed_emits();
    let mut all: BTreeSet<&KindRef> = emits.iter().collect();
    all.extend(plugin.allowed_reads());
    all.extend(&plugin.descriptor().watches);
    // Every kind at once (each is a handful of requests); the first
    // refusal in kind order is the answer, as if they ran one by one.
    let checks = all
        .into_iter()
        .map(|kind| admit_kind(client, kind, emits.contains(kind), explicit_reads));
    let mut notes = Vec::new();
    for checked in futures::future::join_all(checks).await {
        notes.extend(checked?);
    }
    Ok(notes)
}

/// [`admit`] for one kind: a note when it is not served yet.
async fn admit_kind(
    client: &kube::Client,
    kind: &KindRef,
    emitted: bool,
    explicit_reads: &[KindRef],
) -> Result<Option<String>, Refusal> {
    let Some((plural, namespaced)) = discover(client, kind).await? else {
        return Ok(Some(format!("{kind} is not served by the API server yet")));
    };
    if !namespaced {
        if emitted {
            return Err((
                reason::FORBIDDEN_KIND,
                format!(
                    "emits {kind}, which is cluster-scoped: plugins emit namespaced objects only"
                ),
            ));
        }
        if !explicit_reads.contains(kind) {
            return Err((
                reason::FORBIDDEN_KIND,
                format!(
                    "reads or watches {kind}, which is cluster-scoped: allowed only when spec.allowedReads lists it"
                ),
            ));
        }
    }
    let mut verbs = vec!["list", "watch"];
    if emitted {
        verbs.extend(["create", "patch"]);
    }
    let answers = futures::future::join_all(
        verbs
            .iter()
            .map(|verb| allowed(client, kind, &plural, verb)),
    )
    .await;
    for (verb, answer) in verbs.iter().zip(answers) {
        if !answer? {
            return Err((
                reason::KIND_NOT_WATCHABLE,
                format!(
                    "the operator may not {verb} {kind}: grant it in the operator's ClusterRole, or narrow the plugin with spec.allowedKinds / spec.allowedReads"
                ),
            ));
        }
    }
    Ok(None)
}

/// `Some((plural, namespaced))` from discovery; `None` when the kind is not
/// served.
async fn discover(
    client: &kube::Client,
    kind: &KindRef,
) -> Result<Option<(String, bool)>, Refusal> {
    let found = tokio::time::timeout(
        REQUEST_TIMEOUT,
        kube::discovery::pinned_kind(client, &gvk(kind)),
    )
    .await
    .map_err(|_| {
        (
            reason::DISCOVERY_FAILED,
            format!("discovering {kind} timed out after {REQUEST_TIMEOUT:?}"),
        )
    })?;
    match found {
        Ok((resource, caps)) => Ok(Some((
            resource.plural,
            caps.scope == kube::discovery::Scope::Namespaced,
        ))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err((
            reason::DISCOVERY_FAILED,
            bounded::message(&format!("discovering {kind}: {e}")),
        )),
    }
}

/// Whether the operator's identity may `verb` objects of `kind` in every
/// namespace.
async fn allowed(
    client: &kube::Client,
    kind: &KindRef,
    plural: &str,
    verb: &str,
) -> Result<bool, Refusal> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(kind.group().to_owned()),
                resource: Some(plural.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &review))
        .await
        .map_err(|_| {
            (
                reason::DISCOVERY_FAILED,
                format!("checking access to {kind} timed out after {REQUEST_TIMEOUT:?}"),
            )
        })?
        .map_err(|e| {
            (
                reason::DISCOVERY_FAILED,
                bounded::message(&format!("checking access to {kind}: {e}")),
            )
        })?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
