//! [`TestEnv`]: one running control plane, owned by a supervisor thread.
//!
//! The supervisor thread spawns every component (so `PR_SET_PDEATHSIG` ties
//! their lives to it), runs a private current-thread tokio runtime for its own
//! API calls, and tears everything down when the [`TestEnv`] is dropped. The
//! shared environments (see [`crate::shared`]) are never dropped: their
//! supervisor threads live until the process exits, at which point the kernel
//! kills the components and a detached watchdog removes the temp directory.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

use crate::paths::Paths;
use crate::pki::Pki;
use crate::process::{self, Proc};
use crate::{
    Error, Mode, apiserver, controller_manager, crds, etcd, jobset, kubeconfig, kwok, scheduler,
};

/// The environment's certificates, under its directory (see [`Pki`]).
const PKI_DIR: &str = "pki";

/// A running control plane (see the crate docs).
#[derive(Debug)]
pub struct TestEnv {
    mode: Mode,
    dir: PathBuf,
    kubeconfig: PathBuf,
    server_url: String,
    startup: Vec<(String, Duration)>,
    ready_after: Duration,
    pids: Vec<(String, u32)>,
    crds: Vec<String>,
    ns_counter: AtomicU64,
    stop: Mutex<Option<mpsc::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the supervisor reports once the environment is up.
struct Info {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server_url: String,
    startup: Vec<(String, Duration)>,
    ready_after: Duration,
    pids: Vec<(String, u32)>,
    crds: Vec<String>,
}

/// Startup and memory figures of an environment.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The mode.
    pub mode: Mode,
    /// From `start` to ready (all components up, CRDs established).
    pub ready_after: Duration,
    /// Time of each startup step.
    pub steps: Vec<(String, Duration)>,
    /// Peak RSS (VmHWM, KiB) of each component, read now.
    pub peak_rss_kib: Vec<(String, Option<u64>)>,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} mode: ready after {:.1}s",
            self.mode,
            self.ready_after.as_secs_f64()
        )?;
        for (step, d) in &self.steps {
            writeln!(f, "  step {step:<26} {:>6.2}s", d.as_secs_f64())?;
        }
        let mut total = 0;
        for (name, kib) in &self.peak_rss_kib {
            match kib {
                Some(k) => {
                    total += k;
                    writeln!(f, "  peak RSS {name:<23} {:>6} MiB", k / 1024)?
                }
                None => writeln!(f, "  peak RSS {name:<23}      ? (not running)")?,
            }
        }
        write!(f, "  peak RSS {:<23} {:>6} MiB", "(sum)", total / 1024)
    }
}

/// Everything the supervisor owns while the environment runs.
struct Running {
    dir: PathBuf,
    kubeconfig: PathBuf,
    procs: Vec<Proc>,
    full: bool,
    _watchdog: Option<std::process::ChildStdin>,
}

fn keep_dir() -> bool {
    std::env::var("TRAINFORGE_TESTENV_KEEP").as_deref() == Ok("1")
}

impl Running {
    async fn shutdown(mut self) {
        if self.full {
            // Webhooks first: with failurePolicy Fail and no JobSet they would
            // block JobSet/pod creation.
            if let Ok(Ok(client)) =
                tokio::time::timeout(Duration::from_secs(5), kubeconfig::client(&self.kubeconfig))
                    .await
            {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    jobset::unregister_webhooks(&client),
                )
                .await;
            }
        }
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
        if keep_dir() {
            eprintln!("trainforge-testenv: kept {}", self.dir.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!("removing {}: {e}", self.dir.display());
        }
    }
}

