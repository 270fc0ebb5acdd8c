//! Bounds on TrainJob validation by plugins, per namespace and in all, so
//! that one tenant's flood of creates costs only its own admission.
//!
//! Rules:
//! - At most [`AdmissionLimits::per_namespace`] validations of one
//!   namespace's TrainJobs run at once.
//! - The validations in flight reserve, together, at most
//!   [`AdmissionLimits::memory_bytes`] of plugin memory: each reserves the
//!   largest linear-memory limit among the plugins that validate it (their
//!   calls run one after another), so the operator's memory stays within
//!   its limit however many requests arrive.
//! - A request waits for both at most its wait (the request budget); past
//!   it the request is not validated, and the caller answers as the
//!   validating plugins' failure policy says ([`Full`] names the bound).
//! - What a request holds ([`Pass`]) is released when the validation ends,
//!   not when its answer is sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One MiB: the unit memory is reserved in.
const MIB: u64 = 1 << 20;

/// Namespaces remembered before idle ones are forgotten.
const MAX_NAMESPACES: usize = 4096;

/// The bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Validations of one namespace's TrainJobs at once.
    pub per_namespace: usize,
    /// Plugin memory all validations in flight may reserve, in bytes.
    pub memory_bytes: u64,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            per_namespace: 2,
            memory_bytes: 384 * MIB,
        }
    }
}

/// Which bound a request could not pass within its wait.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// Its namespace's validations were all taken.
    #[error(
        "admission of namespace {namespace}'s TrainJobs is at its bound: {limit} validations by plugins already run for it (--admission-validations-per-namespace); retry later"
    )]
    Namespace {
        /// The namespace.
        namespace: String,
        /// The bound.
        limit: usize,
    },
    /// The plugin memory of all validations in flight was taken.
    #[error(
        "admission is at its memory bound: validations in flight hold the {limit_mib} MiB of plugin memory allowed (--admission-validate-memory-mib) and this one needs {needed_mib} MiB; retry later"
    )]
    Memory {
        /// What this request needs, MiB.
        needed_mib: u32,
        /// The bound, MiB.
        limit_mib: u32,
    },
}

/// What a validation holds while it runs.
#[derive(Debug)]
pub struct Pass {
    _namespace: OwnedSemaphorePermit,
    _memory: Option<OwnedSemaphorePermit>,
}

/// The bounds' state.
#[derive(Debug)]
pub struct Gates {
    limits: AdmissionLimits,
    memory_mib: u32,
    memory: Arc<Semaphore>,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Gates {
    /// Gates with `limits` (a zero bound counts as one).
    pub fn new(limits: AdmissionLimits) -> Self {
        let memory_mib = u32::try_from(limits.memory_bytes.div_ceil(MIB))
            .unwrap_or(u32::MAX)
            .max(1);
        Gates {
            limits: AdmissionLimits {
                per_namespace: limits.per_namespace.max(1),
                ..limits
            },
            memory_mib,
            memory: Arc::new(Semaphore::new(memory_mib as usize)),
            namespaces: Mutex::new(HashMap::new()),
        }
    }

    fn namespace(&self, namespace: &str) -> Arc<Semaphore> {
        let mut map = self
            .namespaces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_NAMESPACES && !map.contains_key(namespace) {
            // Forget the idle ones (no permit out: nobody holds a clone).
            map.retain(|_, s| Arc::strong_count(s) > 1);
        }
        map.entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.limits.per_namespace)))
            .clone()
    }

    /// Enter for a validation of a TrainJob of `namespace` whose plugins
    /// need `memory_bytes` (capped at the whole bound), waiting at most
    /// `wait` for both.
    pub async fn enter(
        &self,
        namespace: &str,
        memory_bytes: u64,
        wait: Duration,
    ) -> Result<Pass, Full> {
        let needed_mib = u32::try_from(memory_bytes.div_ceil(MIB))
            .unwrap_or(u32::MAX)
            .min(self.memory_mib);
        let deadline = tokio::time::Instant::now() + wait;
        let ns = self.namespace(namespace);
        let Ok(Ok(ns_permit)) = tokio::time::timeout_at(deadline, ns.acquire_owned()).await else {
            return Err(Full::Namespace {
                namespace: namespace.to_owned(),
                limit: self.limits.per_namespace,
            });
        };
        let memory = if needed_mib == 0 {
            None
        } else {
            match tokio::time::timeout_at(
                deadline,
                self.memory.clone().acquire_many_owned(needed_mib),
            )
            .await
            {
                Ok(Ok(p)) => Some(p),
                _ => {
                    return Err(Full::Memory {
                        needed_mib,
                        limit_mib: self.memory_mib,
                    });
                }
            }
        };
        Ok(Pass {
            _namespace: ns_permit,
            _memory: memory,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const WAIT: Duration = Duration::from_millis(50);

    /// A namespace's third validation waits and is refused naming the
    /// bound, while another namespace enters at once; a finished one lets
    /// the next in.
    #[tokio::test]
    async fn a_namespace_gets_its_share_and_no_more() {
        let g = Gates::new(AdmissionLimits {
            per_namespace: 2,
            memory_bytes: 1 << 30,
        });
        let a1 = g.enter("team-a", 64 * MIB, WAIT).await.unwrap();
        let _a2 = g.enter("team-a", 64 * MIB, WAIT).await.unwrap();
        let full = g.enter("team-a", 64 * MIB, WAIT).await.unwrap_err();
        assert_eq!(
            full,
            Full::Namespace {
                namespace: "team-a".into(),
                limit: 2
            }
        );
        assert!(
            full.to_string()
                .contains("--admission-validations-per-namespace")
        );
        let _b = g.enter("team-b", 64 * MIB, WAIT).await.unwrap();
        drop(a1);
        let _a3 = g.enter("team-a", 64 * MIB, WAIT).await.unwrap();
    }

    /// Memory is shared by all: what the validations in flight reserve
    /// bounds the next one, whatever its namespace; a request needing more
    /// than the whole bound needs all of it, not more.
    #[tokio::test]
    async fn plugin_memory_in_flight_is_bounded() {
        let g = Gates::new(AdmissionLimits {
            per_namespace: 8,
            memory_bytes: 128 * MIB,
        });
        let a = g.enter("team-a", 64 * MIB, WAIT).await.unwrap();
        let _b = g.enter("team-b", 64 * MIB, WAIT).await.unwrap();
        let full = g.enter("team-c", 1, WAIT).await.unwrap_err();
        assert_eq!(
            full,
            Full::Memory {
                needed_mib: 1,
                limit_mib: 128
            }
        );
        drop(a);
        assert!(
            g.enter("team-c", 10 << 30, WAIT).await.is_err(),
            "64 MiB free, all 128 needed"
        );
        let _c = g.enter("team-c", 64 * MIB, WAIT).await.unwrap();
    }

    /// A waiting request gets in as soon as one ends within its wait.
    #[tokio::test]
    async fn a_waiting_validation_enters_when_one_ends() {
        let g = Arc::new(Gates::new(AdmissionLimits {
            per_namespace: 1,
            memory_bytes: 1 << 30,
        }));
        let first = g.enter("team-a", MIB, WAIT).await.unwrap();
        let waiting = {
            let g = g.clone();
            tokio::spawn(async move {
                g.enter("team-a", MIB, Duration::from_secs(10))
                    .await
                    .is_ok()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(waiting.await.unwrap());
    }
}
