//! The plugin-facing data model exchanged (as JSON) between the host and Wasm
//! plugins: the runtime info a plugin sees and edits, and native mirrors of
//! the typed WIT envelope (`wit/plugin.wit`). The one builder of [`Info`]
//! from a TrainJob and its runtime is `crate::blueprint` (not on `wasm32`).
//!
//! Everything here is plain data plus pure helpers, so it builds for
//! `wasm32-wasip2` and is shared by the host and by every plugin.

mod envelope;
mod info;

pub use envelope::{
    Descriptor, FieldError, FieldErrorType, KindRef, Mutation, OBJECT_NAMES, ObjectKey, ObjectName,
    Phase, PluginError, Validation, WIT_VERSION, object_key,
};
pub use info::{
    ANCESTOR_LABEL, Container, Info, InfoError, PodSet, RuntimePolicy, Scheduler, TemplateSpec,
};
