//! `trainforge-demo`: the whole product on one machine, in one command.
//!
//! 1. start the full test control plane (etcd, kube-apiserver,
//!    controller-manager, scheduler, JobSet, kwok) with our CRDs installed;
//! 2. apply the default plugin configuration (`manifests/plugins/*.yaml`) and
//!    the examples other than TrainJobs (by default the shipped
//!    `torch-distributed` runtime and `examples/clustertrainingruntime-multi-node.yaml`);
//! 3. start the operator (`trainforge operator`, log in the environment's
//!    `logs/operator.log`) and wait for its `/readyz`;
//! 4. apply the example TrainJobs (by default `default/demo` of
//!    `examples/trainjob-torch-distributed.yaml`) and print a live view of each
//!    (state, JobSet, pod phases) until it is `Complete` or `Failed`, then its
//!    `status.jobsStatus`;
//! 5. print the kubeconfig and stay up until Ctrl-C (or `--exit-after`).
//!
//! A TrainJob that fails, or is not finished after `--timeout` seconds, or an
//! operator that exits or never gets ready, makes the demo exit with a failure
//! code and the tail of the operator's log. With `--api-only` only etcd and
//! kube-apiserver run and the operator is not started.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::store::{Store, Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trainforge_testenv::process::{Proc, log_tail, spawn};
use trainforge_testenv::{Mode, TestEnv, manifests, ports};

/// Field manager of everything the demo applies.
const FIELD_MANAGER: &str = "trainforge-demo";

/// Start the Trainforge demo: control plane, operator, a TrainJob run to completion.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Manifests to apply after the plugin configs, in order (server-side
    /// apply; errors are reported, not fatal). TrainJobs among them are
    /// applied once the operator is ready and followed in the live view.
    /// Repeat the flag to replace the defaults.
    #[arg(long, default_values = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/runtimes/torch-distributed.yaml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/clustertrainingruntime-multi-node.yaml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/trainjob-torch-distributed.yaml"),
    ])]
    example: Vec<PathBuf>,
    /// Directory of the ClusterTrainerPlugin configs to apply (every `*.yaml`
    /// except `kustomization.yaml`).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/plugins"))]
    plugins: PathBuf,
    /// The `trainforge` binary to run as the operator (default: `trainforge`
    /// next to this executable, as built by `cargo build -p trainforge`).
    #[arg(long)]
    operator: Option<PathBuf>,
    /// Seconds to wait for the TrainJobs to finish (and, separately, for the
    /// operator to get ready) before giving up.
    #[arg(long, default_value_t = 180)]
    timeout: u64,
    /// Stop after this many seconds instead of waiting for Ctrl-C (0 = right
    /// after setup). `DEMO_EXIT=1` in the environment is the same as 0.
    #[arg(long)]
    exit_after: Option<u64>,
    /// Print startup and memory figures before waiting.
    #[arg(long)]
    figures: bool,
    /// Start api mode (etcd + kube-apiserver only, no operator) instead of full mode.
    #[arg(long)]
    api_only: bool,
}

