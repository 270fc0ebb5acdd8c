//! The operator process of the demo.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The operator process, owned by a thread that lives until [`Operator::stop`]
/// (the process gets SIGKILL when that thread ends, see
/// [`trainforge_testenv::process`]).
pub(crate) struct Operator {
    /// `host:port` of `/readyz` and `/metrics`.
    pub(crate) addr: String,
    /// Its log file.
    pub(crate) log: PathBuf,
    /// Its process id.
    pub(crate) pid: u32,
    /// Set when the process has exited (the status).
    pub(crate) exited: Arc<Mutex<Option<String>>>,
    stop_tx: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Operator {
    /// Spawn `bin operator …` against `env` from a dedicated thread.
    /// Its admission server listens on a free port of 127.0.0.1, behind
    /// `front` (the webhook configurations call the front).
    /// `extra` flags are appended.
    pub(crate) fn start(
        env: &TestEnv,
        bin: &Path,
        front: &Front,
        extra: &[String],
    ) -> Result<Operator, DemoError> {
        let port = ports::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let webhook = std::net::SocketAddr::from(([127, 0, 0, 1], ports::free_port()?));
        front.add(webhook);
        let webhook = webhook.to_string();
        let cache = env.dir().join("plugin-cache");
        std::fs::create_dir_all(&cache)
            .map_err(|e| DemoError::Supervisor(format!("creating {}: {e}", cache.display())))?;
        let logs = env.dir().join("logs");
        let args: Vec<String> = [
            "operator",
            "--metrics-bind-address",
            &addr,
            "--health-probe-bind-address",
            &addr,
            "--plugin-cache-dir",
            &cache.to_string_lossy(),
            "--webhook-bind-address",
            &webhook,
            "--webhook-host",
            "127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect();
        let kubeconfig = env.kubeconfig().to_string_lossy().into_owned();
        let bin = bin.to_path_buf();
        let exited = Arc::new(Mutex::new(None));
        let (started_tx, started_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let exited_w = exited.clone();
        let thread = std::thread::Builder::new()
            .name("operator".into())
            .spawn(move || {
                let env = [
                    ("KUBECONFIG", kubeconfig.as_str()),
                    ("RUST_LOG", "info,kube=warn,tower=warn,hyper=warn"),
                    ("TRAINFORGE_LOG_FORMAT", "text"),
                    ("POD_NAMESPACE", "default"),
                    // A plain log file (no ANSI colours).
                    ("NO_COLOR", "1"),
                ];
                let mut proc: Proc = match spawn("operator", &bin, &args, &logs, &env) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                let _ = started_tx.send(Ok((proc.pid(), proc.log.clone())));
                // Until asked to stop (or the demo's side is gone), note an exit.
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(Duration::from_millis(200))
                {
                    if let Err(e) = proc.check_running() {
                        let mut slot = exited_w.lock().unwrap_or_else(|p| p.into_inner());
                        if slot.is_none() {
                            *slot = Some(match e {
                                trainforge_testenv::Error::Exited { status, .. } => status,
                                other => other.to_string(),
                            });
                        }
                    }
                }
                proc.stop(Duration::from_secs(5));
            })
            .map_err(|e| DemoError::Supervisor(format!("spawning the operator thread: {e}")))?;
        match started_rx.recv() {
            Ok(Ok((pid, log))) => Ok(Operator {
                addr,
                log,
                pid,
                exited,
                stop_tx,
                thread,
            }),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(DemoError::Supervisor("the operator thread died".into())),
        }
    }

    /// The last `n` lines of the operator's log.
    pub(crate) fn tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    /// `Err` if the process has exited.
    pub(crate) fn check(&self) -> Result<(), DemoError> {
        match self
            .exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(status) => Err(DemoError::OperatorExited {
                status,
                tail: self.tail(40),
            }),
            None => Ok(()),
        }
    }

    /// Wait until `/readyz` answers 200; past `timeout`, say why not.
    pub(crate) async fn wait_ready(
        &self,
        client: &kube::Client,
        timeout: Duration,
    ) -> Result<(), DemoError> {
        let start = Instant::now();
        loop {
            self.check()?;
            if http_get(&self.addr, "/readyz").await.map(|(s, _)| s) == Some(200) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(DemoError::NotReady {
                    secs: timeout.as_secs(),
                    url: format!("http://{}/readyz", self.addr),
                    why: diagnose(client, self, None).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM the operator (SIGKILL after 5 s) and wait for it.
    pub(crate) async fn stop(self) {
        let _ = self.stop_tx.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}
