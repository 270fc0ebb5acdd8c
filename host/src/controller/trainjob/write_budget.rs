//! Bytes a namespace's TrainJobs may write per minute.
//!
//! Plugins choose what the operator writes: a plugin (a tenant's, or a
//! cluster plugin chosen by a label the TrainJob's author sets) that emits
//! a megabyte ConfigMap per TrainJob would otherwise put whatever a team
//! can create TrainJobs for into etcd, as fast as the workers write. Each
//! namespace has a bucket of `per_minute` bytes, refilled continuously
//! (`per_minute` a minute); every object the operator creates or updates
//! for a TrainJob takes its size from its namespace's bucket. A write may
//! take the bucket below zero (one object's size at most — a call's output
//! is bounded), but none starts while it is below zero: the TrainJob's
//! reconcile stops there, `Blocked` with reason `WriteRateLimited`, and is
//! retried when the bucket is back at zero. Unchanged objects cost nothing.
//!
//! Buckets of namespaces that are full again are forgotten, so the map
//! holds only namespaces that wrote within the last minute.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The default: 32 MiB a minute per namespace (a thousand TrainJobs' JobSets
/// are a few MiB); the operator's `--namespace-write-mib-per-minute`.
pub const DEFAULT_PER_MINUTE: u64 = 32 << 20;

/// The buckets (see the module docs).
#[derive(Debug)]
pub struct WriteBudget {
    /// Bytes a minute per namespace; `None`: unlimited.
    per_minute: Option<u64>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Bytes left; negative after a write larger than what was left.
    left: f64,
    at: Instant,
}

/// A namespace's bucket is empty: no write until `retry_in` has passed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
// Stable while the bucket refills (it becomes a condition message).
#[error(
    "namespace {namespace} wrote more than its {per_minute} bytes a minute of TrainJob objects; writes resume as the budget refills"
)]
pub struct Exhausted {
    /// The namespace.
    pub namespace: String,
    /// Its budget.
    pub per_minute: u64,
    /// When the bucket is back at zero.
    pub retry_in: Duration,
}

impl WriteBudget {
    /// `per_minute` bytes a minute per namespace; zero: unlimited.
    pub fn new(per_minute: u64) -> Self {
        WriteBudget {
            per_minute: (per_minute > 0).then_some(per_minute),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `namespace` may write now.
    pub fn check(&self, namespace: &str) -> Result<(), Exhausted> {
        self.check_at(namespace, Instant::now())
    }

    /// Take `bytes` from `namespace`'s bucket (a write was made).
    pub fn charge(&self, namespace: &str, bytes: usize) {
        self.charge_at(namespace, bytes, Instant::now());
    }

    fn rate(per_minute: u64) -> f64 {
        per_minute as f64 / 60.0
    }

    fn refilled(b: Bucket, per_minute: u64, now: Instant) -> f64 {
        let secs = now.saturating_duration_since(b.at).as_secs_f64();
        (b.left + secs * Self::rate(per_minute)).min(per_minute as f64)
    }

    fn check_at(&self, namespace: &str, now: Instant) -> Result<(), Exhausted> {
        let Some(per_minute) = self.per_minute else {
            return Ok(());
        };
        let buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(b) = buckets.get(namespace) else {
            return Ok(());
        };
        let left = Self::refilled(*b, per_minute, now);
        if left >= 0.0 {
            return Ok(());
        }
        Err(Exhausted {
            namespace: namespace.to_owned(),
            per_minute,
            retry_in: Duration::from_secs_f64(-left / Self::rate(per_minute)),
        })
    }

    fn charge_at(&self, namespace: &str, bytes: usize, now: Instant) {
        let Some(per_minute) = self.per_minute else {
            return;
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let full = per_minute as f64;
        // Forget the buckets that are full again (bounded map).
        buckets.retain(|_, b| Self::refilled(*b, per_minute, now) < full);
        let left = buckets
            .get(namespace)
            .map_or(full, |b| Self::refilled(*b, per_minute, now));
        buckets.insert(
            namespace.to_owned(),
            Bucket {
                left: left - bytes as f64,
                at: now,
            },
        );
    }

    /// Namespaces with a bucket that is not full (tests, metrics).
    pub fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_namespace_writes_its_budget_then_waits_for_the_refill() {
        let b = WriteBudget::new(4 << 20);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(b.check_at("a", t0), Ok(()));
            b.charge_at("a", MIB, t0);
        }
        // Exactly spent: zero left still writes (one more object).
        assert_eq!(b.check_at("a", t0), Ok(()));
        b.charge_at("a", MIB, t0);
        let e = b.check_at("a", t0).unwrap_err();
        assert_eq!(e.namespace, "a");
        // 1 MiB of debt at 4 MiB a minute: 15 s.
        assert_eq!(e.retry_in.as_secs(), 15, "{e}");
        assert!(e.to_string().contains("namespace a"), "{e}");
        assert!(b.check_at("a", t0 + Duration::from_secs(14)).is_err());
        assert_eq!(b.check_at("a", t0 + Duration::from_secs(15)), Ok(()));
        // Another namespace is not touched.
        assert_eq!(b.check_at("b", t0), Ok(()));
    }

    #[test]
    fn the_bucket_never_holds_more_than_a_minute() {
        let b = WriteBudget::new(4 << 20);
        let t0 = Instant::now();
        b.charge_at("a", MIB, t0);
        // An hour idle refills to the budget, not beyond.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..5 {
            assert_eq!(b.check_at("a", later), Ok(()));
            b.charge_at("a", MIB, later);
        }
        assert!(b.check_at("a", later).is_err());
    }

    #[test]
    fn full_buckets_are_forgotten_and_zero_is_unlimited() {
        let b = WriteBudget::new(4 << 20);
        let t0 = Instant::now();
        for i in 0..100 {
            b.charge_at(&format!("ns-{i}"), 1024, t0);
        }
        assert_eq!(b.tracked(), 100);
        b.charge_at("late", 1024, t0 + Duration::from_secs(61));
        assert_eq!(b.tracked(), 1, "only the namespace that wrote lately");
        let unlimited = WriteBudget::new(0);
        unlimited.charge_at("a", usize::MAX, t0);
        assert_eq!(unlimited.check_at("a", t0), Ok(()));
        assert_eq!(unlimited.tracked(), 0);
    }
}
