//! A loaded plugin and its calls: a fresh `Store` per call from the cached
//! `InstancePre`, epoch deadline, memory cap, output bounds, error mapping.

use super::Error;
use super::FailurePolicy;
use super::bindings::{PluginPre, wit};
use super::bounded::{self, MAX_FIELD_ERRORS, MAX_WARNINGS};
use super::code::Code;
use super::engine::{EpochTicker, Limits, deadline_ticks};
use super::observe::ObserverSlot;
use super::output_check::{Owner, check_objects};
use super::pod_policy::PodGrants;
use super::sandbox::{CallScope, CallState, PluginContext, WaitDenied};
use super::source::ObjectSource;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trainforge_api::plugin::{
    Descriptor, FieldError, FieldErrorType, KindRef, Mutation, Phase, PluginError, Validation,
};
use wasmtime::{Engine, Store, Trap};

/// Input of a reconcile phase (JSON strings, threaded through the pipeline).
#[derive(Debug, Clone, Default)]
pub struct PhaseInput {
    /// TrainJob JSON.
    pub trainjob: String,
    /// Info JSON.
    pub info: String,
}

/// Input of `validate`.
#[derive(Debug, Clone, Default)]
pub struct ValidateInput {
    /// TrainJob JSON.
    pub trainjob: String,
    /// Old TrainJob JSON on update.
    pub old_trainjob: Option<String>,
    /// Info JSON.
    pub info: String,
}

/// A compiled, linked and described plugin, ready to be called. Cheap to
/// clone (one `Arc`); `Send + Sync`: call it from many threads at once
/// (each call has its own store and instance).
#[derive(Clone)]
pub struct LoadedPlugin {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) env: CallEnv,
    pub(crate) descriptor: Descriptor,
    pub(crate) sha256: String,
    pub(crate) config: String,
    /// The operator's facts, for a plugin that declared and was granted
    /// them ([`super::facts`]).
    pub(crate) facts: Option<Arc<super::HostFacts>>,
    /// Kinds `build` may return: declared `emits`, narrowed by the
    /// administrator and checked against the host-wide rules at load.
    pub(crate) emits: BTreeSet<KindRef>,
    /// Pod privileges the plugin may add beyond the baseline level.
    pub(crate) pod_grants: PodGrants,
    /// Whether the component is one of the binary's builtin plugins.
    pub(crate) builtin: bool,
    pub(crate) failure_policy: FailurePolicy,
    /// Phases the configuration allows (`None` = all implemented).
    pub(crate) phases: Option<BTreeSet<Phase>>,
    /// The name the call observer sees: the plugin's name, or
    /// `<namespace>/<name>` for a tenant plugin.
    pub(crate) observed_name: String,
    /// Its calls at once in reconcile passes (`limits.concurrency`), shared
    /// by every clone: every TrainJob's pass takes its slots here.
    pub(crate) slots: Option<Slots>,
}

/// The bound on one plugin's calls at once (`limits.concurrency`). Rule: a
/// reconcile pass's call (an enforce phase or `build`) takes a slot before
/// it runs and gives it back when it ends; one that finds none free within
/// the plugin's call deadline fails [`Error::Busy`] without running (its
/// TrainJob backs off and its reconcile turn goes to another). Waiting is
/// not the plugin's time: it is charged to no pass budget. Calls run on
/// blocking threads (`spawn_blocking`), so the wait blocks only its own.
pub(crate) struct Slots {
    max: u16,
    taken: std::sync::Mutex<u16>,
    freed: std::sync::Condvar,
}

/// A taken slot, given back when dropped.
struct Slot<'a>(&'a Slots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut taken = self.0.taken.lock().unwrap_or_else(|p| p.into_inner());
        *taken = taken.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Slots {
    pub(crate) fn new(max: std::num::NonZeroU16) -> Self {
        Slots {
            max: max.get(),
            taken: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
        }
    }

    /// A slot, waiting at most `wait` for one; `None` if none came free.
    fn take(&self, wait: Duration) -> Option<Slot<'_>> {
        let deadline = Instant::now() + wait;
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        while *taken >= self.max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            taken = self
                .freed
                .wait_timeout(taken, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *taken += 1;
        Some(Slot(self))
    }
}

