//! [`PluginSet`]: an ordered set of loaded plugins run as the Trainer
//! framework pipeline (phases in order, TrainJob and info threaded
//! through), validation and status.

use super::Error;
use super::call::{LoadedPlugin, PhaseInput, ValidateInput};
use super::observe::{FailurePolicy, ignored_warning};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use trainforge_api::plugin::{FieldError, Info, Phase};

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

/// An ordered set of plugins run as the Trainer framework pipeline. Cheap
/// to clone (one `Arc`), `Send + Sync`.
#[derive(Debug, Clone, Default)]
pub struct PluginSet {
    plugins: Arc<[LoadedPlugin]>,
}

/// Apply `p`'s failure policy to `r`: `Ignore` turns an error into a
/// logged warning (and `None`), `Fail` returns it.
fn per_policy<T>(
    p: &LoadedPlugin,
    phase: Phase,
    r: Result<T, Error>,
    warnings: &mut Vec<String>,
) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
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
        Ok(PluginSet {
            plugins: plugins.into(),
        })
    }

    /// The plugins, in order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// Run enforce-ml-policy → enforce-pod-group-policy → enforce-pod-spec →
    /// pre-build → build, threading the TrainJob and info through every
    /// plugin. A failure stops the pass, unless the plugin's failure policy
    /// is `Ignore`: then its contribution to that phase is skipped and the
    /// failure is reported in [`ReconcileOutput::warnings`].
    pub fn reconcile(&self, trainjob: &Value, info: &Info) -> Result<ReconcileOutput, Error> {
        let _span = tracing::debug_span!("plugin_pipeline", plugins = self.plugins.len()).entered();
        let mut input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut warnings = Vec::new();
        let mut last_info_writer: Option<&str> = None;
        for phase in [
            Phase::EnforceMlPolicy,
            Phase::EnforcePodGroupPolicy,
            Phase::EnforcePodSpec,
            Phase::PreBuild,
        ] {
            for p in self.plugins.iter().filter(|p| p.calls(phase)) {
                let Some(m) = per_policy(p, phase, p.enforce(phase, &input), &mut warnings)? else {
                    continue;
                };
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
        for p in self.plugins.iter().filter(|p| p.calls(Phase::Build)) {
            if let Some(o) = per_policy(p, Phase::Build, p.build(&input), &mut warnings)? {
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
        let mut out = ValidateOutput::default();
        for p in self.plugins.iter().filter(|p| p.calls(Phase::Validate)) {
            let Some(v) = per_policy(p, Phase::Validate, p.validate(input), &mut out.ignored)?
            else {
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
        let Some(p) = self.plugins.iter().find(|p| p.calls(Phase::Status)) else {
            return Ok(StatusOutput::default());
        };
        let input = PhaseInput {
            trainjob: trainjob.to_string(),
            info: serde_json::to_string(info)
                .map_err(|e| Error::Host(format!("serialising info: {e}")))?,
        };
        let mut warnings = Vec::new();
        let status = per_policy(p, Phase::Status, p.status(&input), &mut warnings)?.flatten();
        Ok(StatusOutput { status, warnings })
    }
}
