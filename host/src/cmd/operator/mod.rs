//! `trainforge operator`: wires the controllers, the plugin catalog, the
//! watch cache, health/metrics endpoints and leader election together.
//!
//! Start-up is a list of named stages ([`run`]; one function each in
//! `stages.rs`): endpoints (so probes answer at once) → plugin runtime →
//! Lease election → watch cache → plugin catalog synced from the
//! `ClusterTrainerPlugin`s (or the builtin set) → admission webhooks →
//! watches of every kind the plugins declared → leadership (standby
//! replicas wait here) → TrainJob controller → shutdown. Every replica loads
//! the plugins and serves admission; only the leader reconciles TrainJobs
//! and writes `ClusterTrainerPlugin` statuses. Shutdown (SIGTERM, Ctrl-C, or
//! losing the Lease): controllers drain, then the Lease is released so a
//! standby takes over at once. Losing the Lease is an error
//! ([`OperatorError::LeaseLost`], exit code 1): the pod restarts and rejoins
//! the election as a standby, as controller-runtime operators do.
//!
//! Readiness (`/readyz`): `caches` passes once the watches have listed;
//! `plugins` passes exactly while the plugin set in service can serve
//! TrainJobs (one of its plugins calls `build`), which can change at any
//! time with the `ClusterTrainerPlugin`s. While it fails, its reason names
//! the plugins not serving and why (`/readyz?verbose`, and the log); while
//! it passes with configured plugins not serving, it is degraded and names
//! them and why (the operator stays ready: TrainJobs that do not need them
//! are served).

mod args;
mod error;
mod stages;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use args::OperatorArgs;
pub use error::OperatorError;
use stages::Operator;

use crate::ops::metrics::Metrics;

/// Blocking entry point for the CLI.
pub fn main(args: OperatorArgs) -> Result<(), OperatorError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    stages::endpoints(&args)?;
    rt.block_on(async move {
        let deadline = args.shutdown_timeout_seconds;
        let shutdown =
            crate::ops::shutdown::on_signal((deadline > 0).then(|| Duration::from_secs(deadline)))?;
        let clients = crate::ops::client::operator_clients().await?;
        run(clients, args, shutdown).await
    })
}

/// Run the operator until `shutdown` is cancelled (`Ok`) or the Lease is
/// lost ([`OperatorError::LeaseLost`]). The stages, in order (one
/// function each in `stages.rs`):
///
/// 1. `health`: the readiness checks, and the `/healthz`,
///    `/readyz`, `/metrics` servers (a secure `/metrics` bound only);
/// 2. `plugin_runtime`: the Wasm runtime and its
///    idle-code sweeper;
/// 3. `leader_election`: join the election for
///    the Lease;
/// 4. `object_cache`: the watch cache, its
///    TrainJob triggers parked until this replica leads;
/// 5. `plugins`: the builtin set, or the catalog synced
///    from the `ClusterTrainerPlugin`s and the `TrainerPlugin` controller;
/// 6. `admission`: certificates, webhooks and the secure
///    `/metrics`, started beside the controllers;
/// 7. `watches`: every kind the plugins need, listed,
///    then following the plugin set;
/// 8. `controllers`: wait for leadership, then the
///    TrainJob controller until shutdown or the Lease is lost;
/// 9. `shutdown`: everything else stopped, the Lease
///    released.
///
/// Shut down while a stage waits (5, 7, 8): `Ok` at once.
pub async fn run(
    clients: crate::ops::client::Clients,
    args: OperatorArgs,
    shutdown: CancellationToken,
) -> Result<(), OperatorError> {
    let op = Operator {
        client: clients.client,
        unretried: clients.unretried,
        args,
        metrics: Arc::new(Metrics::new()),
        shutdown,
    };
    let (checks, secure_metrics) = stages::health(&op).await?;
    let runtime = stages::plugin_runtime(&op)?;
    let leader = stages::leader_election(&op).await?;
    let (objects, triggers) = stages::object_cache(&op);
    let Some(mut loaded) =
        stages::plugins(&op, &runtime, &objects, &leader, &checks.plugins).await?
    else {
        return Ok(());
    };
    stages::admission(&op, &loaded, &runtime, &checks.admission, secure_metrics);
    let Some(()) = stages::watches(&op, &objects, &mut loaded, &checks.caches).await else {
        return Ok(());
    };
    let Some(lease) = stages::controllers(&op, &leader, triggers, &loaded, objects).await? else {
        return Ok(());
    };
    stages::shutdown(&op, loaded, leader, lease).await
}