/// What every call of one plugin needs: engine, its epoch ticker (kept
/// alive by the plugin), its linked code (see [`super::code`]), limits and
/// grants, the object source and the observer.
pub(crate) struct CallEnv {
    pub(crate) engine: Engine,
    pub(crate) tick: Duration,
    pub(crate) _ticker: Arc<EpochTicker>,
    pub(crate) code: Code,
    pub(crate) ctx: Arc<PluginContext>,
    pub(crate) objects: Arc<dyn ObjectSource>,
    pub(crate) observer: Arc<ObserverSlot>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.inner.descriptor.name)
            .field("sha256", &self.inner.sha256)
            .finish_non_exhaustive()
    }
}

/// A plugin's error, its message sanitised and bounded.
fn plugin_error(e: wit::PluginError) -> PluginError {
    let m = |s: String| bounded::message(&s);
    match e {
        wit::PluginError::InvalidConfig(s) => PluginError::InvalidConfig(m(s)),
        wit::PluginError::InvalidInput(s) => PluginError::InvalidInput(m(s)),
        wit::PluginError::Unavailable(s) => PluginError::Unavailable(m(s)),
        wit::PluginError::Internal(s) => PluginError::Internal(m(s)),
    }
}

pub(crate) fn descriptor_from_wit(d: wit::Descriptor) -> Descriptor {
    let kinds = |v: Vec<wit::KindRef>| {
        v.into_iter()
            .map(|k| KindRef {
                api_version: k.api_version,
                kind: k.kind,
            })
            .collect()
    };
    Descriptor {
        name: d.name,
        version: d.version,
        wit_version: d.wit_version,
        policy_keys: d.policy_keys,
        phases: d.phases,
        emits: kinds(d.emits),
        reads: kinds(d.reads),
        watches: kinds(d.watches),
        capabilities: d.capabilities,
        object_names: Vec::new(),
    }
}

/// Time spent inside guest calls, against a limit several calls share (the
/// plugin calls of one pass for a TrainJob). Only instantiation and the
/// call itself count, the span the call's own epoch deadline covers:
/// preparing the code (compiling or mapping it the first time) is the
/// host's time, not the plugin's. Not shared between threads: one pass
/// runs on one.
#[derive(Debug)]
pub struct GuestBudget {
    limit: Duration,
    spent: std::cell::Cell<Duration>,
}

impl GuestBudget {
    /// A budget of `limit`, nothing spent.
    pub fn new(limit: Duration) -> Self {
        GuestBudget {
            limit,
            spent: std::cell::Cell::new(Duration::ZERO),
        }
    }

    /// The budget's limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// What remains (zero when spent).
    pub fn remaining(&self) -> Duration {
        self.limit.saturating_sub(self.spent.get())
    }

    fn charge(&self, d: Duration) {
        self.spent.set(self.spent.get().saturating_add(d));
    }
}

/// Run `f` against a fresh instance with the plugin's limits and map every
/// failure to an [`Error`] naming the plugin and phase. Also returns the
/// instance's linear-memory high-water mark and the time from
/// instantiation to the end of `f` (what the epoch deadline bounds).
pub(crate) fn with_instance<R>(
    env: &CallEnv,
    phase: &str,
    scope: &CallScope,
    timeout: Duration,
    f: impl FnOnce(&mut Store<CallState>, &super::bindings::Plugin) -> wasmtime::Result<R>,
) -> (Result<R, Error>, usize, Duration) {
    with_instance_of(env, phase, scope, timeout, |pre, s| pre.instantiate(s), f)
}

