//! Glue between the generated WIT exports and the [`Plugin`] trait.

use crate::Plugin;
use crate::bindings::exports::trainforge::plugin::guest::Guest;
use crate::bindings::exports::trainforge::plugin::naming;
use crate::bindings::trainforge::plugin::types as wit;
use crate::context::{PhaseContext, ValidateContext};
use crate::host::WasmHost;
use std::marker::PhantomData;
use trainforge_api::plugin::{Descriptor, FieldErrorType, KindRef, PluginError};

/// Adapter implementing the generated `Guest` trait for any [`Plugin`].
/// Used by [`crate::export_plugin!`]; not meant to be named by plugins.
pub struct Export<P>(PhantomData<P>);

/// Export a [`Plugin`] type as the component's `trainforge:plugin/guest`
/// implementation. Use once, at the root of a `cdylib` crate:
///
/// ```no_run
/// use trainforge_sdk::prelude::*;
///
/// #[derive(Default)]
/// struct MyPlugin;
///
/// impl Plugin for MyPlugin {
///     fn describe(&self) -> Descriptor {
///         DescriptorBuilder::new("my-plugin", "0.1.0").build()
///     }
/// }
///
/// trainforge_sdk::export_plugin!(MyPlugin);
/// ```
///
/// Expands to nothing on non-Wasm targets, so the same crate also builds
/// natively for unit tests.
#[macro_export]
macro_rules! export_plugin {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        mod __trainforge_sdk_export {
            #[allow(unused_imports)]
            use super::*;
            type TrainforgeSdkExport = $crate::Export<$ty>;
            $crate::bindings::export!(TrainforgeSdkExport with_types_in $crate::bindings);
        }
    };
}

fn kinds(v: Vec<KindRef>) -> Vec<wit::KindRef> {
    v.into_iter()
        .map(|k| wit::KindRef {
            api_version: k.api_version,
            kind: k.kind,
        })
        .collect()
}

fn descriptor(d: Descriptor) -> wit::Descriptor {
    wit::Descriptor {
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

fn error(e: PluginError) -> wit::PluginError {
    match e {
        PluginError::InvalidConfig(m) => wit::PluginError::InvalidConfig(m),
        PluginError::InvalidInput(m) => wit::PluginError::InvalidInput(m),
        PluginError::Unavailable(m) => wit::PluginError::Unavailable(m),
        PluginError::Internal(m) => wit::PluginError::Internal(m),
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, wit::PluginError> {
    serde_json::to_string(v).map_err(|e| wit::PluginError::Internal(format!("serialise: {e}")))
}

fn mutate(
    input: wit::PhaseInput,
    f: impl FnOnce(&mut PhaseContext) -> Result<(), PluginError>,
) -> Result<wit::Mutation, wit::PluginError> {
    let host = WasmHost;
    let mut ctx = PhaseContext::from_json_lazy(&input.trainjob, &input.info, &input.config, &host)
        .map_err(error)?;
    let result = f(&mut ctx);
    if let Some(e) = ctx.input_error() {
        return Err(error(e));
    }
    result.map_err(error)?;
    let (info, trainjob) = ctx.changed_json().map_err(error)?;
    discard(ctx);
    discard(input);
    Ok(wit::Mutation { info, trainjob })
}

/// Each call runs in a fresh instance that is thrown away afterwards:
/// freeing large parsed values piece by piece would only cost time.
fn discard<T>(value: T) {
    std::mem::forget(value);
}

impl<P: Plugin> naming::Guest for Export<P> {
    fn object_names() -> Vec<naming::ObjectName> {
        P::default()
            .describe()
            .object_names
            .into_iter()
            .map(|n| naming::ObjectName {
                kind: wit::KindRef {
                    api_version: n.kind.api_version,
                    kind: n.kind.kind,
                },
                suffix: n.suffix,
            })
            .collect()
    }
}

impl<P: Plugin> Guest for Export<P> {
    fn describe() -> wit::Descriptor {
        descriptor(P::default().describe())
    }

    fn enforce_ml_policy(input: wit::PhaseInput) -> Result<wit::Mutation, wit::PluginError> {
        mutate(input, |c| P::default().enforce_ml_policy(c))
    }

    fn enforce_pod_group_policy(input: wit::PhaseInput) -> Result<wit::Mutation, wit::PluginError> {
        mutate(input, |c| P::default().enforce_pod_group_policy(c))
    }

    fn enforce_pod_spec(input: wit::PhaseInput) -> Result<wit::Mutation, wit::PluginError> {
        mutate(input, |c| P::default().enforce_pod_spec(c))
    }

    fn pre_build(input: wit::PhaseInput) -> Result<wit::Mutation, wit::PluginError> {
        mutate(input, |c| P::default().pre_build(c))
    }

    fn build(input: wit::PhaseInput) -> Result<Vec<String>, wit::PluginError> {
        let host = WasmHost;
        let ctx = PhaseContext::from_json_lazy(&input.trainjob, &input.info, &input.config, &host)
            .map_err(error)?;
        let objects = P::default().build(&ctx);
        if let Some(e) = ctx.input_error() {
            return Err(error(e));
        }
        let objects = objects.map_err(error)?;
        let out = objects.iter().map(to_json).collect();
        discard((ctx, objects));
        discard(input);
        out
    }

    fn validate(input: wit::ValidateInput) -> Result<wit::Validation, wit::PluginError> {
        let host = WasmHost;
        let ctx = ValidateContext::from_json(
            &input.trainjob,
            input.old_trainjob.as_deref(),
            &input.info,
            &input.config,
            &host,
        )
        .map_err(error)?;
        let v = P::default().validate(&ctx);
        if let Some(e) = ctx.input_error() {
            return Err(error(e));
        }
        let v = v.map_err(error)?;
        discard(ctx);
        discard(input);
        Ok(wit::Validation {
            warnings: v.warnings,
            errors: v
                .errors
                .into_iter()
                .map(|e| wit::FieldError {
                    error_type: match e.error_type {
                        FieldErrorType::NotFound => wit::FieldErrorType::NotFound,
                        FieldErrorType::Required => wit::FieldErrorType::Required,
                        FieldErrorType::Duplicate => wit::FieldErrorType::Duplicate,
                        FieldErrorType::Invalid => wit::FieldErrorType::Invalid,
                        FieldErrorType::NotSupported => wit::FieldErrorType::NotSupported,
                        FieldErrorType::Forbidden => wit::FieldErrorType::Forbidden,
                        FieldErrorType::TooLong => wit::FieldErrorType::TooLong,
                        FieldErrorType::TooMany => wit::FieldErrorType::TooMany,
                        FieldErrorType::Internal => wit::FieldErrorType::Internal,
                        FieldErrorType::TypeInvalid => wit::FieldErrorType::TypeInvalid,
                    },
                    field: e.field,
                    bad_value: e.bad_value,
                    detail: e.detail,
                })
                .collect(),
        })
    }

    fn status(input: wit::PhaseInput) -> Result<Option<String>, wit::PluginError> {
        let host = WasmHost;
        let ctx = PhaseContext::from_json_lazy(&input.trainjob, &input.info, &input.config, &host)
            .map_err(error)?;
        let status = P::default().status(&ctx);
        if let Some(e) = ctx.input_error() {
            return Err(error(e));
        }
        let status = status.map_err(error)?;
        let out = status.as_ref().map(to_json).transpose();
        discard((ctx, status));
        discard(input);
        out
    }
}
