//! The controllers: everything that reconciles objects with the API server.
//!
//! - [`trainjob`]: the TrainJob controller (runtime snapshot → the pure
//!   [`pipeline`](crate::pipeline) → server-side apply → status).
//! - [`catalog`]: the `ClusterTrainerPlugin` controller that fetches,
//!   verifies, compiles and hot-swaps the plugin set in service (the Wasm
//!   runtime itself is [`crate::plugin`]).
//! - [`tenants`]: the `TrainerPlugin` controller (tenant plugins, capped by
//!   the `TrainerPluginPolicy`) and the per-TrainJob plugin set.
//!
//! `trainforge operator` ([`crate::cmd::operator`]) wires them together with
//! the admission webhooks ([`crate::admission`]) and the shared operations
//! ([`crate::ops`]).

pub mod catalog;
pub mod tenants;
pub mod trainjob;

use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

/// Resolves when `shutdown` comes before `store` has had its first list:
/// each controller ends its result stream on it (`take_until`).
///
/// kube-runtime holds every reconcile until the store is ready, and its
/// graceful shutdown stops polling the watch but keeps it (and so the
/// store's writer): a shutdown before the first list waits forever for a
/// list that no longer comes (an operator that lost its Lease the moment
/// its controllers started never exited). Then no reconcile can have
/// started, so the controller may end at once. Once the store is ready,
/// the graceful shutdown (in-flight reconciles finish) applies and this
/// never resolves.
pub(crate) async fn stopped_before_ready<K>(store: Store<K>, shutdown: CancellationToken)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    use futures::FutureExt;
    shutdown.cancelled().await;
    if store.wait_until_ready().now_or_never().is_some() {
        std::future::pending::<()>().await;
    }
}