async fn boot(
    mode: Mode,
    paths: &Paths,
    audit_users: &[String],
    startup: &mut Vec<(String, Duration)>,
) -> Result<Running, Error> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "trainforge-testenv-{}-{}-{}",
        std::process::id(),
        mode,
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)
        .map_err(|e| Error::io(format!("creating {}", logs.display()), e))?;
    let watchdog = if keep_dir() {
        None
    } else {
        Some(process::spawn_dir_watchdog(&dir)?)
    };
    let mut running = Running {
        dir: dir.clone(),
        kubeconfig: dir.join("admin.kubeconfig"),
        procs: Vec::new(),
        full: false,
        _watchdog: watchdog,
    };
    let mut step = |name: &str, t: Instant| {
        let d = t.elapsed();
        tracing::info!(step = name, secs = d.as_secs_f64(), "testenv step done");
        startup.push((name.to_string(), d));
    };

    let t = Instant::now();
    let pki = Pki::create(&dir.join(PKI_DIR))?;
    step("pki", t);

    let t = Instant::now();
    let etcd = etcd::start(&paths.binary("etcd"), &dir, &logs).await?;
    let etcd_port = etcd.client_port;
    running.procs.push(etcd.proc);
    step("etcd", t);

    let t = Instant::now();
    let api = apiserver::start(
        &paths.binary("kube-apiserver"),
        &dir,
        &logs,
        &pki,
        etcd_port,
        mode,
        &running.kubeconfig,
        audit_users,
    )
    .await?;
    running.procs.push(api.proc);
    step("kube-apiserver", t);

    let client = kubeconfig::client(&running.kubeconfig).await?;
    let t = Instant::now();
    let files = crds::crd_files(&paths.data, &paths.own_crds)?;
    crds::install(&client, &files, Duration::from_secs(60)).await?;
    step("crds", t);

    if mode == Mode::Full {
        running.full = true;
        let kc = running.kubeconfig.clone();
        let t = Instant::now();
        running.procs.push(
            controller_manager::start(&paths.binary("kube-controller-manager"), &logs, &pki, &kc)
                .await?,
        );
        step("kube-controller-manager", t);
        let t = Instant::now();
        running
            .procs
            .push(scheduler::start(&paths.binary("kube-scheduler"), &dir, &logs, &pki, &kc).await?);
        step("kube-scheduler", t);
        let t = Instant::now();
        running.procs.push(
            jobset::start(
                &paths.binary("jobset"),
                &dir,
                &logs,
                &paths.data,
                &pki,
                &kc,
                &client,
            )
            .await?,
        );
        step("jobset (+webhooks)", t);
        let t = Instant::now();
        running.procs.push(
            kwok::start(
                &paths.binary("kwok"),
                &dir,
                &logs,
                &paths.data,
                &kc,
                &client,
            )
            .await?,
        );
        step("kwok (+nodes Ready)", t);
        let t = Instant::now();
        crate::manifests::install_public(&client, crds::FIELD_MANAGER).await?;
        step("kubeflow-trainer-public ConfigMap", t);
    }
    Ok(running)
}

fn supervise(
    mode: Mode,
    paths: Paths,
    audit_users: Vec<String>,
    ready: mpsc::Sender<Result<Info, Error>>,
    stop: mpsc::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(Error::io("building the supervisor's tokio runtime", e)));
            return;
        }
    };
    let started = Instant::now();
    let mut startup = Vec::new();
    let mut result = rt.block_on(boot(mode, &paths, &audit_users, &mut startup));
    if let Err(Error::Exited { component, .. }) = &result {
        // Most likely a free-port race: retry the whole start once.
        tracing::warn!("{component} exited during startup; retrying once");
        startup.clear();
        result = rt.block_on(boot(mode, &paths, &audit_users, &mut startup));
    }
    let running = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let info = Info {
        dir: running.dir.clone(),
        kubeconfig: running.kubeconfig.clone(),
        server_url: std::fs::read_to_string(&running.kubeconfig)
            .ok()
            .and_then(|k| {
                k.lines()
                    .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_string))
            })
            .unwrap_or_default(),
        ready_after: started.elapsed(),
        startup,
        pids: running
            .procs
            .iter()
            .map(|p| (p.name.clone(), p.pid()))
            .collect(),
        crds: Vec::new(),
    };
    let info = Info {
        crds: rt.block_on(list_crds(&info.kubeconfig)),
        ..info
    };
    if ready.send(Ok(info)).is_err() {
        rt.block_on(running.shutdown());
        return;
    }
    // Blocks until the TestEnv is dropped (sender dropped or a message). For
    // the shared environments that never happens: the thread, and with it the
    // components, live until the process exits.
    let _ = stop.recv();
    rt.block_on(running.shutdown());
}

async fn list_crds(kubeconfig: &Path) -> Vec<String> {
    let Ok(client) = kubeconfig::client(kubeconfig).await else {
        return Vec::new();
    };
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client);
    match api.list(&Default::default()).await {
        Ok(l) => l
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect(),
        Err(_) => Vec::new(),
    }
}

impl TestEnv {
    /// Start a private environment of `mode` (blocking; callable from inside
    /// or outside a tokio runtime). It is torn down when dropped.
    pub fn start(mode: Mode) -> Result<Self, Error> {
        let paths = Paths::from_env();
        paths.check(mode)?;
        Self::start_with(mode, paths)
    }

    /// Like [`TestEnv::start`] with explicit paths.
    pub fn start_with(mode: Mode, paths: Paths) -> Result<Self, Error> {
        Self::boot_thread(mode, paths, Vec::new())
    }

