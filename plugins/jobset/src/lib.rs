//! JobSet: the builtin plugin that turns the runtime info into the
//! `jobset.x-k8s.io/v1alpha2` JobSet of a TrainJob (Kubeflow Trainer's
//! `plugins/jobset`). It runs for every TrainJob (no policy key).
//!
//! - **pre-build** ([`prebuild`]): pod DNS names
//!   `<job>-<rjob>-<replica>-<pod>.<subdomain>` into every pod set, and
//!   `parallelism`/`completions` of each replicated job := its pod set count.
//! - **build** ([`builder`]): the JobSet, unless it already exists and
//!   neither the TrainJob nor the JobSet is suspended ("frozen once
//!   running": a running JobSet is never re-applied). An existing JobSet
//!   keeps the parts JobSet makes immutable ([`immutable`]).
//! - **status** ([`status`]): JobSet `Completed`/`Failed` → TrainJob
//!   `Complete`/`Failed`, `jobsStatus` from `replicatedJobsStatus`,
//!   `restarts`/`restartsCountTowardsMax` from the JobSet's.
//! - **validate** ([`validate`]): initializer jobs/containers/mounts,
//!   runtime patches, override immutability, the failure policy
//!   ([`failure`]), and a warning when `spec.trainer` cannot apply because
//!   no job has the trainer label.

pub mod builder;
pub mod failure;
pub mod immutable;
mod json;
pub mod prebuild;
pub mod status;
pub mod validate;

use trainforge_sdk::api::jobset::v1alpha2 as jobset;
use trainforge_sdk::prelude::*;

/// The JobSet kind (emitted, read and watched).
pub fn jobset_kind() -> KindRef {
    KindRef::new(jobset::API_VERSION, jobset::KIND)
}

/// The plugin. Stateless.
#[derive(Default)]
pub struct JobSetPlugin;

fn get_jobset(host: &dyn Host, namespace: &str, name: &str) -> Result<Option<Value>, PluginError> {
    host.get_object(&jobset_kind(), namespace, name)
        .map_err(|e| PluginError::Unavailable(format!("reading JobSet {namespace}/{name}: {e}")))
}

impl Plugin for JobSetPlugin {
    fn describe(&self) -> Descriptor {
        DescriptorBuilder::new("jobset", env!("CARGO_PKG_VERSION"))
            .phase(Phase::PreBuild)
            .phase(Phase::Build)
            .phase(Phase::Validate)
            .phase(Phase::Status)
            .emits(jobset::API_VERSION, jobset::KIND)
            .object_name(jobset::API_VERSION, jobset::KIND, "")
            .reads(jobset::API_VERSION, jobset::KIND)
            .watches(jobset::API_VERSION, jobset::KIND)
            .build()
    }

    fn pre_build(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
        let name = ctx.trainjob_name().to_owned();
        prebuild::pre_build(ctx.info_mut(), &name)
    }

    fn build(&self, ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        let (name, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        let existing = get_jobset(ctx.host(), ns, name)?;
        if let Some(existing) = &existing {
            let tj_suspended = ctx
                .trainjob()
                .pointer("/spec/suspend")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let js_suspended = existing
                .pointer("/spec/suspend")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !tj_suspended && !js_suspended {
                return Ok(Vec::new());
            }
        }
        let mut js =
            builder::build_jobset(name, ns, ctx.trainjob(), ctx.info(), ctx.owner_reference())?;
        if let Some(existing) = &existing {
            immutable::keep_frozen_parts(&mut js, existing);
            builder::prune_empty_metadata(&mut js);
        }
        Ok(vec![js])
    }

    fn status(&self, ctx: &PhaseContext) -> Result<Option<Value>, PluginError> {
        let (name, ns) = (ctx.trainjob_name(), ctx.trainjob_namespace());
        match get_jobset(ctx.host(), ns, name)? {
            Some(js) => Ok(Some(status::trainjob_status(
                ctx.trainjob().get("status"),
                &js,
            ))),
            None => match status::when_missing(ctx.trainjob()) {
                status::Missing::KeepStatus => Ok(None),
                status::Missing::Retry => Err(PluginError::Unavailable(format!(
                    "JobSet {ns}/{name} not found (yet)"
                ))),
            },
        }
    }

    fn validate(&self, ctx: &ValidateContext) -> Result<Validation, PluginError> {
        let cfg: validate::Config = ctx.config_as()?;
        let s = |p: &str| {
            ctx.trainjob()
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (name, ns) = (s("/metadata/name"), s("/metadata/namespace"));
        let lookup = || {
            ctx.host()
                .get_object(&jobset_kind(), &ns, &name)
                .map_err(|e| format!("failed to get JobSet {ns}/{name}: {e}"))
        };
        Ok(validate::validate(
            ctx.trainjob(),
            ctx.old_trainjob(),
            ctx.info(),
            &cfg,
            &lookup,
        ))
    }
}

trainforge_sdk::export_plugin!(JobSetPlugin);

#[cfg(test)]
mod tests;
