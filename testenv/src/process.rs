//! Child processes of an environment.
//!
//! Every component runs in its own process group with stdout+stderr in
//! `<dir>/logs/<name>.log`, `NO_PROXY` for loopback, and
//! `PR_SET_PDEATHSIG(SIGKILL)` so it dies with the thread that spawned it (the
//! environment's supervisor thread, which lives as long as the environment —
//! for the shared environments until the test process exits, also on panic or
//! a signal). The death signal is set by exec'ing through util-linux
//! `setpriv --pdeathsig KILL` (it survives the exec of the component), which
//! keeps this crate free of `unsafe`. We only ever signal process groups of
//! children we have not reaped yet, so the ids cannot have been reused by
//! anything else.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::Error;

/// util-linux `setpriv`, if installed (it is on Debian/Ubuntu: util-linux is essential).
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let found = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().map(PathBuf::from).find(|p| p.is_file());
            if found.is_none() {
                tracing::warn!("setpriv not found: components will not die with the test process if it is killed");
            }
            found
        })
        .as_deref()
}

/// A running component.
#[derive(Debug)]
pub struct Proc {
    /// Component name (also the log file name).
    pub name: String,
    /// Path of its log file.
    pub log: PathBuf,
    child: Child,
}

/// Spawn `bin args…` as component `name`, logging into `logs/<name>.log`.
pub fn spawn(
    name: &str,
    bin: &Path,
    args: &[String],
    logs: &Path,
    env: &[(&str, &str)],
) -> Result<Proc, Error> {
    let log = logs.join(format!("{name}.log"));
    let out =
        File::create(&log).map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::io("duplicating a log file handle", e))?;
    let mut cmd = match setpriv() {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.arg("--pdeathsig").arg("KILL").arg("--").arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    tracing::debug!(component = name, ?args, "spawning {}", bin.display());
    let child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("spawning {} ({})", name, bin.display()), e))?;
    Ok(Proc {
        name: name.to_string(),
        log,
        child,
    })
}

impl Proc {
    /// OS process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Err(Exited)` if the process has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                component: self.name.clone(),
                status: status.to_string(),
                log_tail: log_tail(&self.log, 40),
            }),
            Err(e) => Err(Error::io(format!("waiting for {}", self.name), e)),
        }
    }

    fn signal_group(&self, sig: Signal) {
        // The child is not reaped yet, so its pid (= pgid) is still ours.
        if let Err(e) = killpg(Pid::from_raw(self.child.id() as i32), sig) {
            tracing::debug!(component = %self.name, "killpg {sig}: {e}");
        }
    }

    /// Pause the process group (SIGSTOP), as a stalled node or VM would.
    pub fn pause(&self) {
        self.signal_group(Signal::SIGSTOP);
    }

    /// Let a paused process group run again (SIGCONT).
    pub fn resume(&self) {
        self.signal_group(Signal::SIGCONT);
    }

    /// The exit status, once the process has exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM the process group and wait up to `grace`: how long it took
    /// to exit, or `None` when it did not (then it is killed).
    pub fn terminate(&mut self, grace: Duration) -> Option<Duration> {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return Some(Duration::ZERO);
        }
        let start = Instant::now();
        self.signal_group(Signal::SIGTERM);
        while start.elapsed() < grace {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.signal_group(Signal::SIGKILL);
        let _ = self.child.wait();
        None
    }

    /// SIGTERM the process group, wait up to `grace`, then SIGKILL; reap.
    pub fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        self.signal_group(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        tracing::debug!(component = %self.name, "did not stop within {grace:?}, killing");
        self.signal_group(Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// Peak resident set size (VmHWM) in KiB, if the process still runs.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    /// Current resident set size (VmRSS) in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmRSS:")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The last `n` lines of a log file (for error messages).
pub fn log_tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let lines: Vec<&str> = s.lines().collect();
            let start = lines.len().saturating_sub(n);
            format!(
                "--- {} (last {} lines) ---\n{}",
                path.display(),
                lines.len() - start,
                lines[start..].join("\n")
            )
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Spawn a detached watchdog that removes `dir` once this process is gone
/// (it waits for EOF on a pipe whose write end only this process holds). The
/// returned stdin handle must be kept for as long as `dir` is in use.
pub fn spawn_dir_watchdog(dir: &Path) -> Result<std::process::ChildStdin, Error> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("cat >/dev/null; sleep 2; rm -rf -- \"$1\"")
        .arg("trainforge-testenv-watchdog")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("spawning the cleanup watchdog", e))?;
    child
        .stdin
        .take()
        .ok_or_else(|| Error::io("watchdog stdin", std::io::Error::other("missing")))
}
