//! A real OCI registry on loopback, for tests: our `registry` tool
//! (`testenv/go/registry`, built by `testenv/build.sh`), which serves
//! go-containerregistry's in-memory `pkg/registry` with the referrers API on.
//!
//! Independent of the control plane: start one per test with
//! [`Registry::start`]; [`Registry::stop`] (or [`Registry::kill`]) takes it
//! down to simulate an unreachable registry, and dropping it stops it too.
//! Nothing is persisted: a new registry is empty.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::etcd::with_log;
use crate::paths::Paths;
use crate::process::{self, Proc};
use crate::{Error, wait};

/// How long [`Registry::start`] waits for the registry to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How a registry runs; [`Options::default`] is [`Registry::start`]'s plain
/// registry on `127.0.0.1` without TLS or credentials.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// The loopback address it listens on (`127.0.0.1` when `None`), e.g.
    /// `127.0.0.2` for a registry an address guard must refuse.
    pub host: Option<&'a str>,
    /// HTTPS with `(cert_pem, key_pem)`; plain HTTP when `None`.
    pub tls: Option<(&'a Path, &'a Path)>,
    /// HTTP Basic `(user, password)` required on every request.
    pub basic_auth: Option<(&'a str, &'a str)>,
    /// Blob reads (GET) answered with 307 to this base URL
    /// (`BASE/v2/<name>/blobs/<digest>`), as registries backed by object
    /// storage do.
    pub redirect_blobs: Option<&'a str>,
    /// A bearer token required on every request, to be fetched from this
    /// realm URL (every registry serves one at `/token`).
    pub token_realm: Option<&'a str>,
}

/// A running registry.
#[derive(Debug)]
pub struct Registry {
    proc: Proc,
    addr: String,
    tls: bool,
}

impl Registry {
    /// Start `registry` from `paths.binary("registry")` on `127.0.0.1` with a
    /// free port, logging into `logs/registry.log` (`registry-2.log`, … for
    /// further registries of this process). HTTPS when `tls` is
    /// `Some((cert_pem, key_pem))`, plain HTTP otherwise.
    ///
    /// Returns once the registry answers `GET /v2/` with 200 or 401 (with
    /// TLS, or on another address than `127.0.0.1`: once its port accepts
    /// connections). A missing binary is
    /// [`Error::NotBuilt`].
    pub async fn start(
        paths: &Paths,
        logs: &Path,
        tls: Option<(&Path, &Path)>,
    ) -> Result<Registry, Error> {
        Self::start_with(paths, logs, tls, None).await
    }

    /// [`Registry::start`], requiring HTTP Basic credentials
    /// `(user, password)` on every request when `basic_auth` is given
    /// (anything else gets 401 with a Basic challenge).
    pub async fn start_with(
        paths: &Paths,
        logs: &Path,
        tls: Option<(&Path, &Path)>,
        basic_auth: Option<(&str, &str)>,
    ) -> Result<Registry, Error> {
        Self::start_opts(
            paths,
            logs,
            &Options {
                tls,
                basic_auth,
                ..Options::default()
            },
        )
        .await
    }

    /// A registry run as `opts` says (see [`Options`]).
    pub async fn start_opts(
        paths: &Paths,
        logs: &Path,
        opts: &Options<'_>,
    ) -> Result<Registry, Error> {
        let Options {
            host,
            tls,
            basic_auth,
            redirect_blobs,
            token_realm,
        } = *opts;
        let bin = paths.binary("registry");
        if !bin.is_file() {
            return Err(Error::NotBuilt {
                dir: paths.bin.clone(),
                missing: vec!["registry".to_string()],
            });
        }
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let name = match STARTED.fetch_add(1, Ordering::Relaxed) {
            0 => "registry".to_string(),
            n => format!("registry-{}", n + 1),
        };
        let addr_file = logs.join(format!("{name}.addr"));
        match std::fs::remove_file(&addr_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("removing {}", addr_file.display()), e));
            }
            _ => {}
        }
        let mut args = vec![
            format!("-addr={}:0", host.unwrap_or("127.0.0.1")),
            format!("-addr-file={}", addr_file.display()),
        ];
        if let Some((cert, key)) = tls {
            args.push(format!("-tls-cert={}", cert.display()));
            args.push(format!("-tls-key={}", key.display()));
        }
        if let Some((user, password)) = basic_auth {
            args.push(format!("-basic-auth={user}:{password}"));
        }
        if let Some(base) = redirect_blobs {
            args.push(format!("-redirect-blobs={base}"));
        }
        if let Some(realm) = token_realm {
            args.push(format!("-token-realm={realm}"));
        }
        let mut proc = process::spawn(&name, &bin, &args, logs, &[])?;
        let log = proc.log.clone();
        let what = format!(
            "{} to serve {} (log: {})",
            bin.display(),
            if tls.is_some() { "TLS" } else { "GET /v2/" },
            log.display()
        );
        let with_tls = tls.is_some();
        let addr = wait::poll_until(
            &what,
            START_TIMEOUT,
            Duration::from_millis(50),
            || proc.check_running(),
            || {
                let addr_file = addr_file.clone();
                async move {
                    tokio::task::spawn_blocking(move || ready_addr(&addr_file, with_tls))
                        .await
                        .ok()
                        .flatten()
                }
            },
        )
        .await
        .map_err(|e| with_log(e, &log))?;
        tracing::debug!(%addr, tls = with_tls, "registry up");
        Ok(Registry {
            proc,
            addr,
            tls: with_tls,
        })
    }

    /// `127.0.0.1:PORT`: the image reference prefix (`ADDR/repo:tag`).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Its log file (one line per request).
    pub fn log(&self) -> &Path {
        &self.proc.log
    }

    /// Whether the process still runs (`false` after [`Registry::stop`]).
    pub fn is_running(&mut self) -> bool {
        self.proc.check_running().is_ok()
    }

    /// SIGTERM, wait up to 5 s (then SIGKILL); afterwards the port refuses
    /// connections. Idempotent.
    pub fn stop(&mut self) {
        self.proc.stop(Duration::from_secs(5));
    }

    /// Kill it at once (SIGTERM then SIGKILL, no grace period). Idempotent.
    pub fn kill(&mut self) {
        self.proc.stop(Duration::ZERO);
    }
}

/// The address from `addr_file`, once the registry serves on it.
fn ready_addr(addr_file: &Path, tls: bool) -> Option<String> {
    let addr = std::fs::read_to_string(addr_file).ok()?.trim().to_string();
    let sock: std::net::SocketAddr = addr.parse().ok()?;
    let ready = if tls || sock.ip() != std::net::Ipv4Addr::LOCALHOST {
        std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(1)).is_ok()
    } else {
        // 401: up, asking for credentials (-basic-auth).
        matches!(wait::http_get(sock.port(), "/v2/"), Some((200 | 401, _)))
    };
    ready.then_some(addr)
}
