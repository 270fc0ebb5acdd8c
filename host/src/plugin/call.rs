//! A loaded plugin and its calls: a fresh `Store` per call from the cached
//! `InstancePre`, epoch deadline, memory cap, output bounds, error mapping.

use super::bindings::{PluginPre, wit};
use super::engine::{Limits, deadline_ticks};
use super::output_check::{Owner, check_objects};
use super::registry::ObjectSource;
use super::sandbox::{CallState, PluginContext};
use super::Error;
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
/// clone; safe to call from many threads (each call has its own store).
#[derive(Clone)]
pub struct LoadedPlugin {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) tick: Duration,
    pub(crate) pre: PluginPre<CallState>,
    pub(crate) descriptor: Descriptor,
    pub(crate) sha256: String,
    pub(crate) config: String,
    pub(crate) emits: BTreeSet<KindRef>,
    pub(crate) ctx: Arc<PluginContext>,
    pub(crate) objects: Arc<dyn ObjectSource>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.inner.descriptor.name)
            .field("sha256", &self.inner.sha256)
            .finish_non_exhaustive()
    }
}

fn plugin_error(e: wit::PluginError) -> PluginError {
    match e {
        wit::PluginError::InvalidConfig(m) => PluginError::InvalidConfig(m),
        wit::PluginError::InvalidInput(m) => PluginError::InvalidInput(m),
        wit::PluginError::Unavailable(m) => PluginError::Unavailable(m),
        wit::PluginError::Internal(m) => PluginError::Internal(m),
    }
}

pub(crate) fn descriptor_from_wit(d: wit::Descriptor) -> Descriptor {
    let kinds = |v: Vec<wit::KindRef>| {
        v.into_iter().map(|k| KindRef { api_version: k.api_version, kind: k.kind }).collect()
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
    }
}