/// Why the demo stops with a failure.
#[derive(Debug, thiserror::Error)]
enum DemoError {
    /// The operator binary is not there.
    #[error(
        "the operator binary {} does not exist: run `cargo build -p trainforge` first (or pass --operator PATH)",
        .0.display()
    )]
    OperatorMissing(PathBuf),
    /// The path of this executable is unknown.
    #[error(
        "cannot locate the demo executable to find the operator next to it: {0} (pass --operator PATH)"
    )]
    CurrentExe(#[source] std::io::Error),
    /// A test-environment operation failed.
    #[error(transparent)]
    Env(#[from] trainforge_testenv::Error),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The operator thread could not be started or went away.
    #[error("operator supervisor: {0}")]
    Supervisor(String),
    /// The operator process exited.
    #[error("the operator exited: {status}\n{tail}")]
    OperatorExited {
        /// Its exit status.
        status: String,
        /// Tail of its log.
        tail: String,
    },
    /// `/readyz` never answered 200.
    #[error("the operator was not ready after {secs}s ({url})\n{tail}")]
    NotReady {
        /// The bound.
        secs: u64,
        /// The probe URL.
        url: String,
        /// Tail of its log.
        tail: String,
    },
    /// A TrainJob did not finish in time.
    #[error("TrainJob {job} not finished after {secs}s\n{tail}")]
    Timeout {
        /// `namespace/name`.
        job: String,
        /// The bound.
        secs: u64,
        /// Tail of the operator log.
        tail: String,
    },
    /// A TrainJob reached `Failed`.
    #[error("TrainJob {job} Failed: {reason}: {message}\n{tail}")]
    JobFailed {
        /// `namespace/name`.
        job: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
        /// Tail of the operator log.
        tail: String,
    },
    /// Ctrl-C or SIGTERM before the TrainJobs finished.
    #[error("interrupted")]
    Interrupted,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let exit_after = match (args.exit_after, std::env::var("DEMO_EXIT").as_deref()) {
        (Some(s), _) => Some(s),
        (None, Ok("1")) => Some(0),
        _ => None,
    };
    let mode = if args.api_only { Mode::Api } else { Mode::Full };
    // Fail before the (slow) control plane start when the operator is missing.
    let operator_bin = match mode {
        Mode::Api => None,
        Mode::Full => match operator_binary(args.operator.as_deref()) {
            Ok(bin) => Some(bin),
            Err(e) => {
                eprintln!("demo: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let env = match tokio::task::spawn_blocking(move || TestEnv::start(mode)).await {
        Ok(Ok(env)) => env,
        Ok(Err(e)) => {
            eprintln!("demo: cannot start the control plane: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("demo: startup task failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut operator = None;
    let code = match run(
        &env,
        &args,
        operator_bin.as_deref(),
        &mut operator,
        exit_after,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(DemoError::Interrupted) => {
            println!("demo: interrupted");
            ExitCode::from(130)
        }
        Err(e) => {
            println!("demo: FAILED: {e}");
            if std::env::var("TRAINFORGE_TESTENV_KEEP").as_deref() != Ok("1") {
                println!("demo: (set TRAINFORGE_TESTENV_KEEP=1 to keep the logs directory)");
            }
            ExitCode::FAILURE
        }
    };
    if let Some(op) = operator {
        println!("demo: stopping the operator");
        op.stop().await;
    }
    println!("demo: stopping the control plane");
    drop(env);
    println!("demo: stopped");
    code
}

/// `--operator`, or `trainforge` next to this executable; it must exist.
fn operator_binary(flag: Option<&Path>) -> Result<PathBuf, DemoError> {
    let bin = match flag {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(DemoError::CurrentExe)?
            .with_file_name("trainforge"),
    };
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(DemoError::OperatorMissing(bin))
    }
}

async fn run(
    env: &TestEnv,
    args: &Args,
    operator_bin: Option<&Path>,
    operator: &mut Option<Operator>,
    exit_after: Option<u64>,
) -> Result<(), DemoError> {
    let client = env.client().await?;
    println!(
        "demo: control plane up ({} mode) at {}",
        env.mode(),
        env.server_url()
    );
    println!("demo: CRDs installed: {}", env.crds().join(", "));
    apply_plugins(&client, &args.plugins).await;
    // Everything but the TrainJobs now; the TrainJobs once the operator is
    // ready, so that the live view shows each one from its creation.
    let docs = load_examples(&args.example);
    let (trainjob_docs, others): (Vec<_>, Vec<_>) =
        docs.into_iter().partition(|(_, d)| is_trainjob(d));
    apply_docs(&client, &others).await;
    match operator_bin {
        None => {
            apply_docs(&client, &trainjob_docs).await;
            println!(
                "demo: api mode: the operator is not started (it needs the full control plane)"
            );
        }
        Some(bin) => {
            let op = operator.insert(Operator::start(env, bin)?);
            println!(
                "demo: operator {} started (pid {}), log {}",
                shown(bin),
                op.pid,
                op.log.display()
            );
            let started = Instant::now();
            tokio::select! {
                r = op.wait_ready(Duration::from_secs(args.timeout)) => r?,
                _ = shutdown_signal() => return Err(DemoError::Interrupted),
            }
            println!(
                "demo: operator ready in {:.1}s (http://{}/readyz, /metrics)",
                started.elapsed().as_secs_f64(),
                op.addr
            );
            let trainjobs = apply_docs(&client, &trainjob_docs).await;
            if !trainjobs.is_empty() {
                tokio::select! {
                    r = live_view(&client, op, &trainjobs, Duration::from_secs(args.timeout)) => r?,
                    _ = shutdown_signal() => return Err(DemoError::Interrupted),
                }
            }
        }
    }
    if args.figures {
        println!("{}", env.figures());
    }
    let kc = env.kubeconfig().display();
    println!("demo: kubeconfig: {kc}");
    println!("demo: try:  kubectl --kubeconfig {kc} get trainjobs,jobsets,pods");
    println!(
        "demo:       kubectl --kubeconfig {kc} get clustertrainingruntimes,clustertrainerplugins"
    );
    println!(
        "demo: component logs in {}",
        env.dir().join("logs").display()
    );
    match exit_after {
        Some(secs) => {
            println!("demo: exiting after {secs}s (or Ctrl-C)");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                _ = shutdown_signal() => {}
            }
        }
        None => {
            println!("demo: up; press Ctrl-C to stop");
            shutdown_signal().await;
        }
    }
    Ok(())
}

/// `path` relative to the workspace root when it is inside it, for messages.
fn shown(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|r| r.canonicalize().ok());
    match (root, path.canonicalize()) {
        (Some(root), Ok(p)) => match p.strip_prefix(&root) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        },
        _ => path.display().to_string(),
    }
}

/// `kind name` of a manifest, for messages.
fn describe(doc: &Value) -> String {
    format!(
        "{} {}",
        doc.get("kind").and_then(Value::as_str).unwrap_or("?"),
        doc.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?")
    )
}

/// Apply every plugin config of `dir` (one summary line; failures one line each).
async fn apply_plugins(client: &kube::Client, dir: &Path) {
    let files = match manifests::yaml_files(dir) {
        Ok(f) => f,
        Err(e) => {
            println!("demo: cannot list plugin configs: {e}");
            return;
        }
    };
    let mut applied = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "kustomization.yaml"))
    {
        let docs = match manifests::load_yaml_docs(file) {
            Ok(d) => d,
            Err(e) => {
                println!("demo: cannot read {}: {e}", shown(file));
                continue;
            }
        };
        for doc in docs {
            match manifests::apply(client, &doc, FIELD_MANAGER).await {
                Ok(o) => applied.push(o.metadata.name.unwrap_or_default()),
                Err(e) => println!(
                    "demo: REJECTED {} from {}: {e}",
                    describe(&doc),
                    shown(file)
                ),
            }
        }
    }
    println!(
        "demo: applied {} ClusterTrainerPlugins from {}: {}",
        applied.len(),
        shown(dir),
        applied.join(", ")
    );
}

/// Every document of every file, in order, with the file it came from
/// (unreadable files are reported and skipped).
fn load_examples(files: &[PathBuf]) -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for file in files {
        match manifests::load_yaml_docs(file) {
            Ok(docs) => out.extend(docs.into_iter().map(|d| (file.clone(), d))),
            Err(e) => println!("demo: cannot read {}: {e}", shown(file)),
        }
    }
    out
}