/// [`with_instance`] with the instance made by `instantiate` from the
/// plugin's linked code (for a world other than `plugin`, such as
/// `plugin-with-names`); the same limits and the same errors.
pub(crate) fn with_instance_of<I, R>(
    env: &CallEnv,
    phase: &str,
    scope: &CallScope,
    timeout: Duration,
    instantiate: impl FnOnce(&PluginPre<CallState>, &mut Store<CallState>) -> wasmtime::Result<I>,
    f: impl FnOnce(&mut Store<CallState>, &I) -> wasmtime::Result<R>,
) -> (Result<R, Error>, usize, Duration) {
    let ctx = &env.ctx;
    let limits: Limits = ctx.limits;
    let pre = match env.code.pre() {
        Ok(pre) => pre,
        Err(e) => return (Err(e), 0, Duration::ZERO),
    };
    let in_guest = Instant::now();
    let mut store = Store::new(
        &env.engine,
        CallState::new(ctx.clone(), env.objects.clone(), scope.clone()),
    );
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(deadline_ticks(timeout, env.tick));
    store.epoch_deadline_trap();
    let result = match instantiate(&pre, &mut store) {
        Ok(instance) => f(&mut store, &instance),
        Err(e)
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                .is_some() =>
        {
            let high_water = store.data().limiter.high_water;
            return (
                Err(Error::Host(format!(
                    "plugin {}: {phase}: too many plugin calls at once ({e}); raise RuntimeConfig::max_concurrent_calls",
                    ctx.name
                ))),
                high_water,
                in_guest.elapsed(),
            );
        }
        Err(e) => Err(e),
    };
    let in_guest = in_guest.elapsed();
    let high_water = store.data().limiter.high_water;
    let result = result.map_err(|e| {
        let state = store.data();
        if state.limiter.exceeded {
            return Error::MemoryLimit {
                plugin: ctx.name.clone(),
                phase: phase.to_owned(),
                limit_bytes: limits.memory_bytes,
            };
        }
        if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return Error::Timeout {
                plugin: ctx.name.clone(),
                phase: phase.to_owned(),
                limit_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            };
        }
        if state.waited || e.downcast_ref::<WaitDenied>().is_some() {
            return Error::Trap {
                plugin: ctx.name.clone(),
                phase: phase.to_owned(),
                message: WaitDenied.to_string(),
            };
        }
        let stderr = state.stderr_text();
        let mut message = match e.downcast_ref::<Trap>() {
            Some(t) => t.to_string(),
            None => bounded::message(&format!("{e:#}")),
        };
        if !stderr.is_empty() {
            message.push_str("; stderr: ");
            message.push_str(&bounded::message(&stderr));
        }
        Error::Trap {
            plugin: ctx.name.clone(),
            phase: phase.to_owned(),
            message,
        }
    });
    (result, high_water, in_guest)
}

impl LoadedPlugin {
    /// The plugin's descriptor (from `describe` at load time).
    pub fn descriptor(&self) -> &Descriptor {
        &self.inner.descriptor
    }

    /// The plugin name.
    pub fn name(&self) -> &str {
        &self.inner.descriptor.name
    }

    /// sha256 of the component bytes.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// Whether the plugin implements `phase`.
    pub fn implements(&self, phase: Phase) -> bool {
        self.inner.descriptor.implements(phase)
    }

    /// The deadline of one call (the runtime's default or the plugin's
    /// own limit).
    pub fn call_timeout(&self) -> Duration {
        self.inner.env.ctx.limits.timeout
    }

    /// The bound on one call's output (the runtime's default or the
    /// plugin's own limit).
    pub fn max_output_bytes(&self) -> usize {
        self.inner.env.ctx.limits.max_output_bytes
    }

    /// The linear-memory cap of one instance (the runtime's default or the
    /// plugin's own limit).
    pub fn memory_bytes(&self) -> usize {
        self.inner.env.ctx.limits.memory_bytes
    }

