//! [`PluginSet`]: an ordered set of loaded plugins run as the Trainer
//! framework pipeline (phases in order, TrainJob and info threaded
//! through), validation and status.
//!
//! Containment rules of a pass, whatever the plugins return:
//! - the TrainJob's identity ([`Owner`]: namespace, name, uid) is read from
//!   the stored TrainJob before any plugin runs; every call is scoped to it
//!   and every emitted object is checked against it, never against the
//!   in-memory copy plugins pass along;
//! - a phase that returns a TrainJob with another identity
//!   (`apiVersion`, `kind`, namespace, name, uid) is refused
//!   (`IdentityChanged`);
//! - a phase that adds a pod privilege (privileged, capabilities, host
//!   namespaces, hostPath, hostPorts, unconfined profiles, a service account
//!   or an image that was not in what it was given) that its grants do not
//!   allow is refused (`PodSecurity`, see [`super::pod_policy`]);
//! - two objects with the same kind and name are refused
//!   (`ForbiddenObject`), whichever plugins emitted them;
//! - an object whose name a plugin of the set declares as another
//!   TrainJob's (its naming rule `<trainjob><suffix>` for that kind, see
//!   [`super::output_check::rule_refusal`]) is refused (`ForbiddenObject`),
//!   whichever plugin emitted it: every plugin's rules count, not only
//!   those of the plugins serving the pass.
//!
//! Routing: a plugin takes part in a pass only if it serves the runtime's
//! policies ([`Descriptor::serves`]: a plugin whose policy keys all name
//! a field, such as `mlPolicy.mpi`, is called only when the runtime sets
//! one of them). The decision is made from the info the host built, before any
//! plugin ran, so no plugin can pull another into a TrainJob or keep it
//! out; and a failing plugin costs only the TrainJobs whose runtime uses
//! its policy.
//!
//! [`Descriptor::serves`]: trainforge_api::plugin::Descriptor::serves

use super::Error;
use super::FailurePolicy;
use super::call::{GuestBudget, LoadedPlugin, PhaseInput, ValidateInput};
use super::observe::ignored_warning;
use super::output_check::{Owner, describe, rule_refusal};
use super::pod_policy::{Privilege, privileges};
use super::sandbox::CallScope;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use trainforge_api::plugin::{
    FieldError, Info, KindRef, Mutation, ObjectName, Phase, RuntimePolicy,
};

/// What a reconcile pass produced.
#[derive(Debug, Clone)]
pub struct ReconcileOutput {
    /// The in-memory TrainJob after every phase.
    pub trainjob: Value,
    /// The info after every enforce/pre-build phase.
    pub info: Info,
    /// Checked objects from every `build`, in plugin order.
    pub objects: Vec<Value>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`):
    /// plugin, phase, reason and message.
    pub warnings: Vec<String>,
}

/// A field error found by one plugin's `validate`.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginFieldError {
    /// The plugin's name.
    pub plugin: String,
    /// The error.
    pub error: FieldError,
}

/// What a validation pass produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidateOutput {
    /// Admission warnings of every plugin, in plugin order.
    pub warnings: Vec<String>,
    /// Field errors of every plugin, in plugin order.
    pub errors: Vec<PluginFieldError>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`).
    pub ignored: Vec<String>,
}

/// What a status pass produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusOutput {
    /// The new TrainJob status, or `None` to leave it.
    pub status: Option<Value>,
    /// One line per ignored plugin failure (`failurePolicy: Ignore`).
    pub warnings: Vec<String>,
}

/// How one plugin's `validate` call ended, for admission metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// Answered with no field errors.
    Ok,
    /// Answered with field errors.
    Denied,
    /// Failed (with the [`Error::reason`]) under `failurePolicy: Fail`.
    Failed(&'static str),
    /// Failed (with the [`Error::reason`]) under `failurePolicy: Ignore`.
    Ignored(&'static str),
}

/// One `validate` call made within a [`ValidateBudget`].
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// The plugin's name.
    pub plugin: String,
    /// How long the call took.
    pub elapsed: std::time::Duration,
    /// How it ended.
    pub outcome: CallOutcome,
}

/// The time budget of one admission request's validation pass, shared
/// between the thread running the plugins and the one waiting for them: the
/// deadline, the plugin being called right now, and a record of every call.
#[derive(Debug)]
pub struct ValidateBudget {
    deadline: std::time::Instant,
    running: std::sync::Mutex<Option<String>>,
    calls: std::sync::Mutex<Vec<CallRecord>>,
}

