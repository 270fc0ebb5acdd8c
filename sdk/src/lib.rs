//! The Trainforge plugin SDK. See also the crate README (`sdk/README.md`).
//!
//! A Trainforge plugin is a Wasm component (`wasm32-wasip2`) implementing the
//! `trainforge:plugin@0.1.0` world (`wit/plugin.wit`). With this crate you:
//!
//! 1. implement [`Plugin`] — only the phases you need; every phase has a
//!    default that changes nothing;
//! 2. export it with [`export_plugin!`];
//! 3. unit-test it natively with [`testing::Harness`] (no Wasm needed);
//! 4. build it with `cargo build --profile plugin --target wasm32-wasip2`.
//!
//! ```no_run
//! use trainforge_sdk::prelude::*;
//!
//! #[derive(Default)]
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn describe(&self) -> Descriptor {
//!         DescriptorBuilder::new("hello", "0.1.0")
//!             .policy_key("mlPolicy.hello")
//!             .phase(Phase::EnforceMlPolicy)
//!             .build()
//!     }
//!
//!     fn enforce_ml_policy(&self, ctx: &mut PhaseContext) -> Result<(), PluginError> {
//!         if ctx.policy("mlPolicy.hello").is_some() {
//!             ctx.set_env("node", "node", "HELLO", "world")?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! trainforge_sdk::export_plugin!(Hello);
//! ```
//!
//! What the host guarantees and enforces (time and memory limits, no
//! filesystem/network/env/clock, checks on emitted objects) is described in
//! `wit/plugin.wit` and the SDK README.

mod context;
mod descriptor;
mod export;
mod host;
mod lazy_info;
pub mod quantity;
mod raw_object;
pub mod testing;

/// Generated guest bindings of `wit/plugin.wit` (wit-bindgen). Plugins
/// normally never use these directly.
#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin-with-names",
        pub_export_macro: true,
        default_bindings_module: "trainforge_sdk::bindings",
    });
}

pub use context::{PhaseContext, ValidateContext};
pub use descriptor::DescriptorBuilder;
#[doc(hidden)]
pub use export::Export;
pub use host::{Host, HostError, LogLevel};
pub use k8s_openapi;
pub use serde;
pub use serde_json;
pub use trainforge_api as api;
pub use trainforge_api::plugin::{
    ANCESTOR_LABEL, Container, Descriptor, FieldError, FieldErrorType, Info, KindRef, Mutation,
    Phase, PluginError, PodSet, Validation, WIT_VERSION,
};

/// Everything a plugin usually needs: `use trainforge_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Container, Descriptor, DescriptorBuilder, FieldError, FieldErrorType, Host, HostError,
        Info, KindRef, LogLevel, Phase, PhaseContext, Plugin, PluginError, PodSet, ValidateContext,
        Validation,
    };
    pub use serde_json::{Value, json};
}

use serde_json::Value;

/// A Trainforge plugin. Implement [`Plugin::describe`] and the phases you
/// list there; the defaults leave the TrainJob and info unchanged.
///
/// A fresh value (`Default`) is created for every call: plugins are
/// stateless between calls (the host runs each call in a fresh instance).
///
/// The reconcile phases and `build` must depend only on the TrainJob
/// without its status, the info, the configuration and what they read
/// through the host: the operator reuses their last result while none of
/// that changed (an object read is compared without its status), and calls
/// them again at least once per resync period. `status` is called on every
/// reconcile.
pub trait Plugin: Default {
    /// Name, versions, policy keys, phases and the kinds the plugin emits and
    /// reads. The host only calls phases listed here.
    fn describe(&self) -> Descriptor;

    /// EnforceMLPolicy: apply the runtime's `mlPolicy` to the info.
    fn enforce_ml_policy(&self, _ctx: &mut PhaseContext) -> Result<(), PluginError> {
        Ok(())
    }

    /// EnforcePodGroupPolicy: apply the runtime's `podGroupPolicy`.
    fn enforce_pod_group_policy(&self, _ctx: &mut PhaseContext) -> Result<(), PluginError> {
        Ok(())
    }

    /// EnforcePodSpec: pod-set edits not driven by a policy.
    fn enforce_pod_spec(&self, _ctx: &mut PhaseContext) -> Result<(), PluginError> {
        Ok(())
    }

    /// PreComponentBuilder: consolidate the info with the concrete template.
    fn pre_build(&self, _ctx: &mut PhaseContext) -> Result<(), PluginError> {
        Ok(())
    }

    /// ComponentBuilder: the Kubernetes objects to apply (JSON values). Each
    /// must be of a kind listed in `emits`, in the TrainJob's namespace.
    fn build(&self, _ctx: &PhaseContext) -> Result<Vec<Value>, PluginError> {
        Ok(Vec::new())
    }

    /// CustomValidation: admission warnings and field errors.
    fn validate(&self, _ctx: &ValidateContext) -> Result<Validation, PluginError> {
        Ok(Validation::default())
    }

    /// TrainJobStatus: the new TrainJob status, or `None` to leave it.
    fn status(&self, _ctx: &PhaseContext) -> Result<Option<Value>, PluginError> {
        Ok(None)
    }
}
