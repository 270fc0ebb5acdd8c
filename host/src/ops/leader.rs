//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager).
//!
//! Two operator replicas run; only the Lease holder starts the controllers.
//! [`LeaderElection::start`] spawns a task that keeps trying to acquire the
//! Lease and, once held, renews it; the result is published on a
//! `tokio::sync::watch` channel ([`LeaderElection::subscribe`],
//! [`LeaderElection::acquired`]). On [`LeaderElection::release`] (or when the
//! `stop` token given to `start` is cancelled) the holder clears the Lease so
//! a standby takes over within one retry period instead of waiting for the
//! Lease to expire. [`LeaderElection::disabled`] is always leader (local runs,
//! `--leader-elect` off).
//!
//! Timing follows upstream's shipped config (15 s / 10 s / 2 s):
//! - `lease_duration` 15 s: a holder that stops renewing loses the Lease after
//!   this long;
//! - `renew_deadline` 10 s: the holder renews 10 s after its last renewal
//!   (kube-lease-manager's grace = duration − deadline = 5 s before expiry),
//!   and steps down if renewals keep failing until the Lease could expire;
//! - `retry_period` 2 s: how often a standby re-reads the Lease.
//!
//! kube-lease-manager only re-reads a Lease it believes held once its own
//! expiry estimate has passed; to notice a released Lease within
//! `retry_period`, a standby builds a fresh manager (same identity) every
//! period. A holder that gets `false` on the channel must stop writing (the
//! operator exits, as controller-runtime does).
//!
//! Fencing ([`super::fence`]): every retry period the holder reads the Lease
//! and opens its [`Fence`] until the Lease's expiry less one retry period;
//! losing or releasing the Lease closes it. So a holder paused past its
//! Lease writes nothing when it runs again, before it has even learnt that
//! it lost ([`LeaderElection::fence`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fence::{self, Fence};

/// Default Lease name.
pub const DEFAULT_LEASE_NAME: &str = "trainforge-operator";

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid timing options.
    #[error("invalid leader-election options: {0}")]
    Options(String),
    /// The Lease could not be read, created, acquired or released.
    #[error("lease {namespace}/{name}: {source}")]
    Lease {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The cause.
        #[source]
        source: LeaseManagerError,
    },
    /// The election task panicked or was aborted.
    #[error("leader-election task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Where the Lease lives, who we are, and the timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderOptions {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our identity in `holderIdentity` (unique per process).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// How long after a renewal the holder renews again; less than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often a standby re-reads the Lease, and how often a failing renewal is retried.
    pub retry_period: Duration,
}

impl LeaderOptions {
    /// Upstream's timing (15 s / 10 s / 2 s), the Lease [`DEFAULT_LEASE_NAME`]
    /// in `namespace`, and identity [`default_identity`].
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            lease_name: DEFAULT_LEASE_NAME.to_owned(),
            namespace: namespace.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Whole seconds (the Lease API's unit): (duration, grace).
    fn lease_seconds(&self) -> Result<(u64, u64), Error> {
        let duration = self.lease_duration.as_secs();
        let deadline = self.renew_deadline.as_secs();
        if duration < 2 || deadline == 0 || deadline >= duration {
            return Err(Error::Options(format!(
                "need 0 < renew_deadline ({deadline}s) < lease_duration ({duration}s), lease_duration >= 2s"
            )));
        }
        if self.retry_period.is_zero() {
            return Err(Error::Options("retry_period must be > 0".into()));
        }
        Ok((duration, duration - deadline))
    }
}

/// `$POD_NAME` (else `$HOSTNAME`, else `trainforge`) plus `_` and a random
/// 8-character suffix, so a restarted pod never reuses a stale identity.
pub fn default_identity() -> String {
    let base = ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| "trainforge".to_owned());
    format!("{base}_{}", random_suffix(8))
}