    /// Like [`TestEnv::start`], with kube-apiserver writing an audit log of
    /// every request made by one of `users` (user names as the API server
    /// sees them, e.g. `system:serviceaccount:NS:NAME`): see
    /// [`TestEnv::audit_log`].
    pub fn start_audited(mode: Mode, users: &[&str]) -> Result<Self, Error> {
        Self::start_audited_with(mode, Paths::from_env(), users)
    }

    /// Like [`TestEnv::start_audited`] with explicit paths (e.g. another
    /// controller's CRDs as [`Paths::own_crds`]).
    pub fn start_audited_with(mode: Mode, paths: Paths, users: &[&str]) -> Result<Self, Error> {
        paths.check(mode)?;
        Self::boot_thread(mode, paths, users.iter().map(|u| u.to_string()).collect())
    }

    /// The CA that signs every certificate of the environment (PEM file):
    /// the API server trusts webhooks that serve [`TestEnv::webhook_cert_dir`].
    pub fn ca_crt(&self) -> PathBuf {
        self.dir.join(PKI_DIR).join("ca.crt")
    }

    /// `tls.crt`/`tls.key` for a webhook server on `127.0.0.1`, signed by
    /// [`TestEnv::ca_crt`].
    pub fn webhook_cert_dir(&self) -> PathBuf {
        self.dir.join(PKI_DIR).join("webhook")
    }

    /// The audit log (JSON lines of `audit.k8s.io/v1` Events), if this
    /// environment was started with [`TestEnv::start_audited`].
    pub fn audit_log(&self) -> Option<PathBuf> {
        let p = self.dir.join(crate::apiserver::AUDIT_LOG);
        p.exists().then_some(p)
    }

    fn boot_thread(mode: Mode, paths: Paths, audit_users: Vec<String>) -> Result<Self, Error> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel();
        eprintln!(
            "trainforge-testenv: starting {mode} control plane from {}",
            paths.bin.display()
        );
        let thread = std::thread::Builder::new()
            .name(format!("testenv-{mode}"))
            .spawn(move || supervise(mode, paths, audit_users, ready_tx, stop_rx))
            .map_err(|e| Error::io("spawning the supervisor thread", e))?;
        let info = match ready_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Supervisor("it exited without reporting".into()));
            }
        };
        eprintln!(
            "trainforge-testenv: {mode} control plane ready in {:.1}s at {} (kubeconfig {})",
            info.ready_after.as_secs_f64(),
            info.server_url,
            info.kubeconfig.display()
        );
        Ok(Self {
            mode,
            dir: info.dir,
            kubeconfig: info.kubeconfig,
            server_url: info.server_url,
            startup: info.startup,
            ready_after: info.ready_after,
            pids: info.pids,
            crds: info.crds,
            ns_counter: AtomicU64::new(0),
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The mode this environment runs in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Path of the admin kubeconfig (token auth, `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>` of the API server.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The environment's temp directory (`logs/` holds each component's output).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Names of the CRDs installed at startup.
    pub fn crds(&self) -> &[String] {
        &self.crds
    }

    /// A fresh admin client bound to the caller's tokio runtime.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        kubeconfig::client(&self.kubeconfig).await
    }

    /// Create a namespace `<prefix>-<unique suffix>` and return its name.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String, Error> {
        let mut base: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        base.truncate(40);
        let base = base.trim_matches('-');
        let base = if base.is_empty() { "test" } else { base };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let name = format!(
            "{base}-{}-{}-{:04x}",
            std::process::id() % 100_000,
            self.ns_counter.fetch_add(1, Ordering::Relaxed),
            nanos & 0xffff
        );
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name, "labels": { "trainforge.dev/testenv": "true" } }
        }))
        .map_err(|e| Error::manifest("<namespace>", e.to_string()))?;
        Api::<Namespace>::all(self.client().await?)
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(name)
    }

    /// Startup times and the current peak RSS of every component.
    pub fn figures(&self) -> Figures {
        Figures {
            mode: self.mode,
            ready_after: self.ready_after,
            steps: self.startup.clone(),
            peak_rss_kib: self
                .pids
                .iter()
                .map(|(name, pid)| {
                    let kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
                        .ok()
                        .and_then(|s| {
                            s.lines()
                                .find(|l| l.starts_with("VmHWM:"))
                                .and_then(|l| l.split_whitespace().nth(1))
                                .and_then(|v| v.parse().ok())
                        });
                    (name.clone(), kib)
                })
                .collect(),
        }
    }

    /// The last `lines` lines of a component's log (for failure messages).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        process::log_tail(
            &self.dir.join("logs").join(format!("{component}.log")),
            lines,
        )
    }

    /// Stop everything now (same as dropping).
    pub fn shutdown(self) {}
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}
