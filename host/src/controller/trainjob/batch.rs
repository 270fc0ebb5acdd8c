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
//! TrainJob gets its JobSet without waiting. A change marked
//! [`ChildChange::at_once`] (its JobSet's jobs just became all ready:
//! [`super::ready_edge`]) is passed on at once and closes the TrainJob's
//! open window, since that reconcile sees every change before it. A period
//! of zero passes every trigger on at once.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;
use trainforge_api::trainer::v1alpha1::TrainJob;

/// The default batch period (Kubernetes' Job controller batches pod
/// changes the same way, for the same reason).
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(1);

/// A change of a TrainJob's child objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildChange {
    /// The TrainJob that controls the changed object.
    pub trainjob: ObjectRef<TrainJob>,
    /// Reconcile now rather than when a window closes.
    pub at_once: bool,
}

impl ChildChange {
    /// A change that waits for its TrainJob's window.
    pub fn batched(trainjob: ObjectRef<TrainJob>) -> Self {
        ChildChange {
            trainjob,
            at_once: false,
        }
    }
}

struct State {
    rx: Option<UnboundedReceiver<ChildChange>>,
    /// Windows in the order they opened (all are one period long, so this is
    /// also the order they close in), with when each closes. One whose
    /// TrainJob was passed on at once since is no longer in `pending` with
    /// that time, and closes without a trigger.
    open: VecDeque<(Instant, ObjectRef<TrainJob>)>,
    /// The open window of each TrainJob: when it closes.
    pending: HashMap<ObjectRef<TrainJob>, Instant>,
    period: Duration,
}

/// The triggers of `rx`, each TrainJob at most once per `period` unless a
/// change comes [`ChildChange::at_once`] (see the module rule). Ends when
/// `rx` is closed and every open window is out.
pub fn batched(
    rx: UnboundedReceiver<ChildChange>,
    period: Duration,
) -> impl Stream<Item = ObjectRef<TrainJob>> {
    let state = State {
        rx: Some(rx),
        open: VecDeque::new(),
        pending: HashMap::new(),
        period,
    };
    futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some((due, _)) = s.open.front()
                && *due <= Instant::now()
                && let Some((due, r)) = s.open.pop_front()
            {
                if s.pending.get(&r) == Some(&due) {
                    s.pending.remove(&r);
                    return Some((r, s));
                }
                // Closed already by a change passed on at once.
                continue;
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
                Some(Some(c)) if s.period.is_zero() => return Some((c.trainjob, s)),
                Some(Some(c)) if c.at_once => {
                    s.pending.remove(&c.trainjob);
                    return Some((c.trainjob, s));
                }
                Some(Some(c)) => {
                    if let std::collections::hash_map::Entry::Vacant(v) =
                        s.pending.entry(c.trainjob.clone())
                    {
                        let due = Instant::now() + s.period;
                        v.insert(due);
                        s.open.push_back((due, c.trainjob));
                    }
                    // Else folded into its open window.
                }
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

    fn job(name: &str) -> ChildChange {
        ChildChange::batched(ObjectRef::new(name).within("team"))
    }

    fn now(name: &str) -> ChildChange {
        ChildChange {
            at_once: true,
            ..job(name)
        }
    }

    /// What came out of a batcher, with the time since it started.
    type Seen = tokio::task::JoinHandle<Vec<(String, Duration)>>;

    /// Batch with `period` in a task of its own (polled as the controller
    /// polls it).
    fn consume(period: Duration) -> (UnboundedSender<ChildChange>, Seen) {
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
        assert_eq!(out.next().await, Some(job("a").trainjob));
        let reopened = Instant::now();
        tx.send(job("a")).unwrap();
        assert_eq!(out.next().await, Some(job("a").trainjob));
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
    async fn a_change_at_once_passes_now_and_closes_the_open_window() {
        let long = Duration::from_secs(3600);
        let (tx, rx) = unbounded_channel();
        let mut out = std::pin::pin!(batched(rx, long));
        tx.send(job("a")).unwrap();
        tx.send(job("b")).unwrap();
        tx.send(now("a")).unwrap();
        let started = Instant::now();
        assert_eq!(out.next().await, Some(job("a").trainjob));
        assert!(started.elapsed() < long / 2, "not held for the window");
        // a's window is closed: a later change opens a new one, and the old
        // one closing (never, here) would not pass a on twice.
        tx.send(job("a")).unwrap();
        tx.send(now("b")).unwrap();
        assert_eq!(out.next().await, Some(job("b").trainjob));
    }

    #[tokio::test]
    async fn a_window_closed_by_a_change_at_once_passes_nothing_when_it_ends() {
        let (tx, task) = consume(PERIOD);
        tx.send(job("a")).unwrap();
        tx.send(now("a")).unwrap();
        drop(tx);
        let seen = task.await.unwrap();
        assert_eq!(names(&seen), ["a"], "{seen:?}");
        assert!(seen[0].1 < PERIOD, "{seen:?}");
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
