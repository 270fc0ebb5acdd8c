//! The `ClusterTrainerPlugin` status the catalog's state implies, and its
//! write through the status subresource — only when it differs from what the
//! object already shows (a resync writes nothing).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use trainforge_api::trainforge::v1alpha1::{
    API_VERSION, CLUSTER_TRAINER_PLUGIN_KIND, ClusterTrainerPlugin, ClusterTrainerPluginStatus,
    condition, reason,
};

use super::state::{Entry, Stage, StageName, StageStatus};
use super::{Error, FIELD_MANAGER};

/// The status `entry` implies. Conditions whose status did not change keep
/// their `lastTransitionTime` from `current`.
pub(crate) fn desired(
    entry: &Entry,
    current: Option<&ClusterTrainerPluginStatus>,
) -> ClusterTrainerPluginStatus {
    desired_with(entry, current, &[])
}

/// [`desired`] with `extra` conditions after the others (a
/// `TrainerPlugin`'s `WithinPolicy`).
pub(crate) fn desired_with(
    entry: &Entry,
    current: Option<&ClusterTrainerPluginStatus>,
    extra: &[(&str, Stage)],
) -> ClusterTrainerPluginStatus {
    let generation = entry.attempt.as_ref().map(|a| a.generation);
    let mut stages: Vec<(&str, Stage)> = Vec::new();
    if let Some(a) = &entry.attempt {
        for (name, s) in StageName::ATTEMPT.into_iter().zip(a.stages.iter()) {
            stages.push((name.as_str(), s.clone()));
        }
    }
    let failure = entry.attempt.as_ref().and_then(|a| a.failure.clone());
    let ready = match (&entry.serving, &failure) {
        (Some(s), None) => Stage::ok(
            reason::SERVING,
            format!(
                "serving sha256 {} (plugin {})",
                s.digest(),
                s.described.name
            ),
        ),
        (Some(s), Some((_, m))) => Stage::ok(
            reason::SERVING_LAST_KNOWN_GOOD,
            format!(
                "serving sha256 {} from generation {} (plugin {}); the current spec failed: {m}",
                s.digest(),
                s.generation,
                s.described.name
            ),
        ),
        (None, Some((r, m))) => Stage::failed(r, m.clone()),
        (None, None) => Stage::failed(reason::NOT_REACHED, "not loaded yet"),
    };
    let degraded = match &failure {
        Some((r, m)) => Stage {
            status: StageStatus::True,
            reason: r.clone(),
            message: m.clone(),
        },
        None => Stage {
            status: StageStatus::False,
            reason: reason::AS_EXPECTED.to_owned(),
            message: "the current spec is serving".to_owned(),
        },
    };
    stages.push((StageName::Ready.as_str(), ready));
    stages.push((condition::DEGRADED, degraded));
    stages.extend(extra.iter().cloned());

    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let conditions = stages
        .into_iter()
        .map(|(t, s)| {
            let status = condition_status(s.status);
            let previous = current
                .and_then(|c| c.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == t))
                .filter(|c| c.status == status);
            Condition {
                type_: t.to_owned(),
                status: status.to_owned(),
                reason: s.reason,
                message: s.message,
                observed_generation: generation,
                last_transition_time: previous
                    .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
            }
        })
        .collect();
    ClusterTrainerPluginStatus {
        conditions: Some(conditions),
        serving_digest: entry.serving.as_ref().map(|s| s.digest().to_owned()),
        serving_generation: entry.serving.as_ref().map(|s| s.generation),
        serving_spec: entry.serving.as_ref().map(|s| s.spec.clone()),
        observed_generation: generation,
        last_error: failure.map(|(_, m)| m),
        plugin: entry.serving.as_ref().map(|s| s.described.clone()),
        // Not this writer's: `super::rollout` writes it with its own field
        // manager.
        rollout: None,
    }
}

/// `current` with `Compiled=Unknown` for `generation` (reason `Compiling`,
/// `message`), and `Ready=False` likewise when nothing serves yet: what a
/// tenant plugin's status shows while its compile waits for or holds the
/// tenants' compile slot. Every other field stays as it was.
pub(crate) fn compiling(
    current: Option<&ClusterTrainerPluginStatus>,
    generation: i64,
    message: &str,
) -> ClusterTrainerPluginStatus {
    let mut status = current.cloned().unwrap_or_default();
    status.rollout = None;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut conditions = status.conditions.take().unwrap_or_default();
    let mut set = |type_: &str, value: &str| {
        let since = conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == value)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
        let c = Condition {
            type_: type_.to_owned(),
            status: value.to_owned(),
            reason: reason::COMPILING.to_owned(),
            message: message.to_owned(),
            observed_generation: Some(generation),
            last_transition_time: since,
        };
        match conditions.iter_mut().find(|old| old.type_ == type_) {
            Some(old) => *old = c,
            None => conditions.push(c),
        }
    };
    set(condition::COMPILED, "Unknown");
    if status.serving_digest.is_none() {
        set(condition::READY, "False");
    }
    status.conditions = Some(conditions);
    status
}

