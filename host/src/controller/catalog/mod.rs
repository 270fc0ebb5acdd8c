//! The `ClusterTrainerPlugin` controller and the plugin catalog.
//!
//! Platform teams add, upgrade or roll back a framework plugin by editing a
//! `ClusterTrainerPlugin` (`trainforge.dev/v1alpha1`, cluster scoped); the
//! operator swaps it in at run time with no restart:
//!
//! 1. [`fetch`]: the component bytes — a builtin by name, a ConfigMap's
//!    `binaryData` key, an `https://` URL or a `file://` path, bounded in
//!    size (`Fetched`);
//! 2. the sha256 is checked against `spec.sha256` (`Verified`);
//! 3. [`spec`] maps limits, grants, config and policy to a
//!    [`PluginSource`](crate::plugin::PluginSource), and the runtime compiles
//!    (or takes from its artifact cache), links and describes it in
//!    `spawn_blocking` (`Compiled`);
//! 4. [`PluginCatalog`] builds a new [`PluginSet`](crate::plugin::PluginSet)
//!    from every serving plugin sorted by `(order, name)` and swaps it in
//!    atomically (`Ready`).
//!
//! A version that fails any step leaves the last good version of that plugin
//! serving and sets `Degraded=True` with the reason; pointing the CR back at
//! an earlier digest rolls back (compiled artifacts are cached by digest).
//! The status records the serving spec (`servingSpec`, `servingDigest`,
//! `servingGeneration`), so a restarted operator brings the last good
//! version back even while the current spec fails.
//! Deleting a CR removes its plugin (the controller sees the object leave its
//! reflector; no finalizer). [`status`] writes the status subresource only
//! when it changes, so a resync writes nothing; [`rollout`] writes how far
//! a new version has reached the unfinished TrainJobs.
//!
//! The TrainJob controller takes [`PluginCatalog::current`] once per
//! reconcile (in-flight reconciles keep the set they started with) and
//! watches [`PluginCatalog::kinds`].

mod controller;
pub mod fetch;
mod kinds;
pub mod rollout;
pub mod spec;
mod state;
pub mod status;

pub(crate) use controller::{Loader, Pin, Tenancy, attempt, restore_with, rises};
pub use controller::{Options, run, run_with};
pub(crate) use state::{Attempt, Entry, Serving, Stage, StageName};
pub use state::{PluginCatalog, PluginReport};

/// Field manager of the status writes.
pub const FIELD_MANAGER: &str = "trainforge-plugins";

/// Errors of the plugin configuration controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call (status write) failed.
    #[error("{kind} {name}: {action}: {source}")]
    Kube {
        /// The CR's kind (`ClusterTrainerPlugin`, `TrainerPlugin`).
        kind: &'static str,
        /// The CR's name.
        name: String,
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// Serialising the status patch failed.
    #[error("{kind} {name}: serialising status: {source}")]
    Serialize {
        /// The CR's kind.
        kind: &'static str,
        /// The CR's name.
        name: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The HTTPS client could not be built.
    #[error("building the HTTPS client: {0}")]
    HttpClient(String),
}