    /// The configured failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.failure_policy
    }

    /// The kinds `build` may return: declared `emits` narrowed by the
    /// administrator and checked against the host-wide rules.
    pub fn allowed_emits(&self) -> &BTreeSet<KindRef> {
        &self.inner.emits
    }

    /// Whether this plugin builds TrainJobs' JobSets: its `build` is called
    /// and it may emit `jobset.x-k8s.io` JobSets. Without one such plugin
    /// in service no TrainJob gets a JobSet.
    pub fn builds_jobsets(&self) -> bool {
        self.calls(Phase::Build)
            && self
                .allowed_emits()
                .iter()
                .any(|k| k.group() == "jobset.x-k8s.io" && k.kind == "JobSet")
    }

    /// The kinds `host.get-object` serves to this plugin.
    pub fn allowed_reads(&self) -> &BTreeSet<KindRef> {
        &self.inner.env.ctx.reads
    }

    /// The pod privileges this plugin may add beyond the baseline level.
    pub fn pod_grants(&self) -> &PodGrants {
        &self.inner.pod_grants
    }

    /// The namespace of the `TrainerPlugin` serving this plugin, for a
    /// tenant plugin.
    pub fn tenant(&self) -> Option<&str> {
        self.inner.observed_name.split_once('/').map(|(ns, _)| ns)
    }

    /// Whether the component is one of the binary's builtin plugins.
    pub fn is_builtin(&self) -> bool {
        self.inner.builtin
    }

    /// Whether the plugin's compiled code is mapped now: always for a
    /// plugin whose code stays resident, only while in use for a builtin
    /// with its artifact on disk (see [`PluginRuntime::release_idle`]).
    ///
    /// [`PluginRuntime::release_idle`]: super::PluginRuntime::release_idle
    pub fn code_mapped(&self) -> bool {
        self.inner.env.code.is_mapped()
    }

    /// Whether the pipeline calls `phase` on this plugin: it implements it
    /// and the configuration's `phases` (if set) includes it.
    pub fn calls(&self, phase: Phase) -> bool {
        self.implements(phase)
            && self
                .inner
                .phases
                .as_ref()
                .is_none_or(|only| only.contains(&phase))
    }

    /// One observed guest call: a fresh instance runs `f`, then `post`
    /// checks the answer; the observer sees the outcome of both.
    fn call<R, T>(
        &self,
        phase: &str,
        scope: &CallScope,
        f: impl FnOnce(&mut Store<CallState>, &super::bindings::Plugin) -> wasmtime::Result<R>,
        post: impl FnOnce(R) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.call_within(phase, scope, None, None, f, post)
    }

    /// [`LoadedPlugin::call`] with an optional cap on the call's time: the
    /// call's deadline is the smaller of the plugin's own time limit, `cap`
    /// and what remains of `budget` (neither lengthens a call); the time
    /// spent in the guest is charged to `budget`. A call with a budget is a
    /// reconcile pass's: it takes one of the plugin's [`Slots`] first.
    fn call_within<R, T>(
        &self,
        phase: &str,
        scope: &CallScope,
        cap: Option<Duration>,
        budget: Option<&GuestBudget>,
        f: impl FnOnce(&mut Store<CallState>, &super::bindings::Plugin) -> wasmtime::Result<R>,
        post: impl FnOnce(R) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let i = &self.inner;
        let span = tracing::debug_span!("plugin_call", plugin = %i.descriptor.name, phase = %phase);
        let _enter = span.enter();
        let start = Instant::now();
        let cap = match (cap, budget) {
            (Some(c), Some(b)) => Some(c.min(b.remaining())),
            (c, b) => c.or(b.map(GuestBudget::remaining)),
        };
        let timeout = effective_timeout(i.env.ctx.limits.timeout, cap);
        let _slot = match (&i.slots, budget) {
            (Some(slots), Some(_)) => match slots.take(i.env.ctx.limits.timeout) {
                Some(slot) => Some(slot),
                None => {
                    let e = Error::Busy {
                        plugin: i.descriptor.name.clone(),
                        phase: phase.to_owned(),
                        concurrency: slots.max,
                        waited_ms: u64::try_from(i.env.ctx.limits.timeout.as_millis())
                            .unwrap_or(u64::MAX),
                    };
                    tracing::warn!(reason = e.reason(), error = %e, "plugin call not started");
                    i.env.observer.notify(
                        &i.observed_name,
                        phase,
                        start.elapsed(),
                        Some(e.reason()),
                        0,
                    );
                    return Err(e);
                }
            },
            _ => None,
        };
        let (r, high_water, in_guest) = with_instance(&i.env, phase, scope, timeout, f);
        if let Some(b) = budget {
            b.charge(in_guest);
        }
        let r = r.and_then(post);
        let elapsed = start.elapsed();
        match &r {
            Ok(_) => tracing::debug!(
                elapsed_us = elapsed.as_micros() as u64,
                high_water,
                "plugin call done"
            ),
            // "Not available yet" (e.g. a JobSet not in the cache right
            // after it was created) is a normal race, retried soon.
            Err(
                e @ Error::Plugin {
                    error: PluginError::Unavailable(_),
                    ..
                },
            ) => tracing::debug!(reason = e.reason(), error = %e, "plugin call: not available yet"),
            Err(e) => tracing::warn!(reason = e.reason(), error = %e, "plugin call failed"),
        }
        i.env.observer.notify(
            &i.observed_name,
            phase,
            elapsed,
            r.as_ref().err().map(Error::reason),
            high_water,
        );
        r
    }

    fn check_size(&self, phase: Phase, n: usize) -> Result<(), Error> {
        let max = self.inner.env.ctx.limits.max_output_bytes;
        if n > max {
            return Err(Error::invalid_output(
                self.name(),
                phase,
                format!("output of {n} bytes exceeds the {max}-byte limit"),
            ));
        }
        Ok(())
    }

    /// The configuration a call of `phase` gets: the administrator's, with
    /// the operator's facts when the plugin asked for and was granted them
    /// ([`super::facts`]). Facts promised but not ready yet fail the call
    /// as `Unavailable` (retried) before the plugin runs.
    fn config_for(&self, phase: Phase) -> Result<String, Error> {
        match &self.inner.facts {
            None => Ok(self.inner.config.clone()),
            Some(f) => f
                .config_with_facts(&self.inner.config)
                .map_err(|e| Error::Plugin {
                    plugin: self.name().to_owned(),
                    phase: phase.to_string(),
                    error: PluginError::Unavailable(e.to_string()),
                }),
        }
    }

    fn expected(&self, phase: Phase, e: wit::PluginError) -> Error {
        Error::Plugin {
            plugin: self.name().to_owned(),
            phase: phase.to_string(),
            error: plugin_error(e),
        }
    }

    /// Run an enforce or pre-build phase. The returned JSON (if any) is
    /// checked to be well-formed and within the output bound.
    pub fn enforce(
        &self,
        phase: Phase,
        input: &PhaseInput,
        scope: &CallScope,
    ) -> Result<Mutation, Error> {
        self.enforce_within(phase, input, scope, None)
    }

    /// [`LoadedPlugin::enforce`] within `budget`: the call gets the smaller
    /// of the plugin's own time limit and what remains of `budget`, and its
    /// time in the guest is charged to it (a pass's plugin calls share
    /// one). `None` is the plugin's own limit.
    pub fn enforce_within(
        &self,
        phase: Phase,
        input: &PhaseInput,
        scope: &CallScope,
        budget: Option<&GuestBudget>,
    ) -> Result<Mutation, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.config_for(phase)?,
        };
        self.call_within(
            phase.as_str(),
            scope,
            None,
            budget,
            |store, p| {
                let g = p.trainforge_plugin_guest();
                match phase {
                    Phase::EnforceMlPolicy => g.call_enforce_ml_policy(store, &wit_input),
                    Phase::EnforcePodGroupPolicy => {
                        g.call_enforce_pod_group_policy(store, &wit_input)
                    }
                    Phase::EnforcePodSpec => g.call_enforce_pod_spec(store, &wit_input),
                    Phase::PreBuild => g.call_pre_build(store, &wit_input),
                    Phase::Build | Phase::Validate | Phase::Status => Err(wasmtime::Error::msg(
                        format!("{phase} is not an enforce phase"),
                    )),
                }
            },
            |r| {
                let m = r.map_err(|e| self.expected(phase, e))?;
                let size = m.info.as_ref().map_or(0, String::len)
                    + m.trainjob.as_ref().map_or(0, String::len);
                self.check_size(phase, size)?;
                for (what, s) in [("info", &m.info), ("trainjob", &m.trainjob)] {
                    if let Some(s) = s {
                        // Validate without building a tree (the next plugin parses it).
                        if !s.trim_start().starts_with('{') {
                            return Err(Error::invalid_output(
                                self.name(),
                                phase,
                                format!("{what} is not a JSON object"),
                            ));
                        }
                        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(s) {
                            return Err(Error::invalid_output(
                                self.name(),
                                phase,
                                format!("{what} is not valid JSON: {e}"),
                            ));
                        }
                    }
                }
                Ok(Mutation {
                    info: m.info,
                    trainjob: m.trainjob,
                })
            },
        )
    }

    /// Run `build` for the TrainJob `owner` (identity from the stored
    /// object) and check every object (see [`super::output_check`]).
    pub fn build(&self, input: &PhaseInput, owner: &Owner) -> Result<Vec<Value>, Error> {
        self.build_within(input, owner, None)
    }

    /// [`LoadedPlugin::build`] within `budget` (as
    /// [`LoadedPlugin::enforce_within`]).
    pub fn build_within(
        &self,
        input: &PhaseInput,
        owner: &Owner,
        budget: Option<&GuestBudget>,
    ) -> Result<Vec<Value>, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.config_for(Phase::Build)?,
        };
        self.call_within(
            "build",
            &CallScope::of(owner),
            None,
            budget,
            |store, p| p.trainforge_plugin_guest().call_build(store, &wit_input),
            |r| {
                let raw = r.map_err(|e| self.expected(Phase::Build, e))?;
                self.check_size(Phase::Build, raw.iter().map(String::len).sum())?;
                check_objects(self.name(), &self.inner.emits, owner, raw)
            },
        )
    }

    /// Run `validate` (admission). At most [`MAX_WARNINGS`] warnings and
    /// [`MAX_FIELD_ERRORS`] field errors; every text sanitised and bounded.
    pub fn validate(&self, input: &ValidateInput, scope: &CallScope) -> Result<Validation, Error> {
        self.validate_within(input, scope, None)
    }

    /// [`LoadedPlugin::validate`] within `cap`: the call gets the smaller of
    /// the plugin's own time limit and `cap` (admission gives each call what
    /// remains of its request budget). `None` is the plugin's own limit.
    pub fn validate_within(
        &self,
        input: &ValidateInput,
        scope: &CallScope,
        cap: Option<Duration>,
    ) -> Result<Validation, Error> {
        let wit_input = wit::ValidateInput {
            trainjob: input.trainjob.clone(),
            old_trainjob: input.old_trainjob.clone(),
            info: input.info.clone(),
            config: self.config_for(Phase::Validate)?,
        };
        self.call_within(
            "validate",
            scope,
            cap,
            None,
            |store, p| p.trainforge_plugin_guest().call_validate(store, &wit_input),
            |r| {
                let v = r.map_err(|e| self.expected(Phase::Validate, e))?;
                if v.warnings.len() > MAX_WARNINGS || v.errors.len() > MAX_FIELD_ERRORS {
                    return Err(Error::invalid_output(
                        self.name(),
                        Phase::Validate,
                        format!(
                            "{} warnings and {} field errors; at most {MAX_WARNINGS} and {MAX_FIELD_ERRORS}",
                            v.warnings.len(),
                            v.errors.len()
                        ),
                    ));
                }
                let size = v.warnings.iter().map(String::len).sum::<usize>()
                    + v.errors
                        .iter()
                        .map(|e| {
                            e.field.len()
                                + e.detail.len()
                                + e.bad_value.as_ref().map_or(0, String::len)
                        })
                        .sum::<usize>();
                self.check_size(Phase::Validate, size)?;
                Ok(validation_from_wit(v))
            },
        )
    }

    /// Run `status`: the new TrainJob status JSON, or `None`.
    pub fn status(&self, input: &PhaseInput, scope: &CallScope) -> Result<Option<Value>, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.config_for(Phase::Status)?,
        };
        self.call(
            "status",
            scope,
            |store, p| p.trainforge_plugin_guest().call_status(store, &wit_input),
            |r| match r.map_err(|e| self.expected(Phase::Status, e))? {
                None => Ok(None),
                Some(s) => {
                    self.check_size(Phase::Status, s.len())?;
                    let invalid = |m: String| Error::invalid_output(self.name(), Phase::Status, m);
                    let status: Value = serde_json::from_str(&s)
                        .map_err(|e| invalid(format!("status is not valid JSON: {e}")))?;
                    if let Some(why) = bounded::status_refusal(&s, &status) {
                        return Err(invalid(why));
                    }
                    Ok(Some(status))
                }
            },
        )
    }

    /// Call `describe` again (fresh instance) — used by benchmarks and `inspect`.
    /// The answer is `describe`'s alone: the naming rules are read once, at
    /// load ([`LoadedPlugin::descriptor`] has them).
    pub fn describe_fresh(&self) -> Result<Descriptor, Error> {
        self.call(
            "describe",
            &CallScope::default(),
            |store, p| p.trainforge_plugin_guest().call_describe(store),
            |d| Ok(descriptor_from_wit(d)),
        )
    }
}