/// Whether a manifest is a TrainJob.
fn is_trainjob(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some("TrainJob")
        && doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("trainer.kubeflow.org/"))
}

/// Apply `docs` in order (failures are reported); returns the TrainJobs
/// applied as `(namespace, name)`.
async fn apply_docs(client: &kube::Client, docs: &[(PathBuf, Value)]) -> Vec<(String, String)> {
    let mut trainjobs = Vec::new();
    for (file, doc) in docs {
        let what = describe(doc);
        match manifests::apply(client, doc, FIELD_MANAGER).await {
            Ok(o) => {
                println!("demo: applied {what} from {}", shown(file));
                if is_trainjob(doc) {
                    let ns = o.metadata.namespace.unwrap_or_else(|| "default".into());
                    trainjobs.push((ns, o.metadata.name.unwrap_or_default()));
                }
            }
            Err(e) => println!("demo: REJECTED {what} from {}: {e}", shown(file)),
        }
    }
    trainjobs
}

/// The operator process, owned by a thread that lives until [`Operator::stop`]
/// (the process gets SIGKILL when that thread ends, see
/// [`trainforge_testenv::process`]).
struct Operator {
    /// `host:port` of `/readyz` and `/metrics`.
    addr: String,
    /// Its log file.
    log: PathBuf,
    /// Its process id.
    pid: u32,
    /// Set when the process has exited (the status).
    exited: Arc<Mutex<Option<String>>>,
    stop_tx: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Operator {
    /// Spawn `bin operator …` against `env` from a dedicated thread.
    fn start(env: &TestEnv, bin: &Path) -> Result<Operator, DemoError> {
        let port = ports::free_port()?;
        let addr = format!("127.0.0.1:{port}");
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
        ]
        .iter()
        .map(|s| s.to_string())
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
    fn tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    /// `Err` if the process has exited.
    fn check(&self) -> Result<(), DemoError> {
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

    /// Wait until `/readyz` answers 200.
    async fn wait_ready(&self, timeout: Duration) -> Result<(), DemoError> {
        let start = Instant::now();
        loop {
            self.check()?;
            if http_status(&self.addr, "/readyz").await == Some(200) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(DemoError::NotReady {
                    secs: timeout.as_secs(),
                    url: format!("http://{}/readyz", self.addr),
                    tail: self.tail(40),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM the operator (SIGKILL after 5 s) and wait for it.
    async fn stop(self) {
        let _ = self.stop_tx.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Status code of `GET http://addr/path` (plain HTTP/1.0), `None` if unreachable.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = [0u8; 64];
        let mut n = 0;
        while n < buf.len() {
            match s.read(&mut buf[n..]).await.ok()? {
                0 => break,
                k => n += k,
            }
        }
        // "HTTP/1.1 200 OK"
        let head = std::str::from_utf8(&buf[..n]).ok()?;
        head.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

/// The JobSet resource (v1alpha2).
fn jobset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    )
}

/// The TrainJob resource.
fn trainjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    )
}

/// Type of the `True` condition to show for an object: `Complete`/`Failed`
/// first, else the first `True` one, else `None`.
fn true_condition(obj: &Value) -> Option<&Value> {
    let conditions = obj.pointer("/status/conditions")?.as_array()?;
    let is_true = |c: &&Value| c.get("status").and_then(Value::as_str) == Some("True");
    conditions
        .iter()
        .filter(is_true)
        .find(|c| {
            matches!(
                c.get("type").and_then(Value::as_str),
                Some("Complete" | "Failed")
            )
        })
        .or_else(|| conditions.iter().find(is_true))
}

/// `demo-node-0-1 Running` (Job name and completion index when known).
fn pod_line(pod: &Pod) -> String {
    let labels = pod.metadata.labels.as_ref();
    let index = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"));
    let job = labels.and_then(|l| l.get("batch.kubernetes.io/job-name"));
    let name = match (job, index) {
        (Some(j), Some(i)) => format!("{j}-{i}"),
        _ => pod.metadata.name.clone().unwrap_or_default(),
    };
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    format!("{name} {phase}")
}

/// Next item of a stream. (This crate has no `futures` dependency: the
/// `Stream` trait is reached through its subtrait kube `WatchStreamExt`,
/// which is implemented for every stream.)
async fn next_item<S: WatchStreamExt + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

/// Caches (reflectors) of one TrainJob, its JobSet and its pods.
struct Watches {
    trainjob: Store<DynamicObject>,
    jobset: Store<DynamicObject>,
    pods: Store<Pod>,
}

/// What the live view shows of one TrainJob at one moment.
struct View {
    /// The TrainJob as JSON (`Null` if absent).
    trainjob: Value,
    /// Its state: the shown `True` condition's type, else `Created`.
    state: String,
    /// `absent`, `present` or the JobSet's shown `True` condition type.
    jobset: String,
    /// `name phase` of each pod, sorted.
    pods: Vec<String>,
}

impl View {
    /// The view from the caches.
    fn of(w: &Watches) -> View {
        let trainjob = w
            .trainjob
            .state()
            .first()
            .map(|o| serde_json::to_value(o.as_ref()).unwrap_or_default())
            .unwrap_or_default();
        let state = condition_type(&trainjob).unwrap_or("Created").to_owned();
        let jobset = match w.jobset.state().first() {
            None => "absent".to_owned(),
            Some(js) => {
                let js = serde_json::to_value(js.as_ref()).unwrap_or_default();
                condition_type(&js).unwrap_or("present").to_owned()
            }
        };
        let mut pods: Vec<String> = w.pods.state().iter().map(|p| pod_line(p)).collect();
        pods.sort();
        View {
            trainjob,
            state,
            jobset,
            pods,
        }
    }

    /// `Created | JobSet: present | pods: demo-node-0-0 Running, …`.
    fn line(&self) -> String {
        let pods = if self.pods.is_empty() {
            "none".to_owned()
        } else {
            self.pods.join(", ")
        };
        format!("{} | JobSet: {} | pods: {pods}", self.state, self.jobset)
    }

    /// `reason`/`message` of the shown condition.
    fn condition_field(&self, key: &str) -> String {
        true_condition(&self.trainjob)
            .and_then(|c| c.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    }
}

/// Type of [`true_condition`].
fn condition_type(obj: &Value) -> Option<&str> {
    true_condition(obj)?.get("type")?.as_str()
}

/// Follow every TrainJob in turn until it is `Complete` (`Failed` or
/// `timeout` is an error), then print its `status.jobsStatus`.
async fn live_view(
    client: &kube::Client,
    op: &Operator,
    trainjobs: &[(String, String)],
    timeout: Duration,
) -> Result<(), DemoError> {
    for (ns, name) in trainjobs {
        follow(client, op, ns, name, timeout).await?;
    }
    Ok(())
}

/// Watch one TrainJob, its JobSet and its pods; print a line as soon as what
/// it shows changes (every pod phase is seen), and at least once a second.
async fn follow(
    client: &kube::Client,
    op: &Operator,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<(), DemoError> {
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (tj_ar, js_ar) = (trainjob_resource(), jobset_resource());
    let tj_writer = Writer::new(tj_ar.clone());
    let js_writer = Writer::new(js_ar.clone());
    let pod_writer = Writer::<Pod>::default();
    let watches = Watches {
        trainjob: tj_writer.as_reader(),
        jobset: js_writer.as_reader(),
        pods: pod_writer.as_reader(),
    };
    let mut tj_events = Box::pin(
        watcher(
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &tj_ar),
            by_name.clone(),
        )
        .default_backoff()
        .reflect(tj_writer),
    );
    let mut js_events = Box::pin(
        watcher(
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &js_ar),
            by_name,
        )
        .default_backoff()
        .reflect(js_writer),
    );
    let mut pod_events = Box::pin(
        watcher(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&format!("jobset.sigs.k8s.io/jobset-name={name}")),
        )
        .default_backoff()
        .reflect(pod_writer),
    );
    let job = format!("{ns}/{name}");
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let (mut last, mut printed_at): (String, Option<Instant>) = (String::new(), None);
    loop {
        let event = tokio::select! {
            e = next_item(&mut tj_events) => e.map(|r| r.map(|_| ())),
            e = next_item(&mut js_events) => e.map(|r| r.map(|_| ())),
            e = next_item(&mut pod_events) => e.map(|r| r.map(|_| ())),
            _ = tick.tick() => Some(Ok(())),
        };
        match event {
            None => return Err(DemoError::Supervisor("a watch ended".into())),
            // Retried with backoff by the watcher; the view just lags.
            Some(Err(e)) => tracing::debug!("watch error (retrying): {e}"),
            Some(Ok(())) => {}
        }
        op.check()?;
        let elapsed = start.elapsed();
        let view = View::of(&watches);
        let line = view.line();
        if line != last || printed_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            println!(
                "demo: [{:>5.1}s] TrainJob {job}: {line}",
                elapsed.as_secs_f64()
            );
            last = line;
            printed_at = Some(Instant::now());
        }
        match view.state.as_str() {
            "Complete" => {
                println!(
                    "demo: TrainJob {job} Complete {:.1}s after it was applied ({}: {})",
                    elapsed.as_secs_f64(),
                    view.condition_field("reason"),
                    view.condition_field("message")
                );
                println!("demo: status.jobsStatus of {job}:");
                let statuses = view
                    .trainjob
                    .pointer("/status/jobsStatus")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if statuses.is_empty() {
                    println!("demo:   (empty)");
                }
                for s in statuses {
                    println!("demo:   {s}");
                }
                return Ok(());
            }
            "Failed" => {
                return Err(DemoError::JobFailed {
                    job,
                    reason: view.condition_field("reason"),
                    message: view.condition_field("message"),
                    tail: op.tail(40),
                });
            }
            _ if elapsed > timeout => {
                return Err(DemoError::Timeout {
                    job,
                    secs: timeout.as_secs(),
                    tail: op.tail(40),
                });
            }
            _ => {}
        }
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
