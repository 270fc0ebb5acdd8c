//! Batching the reconciles that changes of a TrainJob's child objects
//! trigger.
//!
//! Rule: the first change of a TrainJob's children opens a window of one
//! batch period; every further change of its children within it is folded
//! in, and the TrainJob is reconciled once when the window closes, seeing
//! the children as they are then. A JobSet that goes through several
//! states in quick succession (jobs created, active, ready, done) costs one
//! reconcile and at most one status write instead of one per state; what a
//! user sees is at most one period late. Changes of the TrainJob itself
//! (create, spec edits) and plugin-set changes are not batched: a new
//! TrainJob gets its JobSet without waiting. A period of zero passes every
//! trigger on at once.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use trainforge_api::trainer::v1alpha1::TrainJob;

/// The default batch period (Kubernetes' Job controller batches pod
/// changes the same way, for the same reason).
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(1);

struct State {
    rx: Option<UnboundedReceiver<ObjectRef<TrainJob>>>,
    /// Open windows in the order they opened (all are one period long, so
    /// this is also the order they close in).
    open: VecDeque<(Instant, ObjectRef<TrainJob>)>,
    pending: HashSet<ObjectRef<TrainJob>>,
    period: Duration,
}

/// The triggers of `rx`, each TrainJob at most once per `period` (see the
/// module rule). Ends when `rx` is closed and every open window is out.
pub fn batched(
    rx: UnboundedReceiver<ObjectRef<TrainJob>>,
    period: Duration,
) -> impl Stream<Item = ObjectRef<TrainJob>> {
    let state = State {
        rx: Some(rx),
        open: VecDeque::new(),
        pending: HashSet::new(),
        period,
    };
    futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some((due, _)) = s.open.front()
                && *due <= Instant::now()
                && let Some((_, r)) = s.open.pop_front()
            {
                s.pending.remove(&r);
                return Some((r, s));
            }
            let next_due = s.open.front().map(|(due, _)| *due);
            let Some(rx) = s.rx.as_mut() else {
                // Closed: let the open windows run out, then end.
                tokio::time::sleep_until(next_due?).await;
                continue;
            };
            let received = match next_due {
                Some(due) => tokio::select! {
                    r = rx.recv() => Some(r),
                    _ = tokio::time::sleep_until(due) => None,
                },
                None => Some(rx.recv().await),
            };
            match received {
                None => {}
                Some(None) => s.rx = None,
                Some(Some(r)) if s.period.is_zero() => return Some((r, s)),
                Some(Some(r)) if s.pending.insert(r.clone()) => {
                    s.open.push_back((Instant::now() + s.period, r));
                }
                // Folded into its open window.
                Some(Some(_)) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use futures::StreamExt;
    use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

    const PERIOD: Duration = Duration::from_millis(200);

    fn job(name: &str) -> ObjectRef<TrainJob> {
        ObjectRef::new(name).within("team")
    }

    /// What came out of a batcher, with the time since it started.
    type Seen = tokio::task::JoinHandle<Vec<(String, Duration)>>;

    /// Batch with `period` in a task of its own (polled as the controller
    /// polls it).
    fn consume(period: Duration) -> (UnboundedSender<ObjectRef<TrainJob>>, Seen) {
        let (tx, rx) = unbounded_channel();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let mut out = std::pin::pin!(batched(rx, period));
            let mut seen = Vec::new();
            while let Some(r) = out.next().await {
                seen.push((r.name, start.elapsed()));
            }
            seen
        });
        (tx, task)
    }

    fn names(seen: &[(String, Duration)]) -> Vec<&str> {
        seen.iter().map(|(n, _)| n.as_str()).collect()
    }

    // Real time: the assertions are orders, counts and lower bounds only,
    // which no scheduling delay can break.

    #[tokio::test]
    async fn changes_within_a_period_reconcile_once_when_it_closes() {
        let (tx, task) = consume(PERIOD);
        for name in ["a", "b", "a", "a", "b"] {
            tx.send(job(name)).unwrap();
        }
        drop(tx);
        let seen = task.await.unwrap();
        assert_eq!(names(&seen), ["a", "b"], "{seen:?}");
        assert!(seen.iter().all(|(_, at)| *at >= PERIOD), "{seen:?}");
    }

    #[tokio::test]
    async fn a_change_after_the_window_closed_opens_a_new_one() {
        let (tx, rx) = unbounded_channel();
        let mut out = std::pin::pin!(batched(rx, PERIOD));
        tx.send(job("a")).unwrap();
        assert_eq!(out.next().await, Some(job("a")));
        let reopened = Instant::now();
        tx.send(job("a")).unwrap();
        assert_eq!(out.next().await, Some(job("a")));
        assert!(reopened.elapsed() >= PERIOD);
        drop(tx);
        assert_eq!(out.next().await, None, "closed and nothing open: ends");
    }

    #[tokio::test]
    async fn windows_close_in_the_order_they_opened() {
        let (tx, task) = consume(PERIOD);
        tx.send(job("a")).unwrap();
        tokio::time::sleep(PERIOD / 2).await;
        tx.send(job("b")).unwrap();
        tx.send(job("a")).unwrap();
        drop(tx);
        let seen = task.await.unwrap();
        // `a` reopened only if its first window had closed before the
        // second change came; either way `a` comes first.
        assert_eq!(names(&seen)[..2], ["a", "b"], "{seen:?}");
        assert!(seen[1].1 >= seen[0].1 + PERIOD / 2, "{seen:?}");
    }

    #[tokio::test]
    async fn a_zero_period_passes_every_trigger_at_once() {
        let (tx, task) = consume(Duration::ZERO);
        tx.send(job("a")).unwrap();
        tx.send(job("a")).unwrap();
        drop(tx);
        let seen = task.await.unwrap();
        assert_eq!(names(&seen), ["a", "a"]);
    }
}
