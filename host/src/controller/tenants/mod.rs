//! Tenant plugins: a team installs a `TrainerPlugin` (`trainforge.dev/v1alpha1`,
//! namespaced) for the TrainJobs of its own namespace, without the cluster
//! trusting its code.
//!
//! - [`ceiling`]: the `TrainerPluginPolicy` named `default` caps what any
//!   tenant plugin may ask for (namespaces, sources, phases, kinds, limits,
//!   grants, pod security level); a `TrainerPlugin` asking for more is
//!   refused with `WithinPolicy=False` naming what.
//! - the controller: loads each `TrainerPlugin` as the ceiling allows (the
//!   same fetch → verify → compile stages as a `ClusterTrainerPlugin`) and
//!   writes its status; a tightened ceiling takes plugins that no longer fit
//!   out of service.
//! - [`TenantPlugins`]: the tenant plugins in service by namespace, the set
//!   each TrainJob gets (cluster plugins, then its namespace's tenant
//!   plugins whose selector matches), and per-namespace reconcile permits.
//!
//! Every containment rule of cluster plugins applies to tenant plugins too
//! (identity from the stored TrainJob, owned objects only, reads in the
//! TrainJob's namespace, pod policy on what the plugin changed), with the
//! ceiling on top: explicit emit and read lists, the restricted pod level
//! by default, capped limits.

pub mod ceiling;
mod controller;
pub mod offline;
mod state;

pub use ceiling::{Ceiling, Refusal};
pub use controller::{Error, RETRY_FAILED, run};
pub use state::{ComposeError, Composed, TenantPlugins, TenantRef};
