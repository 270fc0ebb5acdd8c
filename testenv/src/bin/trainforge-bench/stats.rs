//! What a process tree costs, read from `/proc`: resident memory (sampled
//! in the background for the peak) and CPU time.
//!
//! The tree is the operator and every process below it (its plugin compile
//! worker): a child's memory is the operator's cost too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Clock ticks per second of `/proc/<pid>/stat` times. The kernel reports
/// them in `USER_HZ`, which is 100 on every Linux architecture (it is part
/// of the user-space ABI, unlike the kernel's internal `HZ`).
const USER_HZ: f64 = 100.0;

/// How often the sampler reads the tree's memory.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// `pid` and its descendants, from `/proc/<pid>/task/*/children`.
fn tree(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(text) = std::fs::read_to_string(t.path().join("children")) {
                    out.extend(
                        text.split_whitespace()
                            .filter_map(|c| c.parse::<u32>().ok()),
                    );
                }
            }
        }
        i += 1;
    }
    out
}

/// A field of `/proc/<pid>/status` in KiB.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resident memory of `pid` and its descendants now, KiB.
pub fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| status_kib(p, "VmRSS:"))
        .sum()
}

/// CPU seconds `pid` has used, user + system, including the children it
/// has waited for (its finished compile workers).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f
        .get(11..15)?
        .iter()
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    Some(ticks / USER_HZ)
}

/// A background thread keeping the peak of [`tree_rss_kib`].
pub struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    /// Start sampling `pid`'s tree every [`SAMPLE_EVERY`].
    pub fn start(pid: u32) -> Sampler {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(tree_rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(SAMPLE_EVERY);
            }
        });
        Sampler { peak, stop }
    }

    /// The highest tree RSS seen since the start or the last reset, KiB.
    pub fn peak_kib(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Forget the peak seen so far.
    pub fn reset(&self) {
        self.peak.store(0, Ordering::Relaxed);
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_and_cpu() {
        let me = std::process::id();
        // Burn a little CPU so the counter is past zero.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(tree_rss_kib(me) > 0);
        assert!(cpu_seconds(me).is_some_and(|s| s > 0.0));
        assert!(cpu_seconds(u32::MAX).is_none());
    }
}