/// Run `f` against a fresh instance with the plugin's limits and map every
/// failure to an [`Error`] naming the plugin and phase.
pub(crate) fn with_instance<R>(
    engine: &Engine,
    tick: Duration,
    pre: &PluginPre<CallState>,
    ctx: &Arc<PluginContext>,
    objects: &Arc<dyn ObjectSource>,
    phase: &str,
    f: impl FnOnce(&mut Store<CallState>, &super::bindings::Plugin) -> wasmtime::Result<R>,
) -> Result<R, Error> {
    let limits: Limits = ctx.limits;
    let mut store = Store::new(engine, CallState::new(ctx.clone(), objects.clone()));
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(deadline_ticks(limits.timeout, tick));
    store.epoch_deadline_trap();
    let result = pre.instantiate(&mut store).and_then(|instance| f(&mut store, &instance));
    result.map_err(|e| {
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
                limit_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
            };
        }
        let stderr = state.stderr_text();
        let mut message = match e.downcast_ref::<Trap>() {
            Some(t) => t.to_string(),
            None => format!("{e:#}"),
        };
        if !stderr.is_empty() {
            message.push_str("; stderr: ");
            message.push_str(&stderr);
        }
        Error::Trap { plugin: ctx.name.clone(), phase: phase.to_owned(), message }
    })
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

    fn call<R>(
        &self,
        phase: &str,
        f: impl FnOnce(&mut Store<CallState>, &super::bindings::Plugin) -> wasmtime::Result<R>,
    ) -> Result<R, Error> {
        let i = &self.inner;
        let span = tracing::debug_span!("plugin_call", plugin = %i.descriptor.name, phase = %phase);
        let _enter = span.enter();
        let start = Instant::now();
        let r = with_instance(&i.engine, i.tick, &i.pre, &i.ctx, &i.objects, phase, f);
        match &r {
            Ok(_) => tracing::debug!(elapsed_us = start.elapsed().as_micros() as u64, "plugin call done"),
            Err(e) => tracing::warn!(reason = e.reason(), error = %e, "plugin call failed"),
        }
        r
    }

    fn check_size(&self, phase: Phase, n: usize) -> Result<(), Error> {
        let max = self.inner.ctx.limits.max_output_bytes;
        if n > max {
            return Err(Error::invalid_output(
                self.name(),
                phase,
                format!("output of {n} bytes exceeds the {max}-byte limit"),
            ));
        }
        Ok(())
    }

    fn expected(&self, phase: Phase, e: wit::PluginError) -> Error {
        Error::Plugin { plugin: self.name().to_owned(), phase: phase.to_string(), error: plugin_error(e) }
    }

    /// Run an enforce or pre-build phase. The returned JSON (if any) is
    /// checked to be well-formed and within the output bound.
    pub fn enforce(&self, phase: Phase, input: &PhaseInput) -> Result<Mutation, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.inner.config.clone(),
        };
        let r = self.call(phase.as_str(), |store, p| {
            let g = p.trainforge_plugin_guest();
            match phase {
                Phase::EnforceMlPolicy => g.call_enforce_ml_policy(store, &wit_input),
                Phase::EnforcePodGroupPolicy => g.call_enforce_pod_group_policy(store, &wit_input),
                Phase::EnforcePodSpec => g.call_enforce_pod_spec(store, &wit_input),
                Phase::PreBuild => g.call_pre_build(store, &wit_input),
                Phase::Build | Phase::Validate | Phase::Status => {
                    Err(wasmtime::Error::msg(format!("{phase} is not an enforce phase")))
                }
            }
        })?;
        let m = r.map_err(|e| self.expected(phase, e))?;
        let size = m.info.as_ref().map_or(0, String::len) + m.trainjob.as_ref().map_or(0, String::len);
        self.check_size(phase, size)?;
        for (what, s) in [("info", &m.info), ("trainjob", &m.trainjob)] {
            if let Some(s) = s {
                // Validate without building a tree (the next plugin parses it).
                if !s.trim_start().starts_with('{') {
                    return Err(Error::invalid_output(self.name(), phase, format!("{what} is not a JSON object")));
                }
                if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(s) {
                    return Err(Error::invalid_output(self.name(), phase, format!("{what} is not valid JSON: {e}")));
                }
            }
        }
        Ok(Mutation { info: m.info, trainjob: m.trainjob })
    }

    /// Run `build` and check every object (see [`super::output_check`]).
    pub fn build(&self, input: &PhaseInput) -> Result<Vec<Value>, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.inner.config.clone(),
        };
        let r = self.call("build", |store, p| p.trainforge_plugin_guest().call_build(store, &wit_input))?;
        let raw = r.map_err(|e| self.expected(Phase::Build, e))?;
        self.check_size(Phase::Build, raw.iter().map(String::len).sum())?;
        let trainjob: Value = serde_json::from_str(&input.trainjob).unwrap_or(Value::Null);
        check_objects(self.name(), &self.inner.emits, &Owner::from_trainjob(&trainjob), raw)
    }

    /// Run `validate` (admission).
    pub fn validate(&self, input: &ValidateInput) -> Result<Validation, Error> {
        let wit_input = wit::ValidateInput {
            trainjob: input.trainjob.clone(),
            old_trainjob: input.old_trainjob.clone(),
            info: input.info.clone(),
            config: self.inner.config.clone(),
        };
        let r = self.call("validate", |store, p| p.trainforge_plugin_guest().call_validate(store, &wit_input))?;
        let v = r.map_err(|e| self.expected(Phase::Validate, e))?;
        let size = v.warnings.iter().map(String::len).sum::<usize>()
            + v.errors.iter().map(|e| e.field.len() + e.detail.len() + e.bad_value.as_ref().map_or(0, String::len)).sum::<usize>();
        self.check_size(Phase::Validate, size)?;
        Ok(Validation {
            warnings: v.warnings,
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
                    field: e.field,
                    bad_value: e.bad_value,
                    detail: e.detail,
                })
                .collect(),
        })
    }

    /// Run `status`: the new TrainJob status JSON, or `None`.
    pub fn status(&self, input: &PhaseInput) -> Result<Option<Value>, Error> {
        let wit_input = wit::PhaseInput {
            trainjob: input.trainjob.clone(),
            info: input.info.clone(),
            config: self.inner.config.clone(),
        };
        let r = self.call("status", |store, p| p.trainforge_plugin_guest().call_status(store, &wit_input))?;
        let s = r.map_err(|e| self.expected(Phase::Status, e))?;
        match s {
            None => Ok(None),
            Some(s) => {
                self.check_size(Phase::Status, s.len())?;
                serde_json::from_str(&s)
                    .map(Some)
                    .map_err(|e| Error::invalid_output(self.name(), Phase::Status, format!("status is not valid JSON: {e}")))
            }
        }
    }

    /// Call `describe` again (fresh instance) — used by benchmarks and `inspect`.
    pub fn describe_fresh(&self) -> Result<Descriptor, Error> {
        self.call("describe", |store, p| p.trainforge_plugin_guest().call_describe(store))
            .map(descriptor_from_wit)
    }
}