/// Whether `current` shows `status`, `rollout` aside (another writer's).
fn shows(
    current: Option<&ClusterTrainerPluginStatus>,
    status: &ClusterTrainerPluginStatus,
) -> bool {
    let without = |s: &ClusterTrainerPluginStatus| ClusterTrainerPluginStatus {
        rollout: None,
        ..s.clone()
    };
    current.is_some_and(|c| without(c) == without(status))
}

/// The condition status a stage is written as.
fn condition_status(status: StageStatus) -> &'static str {
    match status {
        StageStatus::True => "True",
        StageStatus::False => "False",
        StageStatus::Unknown => "Unknown",
    }
}

/// Write `status` to `obj` unless it already shows exactly that. Returns
/// whether a write was made.
pub(crate) async fn write(
    api: &Api<ClusterTrainerPlugin>,
    obj: &ClusterTrainerPlugin,
    status: &ClusterTrainerPluginStatus,
) -> Result<bool, Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    write_to(
        api,
        &name,
        CLUSTER_TRAINER_PLUGIN_KIND,
        obj.status.as_ref(),
        status,
    )
    .await
}

/// Write `status` to the object `name` of `kind` (a `ClusterTrainerPlugin`
/// or a `TrainerPlugin`) unless `current` is exactly that. `rollout` is
/// another writer's ([`super::rollout`]): neither compared nor written.
pub(crate) async fn write_to<K>(
    api: &Api<K>,
    name: &str,
    kind: &'static str,
    current: Option<&ClusterTrainerPluginStatus>,
    status: &ClusterTrainerPluginStatus,
) -> Result<bool, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = name.to_owned();
    if shows(current, status) {
        return Ok(false);
    }
    let patch = json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "status": serde_json::to_value(status).map_err(|source| Error::Serialize { kind, name: name.clone(), source })?,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::Kube {
        kind,
        name,
        action: "writing status",
        source,
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::state::Attempt;
    use super::*;

    fn cond<'a>(s: &'a ClusterTrainerPluginStatus, t: &str) -> &'a Condition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    /// A compile's interim status: `Compiled=Unknown` with its place, and
    /// `Ready=False` only while nothing serves; the rest as it was.
    #[test]
    fn a_compiling_status_keeps_everything_else() {
        let failed = Entry {
            uid: "u".into(),
            attempt: Some(Attempt::failed(
                3,
                vec![Stage::ok(reason::FETCHED, "1 bytes")],
                reason::DIGEST_MISMATCH,
                "bad".into(),
            )),
            serving: None,
        };
        let before = desired(&failed, None);
        let s = compiling(Some(&before), 4, "2 compiles go first");
        assert_eq!(cond(&s, "Compiled").status, "Unknown");
        assert_eq!(cond(&s, "Compiled").reason, "Compiling");
        assert_eq!(cond(&s, "Compiled").observed_generation, Some(4));
        assert_eq!(cond(&s, "Ready").reason, "Compiling");
        assert_eq!(cond(&s, "Ready").message, "2 compiles go first");
        assert_eq!(cond(&s, "Fetched"), cond(&before, "Fetched"));
        assert_eq!(cond(&s, "Degraded"), cond(&before, "Degraded"));
        // Ready was False already: its transition time is kept.
        assert_eq!(
            cond(&s, "Ready").last_transition_time,
            cond(&before, "Ready").last_transition_time
        );
        assert_eq!(s.last_error, before.last_error);

        // A version serves: Ready is left to it.
        let mut serving = before.clone();
        serving.serving_digest = Some("aa".into());
        let s = compiling(Some(&serving), 4, "compiling");
        assert_eq!(cond(&s, "Ready"), cond(&serving, "Ready"));
        assert_eq!(cond(&s, "Compiled").reason, "Compiling");

        // A new plugin: only the two conditions.
        let s = compiling(None, 1, "compiling");
        assert_eq!(s.conditions.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn failure_without_a_serving_version_is_not_ready_and_degraded() {
        let entry = Entry {
            uid: "u".into(),
            attempt: Some(Attempt::failed(
                3,
                vec![Stage::ok(reason::FETCHED, "1 bytes")],
                reason::DIGEST_MISMATCH,
                "expected sha256 aa, got bb".into(),
            )),
            serving: None,
        };
        let s = desired(&entry, None);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(cond(&s, "Fetched").status, "True");
        assert_eq!(cond(&s, "Verified").reason, "DigestMismatch");
        assert_eq!(cond(&s, "Compiled").status, "Unknown");
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(cond(&s, "Degraded").status, "True");
        assert_eq!(s.last_error.as_deref(), Some("expected sha256 aa, got bb"));
        assert_eq!(s.serving_digest, None);

        // Same state again: same status, transition times kept.
        let again = desired(&entry, Some(&s));
        assert_eq!(again, s);
        assert!(shows(Some(&s), &again));

        // A rollout (another writer's) neither makes a write nor is written.
        let mut with_rollout = s.clone();
        with_rollout.rollout = Some(trainforge_api::trainforge::v1alpha1::PluginRollout {
            serving_generation: 3,
            train_jobs: 1,
            re_rendered: 1,
            failed: 0,
            skipped: 0,
            remaining: 0,
            started_at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            completed_at: None,
        });
        let again = desired(&entry, Some(&with_rollout));
        assert_eq!(again.rollout, None);
        assert!(shows(Some(&with_rollout), &again));
        assert!(!shows(None, &again));
    }
}