impl ValidateBudget {
    /// A budget ending `budget` from now.
    pub fn new(budget: std::time::Duration) -> Self {
        let now = std::time::Instant::now();
        ValidateBudget {
            deadline: now.checked_add(budget).unwrap_or(now),
            running: std::sync::Mutex::new(None),
            calls: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// What remains of the budget (zero once it is spent).
    pub fn remaining(&self) -> std::time::Duration {
        self.deadline
            .saturating_duration_since(std::time::Instant::now())
    }

    /// The plugin whose `validate` is running now, if any.
    pub fn running(&self) -> Option<String> {
        match self.running.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Every call finished so far, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        match self.calls.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set_running(&self, plugin: Option<&str>) {
        let v = plugin.map(str::to_owned);
        match self.running.lock() {
            Ok(mut g) => *g = v,
            Err(poisoned) => *poisoned.into_inner() = v,
        }
    }

    fn record(&self, call: CallRecord) {
        match self.calls.lock() {
            Ok(mut g) => g.push(call),
            Err(poisoned) => poisoned.into_inner().push(call),
        }
    }
}

/// An ordered set of plugins run as the Trainer framework pipeline. Cheap
/// to clone (one `Arc`), `Send + Sync`.
#[derive(Debug, Clone)]
pub struct PluginSet {
    plugins: Arc<[LoadedPlugin]>,
    /// The naming rules of every plugin in the set (not only those serving
    /// a pass: the rules protect names for every TrainJob), with the
    /// plugin that declared each.
    names: Arc<[(ObjectName, String)]>,
    /// Unique in this process: every set built gets its own (clones share it).
    id: u64,
}

/// The next [`PluginSet::id`].
fn next_set_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for PluginSet {
    fn default() -> Self {
        PluginSet {
            plugins: Arc::from(Vec::new()),
            names: Arc::from(Vec::new()),
            id: next_set_id(),
        }
    }
}

/// The time all plugin calls of one pass for a TrainJob (enforce phases
/// and build, every plugin) may take together, unless one plugin's own call
/// deadline is longer (an administrator granted it): then that. A single
/// call's default deadline is 1 s; a plugin that spins just under it in
/// every phase would otherwise cost several seconds of a worker per
/// reconcile, and never fail (so never back off).
pub const PASS_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// A pass's budget: the time its plugin calls spend in the guest (see
/// [`GuestBudget`]: preparing the code is not counted), and the error
/// of a call that finds nothing left or was cut short by it.
struct PassBudget {
    guest: GuestBudget,
}

impl PassBudget {
    fn new(serving: &[&LoadedPlugin]) -> Self {
        let budget = serving
            .iter()
            .map(|p| p.call_timeout())
            .fold(PASS_BUDGET, std::time::Duration::max);
        PassBudget {
            guest: GuestBudget::new(budget),
        }
    }

    fn spent(&self, p: &LoadedPlugin, phase: Phase) -> Error {
        Error::Budget {
            plugin: p.name().to_owned(),
            phase: phase.to_string(),
            budget_ms: u64::try_from(self.guest.limit().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The budget for `p`'s next call, or the budget error when nothing
    /// remains. Also returns the call's cap (what remained at its start).
    fn cap(
        &self,
        p: &LoadedPlugin,
        phase: Phase,
    ) -> Result<(&GuestBudget, std::time::Duration), Error> {
        let left = self.guest.remaining();
        if left.is_zero() {
            return Err(self.spent(p, phase));
        }
        Ok((&self.guest, left))
    }

    /// `r`, with a timeout the budget's cap caused (shorter than the
    /// plugin's own deadline) reported as the budget's.
    fn judge<T>(
        &self,
        p: &LoadedPlugin,
        phase: Phase,
        cap: std::time::Duration,
        r: Result<T, Error>,
    ) -> Result<T, Error> {
        match r {
            Err(Error::Timeout { .. }) if cap < p.call_timeout() => Err(self.spent(p, phase)),
            other => other,
        }
    }
}

/// The bytes of a pass's objects with `p`'s `objs` added to the
/// `before` emitted by the plugins before it, or the refusal of `p`'s
/// objects when that passes `max` (see
/// [`super::bounded::MAX_TRAINJOB_OBJECT_BYTES`]).
fn within_total(
    p: &LoadedPlugin,
    objs: &[Value],
    before: usize,
    max: usize,
) -> Result<usize, Error> {
    let total = objs
        .iter()
        .map(super::bounded::json_len)
        .fold(before, usize::saturating_add);
    if total > max {
        return Err(Error::invalid_output(
            p.name(),
            Phase::Build,
            format!(
                "its objects bring this TrainJob's to {total} bytes, more than the {max} bytes all plugins may emit for one TrainJob"
            ),
        ));
    }
    Ok(total)
}

/// Apply `p`'s failure policy to `r`: `Ignore` turns an error into a
/// logged warning (and `None`), `Fail` returns it. A pass over its budget
/// fails whatever the policy: the time is the TrainJob's, not the
/// plugin's; so does a call that found the plugin busy (ignoring it would
/// build the TrainJob without the plugin's changes only because others ran
/// at the same time).
fn per_policy<T>(
    p: &LoadedPlugin,
    phase: Phase,
    r: Result<T, Error>,
    warnings: &mut Vec<String>,
) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e @ (Error::Budget { .. } | Error::Busy { .. })) => Err(e),
        Err(e) if p.failure_policy() == FailurePolicy::Ignore => {
            let w = ignored_warning(p.name(), phase.as_str(), &e);
            tracing::warn!(plugin = %p.name(), phase = %phase, reason = e.reason(), error = %e, "plugin failure ignored (failurePolicy Ignore)");
            warnings.push(w);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl PluginSet {
    /// A set; order within a phase is the order given. At most one plugin
    /// may have the `status` phase called, and names must be unique.
    pub fn new(plugins: Vec<LoadedPlugin>) -> Result<Self, Error> {
        let mut names = BTreeSet::new();
        for p in &plugins {
            if !names.insert(p.name().to_owned()) {
                return Err(Error::LoadFailed {
                    plugin: p.name().to_owned(),
                    message: "duplicate plugin name".into(),
                });
            }
        }
        let status: Vec<&str> = plugins
            .iter()
            .filter(|p| p.calls(Phase::Status))
            .map(LoadedPlugin::name)
            .collect();
        if status.len() > 1 {
            return Err(Error::LoadFailed {
                plugin: status.join(","),
                message: "too many plugins implement the status phase".into(),
            });
        }
        let names = plugins
            .iter()
            .flat_map(|p| {
                p.descriptor()
                    .object_names
                    .iter()
                    .map(|n| (n.clone(), p.name().to_owned()))
            })
            .collect();
        Ok(PluginSet {
            plugins: plugins.into(),
            names,
            id: next_set_id(),
        })
    }

    /// Every plugin's naming rules, each with the plugin that declared it.
    pub fn naming_rules(&self) -> &[(ObjectName, String)] {
        &self.names
    }

    /// This set's identity: two sets with the same id are the same plugins
    /// with the same settings (ids are never reused within a process).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// The plugins that serve a runtime with `policy`, in order (see the
    /// module's routing rule).
    fn serving<'a>(
        &'a self,
        policy: &'a RuntimePolicy,
    ) -> impl Iterator<Item = &'a LoadedPlugin> + 'a {
        self.plugins
            .iter()
            .filter(|p| p.descriptor().serves(policy))
    }

    /// The runtime policies of `info` (an [`Info`] as JSON) when routing
    /// `phase` depends on them, else none (nothing is parsed).
    fn policy_for(&self, phase: Phase, info: &str) -> Result<RuntimePolicy, Error> {
        if !self
            .plugins
            .iter()
            .any(|p| p.calls(phase) && p.descriptor().routed_by_policy())
        {
            return Ok(RuntimePolicy::default());
        }
        /// Only the policies of an info; every other field is skipped.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Policies {
            #[serde(default)]
            runtime_policy: RuntimePolicy,
        }
        serde_json::from_str::<Policies>(info)
            .map(|p| p.runtime_policy)
            .map_err(|e| Error::Host(format!("reading the info's runtimePolicy: {e}")))
    }

    /// Run enforce-ml-policy → enforce-pod-group-policy → enforce-pod-spec →
    /// pre-build → build for the stored TrainJob `trainjob`, threading an
    /// in-memory copy of it and the info through every plugin (see the
    /// module rules). A failure stops the pass, unless the plugin's failure
    /// policy is `Ignore`: then its contribution to that phase is skipped
    /// and the failure is reported in [`ReconcileOutput::warnings`].
    pub fn reconcile(&self, trainjob: &Value, info: &Info) -> Result<ReconcileOutput, Error> {
        let _span = tracing::debug_span!("plugin_pipeline", plugins = self.plugins.len()).entered();
        let owner = Owner::from_stored(trainjob).map_err(Error::InvalidTrainJob)?;
        let scope = CallScope::of(&owner);
        let info_json = serde_json::to_value(info)
            .map_err(|e| Error::Host(format!("serialising info: {e}")))?;
        let mut input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: info_json.to_string(),
        };
        let mut seen = Seen {
            trainjob: privileges(trainjob),
            info: privileges(&info_json),
        };
        let mut warnings = Vec::new();
        let mut last_info_writer: Option<&str> = None;
        let serving: Vec<&LoadedPlugin> = self.serving(&info.runtime_policy).collect();
        let budget = PassBudget::new(&serving);
        for phase in [
            Phase::EnforceMlPolicy,
            Phase::EnforcePodGroupPolicy,
            Phase::EnforcePodSpec,
            Phase::PreBuild,
        ] {
            for p in serving.iter().filter(|p| p.calls(phase)) {
                let (guest, cap) = budget.cap(p, phase)?;
                let r = budget
                    .judge(
                        p,
                        phase,
                        cap,
                        p.enforce_within(phase, &input, &scope, Some(guest)),
                    )
                    .and_then(|m| contain_mutation(p, phase, &owner, &seen, m));
                let Some((m, after)) = per_policy(p, phase, r, &mut warnings)? else {
                    continue;
                };
                seen = after;
                if let Some(i) = m.info {
                    input.info = i;
                    last_info_writer = Some(p.name());
                }
                if let Some(t) = m.trainjob {
                    input.trainjob = t;
                }
            }
        }
        let mut objects = Vec::new();
        let mut names: BTreeMap<(KindRef, String), String> = BTreeMap::new();
        let max_bytes = serving
            .iter()
            .map(|p| p.max_output_bytes())
            .fold(super::bounded::MAX_TRAINJOB_OBJECT_BYTES, usize::max);
        let mut bytes = 0usize;
        for p in serving.iter().filter(|p| p.calls(Phase::Build)) {
            let (guest, cap) = budget.cap(p, Phase::Build)?;
            let r = budget
                .judge(
                    p,
                    Phase::Build,
                    cap,
                    p.build_within(&input, &owner, Some(guest)),
                )
                .and_then(|objs| contain_objects(p, &owner, &seen, &names, &self.names, objs))
                .and_then(|objs| within_total(p, &objs, bytes, max_bytes).map(|n| (objs, n)));
            if let Some((o, n)) = per_policy(p, Phase::Build, r, &mut warnings)? {
                bytes = n;
                for obj in &o {
                    names.insert(object_name(obj), p.name().to_owned());
                }
                objects.extend(o);
            }
        }
        let info: Info = serde_json::from_str(&input.info).map_err(|e| {
            Error::invalid_output(
                last_info_writer.unwrap_or("host"),
                Phase::PreBuild,
                format!("info does not match the info model: {e}"),
            )
        })?;
        let trainjob = serde_json::from_str(&input.trainjob)
            .map_err(|e| Error::Host(format!("TrainJob JSON: {e}")))?;
        Ok(ReconcileOutput {
            trainjob,
            info,
            objects,
            warnings,
        })
    }

    /// Run every `validate`, concatenating warnings and errors (ignored
    /// failures in [`ValidateOutput::ignored`]).
    pub fn validate(
        &self,
        trainjob: &Value,
        old: Option<&Value>,
        info: &Info,
    ) -> Result<ValidateOutput, Error> {
        let input = ValidateInput {
            trainjob: trainjob.to_string(),
            old_trainjob: old.map(Value::to_string),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        self.validate_input(&input)
    }

    /// [`PluginSet::validate`] with the input already serialised.
    pub fn validate_input(&self, input: &ValidateInput) -> Result<ValidateOutput, Error> {
        self.validate_input_within(input, None)
    }

    /// [`PluginSet::validate_input`] within a request budget (admission):
    /// each call gets the smaller of the plugin's own time limit and what
    /// remains of `budget`; a call that cannot start because nothing remains
    /// fails as a `Timeout` of that plugin. Either way the plugin's failure
    /// policy decides. Every call is recorded in `budget`, and the plugin
    /// being called is readable from another thread while it runs
    /// ([`ValidateBudget::running`]). `None`: the plugins' own limits only.
    pub fn validate_input_within(
        &self,
        input: &ValidateInput,
        budget: Option<&ValidateBudget>,
    ) -> Result<ValidateOutput, Error> {
        let mut out = ValidateOutput::default();
        let scope = scope_of_json(&input.trainjob);
        let policy = self.policy_for(Phase::Validate, &input.info)?;
        for p in self.serving(&policy).filter(|p| p.calls(Phase::Validate)) {
            let start = std::time::Instant::now();
            let result = match budget {
                None => p.validate(input, &scope),
                Some(b) => {
                    let remaining = b.remaining();
                    if remaining.is_zero() {
                        Err(Error::Timeout {
                            plugin: p.name().to_owned(),
                            phase: Phase::Validate.to_string(),
                            limit_ms: 0,
                        })
                    } else {
                        b.set_running(Some(p.name()));
                        let r = p.validate_within(input, &scope, Some(remaining));
                        b.set_running(None);
                        r
                    }
                }
            };
            if let Some(b) = budget {
                let outcome = match &result {
                    Ok(v) if v.errors.is_empty() => CallOutcome::Ok,
                    Ok(_) => CallOutcome::Denied,
                    Err(e) if p.failure_policy() == FailurePolicy::Ignore => {
                        CallOutcome::Ignored(e.reason())
                    }
                    Err(e) => CallOutcome::Failed(e.reason()),
                };
                b.record(CallRecord {
                    plugin: p.name().to_owned(),
                    elapsed: start.elapsed(),
                    outcome,
                });
            }
            let Some(v) = per_policy(p, Phase::Validate, result, &mut out.ignored)? else {
                continue;
            };
            out.warnings.extend(v.warnings);
            out.errors
                .extend(v.errors.into_iter().map(|error| PluginFieldError {
                    plugin: p.name().to_owned(),
                    error,
                }));
        }
        Ok(out)
    }

    /// Run the (single) `status` plugin, if any. An ignored failure gives
    /// `None` (and a log line); [`PluginSet::status_report`] also returns it
    /// as a warning.
    pub fn status(&self, trainjob: &Value, info: &Info) -> Result<Option<Value>, Error> {
        self.status_report(trainjob, info).map(|s| s.status)
    }

    /// Run the (single) `status` plugin, if any, with ignored failures.
    pub fn status_report(&self, trainjob: &Value, info: &Info) -> Result<StatusOutput, Error> {
        let info = serde_json::to_string(info)
            .map_err(|e| Error::Host(format!("serialising info: {e}")))?;
        self.status_report_json(trainjob, &info)
    }

    /// [`PluginSet::status_report`] with the info already serialised
    /// (`info` must be an [`Info`] as JSON; the operator keeps a render's
    /// info in this form).
    pub fn status_report_json(&self, trainjob: &Value, info: &str) -> Result<StatusOutput, Error> {
        let policy = self.policy_for(Phase::Status, info)?;
        let Some(p) = self.serving(&policy).find(|p| p.calls(Phase::Status)) else {
            return Ok(StatusOutput::default());
        };
        let input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: info.to_owned(),
        };
        let scope = Owner::from_stored(trainjob)
            .map(|o| CallScope::of(&o))
            .unwrap_or_default();
        let mut warnings = Vec::new();
        let status =
            per_policy(p, Phase::Status, p.status(&input, &scope), &mut warnings)?.flatten();
        Ok(StatusOutput { status, warnings })
    }
}

/// The pod privileges present in what the next plugin is given.
#[derive(Debug, Clone)]
struct Seen {
    trainjob: BTreeSet<Privilege>,
    info: BTreeSet<Privilege>,
}

impl Seen {
    fn contains(&self, p: &Privilege) -> bool {
        self.trainjob.contains(p) || self.info.contains(p)
    }
}

/// The scope of a call about the TrainJob in `json` (none if it has no
/// namespace).
fn scope_of_json(json: &str) -> CallScope {
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| Owner::from_stored(&v).ok())
        .map(|o| CallScope::of(&o))
        .unwrap_or_default()
}

/// Refuse what `p` added beyond its grants. Needing no grant: a resource
/// quantity up to one the runtime or TrainJob already asks for; a
/// reference to a Secret or ConfigMap named from the TrainJob
/// (`<trainjob>`, `<trainjob>-…`: the names its plugins emit, see
/// [`super::output_check`]); a projected service-account token whose
/// audience is this TrainJob's status endpoint ([`super::facts::status_audience`]: the
/// status server accepts it for this TrainJob only, from pods that run its
/// code anyway).
fn check_added<'a>(
    p: &LoadedPlugin,
    phase: &str,
    owner: &Owner,
    seen: &Seen,
    after: impl IntoIterator<Item = &'a Privilege>,
    what: impl Fn() -> String,
) -> Result<(), Error> {
    let own = |n: &str| {
        n == owner.name
            || n.strip_prefix(owner.name.as_str())
                .is_some_and(|rest| rest.starts_with('-'))
    };
    for privilege in after {
        if seen.contains(privilege) {
            continue;
        }
        if matches!(privilege, Privilege::SecretRef(n) | Privilege::ConfigMapRef(n) if own(n)) {
            continue;
        }
        if matches!(privilege, Privilege::ProjectedToken { audience, .. }
            if *audience == super::facts::status_audience(&owner.namespace, &owner.name))
        {
            continue;
        }
        if super::pod_policy::within_seen(privilege, seen.trainjob.iter().chain(&seen.info)) {
            continue;
        }
        if let Err(grant) = p.pod_grants().check(privilege) {
            return Err(Error::PodSecurity {
                plugin: p.name().to_owned(),
                phase: phase.to_owned(),
                message: format!(
                    "adds {privilege} to {}, which is beyond the Pod Security Standards baseline level or what plugins may change in pods by default; {grant} does not allow it",
                    what()
                ),
            });
        }
    }
    Ok(())
}

/// The containment checks of one enforce/pre-build answer (identity and
/// pod privileges); returns it with the privileges the next plugin sees.
fn contain_mutation(
    p: &LoadedPlugin,
    phase: Phase,
    owner: &Owner,
    before: &Seen,
    m: Mutation,
) -> Result<(Mutation, Seen), Error> {
    let mut after = before.clone();
    let parse = |what: &str, s: &str| {
        serde_json::from_str::<Value>(s)
            .map_err(|e| Error::invalid_output(p.name(), phase, format!("{what}: {e}")))
    };
    if let Some(t) = &m.trainjob {
        let v = parse("trainjob", t)?;
        if let Some(field) = owner.changed_field(&v) {
            return Err(Error::IdentityChanged {
                plugin: p.name().to_owned(),
                phase: phase.to_string(),
                field: field.to_owned(),
            });
        }
        after.trainjob = privileges(&v);
    }
    if let Some(i) = &m.info {
        after.info = privileges(&parse("info", i)?);
    }
    check_added(
        p,
        phase.as_str(),
        owner,
        before,
        after.trainjob.iter().chain(&after.info),
        || "the TrainJob or runtime info".to_owned(),
    )?;
    Ok((m, after))
}

fn object_name(o: &Value) -> (KindRef, String) {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        KindRef::new(s("/apiVersion"), s("/kind")),
        s("/metadata/name"),
    )
}

/// The containment checks of one `build` answer: pod privileges of every
/// object, and names not already emitted (by this or an earlier plugin).
fn contain_objects(
    p: &LoadedPlugin,
    owner: &Owner,
    seen: &Seen,
    earlier: &BTreeMap<(KindRef, String), String>,
    rules: &[(ObjectName, String)],
    objects: Vec<Value>,
) -> Result<Vec<Value>, Error> {
    let mut mine = BTreeSet::new();
    for o in &objects {
        let key = object_name(o);
        if let Some(message) = rule_refusal(&key.0, &key.1, owner, rules) {
            return Err(Error::ForbiddenObject {
                plugin: p.name().to_owned(),
                object: describe(o),
                message,
            });
        }
        let by = earlier
            .get(&key)
            .cloned()
            .or_else(|| mine.contains(&key).then(|| p.name().to_owned()));
        if let Some(by) = by {
            return Err(Error::ForbiddenObject {
                plugin: p.name().to_owned(),
                object: describe(o),
                message: format!("already emitted by plugin {by} in this pass"),
            });
        }
        mine.insert(key);
        check_added(p, "build", owner, seen, &privileges(o), || describe(o))?;
    }
    Ok(objects)
}
