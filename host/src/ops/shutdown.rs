//! Graceful shutdown: a [`CancellationToken`] cancelled on SIGTERM or Ctrl-C.
//!
//! The first signal cancels the token (controllers drain, the leader Lease is
//! released, servers stop); a second signal exits the process at once with
//! status 130, for when draining hangs. With a drain deadline, a plain
//! thread (not a task: it runs even when every runtime worker is busy)
//! exits the process with status 1 once the deadline has passed since the
//! first signal, so a drain that hangs (compiles queued, a stalled API
//! server) never outlives a kubelet's grace period; compile workers die
//! with the process (their parent-death signal).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Errors installing the signal handlers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SIGTERM handler could not be installed.
    #[error("installing the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// Install SIGTERM and Ctrl-C handlers and return a token they cancel;
/// `drain_deadline`: how long the drain after the first signal may take
/// before the process exits anyway (`None`: as long as it takes). Must be
/// called from inside a tokio runtime.
pub fn on_signal(drain_deadline: Option<Duration>) -> Result<CancellationToken, Error> {
    let token = CancellationToken::new();
    let mut signals = Signals::new()?;
    let cancel = token.clone();
    tokio::spawn(async move {
        let first = signals.next().await;
        tracing::info!(
            signal = first,
            "shutdown requested; draining (send it again to exit at once)"
        );
        cancel.cancel();
        if let Some(deadline) = drain_deadline {
            watchdog(deadline, |code| std::process::exit(code));
        }
        let second = signals.next().await;
        tracing::warn!(signal = second, "second signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(token)
}

/// After `deadline`, call `exit(1)` from a thread of its own.
fn watchdog(deadline: Duration, exit: impl FnOnce(i32) + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("shutdown-deadline".into())
        .spawn(move || {
            std::thread::sleep(deadline);
            tracing::error!(
                deadline_seconds = deadline.as_secs_f64(),
                "draining took longer than the shutdown deadline: exiting without finishing"
            );
            exit(1);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the shutdown deadline's thread");
    }
}

/// SIGTERM (Unix) and Ctrl-C.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Error> {
        Ok(Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(Error::Signal)?,
        })
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = ctrl_c() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            ctrl_c().await;
            "SIGINT"
        }
    }
}

/// Wait for Ctrl-C; if its handler cannot be installed, wait forever (SIGTERM
/// still works).
async fn ctrl_c() {
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::warn!(error = %e, "cannot listen for Ctrl-C");
        std::future::pending::<()>().await;
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The deadline's thread exits with status 1 once the deadline has
    /// passed, not before, however busy the async runtime is.
    #[test]
    fn the_deadline_exits_once_it_has_passed() {
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        watchdog(Duration::from_millis(200), move |code| {
            let _ = tx.send((code, start.elapsed()));
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        let (code, after) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(code, 1);
        assert!(after >= Duration::from_millis(200), "{after:?}");
    }

    /// SIGTERM to ourselves cancels the token (and does not kill the test
    /// process, since the handler is installed).
    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = on_signal(None).unwrap();
        assert!(!token.is_cancelled());
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .unwrap();
    }
}
