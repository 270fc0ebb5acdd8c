//! Fair turns for TrainJob reconciles: `concurrency` run at once, handed
//! out round-robin across namespaces.
//!
//! kube-runtime's controller runs queued reconciles first come, first
//! served: one namespace that queues a hundred slow TrainJobs (a plugin
//! chosen by their labels spending each pass's whole budget) would hold
//! every worker until they are done, and another team's new TrainJob would
//! wait behind all of them. Here the controller starts every reconcile at
//! once and each first takes a turn from this gate:
//! - at most `limit` hold a turn at a time (the operator's
//!   `--concurrency`);
//! - a freed turn goes to the namespace *after* the last one served that
//!   has a reconcile waiting (round-robin), and within a namespace to its
//!   longest-waiting reconcile (first come, first served). So a namespace
//!   with a reconcile waiting gets the next turn within `limit` turns at
//!   most, however long other namespaces' queues are: its wait is bounded
//!   by the longest pass (the pass budget) plus the API writes of one
//!   reconcile, not by other namespaces' backlog;
//! - a reconcile dropped while waiting (the controller shutting down) gives
//!   nothing up and takes no turn.
//!
//! Hand-written: a fair semaphore keyed by namespace is a few dozen lines,
//! and no maintained crate offers round-robin across keys.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::oneshot;

/// The gate (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct FairGate {
    inner: Arc<Mutex<State>>,
    limit: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Turns held now.
    running: usize,
    /// Waiting reconciles by namespace, longest-waiting first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<Turn>>>,
    /// Namespaces with a reconcile waiting, in the order they are served.
    order: VecDeque<String>,
    /// Reconciles waiting, all namespaces.
    queued: usize,
}

/// A turn: the reconcile holding it runs; dropping it hands it on.
#[derive(Debug)]
pub struct Turn {
    gate: Option<FairGate>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

impl FairGate {
    /// A gate of `limit` turns (at least one).
    pub fn new(limit: usize) -> Self {
        FairGate {
            inner: Arc::new(Mutex::new(State::default())),
            limit: limit.max(1),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reconciles waiting for a turn now.
    pub fn waiting(&self) -> usize {
        self.state().queued
    }

    /// Wait for a turn for a reconcile in `namespace`.
    pub async fn turn(&self, namespace: &str) -> Turn {
        let rx = {
            let mut s = self.state();
            if s.running < self.limit && s.queued == 0 {
                s.running += 1;
                return Turn {
                    gate: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            let queue = s.waiting.entry(namespace.to_owned()).or_default();
            let new = queue.is_empty();
            queue.push_back(tx);
            if new {
                s.order.push_back(namespace.to_owned());
            }
            s.queued += 1;
            // Turns may be free (every waiter before us was dropped).
            self.hand_out(&mut s);
            rx
        };
        match rx.await {
            Ok(turn) => turn,
            // Unreachable while `self` lives (it holds the senders), but
            // never block for it: run without a turn.
            Err(_) => Turn { gate: None },
        }
    }

    fn release(&self) {
        let mut s = self.state();
        s.running = s.running.saturating_sub(1);
        self.hand_out(&mut s);
    }

    /// Give free turns to waiting reconciles, one namespace after another.
    fn hand_out(&self, s: &mut State) {
        while s.running < self.limit {
            let Some(ns) = s.order.pop_front() else {
                return;
            };
            let Some(queue) = s.waiting.get_mut(&ns) else {
                continue;
            };
            let mut granted = false;
            let mut skipped = 0;
            while let Some(tx) = queue.pop_front() {
                skipped += 1;
                let turn = Turn {
                    gate: Some(self.clone()),
                };
                match tx.send(turn) {
                    Ok(()) => {
                        granted = true;
                        break;
                    }
                    // Dropped while waiting: no turn taken, none released.
                    Err(mut turn) => turn.gate = None,
                }
            }
            let empty = queue.is_empty();
            if empty {
                s.waiting.remove(&ns);
            } else {
                s.order.push_back(ns);
            }
            s.queued = s.queued.saturating_sub(skipped);
            if granted {
                s.running += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;

    /// Whether `f` is ready within a few polls.
    async fn ready<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .ok()
    }

    #[tokio::test]
    async fn turns_are_limited_and_handed_on_when_dropped() {
        let gate = FairGate::new(2);
        let a = ready(gate.turn("a")).await.unwrap();
        let b = ready(gate.turn("a")).await.unwrap();
        let third = tokio::spawn({
            let gate = gate.clone();
            async move { gate.turn("a").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!third.is_finished(), "a third turn while two are held");
        assert_eq!(gate.waiting(), 1);
        drop(a);
        let c = ready(third).await.unwrap().unwrap();
        assert_eq!(gate.waiting(), 0);
        drop((b, c));
        assert_eq!(gate.state().running, 0);
    }

    /// One namespace's long queue does not delay another namespace beyond
    /// the next freed turn; within a namespace, first come, first served.
    #[tokio::test]
    async fn a_freed_turn_goes_round_robin_across_namespaces() {
        let gate = FairGate::new(1);
        let held = ready(gate.turn("busy")).await.unwrap();
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        let spawn = |ns: &'static str, i: usize| {
            let gate = gate.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let turn = gate.turn(ns).await;
                tx.send(format!("{ns}{i}")).unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(turn);
            })
        };
        for i in 0..5 {
            tasks.push(spawn("busy", i));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tasks.push(spawn("quiet", 0));
        tokio::time::sleep(Duration::from_millis(2)).await;
        tasks.push(spawn("other", 0));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(gate.waiting(), 7);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(s) = order.recv().await {
            got.push(s);
        }
        assert_eq!(
            got,
            [
                "busy0", "quiet0", "other0", "busy1", "busy2", "busy3", "busy4"
            ],
            "quiet and other wait one turn each, not five"
        );
    }

    /// A reconcile dropped while waiting (shutdown) takes no turn and
    /// leaks none.
    #[tokio::test]
    async fn a_dropped_waiter_takes_no_turn() {
        let gate = FairGate::new(1);
        let held = ready(gate.turn("a")).await.unwrap();
        assert!(
            ready(gate.turn("b")).await.is_none(),
            "dropped while waiting"
        );
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.turn("c").await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(gate.waiting(), 2);
        drop(held);
        let turn = ready(waiter).await.unwrap().unwrap();
        assert_eq!(gate.waiting(), 0);
        assert_eq!(gate.state().running, 1);
        drop(turn);
        assert_eq!(gate.state().running, 0);
        let again = ready(gate.turn("b")).await;
        assert!(again.is_some(), "the gate is free again");
    }
}