/// The deadline of one call: the plugin's own limit, or `cap` when that is
/// shorter.
fn effective_timeout(own: Duration, cap: Option<Duration>) -> Duration {
    cap.map_or(own, |c| c.min(own))
}

fn validation_from_wit(v: wit::Validation) -> Validation {
    let m = |s: String| bounded::message(&s);
    Validation {
        warnings: v.warnings.into_iter().map(m).collect(),
        errors: v
            .errors
            .into_iter()
            .map(|e| FieldError {
                error_type: match e.error_type {
                    wit::FieldErrorType::NotFound => FieldErrorType::NotFound,
                    wit::FieldErrorType::Required => FieldErrorType::Required,
                    wit::FieldErrorType::Duplicate => FieldErrorType::Duplicate,
                    wit::FieldErrorType::Invalid => FieldErrorType::Invalid,
                    wit::FieldErrorType::NotSupported => FieldErrorType::NotSupported,
                    wit::FieldErrorType::Forbidden => FieldErrorType::Forbidden,
                    wit::FieldErrorType::TooLong => FieldErrorType::TooLong,
                    wit::FieldErrorType::TooMany => FieldErrorType::TooMany,
                    wit::FieldErrorType::Internal => FieldErrorType::Internal,
                    wit::FieldErrorType::TypeInvalid => FieldErrorType::TypeInvalid,
                },
                field: bounded::sanitize(&e.field, 256),
                bad_value: e.bad_value.map(m),
                detail: m(e.detail),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The slots rule: at most `max` taken; a taker waits at most its time
    /// for one, and gets the one a holder gives back.
    #[test]
    fn slots_bound_calls_at_once_and_wait_only_so_long() {
        let slots = Arc::new(Slots::new(std::num::NonZeroU16::new(2).unwrap()));
        let a = slots.take(Duration::ZERO).unwrap();
        let _b = slots.take(Duration::ZERO).unwrap();
        let started = Instant::now();
        assert!(slots.take(Duration::from_millis(50)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        // A slot given back while another waits goes to the waiter.
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || slots.take(Duration::from_secs(10)).is_some())
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        assert!(waiter.join().unwrap());
        // The waiter's slot went back when its thread ended.
        assert!(slots.take(Duration::ZERO).is_some());
    }
}
