//! Free loopback ports.
//!
//! A port is taken from below the kernel's ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), checked free by binding it,
//! closed and handed to a component. Ephemeral ports are what the kernel
//! gives every outgoing connection its local end from (the API server's
//! connections to etcd, a test's clients), so a port found by binding
//! `127.0.0.1:0` can be taken by one of those before the component binds
//! it; a port below the range cannot. Ports handed out by this process are
//! remembered so that two components never get the same one. Test processes
//! run side by side (`testenv/by-module.sh` runs modules at once), and a
//! port one has checked free but whose component has not bound it yet looks
//! free to the others too: so each port below the range is also claimed for
//! the life of the process with an exclusive lock on a file named after it
//! (`$TMPDIR/trainforge-ports/<port>`), which the kernel releases when the
//! process ends, however it ends. Where the range is unknown (not Linux) or
//! nothing below it is free, `127.0.0.1:0` is used.

use std::collections::HashSet;
use std::fs::File;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::Error;

/// The lowest port handed out from below the ephemeral range.
const LOWEST: u16 = 10_000;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static SET: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The first port of the kernel's ephemeral range, if known.
fn ephemeral_start() -> Option<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The claims this process holds (module rule): each file's lock is held
/// until the process ends.
fn claims() -> &'static Mutex<Vec<File>> {
    static CLAIMS: OnceLock<Mutex<Vec<File>>> = OnceLock::new();
    CLAIMS.get_or_init(|| Mutex::new(Vec::new()))
}

/// The directory of the port claim files.
fn claim_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("trainforge-ports")
}

/// Claim `port` against other processes: `None` when another process holds
/// it. Where the claim file cannot be made at all (a read-only temporary
/// directory), the port is not claimed and the bind check alone decides.
fn claim(port: u16) -> Option<Option<File>> {
    let dir = claim_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        return Some(None);
    }
    let Ok(file) = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
    else {
        return Some(None);
    };
    match file.try_lock() {
        Ok(()) => Some(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => None,
        Err(std::fs::TryLockError::Error(_)) => Some(None),
    }
}

/// Whether `port` on 127.0.0.1 can be bound now.
fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Claim `port` and check it can be bound; keeps the claim when it can.
fn take(port: u16) -> bool {
    let Some(file) = claim(port) else {
        return false;
    };
    if !bindable(port) {
        return false;
    }
    if let Some(file) = file {
        claims()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(file);
    }
    true
}

/// A free port in `[LOWEST, end)` not handed out before, searched from a
/// point that differs between processes (two test processes at once rarely
/// probe the same ports).
fn below_ephemeral(end: u16) -> Option<u16> {
    let mut set = handed_out().lock().unwrap_or_else(|p| p.into_inner());
    probe_order(end)?
        .find(|p| !set.contains(p) && take(*p))
        .inspect(|p| {
            set.insert(*p);
        })
}

/// Every port of `[LOWEST, end)` once, in the order this process tries
/// them; `None` if the span is empty.
fn probe_order(end: u16) -> Option<impl Iterator<Item = u16>> {
    let span = end.checked_sub(LOWEST).filter(|s| *s > 0)?;
    let start = (std::process::id().wrapping_mul(7919) % u32::from(span)) as u16;
    Some((0..span).map(move |i| LOWEST + (start + i) % span))
}

/// A port from `127.0.0.1:0`, not handed out before by this process.
fn any_free() -> Result<u16, Error> {
    for _ in 0..100 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading a bound port", e))?
            .port();
        drop(listener);
        let mut set = handed_out().lock().unwrap_or_else(|p| p.into_inner());
        if set.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::io(
        "finding a free port",
        std::io::Error::other("no free port after 100 tries"),
    ))
}

/// A currently free TCP port on 127.0.0.1 not handed out before by this
/// process, below the ephemeral range where there is one (module rule).
pub fn free_port() -> Result<u16, Error> {
    match ephemeral_start().and_then(below_ephemeral) {
        Some(port) => Ok(port),
        None => any_free(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The tests share this process's handed-out set and its ports: one
    /// holding ports while the other checks that the ports it was handed
    /// can be bound would fail it (seen in CI), so they take turns.
    static TURN: Mutex<()> = Mutex::new(());

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        if let Some(start) = ephemeral_start().filter(|s| *s > LOWEST) {
            assert!(
                ports.iter().all(|p| (LOWEST..start).contains(p)),
                "{ports:?}"
            );
        }
        // Handed out and not bound by anyone: each can be bound.
        for p in ports {
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }

    #[test]
    fn a_bound_port_is_never_handed_out() {
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        let Some(start) = ephemeral_start().filter(|s| *s > LOWEST) else {
            // Without a known range (or none above LOWEST) every port comes from 127.0.0.1:0,
            // which never gives a bound port.
            return;
        };
        // Hold the first ports the search would try (the ones not handed
        // out yet): the one handed out is none of them.
        let taken = handed_out().lock().unwrap().clone();
        let held: Vec<TcpListener> = probe_order(start)
            .unwrap()
            .filter(|p| !taken.contains(p))
            .take(16)
            .filter_map(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        assert!(!held.is_empty(), "could not hold any port below {start}");
        let held_ports: HashSet<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        let p = free_port().unwrap();
        assert!(!held_ports.contains(&p), "{p} is held");
        assert!(p < start, "{p} is not below the ephemeral range");
    }

    /// A port another process has claimed (here: a lock on its claim file
    /// through another open file, which conflicts as another process's
    /// would) is never handed out, though nothing is bound to it.
    #[test]
    fn a_port_claimed_by_another_process_is_never_handed_out() {
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        let Some(start) = ephemeral_start().filter(|s| *s > LOWEST) else {
            return;
        };
        let taken = handed_out().lock().unwrap().clone();
        std::fs::create_dir_all(claim_dir()).unwrap();
        let others: Vec<(u16, File)> = probe_order(start)
            .unwrap()
            .filter(|p| !taken.contains(p) && bindable(*p))
            .take(16)
            .filter_map(|p| {
                let f = File::create(claim_dir().join(p.to_string())).ok()?;
                f.try_lock().ok()?;
                Some((p, f))
            })
            .collect();
        assert!(!others.is_empty(), "could not claim any port below {start}");
        let claimed: HashSet<u16> = others.iter().map(|(p, _)| *p).collect();
        let p = free_port().unwrap();
        assert!(!claimed.contains(&p), "{p} is claimed by another process");
        // Once the other claim goes (its process ended), the port is free again.
        let (first, file) = others.into_iter().next().unwrap();
        drop(file);
        assert!(
            claim(first).is_some_and(|f| f.is_some()),
            "{first} stays claimed"
        );
    }
}