fn random_suffix(len: usize) -> String {
    use rand::RngExt;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng: rand::rngs::StdRng = rand::make_rng();
    (0..len)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

/// A running (or disabled) leader election.
#[derive(Debug)]
pub struct LeaderElection {
    rx: watch::Receiver<bool>,
    /// Keeps the channel open in disabled mode.
    _tx: Option<watch::Sender<bool>>,
    stop: CancellationToken,
    task: Option<JoinHandle<Result<(), Error>>>,
    identity: String,
    fence: Fence,
    /// How often this replica lost the Lease after holding it.
    losses: Arc<AtomicU64>,
}

impl LeaderElection {
    /// Always leader, no Lease (local runs).
    pub fn disabled() -> Self {
        let (tx, rx) = watch::channel(true);
        Self {
            rx,
            _tx: Some(tx),
            stop: CancellationToken::new(),
            task: None,
            identity: "disabled".to_owned(),
            fence: Fence::open(),
            losses: Arc::default(),
        }
    }

    /// Create the Lease if absent and spawn the election task. Cancelling
    /// `stop` (e.g. the process shutdown token) releases the Lease if held and
    /// ends the task; prefer [`LeaderElection::release`] after the
    /// controllers have drained, so the next leader never overlaps a write.
    pub async fn start(
        client: Client,
        opts: LeaderOptions,
        stop: CancellationToken,
    ) -> Result<Self, Error> {
        let (duration, grace) = opts.lease_seconds()?;
        // Fail fast on RBAC / namespace problems: create (or find) the Lease now.
        let first = new_manager(&client, &opts, duration, grace).await?;
        let (tx, rx) = watch::channel(false);
        let stop = stop.child_token();
        let identity = opts.identity.clone();
        let fence = Fence::closed();
        let losses = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(run(
            client,
            opts,
            (duration, grace),
            first,
            tx,
            (fence.clone(), losses.clone()),
            stop.clone(),
        ));
        Ok(Self {
            rx,
            _tx: None,
            stop,
            task: Some(task),
            identity,
            fence,
            losses,
        })
    }

    /// Whether this replica has lost the Lease since it first held it (a
    /// replica that lost it must not lead again: it exits, as one that loses
    /// it while leading does).
    pub fn has_lost(&self) -> bool {
        self.losses.load(Ordering::SeqCst) > 0
    }

    /// The fence of this replica's writes: open while it surely holds the
    /// Lease (always, when disabled); see [`super::fence`].
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Our identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether we hold the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// A receiver of leadership changes (`true` = we hold the Lease).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }

    /// Wait until we hold the Lease. `false` if the election ended first
    /// (stopped, or the task failed).
    pub async fn acquired(&self) -> bool {
        let mut rx = self.rx.clone();
        rx.wait_for(|leader| *leader).await.is_ok()
    }

    /// Wait until we no longer hold the Lease (lost, released or stopped).
    pub async fn lost(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|leader| !*leader).await;
    }

    /// Release the Lease if held (a standby takes over within its retry
    /// period) and end the election task.
    pub async fn release(mut self) -> Result<(), Error> {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}

impl Drop for LeaderElection {
    fn drop(&mut self) {
        // Dropped without `release`: still release in the background.
        self.stop.cancel();
    }
}

async fn new_manager(
    client: &Client,
    opts: &LeaderOptions,
    duration: u64,
    grace: u64,
) -> Result<LeaseManager, Error> {
    let params = LeaseParams::new(opts.identity.clone(), duration, grace);
    LeaseManager::new(
        client.clone(),
        opts.lease_name.clone(),
        opts.namespace.clone(),
        params,
        LeaseCreateMode::AutoCreate,
    )
    .await
    .map_err(|source| lease_error(opts, source))
}

fn lease_error(opts: &LeaderOptions, source: LeaseManagerError) -> Error {
    Error::Lease {
        namespace: opts.namespace.clone(),
        name: opts.lease_name.clone(),
        source,
    }
}

/// The election loop: standby (poll every retry period with a fresh
/// manager) → holder (renew; step down on loss or persistent errors) → ...
/// until `stop`.
#[tracing::instrument(name = "leader_election", skip_all, fields(lease = %opts.lease_name, namespace = %opts.namespace, identity = %opts.identity))]
async fn run(
    client: Client,
    opts: LeaderOptions,
    (duration, grace): (u64, u64),
    first: LeaseManager,
    tx: watch::Sender<bool>,
    (fence, losses): (Fence, Arc<AtomicU64>),
    stop: CancellationToken,
) -> Result<(), Error> {
    let mut manager = Some(first);
    // Step down when renewals fail for this long: the Lease may expire after
    // `grace` seconds past the planned renewal, leave one retry of margin.
    let max_renew_failures = Duration::from_secs(grace).saturating_sub(opts.retry_period);
    loop {
        // ---- standby ----
        let held = loop {
            if stop.is_cancelled() {
                return Ok(());
            }
            let m = match manager.take() {
                Some(m) => m,
                None => match new_manager(&client, &opts, duration, grace).await {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "lease not readable; retrying");
                        sleep_or_stop(opts.retry_period, &stop).await;
                        continue;
                    }
                },
            };
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                r = tokio::time::timeout(opts.retry_period, m.changed()) => match r {
                    Ok(Ok(true)) => break m,
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "acquiring lease failed; retrying");
                        sleep_or_stop(opts.retry_period, &stop).await;
                    }
                    // still held by someone else: re-read with a fresh manager
                    Err(_elapsed) => {}
                },
            }
        };
        tracing::info!("acquired leadership");
        hold_fence(&client, &opts, &fence).await;
        let _ = tx.send(true);

        // ---- holder ----
        let mut failing_since: Option<Instant> = None;
        let reason = loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    fence.close("this replica released the Lease");
                    let _ = tx.send(false);
                    let released = held.release().await;
                    return match released {
                        Ok(()) => {
                            tracing::info!("released leadership");
                            Ok(())
                        }
                        Err(e) => Err(lease_error(&opts, e)),
                    };
                }
                // Restarted every retry period so that a full period
                // without an error clears `failing_since` (a successful
                // renewal does not return from `changed`).
                r = tokio::time::timeout(opts.retry_period, held.changed()) => match r {
                    Err(_) | Ok(Ok(true)) => {
                        failing_since = None;
                        hold_fence(&client, &opts, &fence).await;
                    }
                    Ok(Ok(false)) => break "lease taken by another holder",
                    Ok(Err(e)) => {
                        let since = *failing_since.get_or_insert_with(Instant::now);
                        tracing::warn!(error = %e, "renewing lease failed");
                        if since.elapsed() >= max_renew_failures {
                            break "renewals kept failing";
                        }
                        sleep_or_stop(opts.retry_period, &stop).await;
                    }
                },
            }
        };
        fence.close("this replica lost the Lease");
        losses.fetch_add(1, Ordering::SeqCst);
        tracing::warn!(reason, "lost leadership");
        let _ = tx.send(false);
        drop(held);
    }
}

