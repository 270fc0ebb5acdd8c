//! Graceful shutdown: a [`CancellationToken`] cancelled on SIGTERM or Ctrl-C.
//!
//! The first signal cancels the token (controllers drain, the leader Lease is
//! released, servers stop); a second signal exits the process at once with
//! status 130, for when draining hangs.

use tokio_util::sync::CancellationToken;

/// Errors installing the signal handlers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The SIGTERM handler could not be installed.
    #[error("installing the SIGTERM handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// Install SIGTERM and Ctrl-C handlers and return a token they cancel.
/// Must be called from inside a tokio runtime.
pub fn on_signal() -> Result<CancellationToken, Error> {
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
        let second = signals.next().await;
        tracing::warn!(signal = second, "second signal: exiting without draining");
        std::process::exit(130);
    });
    Ok(token)
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
    use std::time::Duration;

    use super::*;

    /// SIGTERM to ourselves cancels the token (and does not kill the test
    /// process, since the handler is installed).
    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = on_signal().unwrap();
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
