//! The TrainJob controller: where a TrainJob becomes a JobSet.
//!
//! For each TrainJob ([`reconcile`](reconcile::reconcile)):
//! 1. `managedBy` someone else → leave it alone;
//! 2. resolve the runtime through its snapshot ([`snapshot`]);
//! 3. unless the job has finished, build the objects with the pure
//!    [`pipeline`](crate::pipeline) and the plugin set in service — only if
//!    the set can serve TrainJobs ([`serving`]) — and server-side apply
//!    every object ([`apply`]; manager `trainer`, force; unchanged objects
//!    are not written);
//! 4. conditions (`Suspended`, the status plugin's `Complete`/`Failed` and
//!    `jobsStatus`, the active deadline, `Failed/InvalidTrainJob`, and the
//!    extensions `PluginsReady`, `Blocked`, `RuntimePatchesIgnored` —
//!    [`conditions`]) written through the status subresource only when they
//!    changed;
//! 5. Events for the important transitions ([`events`]).
//!
//! A TrainJob is reconciled when it changes apart from its status (the
//! operator's own status writes trigger nothing), when an object it
//! controls changes, and every resync period. Steps 3's plugin calls and
//! apply are skipped when nothing the last render depended on changed
//! ([`render_memo`]).
//!
//! Child objects of every kind the plugins declared are watched
//! ([`objects`]) and map back to their controlling TrainJob. A TrainJob
//! that found no plugin set able to serve it, or no serving plugin for a
//! policy of its runtime, is reconciled again as soon as the set in service
//! changes to one that can serve; a change of the set re-renders every
//! unfinished TrainJob, and [`rollout`] tells how far that got.

pub mod apply;
pub mod batch;
pub mod conditions;
mod context;
mod controller;
pub mod decide;
pub mod events;
pub mod fair;
pub mod legacy;
pub mod objects;
pub mod pod_failures;
pub mod ready_edge;
pub mod reconcile;
pub mod render_memo;
pub mod rollout;
pub mod serving;
pub mod snapshot;
pub mod write_budget;

pub use context::{
    CONTROLLER_NAME, Context, EVENT_REPORTER, FixedPlugins, NO_PLUGINS_RETRY, Plugins, Settings,
};
pub use controller::{WAKE_SETTLE, run};
pub use objects::ObjectCache;
pub use reconcile::ReconcileError;
pub use serving::{Degraded, NotServing};