/// Read the Lease and open `fence` until it expires less one retry period
/// if this replica holds it; close it if another does. A failed read
/// changes nothing (the fence closes when its time is up).
async fn hold_fence(client: &Client, opts: &LeaderOptions, fence: &Fence) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &opts.namespace);
    let read_at = std::time::Instant::now();
    let now_wall = k8s_openapi::jiff::Timestamp::now();
    let lease = match tokio::time::timeout(opts.retry_period, api.get(&opts.lease_name)).await {
        Ok(Ok(lease)) => lease,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reading the Lease for the write fence failed");
            return;
        }
        Err(_) => {
            tracing::warn!("reading the Lease for the write fence timed out");
            return;
        }
    };
    let Some(spec) = lease.spec else {
        fence.close("the Lease has no holder");
        return;
    };
    if spec.holder_identity.as_deref() != Some(opts.identity.as_str()) {
        fence.close("another replica holds the Lease");
        return;
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(opts.lease_duration, Duration::from_secs);
    let until = spec.renew_time.and_then(|renewed| {
        fence::held_until(read_at, now_wall, renewed.0, duration, opts.retry_period)
    });
    match until {
        Some(until) => fence.open_until(until),
        None => fence.close("this replica's Lease is about to expire"),
    }
}

async fn sleep_or_stop(period: Duration, stop: &CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(period) => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn upstream_timing_maps_to_duration_and_grace() {
        let o = LeaderOptions::new("trainforge-system");
        assert_eq!(o.lease_seconds().unwrap(), (15, 5));
        assert_eq!(o.lease_name, "trainforge-operator");
        let bad = LeaderOptions {
            renew_deadline: Duration::from_secs(15),
            ..o.clone()
        };
        assert!(bad.lease_seconds().is_err());
        let bad = LeaderOptions {
            retry_period: Duration::ZERO,
            ..o
        };
        assert!(bad.lease_seconds().is_err());
    }

    #[test]
    fn identities_are_unique() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        let suffix = a.rsplit('_').next().unwrap();
        assert_eq!(suffix.len(), 8);
    }

    #[tokio::test]
    async fn disabled_is_always_leader() {
        let le = LeaderElection::disabled();
        assert!(le.is_leader());
        assert!(le.acquired().await);
        le.release().await.unwrap();
    }
}
