//! How often one TrainJob's pods may write its progress: a token bucket per
//! TrainJob, in a map bounded by entries.
//!
//! Hand-written rather than `governor`'s keyed limiter because its keyed
//! store grows with every key until it is pruned by hand, and we need a
//! hard bound: at most [`MAX_TRAINJOBS`] buckets. A full bucket (a
//! TrainJob idle long enough to have its whole burst back) carries no
//! state and is dropped when room is needed; if every bucket is in use,
//! a new TrainJob is refused until one frees, which costs reporters only
//! (the status is informational) and never the operator's memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::request::Target;

/// Writes a TrainJob may make at once after being idle.
pub const BURST: f64 = 20.0;
/// Writes a TrainJob may make a second, sustained (the SDK sends at most
/// one every 5 s per process).
pub const PER_SECOND: f64 = 5.0;
/// Most TrainJobs tracked at once.
pub const MAX_TRAINJOBS: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(self, now: Instant, burst: f64, rate: f64) -> f64 {
        (self.tokens + now.saturating_duration_since(self.at).as_secs_f64() * rate).min(burst)
    }
}

/// The per-TrainJob limiter.
#[derive(Debug)]
pub struct Limiter {
    burst: f64,
    rate: f64,
    max: usize,
    buckets: Mutex<HashMap<Target, Bucket>>,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new(BURST, PER_SECOND, MAX_TRAINJOBS)
    }
}

impl Limiter {
    /// A limiter of `burst` writes, `rate` a second, for at most `max`
    /// TrainJobs.
    pub fn new(burst: f64, rate: f64, max: usize) -> Self {
        Self {
            burst,
            rate,
            max,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one write for `t` at `now`: `Ok`, or `Err(wait)` until one is
    /// available.
    pub fn take(&self, t: &Target, now: Instant) -> Result<(), Duration> {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !buckets.contains_key(t) && buckets.len() >= self.max {
            let (burst, rate) = (self.burst, self.rate);
            buckets.retain(|_, b| b.refilled(now, burst, rate) < burst);
            if buckets.len() >= self.max {
                return Err(Duration::from_secs_f64(1.0 / self.rate.max(0.001)));
            }
        }
        let b = buckets.entry(t.clone()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let tokens = b.refilled(now, self.burst, self.rate);
        if tokens >= 1.0 {
            *b = Bucket {
                tokens: tokens - 1.0,
                at: now,
            };
            Ok(())
        } else {
            *b = Bucket { tokens, at: now };
            Err(Duration::from_secs_f64(
                (1.0 - tokens) / self.rate.max(0.001),
            ))
        }
    }

    /// TrainJobs tracked now.
    pub fn len(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether none is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn t(name: &str) -> Target {
        Target {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_trainjob_gets_its_burst_then_its_rate() {
        let l = Limiter::new(3.0, 1.0, 10);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(l.take(&t("a"), t0).is_ok());
        }
        let wait = l.take(&t("a"), t0).unwrap_err();
        assert!(
            wait <= Duration::from_secs(1) && wait > Duration::ZERO,
            "{wait:?}"
        );
        // Another TrainJob is not charged for the first one's writes.
        assert!(l.take(&t("b"), t0).is_ok());
        assert!(l.take(&t("a"), t0 + Duration::from_millis(1001)).is_ok());
        assert!(l.take(&t("a"), t0 + Duration::from_millis(1002)).is_err());
    }

    #[test]
    fn the_map_is_bounded_and_idle_trainjobs_make_room() {
        let l = Limiter::new(2.0, 1.0, 2);
        let t0 = Instant::now();
        assert!(l.take(&t("a"), t0).is_ok());
        assert!(l.take(&t("b"), t0).is_ok());
        // Both still owe tokens: a third TrainJob waits.
        assert!(l.take(&t("c"), t0).is_err());
        assert_eq!(l.len(), 2);
        // Once they are idle (full again), they are dropped for it.
        assert!(l.take(&t("c"), t0 + Duration::from_secs(2)).is_ok());
        assert!(l.len() <= 2);
    }
}
