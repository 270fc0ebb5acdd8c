//! `trainforge-bench`: what one operator replica costs, per TrainJob, on
//! the real control plane. `make bench` runs it against the release build.
//!
//! 1. start the full test control plane with an audit log of the
//!    operator's ServiceAccount, install the operator's shipped RBAC, the
//!    default plugin configs (`manifests/plugins`), the `torch-distributed`
//!    runtime and the admission webhooks;
//! 2. start the operator with the Deployment's flags (leader election,
//!    webhooks, a plugin cache dir) and an empty plugin cache, measuring
//!    start → `/readyz` 200, CPU-seconds and peak memory: once compiling
//!    every plugin (no shipped artifacts), once as shipped (with
//!    `--artifacts`: the builtins precompiled, as the image has them);
//! 3. start it again on the warm cache: start → ready; then idle memory;
//! 4. create `--jobs` torch TrainJobs as fast as `--concurrency` clients
//!    can, and wait until every one is `Complete`: create → JobSet latency,
//!    CPU-seconds, peak and end memory, and the operator's API requests by
//!    verb and resource (from the audit log).
//!
//! Memory and CPU are the operator's process tree (its plugin compile
//! workers included). Figures are printed, never asserted: the exit code
//! only says whether the run itself worked (operator ready, every TrainJob
//! Complete in time).
//!
//! With `--upstream BINARY` (the Kubeflow Trainer v2.3.0 controller manager
//! `testenv/upstream.sh` builds), the same is measured for upstream
//! afterwards, on a fresh control plane of the same mode with upstream's own
//! CRDs, RBAC and admission webhooks, audited for its ServiceAccount: one
//! start (start → `/readyz`), idle memory, and the same load. `BENCH
//! upstream` lines give its figures, `BENCH ratio` lines Trainforge ÷
//! upstream per figure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trainforge_testenv::paths::Paths;
use trainforge_testenv::process::{Proc, log_tail, spawn};
use trainforge_testenv::webhooks::Front;
use trainforge_testenv::{Mode, TestEnv, kubeconfig, manifests, ports, upstream};

mod audit;
mod stats;

use stats::{Sampler, cpu_seconds, tree_rss_kib};

/// The operator's ServiceAccount (`manifests/operator`), as the API server
/// names it: only its requests are audited and counted.
const OPERATOR_NAMESPACE: &str = "trainforge-system";
const OPERATOR_SA: &str = "trainforge-operator";
const OPERATOR_USER: &str = "system:serviceaccount:trainforge-system:trainforge-operator";
/// Field manager of what the bench applies.
const FIELD_MANAGER: &str = "trainforge-bench";

/// Measure one operator replica: start-up, idle, and N torch TrainJobs to Complete.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The `trainforge` binary to measure (default: `trainforge` next to
    /// this executable).
    #[arg(long)]
    operator: Option<PathBuf>,
    /// The builtin plugins precompiled for `--operator`
    /// (`trainforge plugin precompile --out DIR`), as an image ships them:
    /// passed as `--plugin-artifacts-dir` except to the start that compiles.
    #[arg(long)]
    artifacts: Option<PathBuf>,
    /// TrainJobs to create.
    #[arg(long, default_value_t = 300)]
    jobs: usize,
    /// Clients creating them at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// `spec.trainer.numNodes` of each TrainJob (one pod per node).
    #[arg(long, default_value_t = 1)]
    nodes: u32,
    /// Seconds the operator may take to get ready, and (separately) the
    /// TrainJobs to complete, before the run fails.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Seconds to wait after the operator is ready before reading its idle
    /// memory.
    #[arg(long, default_value_t = 10)]
    settle: u64,
    /// The upstream Kubeflow Trainer controller manager to measure the same
    /// way after Trainforge, on a fresh control plane (`testenv/upstream.sh
    /// --print-bin`; `make bench-upstream` builds it and passes it).
    #[arg(long)]
    upstream: Option<PathBuf>,
    /// Upstream's data files: its CRDs, webhook configurations, RBAC and
    /// configuration (default: the `data/` next to the `bin/` of
    /// `--upstream`, as `testenv/upstream.sh` lays them out).
    #[arg(long, requires = "upstream")]
    upstream_data: Option<PathBuf>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("the operator binary {} does not exist (build it, or pass --operator)", .0.display())]
    OperatorMissing(PathBuf),
    #[error("the upstream controller {} does not exist (testenv/upstream.sh builds it)", .0.display())]
    UpstreamMissing(PathBuf),
    #[error("test environment: {0}")]
    Env(#[from] trainforge_testenv::Error),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0} exited: {1}")]
    Exited(String, String),
    #[error("{0} was not ready after {1}s; its log ends with:\n{2}")]
    NotReady(String, u64, String),
    #[error("{done} of {jobs} TrainJobs Complete after {secs}s ({failed} Failed)")]
    NotComplete {
        done: usize,
        failed: usize,
        jobs: usize,
        secs: u64,
    },
    #[error("reading the audit log: {0}")]
    Audit(String),
    #[error("{0}")]
    Setup(String),
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
    let bin = match args.operator.clone().map_or_else(
        || {
            std::env::current_exe()
                .map(|p| p.with_file_name("trainforge"))
                .map_err(|e| BenchError::Setup(format!("locating this executable: {e}")))
        },
        Ok,
    ) {
        Ok(b) if b.is_file() => b,
        Ok(b) => return fail(BenchError::OperatorMissing(b)),
        Err(e) => return fail(e),
    };
    // Checked before the Trainforge run, so that a missing build fails at once.
    let theirs = match upstream_inputs(&args) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let (ours, ours_cold) = match trainforge(&args, &bin).await {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let Some((upstream_bin, upstream_data)) = theirs else {
        return ExitCode::SUCCESS;
    };
    match upstream_run(&args, &upstream_bin, &upstream_data).await {
        Ok(theirs) => {
            print_ratios(&ours, ours_cold.as_ref(), &theirs);
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn fail(e: BenchError) -> ExitCode {
    println!("bench: FAILED: {e}");
    ExitCode::FAILURE
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn now() -> Timestamp {
    Timestamp::try_from(SystemTime::now()).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `--upstream` and its data directory, checked.
fn upstream_inputs(args: &Args) -> Result<Option<(PathBuf, PathBuf)>, BenchError> {
    let Some(bin) = &args.upstream else {
        return Ok(None);
    };
    if !bin.is_file() {
        return Err(BenchError::UpstreamMissing(bin.clone()));
    }
    let data = args
        .upstream_data
        .clone()
        .unwrap_or_else(|| upstream::data_dir_for(bin));
    upstream::check(&data)?;
    Ok(Some((bin.clone(), data)))
}

/// A fresh full control plane auditing `user`'s requests.
async fn start_env(paths: Paths, user: &'static str) -> Result<TestEnv, BenchError> {
    match tokio::task::spawn_blocking(move || {
        TestEnv::start_audited_with(Mode::Full, paths, &[user])
    })
    .await
    {
        Ok(env) => Ok(env?),
        Err(e) => Err(BenchError::Setup(format!("control plane start: {e}"))),
    }
}

/// Server-side apply every document of `file` (`kustomization.yaml` files
/// are skipped).
async fn apply_file(client: &kube::Client, file: &Path) -> Result<usize, BenchError> {
    let docs = manifests::load_yaml_docs(file)?;
    for d in &docs {
        manifests::apply(client, d, FIELD_MANAGER).await?;
    }
    Ok(docs.len())
}

/// Everything the operator needs before it starts: its RBAC and identity,
/// the plugin configs, the torch runtime, the webhook configurations (with
/// `front` as their Service). Returns the ServiceAccount's kubeconfig.
async fn install(
    env: &TestEnv,
    client: &kube::Client,
    front: &Front,
) -> Result<PathBuf, BenchError> {
    let root = repo_root();
    for f in [
        "namespace.yaml",
        "service_account.yaml",
        "cluster_role.yaml",
        "cluster_role_binding.yaml",
        "leader_election_role.yaml",
        "leader_election_role_binding.yaml",
    ] {
        apply_file(client, &root.join("manifests/operator").join(f)).await?;
    }
    let kc = env.dir().join("operator-sa.kubeconfig");
    kubeconfig::write_service_account(
        env.kubeconfig(),
        OPERATOR_NAMESPACE,
        OPERATOR_SA,
        86_400,
        &kc,
    )
    .await?;
    let mut plugins = 0;
    for f in manifests::yaml_files(&root.join("manifests/plugins"))? {
        if f.file_name().is_some_and(|n| n != "kustomization.yaml") {
            plugins += apply_file(client, &f).await?;
        }
    }
    apply_file(client, &torch_runtime()).await?;
    trainforge_testenv::webhooks::register(client, &root, front.addr()).await?;
    println!(
        "bench: installed the operator's RBAC, {plugins} plugin configs, the torch-distributed runtime, the webhooks"
    );
    Ok(kc)
}

/// The `torch-distributed` ClusterTrainingRuntime both runs use.
fn torch_runtime() -> PathBuf {
    repo_root().join("manifests/runtimes/torch-distributed.yaml")
}

/// A running controller, owned by a thread of its own (the process is
/// killed when the thread that spawned it ends).
struct Operator {
    name: String,
    /// Where `/readyz` (and, for Trainforge, `/metrics`) is served.
    addr: String,
    pid: u32,
    log: PathBuf,
    exited: Arc<Mutex<Option<String>>>,
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Operator {
    /// `bin args` as component `name` (log `logs/<name>.log`) with `env`,
    /// serving `/readyz` on `addr`.
    fn spawn(
        name: &str,
        bin: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        logs: &Path,
        addr: String,
    ) -> Result<Operator, BenchError> {
        let (bin, logs, thread_name) = (bin.to_path_buf(), logs.to_path_buf(), name.to_owned());
        let exited = Arc::new(Mutex::new(None));
        let exited_w = exited.clone();
        let (started_tx, started_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut proc: Proc = match spawn(&thread_name, &bin, &args, &logs, &env) {
                Ok(p) => p,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return;
                }
            };
            let _ = started_tx.send(Ok((proc.pid(), proc.log.clone())));
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stop_rx.recv_timeout(Duration::from_millis(100))
            {
                if let Err(e) = proc.check_running() {
                    let mut slot = exited_w.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert_with(|| e.to_string());
                }
            }
            proc.stop(Duration::from_secs(10));
        });
        match started_rx.recv() {
            Ok(Ok((pid, log))) => Ok(Operator {
                name: name.to_owned(),
                addr,
                pid,
                log,
                exited,
                stop: stop_tx,
                thread,
            }),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(BenchError::Setup(format!("the thread of {name} died"))),
        }
    }

    /// `bin operator` with the Deployment's flags, as the ServiceAccount of
    /// `kubeconfig`, caching compiled plugins in `cache`.
    fn start(
        bin: &Path,
        kubeconfig: &Path,
        cache: &Path,
        logs: &Path,
        name: &str,
        front: &Front,
        extra: &[&str],
    ) -> Result<Operator, BenchError> {
        let addr = format!("127.0.0.1:{}", ports::free_port()?);
        let webhook = std::net::SocketAddr::from(([127, 0, 0, 1], ports::free_port()?));
        front.add(webhook);
        std::fs::create_dir_all(cache)
            .map_err(|e| BenchError::Setup(format!("creating {}: {e}", cache.display())))?;
        let mut args: Vec<String> = vec![
            "operator".into(),
            "--leader-elect".into(),
            format!("--lease-namespace={OPERATOR_NAMESPACE}"),
            format!("--metrics-bind-address={addr}"),
            format!("--health-probe-bind-address={addr}"),
            format!("--plugin-cache-dir={}", cache.display()),
            format!("--webhook-bind-address={webhook}"),
            "--webhook-cert-secret=trainforge-webhook-cert".into(),
            "--webhook-service=trainforge-webhook-service".into(),
            "--webhook-host=127.0.0.1".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let env = vec![
            (
                "KUBECONFIG".to_owned(),
                kubeconfig.to_string_lossy().into_owned(),
            ),
            ("RUST_LOG".to_owned(), "info".to_owned()),
            ("POD_NAMESPACE".to_owned(), OPERATOR_NAMESPACE.to_owned()),
            ("POD_NAME".to_owned(), name.to_owned()),
        ];
        Operator::spawn(name, bin, args, env, logs, addr)
    }

    fn check(&self) -> Result<(), BenchError> {
        match self
            .exited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(s) => Err(BenchError::Exited(
                self.name.clone(),
                format!("{s}\n{}", log_tail(&self.log, 30)),
            )),
            None => Ok(()),
        }
    }

    /// Wait for `/readyz` 200; how long it took from `since`.
    async fn wait_ready(&self, since: Instant, timeout: Duration) -> Result<Duration, BenchError> {
        loop {
            self.check()?;
            if http_status(&self.addr, "/readyz").await == Some(200) {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                return Err(BenchError::NotReady(
                    self.name.clone(),
                    timeout.as_secs(),
                    log_tail(&self.log, 30),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM (SIGKILL after 10 s) and wait for the exit.
    async fn stop(self) {
        let _ = self.stop.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Status code and body of `GET path` on `addr` (plain HTTP/1.0).
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        (&mut s).take(8 << 20).read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

/// The status code of `GET path` on `addr`.
async fn http_status(addr: &str, path: &str) -> Option<u16> {
    http_get(addr, path).await.map(|(c, _)| c)
}

/// Per value of label `label`, the sum of the samples of the metric
/// family `name` in an OpenMetrics text.
fn metric_by(text: &str, name: &str, label: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let key = format!("{label}=\"");
    for l in text.lines() {
        let Some(rest) = l.strip_prefix(name).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Some(v) = labels
            .split_once(key.as_str())
            .and_then(|(_, after)| after.split_once('"'))
            .map(|(v, _)| v.to_owned())
        else {
            continue;
        };
        if let Ok(n) = value.trim().parse::<f64>() {
            *out.entry(v).or_insert(0.0) += n;
        }
    }
    out
}

/// The sum of every sample of the metric family `name` (all label sets)
/// in an OpenMetrics text.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One start of a controller, measured.
struct Start {
    ready: Duration,
    cpu: f64,
    peak_kib: u64,
    from: Timestamp,
    to: Timestamp,
}

/// Start a controller with `start` and measure it until `/readyz` answers.
async fn measured_start(
    start: impl FnOnce() -> Result<Operator, BenchError>,
    timeout: Duration,
) -> Result<(Operator, Sampler, Start), BenchError> {
    let from = now();
    let t0 = Instant::now();
    let op = start()?;
    let sampler = Sampler::start(op.pid);
    let ready = op.wait_ready(t0, timeout).await?;
    let start = Start {
        ready,
        cpu: cpu_seconds(op.pid).unwrap_or(0.0),
        peak_kib: sampler.peak_kib(),
        from,
        to: now(),
    };
    Ok((op, sampler, start))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn trainjob(ns: &str, name: &str, nodes: u32) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": nodes}},
    })
}

fn is_true(o: &DynamicObject, t: &str) -> bool {
    o.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(t)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// What the load cost one controller.
struct Load {
    created_in: Duration,
    all_done: Duration,
    last_jobset: Duration,
    /// create → JobSet of every TrainJob whose JobSet was seen, sorted.
    latency: Vec<Duration>,
    cpu: f64,
    peak_kib: u64,
    end_kib: u64,
    from: Timestamp,
    to: Timestamp,
    /// `/metrics` before and after the load (when scraped).
    metrics: (String, String),
}

/// What one controller cost, measured the same way for Trainforge and
/// upstream.
struct Cost {
    /// The start that served the load (Trainforge: warm plugin cache).
    start: Start,
    idle_kib: u64,
    load: Load,
    /// API requests over the load.
    api_load: audit::Counts,
    /// API requests from start to ready.
    api_start: audit::Counts,
}

/// Create `--jobs` torch TrainJobs with `--concurrency` clients and wait
/// until every one is Complete, measuring `op` (`sampler` samples its
/// tree). With `scrape`, `/metrics` on `op.addr` before and after.
async fn run_load(
    env: &TestEnv,
    client: &kube::Client,
    op: &Operator,
    sampler: &Sampler,
    args: &Args,
    scrape: bool,
) -> Result<Load, BenchError> {
    let timeout = Duration::from_secs(args.timeout);
    let ns = env.create_namespace("bench").await?;
    let gvk = |g: &str, v: &str, k: &str| ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k));
    let jobsets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    );
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
    );
    // When each JobSet was first seen.
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(jobsets.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(o)) = stream.next().await {
                if let Some(n) = o.metadata.name {
                    seen.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(n)
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    let scrape_metrics = || async {
        if scrape {
            http_get(&op.addr, "/metrics")
                .await
                .map(|(_, b)| b)
                .unwrap_or_default()
        } else {
            String::new()
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    sampler.reset();
    let metrics0 = scrape_metrics().await;
    let cpu0 = cpu_seconds(op.pid).unwrap_or(0.0);
    let from = now();
    let t0 = Instant::now();
    let names: Vec<String> = (0..args.jobs).map(|i| format!("bench-{i}")).collect();
    let created: Vec<Result<(String, Instant), kube::Error>> = futures::stream::iter(names)
        .map(|name| {
            let (trainjobs, ns, nodes) = (trainjobs.clone(), ns.clone(), args.nodes);
            async move {
                let at = Instant::now();
                trainjobs
                    .patch(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(trainjob(&ns, &name, nodes)),
                    )
                    .await?;
                Ok((name, at))
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let created: Vec<(String, Instant)> = created.into_iter().collect::<Result<_, _>>()?;
    let created_in = t0.elapsed();
    // Wait for every TrainJob to complete.
    let (done, failed) = loop {
        op.check()?;
        let list = trainjobs.list(&ListParams::default()).await?;
        let done = list.items.iter().filter(|o| is_true(o, "Complete")).count();
        let failed = list.items.iter().filter(|o| is_true(o, "Failed")).count();
        if done + failed >= args.jobs || t0.elapsed() > timeout {
            break (done, failed);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let all_done = t0.elapsed();
    let to = now();
    let cpu = cpu_seconds(op.pid).unwrap_or(0.0) - cpu0;
    let peak_kib = sampler.peak_kib();
    let metrics1 = scrape_metrics().await;
    watch.abort();
    if done < args.jobs {
        return Err(BenchError::NotComplete {
            done,
            failed,
            jobs: args.jobs,
            secs: args.timeout,
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end_kib = tree_rss_kib(op.pid);
    let mut latency = Vec::new();
    let mut last_jobset = Duration::ZERO;
    {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        for (name, at) in &created {
            if let Some(s) = seen.get(name) {
                latency.push(s.saturating_duration_since(*at));
                last_jobset = last_jobset.max(s.saturating_duration_since(t0));
            }
        }
    }
    latency.sort();
    Ok(Load {
        created_in,
        all_done,
        last_jobset,
        latency,
        cpu,
        peak_kib,
        end_kib,
        from,
        to,
        metrics: (metrics0, metrics1),
    })
}

/// `user`'s API requests over the load and from start to ready, from the
/// environment's audit log.
fn api_counts(
    env: &TestEnv,
    user: &str,
    load: &Load,
    start: &Start,
) -> Result<(audit::Counts, audit::Counts), BenchError> {
    let log = env
        .audit_log()
        .ok_or_else(|| BenchError::Audit("kube-apiserver wrote no audit log".into()))?;
    let requests = audit::read(&log, user).map_err(|e| BenchError::Audit(e.to_string()))?;
    Ok((
        audit::Counts::of(&requests, load.from, load.to),
        audit::Counts::of(&requests, start.from, start.to),
    ))
}

/// Trainforge on a control plane of its own, torn down before this returns:
/// its cost, and its cold start as shipped (with `--artifacts`).
async fn trainforge(args: &Args, bin: &Path) -> Result<(Cost, Option<Start>), BenchError> {
    let env = start_env(Paths::from_env(), OPERATOR_USER).await?;
    let result = run(&env, args, bin).await;
    // The control plane's own start-up and memory, beside the operator's.
    for line in env.figures().to_string().lines() {
        println!("BENCH testenv {line}");
    }
    if let Ok(client) = env.client().await {
        let _ = trainforge_testenv::webhooks::unregister(&client, &repo_root()).await;
    }
    drop(env);
    result
}

async fn run(env: &TestEnv, args: &Args, bin: &Path) -> Result<(Cost, Option<Start>), BenchError> {
    let client = env.client().await?;
    let front = Front::start()?;
    let kc = install(env, &client, &front).await?;
    let timeout = Duration::from_secs(args.timeout);
    let cache = env.dir().join("plugin-cache");
    let logs = env.dir().join("logs");
    println!(
        "bench: operator {} ({} jobs, {} node(s) each, {} clients)",
        bin.display(),
        args.jobs,
        args.nodes,
        args.concurrency
    );

    // 1. Cold, compiling every plugin: no shipped artifacts, empty cache.
    // (An operator without shipped artifacts predates the flag: it is only
    // given along with `--artifacts`.)
    let none: &[&str] = if args.artifacts.is_some() {
        &["--no-plugin-artifacts"]
    } else {
        &[]
    };
    let (op, sampler, compiled) = measured_start(
        || Operator::start(bin, &kc, &cache, &logs, "operator-compile", &front, none),
        timeout,
    )
    .await?;
    drop(sampler);
    op.stop().await;
    // 2. Cold as shipped: precompiled builtins, an empty cache.
    let shipped_flag = args
        .artifacts
        .as_ref()
        .map(|d| format!("--plugin-artifacts-dir={}", d.display()));
    let shipped: Vec<&str> = shipped_flag.iter().map(String::as_str).collect();
    let cold = match &args.artifacts {
        Some(_) => {
            let empty = env.dir().join("plugin-cache-empty");
            let (op, sampler, cold) = measured_start(
                || Operator::start(bin, &kc, &empty, &logs, "operator-cold", &front, &shipped),
                timeout,
            )
            .await?;
            drop(sampler);
            op.stop().await;
            Some(cold)
        }
        None => {
            println!("bench: no --artifacts: skipping the cold start with precompiled builtins");
            None
        }
    };
    // 3. Warm: the first start's cache, a new process; this one serves the load.
    let (op, sampler, warm) = measured_start(
        || Operator::start(bin, &kc, &cache, &logs, "operator", &front, &shipped),
        timeout,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    op.check()?;
    let idle_kib = tree_rss_kib(op.pid);

    // 4. Load.
    let load = run_load(env, &client, &op, &sampler, args, true).await?;
    drop(sampler);
    op.stop().await;
    let (api_load, api_start) = api_counts(env, OPERATOR_USER, &load, &warm)?;
    let cost = Cost {
        start: warm,
        idle_kib,
        load,
        api_load,
        api_start,
    };

    let start_line = |what: &str, s: &Start| {
        println!(
            "BENCH operator start -> ready, {what}: {:.2} s, {:.2} CPU-s, peak RSS {:.1} MiB (with compile workers)",
            s.ready.as_secs_f64(),
            s.cpu,
            mib(s.peak_kib)
        );
    };
    start_line("empty plugin cache, compiling every plugin", &compiled);
    if let Some(cold) = &cold {
        start_line("empty plugin cache, shipped builtin artifacts", cold);
    }
    start_line("warm plugin cache", &cost.start);
    print_load(&OURS, &cost, args);
    let per_f = |n: f64| n / args.jobs as f64;
    let (metrics0, metrics1) = (&cost.load.metrics.0, &cost.load.metrics.1);
    let delta = |name: &str| metric_sum(metrics1, name) - metric_sum(metrics0, name);
    println!(
        "BENCH operator work over the load: {:.1} reconciles and {:.1} plugin calls per TrainJob, {:.2} ms of plugin calls per TrainJob ({:.1} µs per call), {:.0} admission reviews",
        per_f(delta("trainforge_reconcile_total")),
        per_f(delta("trainforge_plugin_calls_total")),
        per_f(delta("trainforge_plugin_call_duration_seconds_sum")) * 1e3,
        delta("trainforge_plugin_call_duration_seconds_sum") * 1e6
            / delta("trainforge_plugin_calls_total").max(1.0),
        delta("trainforge_admission_requests_total"),
    );
    let by_phase = |text: &str| metric_by(text, "trainforge_plugin_calls_total", "phase");
    let (p0, p1) = (by_phase(metrics0), by_phase(metrics1));
    let phases: Vec<String> = p1
        .iter()
        .map(|(phase, n)| {
            format!(
                "{phase}={:.1}",
                per_f(n - p0.get(phase).copied().unwrap_or(0.0))
            )
        })
        .collect();
    println!(
        "BENCH plugin calls per TrainJob by phase: {}; reconciles that reused the last render: {:.1} per TrainJob",
        phases.join(", "),
        per_f(delta("trainforge_renders_reused_total"))
    );
    print_api(&OURS, &cost, args);
    Ok((cost, cold))
}

/// Upstream on a fresh control plane with its own CRDs, torn down before
/// this returns.
async fn upstream_run(args: &Args, bin: &Path, data: &Path) -> Result<Cost, BenchError> {
    let mut paths = Paths::from_env();
    paths.own_crds = upstream::crds_dir(data);
    println!(
        "bench: upstream {} on a fresh control plane with its CRDs ({})",
        bin.display(),
        paths.own_crds.display()
    );
    let env = start_env(paths, upstream::USER).await?;
    let result = async {
        let client = env.client().await?;
        let front = Front::start()?;
        let ca = env.ca_crt();
        let ca = std::fs::read_to_string(&ca)
            .map_err(|e| BenchError::Setup(format!("reading {}: {e}", ca.display())))?;
        let hooks = upstream::webhook_configurations(data, front.addr(), &ca)?;
        let result = run_upstream(&env, &client, &front, &hooks, args, bin, data).await;
        let _ = upstream::unregister(&client, &hooks).await;
        result
    }
    .await;
    drop(env);
    result
}

/// The `spec` of the first document of a manifest.
fn spec_of(file: &Path) -> Result<Value, BenchError> {
    Ok(manifests::load_yaml_docs(file)?
        .into_iter()
        .next()
        .and_then(|d| d.get("spec").cloned())
        .unwrap_or(Value::Null))
}

#[allow(clippy::too_many_arguments)]
async fn run_upstream(
    env: &TestEnv,
    client: &kube::Client,
    front: &Front,
    hooks: &[Value],
    args: &Args,
    bin: &Path,
    data: &Path,
) -> Result<Cost, BenchError> {
    let timeout = Duration::from_secs(args.timeout);
    // Its RBAC and identity (the namespace is there: the environment
    // installs manifests/public), our torch runtime, its webhooks.
    let rbac = upstream::rbac_objects(data)?;
    for obj in &rbac {
        manifests::apply(client, obj, FIELD_MANAGER).await?;
    }
    let kc = env.dir().join("upstream-sa.kubeconfig");
    kubeconfig::write_service_account(
        env.kubeconfig(),
        upstream::NAMESPACE,
        upstream::SERVICE_ACCOUNT,
        86_400,
        &kc,
    )
    .await?;
    apply_file(client, &torch_runtime()).await?;
    let same =
        spec_of(&torch_runtime())? == spec_of(&data.join("runtimes/torch_distributed.yaml"))?;
    upstream::register(client, hooks).await?;
    println!(
        "bench: upstream: installed its ServiceAccount, ClusterRole and binding ({} objects), the torch-distributed runtime ({}), its webhooks (via a front, CA bundle of the environment)",
        rbac.len(),
        if same {
            "spec identical to upstream's torch_distributed.yaml"
        } else {
            "WARNING: its spec differs from upstream's torch_distributed.yaml"
        }
    );

    let ports = upstream::Ports {
        health: ports::free_port()?,
        metrics: ports::free_port()?,
        webhook: ports::free_port()?,
        status: ports::free_port()?,
    };
    let config = env.dir().join("upstream-config.yaml");
    std::fs::write(&config, upstream::config(data, ports)?)
        .map_err(|e| BenchError::Setup(format!("writing {}: {e}", config.display())))?;
    let tmp = upstream::cert_tmpdir(&env.dir().join("upstream-tmp"), &env.webhook_cert_dir())?;
    front.add(std::net::SocketAddr::from(([127, 0, 0, 1], ports.webhook)));
    // The Deployment's arguments (manifests/base/manager).
    let spawn_args = vec![
        format!("--config={}", config.display()),
        "--zap-log-level=2".to_owned(),
    ];
    let spawn_env = vec![
        ("KUBECONFIG".to_owned(), kc.display().to_string()),
        ("TMPDIR".to_owned(), tmp.display().to_string()),
    ];
    let logs = env.dir().join("logs");
    let addr = format!("127.0.0.1:{}", ports.health);
    println!(
        "bench: upstream: {} jobs, {} node(s) each, {} clients",
        args.jobs, args.nodes, args.concurrency
    );
    let (op, sampler, start) = measured_start(
        || Operator::spawn("upstream", bin, spawn_args, spawn_env, &logs, addr),
        timeout,
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    op.check()?;
    let idle_kib = tree_rss_kib(op.pid);
    let load = run_load(env, client, &op, &sampler, args, false).await?;
    drop(sampler);
    op.stop().await;
    let (api_load, api_start) = api_counts(env, upstream::USER, &load, &start)?;
    let cost = Cost {
        start,
        idle_kib,
        load,
        api_load,
        api_start,
    };
    println!(
        "BENCH upstream controller start -> ready: {:.2} s, {:.2} CPU-s, peak RSS {:.1} MiB",
        cost.start.ready.as_secs_f64(),
        cost.start.cpu,
        mib(cost.start.peak_kib)
    );
    print_load(&THEIRS, &cost, args);
    print_api(&THEIRS, &cost, args);
    println!(
        "bench: upstream: the API server opened {} connections to its webhooks",
        front.connections()
    );
    Ok(cost)
}

/// How one controller's lines read.
struct Label {
    /// The lines' prefix.
    bench: &'static str,
    /// What the controller is called in them.
    who: &'static str,
    /// Which start the start → ready requests are of.
    start: &'static str,
}

const OURS: Label = Label {
    bench: "BENCH",
    who: "operator",
    start: " (warm)",
};

const THEIRS: Label = Label {
    bench: "BENCH upstream",
    who: "controller",
    start: "",
};

/// Idle memory and what the load cost.
fn print_load(l: &Label, c: &Cost, args: &Args) {
    let (b, who, load) = (l.bench, l.who, &c.load);
    println!(
        "{b} {who} RSS idle {}s after ready: {:.1} MiB",
        args.settle,
        mib(c.idle_kib)
    );
    println!(
        "{b} {} TrainJobs created in {:.1} s; all Complete {:.1} s after the first create; last JobSet at {:.1} s",
        args.jobs,
        load.created_in.as_secs_f64(),
        load.all_done.as_secs_f64(),
        load.last_jobset.as_secs_f64()
    );
    println!(
        "{b} create -> JobSet: p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms ({} JobSets seen)",
        percentile(&load.latency, 0.5).as_secs_f64() * 1e3,
        percentile(&load.latency, 0.9).as_secs_f64() * 1e3,
        load.latency
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
        load.latency.len()
    );
    println!(
        "{b} {who} RSS over the load: peak {:.1} MiB, end {:.1} MiB",
        mib(load.peak_kib),
        mib(load.end_kib)
    );
    println!(
        "{b} {who} CPU-seconds, first create -> all Complete: {:.2} ({:.1} ms per TrainJob)",
        load.cpu,
        load.cpu * 1e3 / args.jobs as f64
    );
}

/// The controller's API requests (audit log).
fn print_api(l: &Label, c: &Cost, args: &Args) {
    let (b, who, api) = (l.bench, l.who, &c.api_load);
    let per = |n: u64| n as f64 / args.jobs as f64;
    println!(
        "{b} API writes by the {who} over the load: {} ({:.2} per TrainJob)",
        api.writes(),
        per(api.writes())
    );
    println!(
        "{b} API reads by the {who} over the load: get {} ({:.2} per TrainJob), list {}, watch {}",
        api.verb("get"),
        per(api.verb("get")),
        api.verb("list"),
        api.verb("watch")
    );
    println!(
        "{b} API requests by the {who} over the load, by verb and resource: {}",
        api.breakdown()
    );
    println!(
        "{b} API requests by the {who} from start to ready{}: {}",
        l.start,
        c.api_start.breakdown()
    );
}

/// `ours ÷ theirs`, or `n/a` when upstream's figure is zero.
fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 {
        format!("{:.2}", ours / theirs)
    } else {
        "n/a".to_owned()
    }
}

/// One `BENCH ratio` line: the figure, Trainforge ÷ upstream, both values.
fn ratio_line(figure: &str, ours: f64, theirs: f64, unit: &str, decimals: usize) {
    println!(
        "BENCH ratio {figure}: {} (Trainforge {ours:.decimals$}{unit} ÷ upstream {theirs:.decimals$}{unit})",
        ratio(ours, theirs)
    );
}

/// Trainforge ÷ upstream for every figure both runs measured.
fn print_ratios(ours: &Cost, ours_cold: Option<&Start>, theirs: &Cost) {
    let secs = |d: Duration| d.as_secs_f64();
    let ms = |l: &Load, p: f64| percentile(&l.latency, p).as_secs_f64() * 1e3;
    let (a, b) = (&ours.load, &theirs.load);
    ratio_line(
        "start -> ready (Trainforge: warm plugin cache)",
        secs(ours.start.ready),
        secs(theirs.start.ready),
        " s",
        2,
    );
    if let Some(cold) = ours_cold {
        ratio_line(
            "start -> ready (Trainforge: empty plugin cache, shipped builtin artifacts)",
            secs(cold.ready),
            secs(theirs.start.ready),
            " s",
            2,
        );
    }
    ratio_line(
        "RSS idle",
        mib(ours.idle_kib),
        mib(theirs.idle_kib),
        " MiB",
        1,
    );
    ratio_line(
        "RSS peak over the load",
        mib(a.peak_kib),
        mib(b.peak_kib),
        " MiB",
        1,
    );
    ratio_line(
        "RSS end of the load",
        mib(a.end_kib),
        mib(b.end_kib),
        " MiB",
        1,
    );
    ratio_line(
        "CPU-seconds, first create -> all Complete",
        a.cpu,
        b.cpu,
        " s",
        2,
    );
    ratio_line(
        "all Complete after the first create",
        secs(a.all_done),
        secs(b.all_done),
        " s",
        1,
    );
    ratio_line("create -> JobSet p50", ms(a, 0.5), ms(b, 0.5), " ms", 0);
    ratio_line("create -> JobSet p90", ms(a, 0.9), ms(b, 0.9), " ms", 0);
    let count = |c: &Cost, verb: Option<&str>| match verb {
        Some(v) => c.api_load.verb(v) as f64,
        None => c.api_load.writes() as f64,
    };
    for (figure, verb) in [
        ("API writes over the load", None),
        ("API gets over the load", Some("get")),
        ("API lists over the load", Some("list")),
        ("API watches over the load", Some("watch")),
    ] {
        ratio_line(figure, count(ours, verb), count(theirs, verb), "", 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# TYPE trainforge_plugin_calls counter
trainforge_plugin_calls_total{plugin=\"torch\",phase=\"build\"} 3
trainforge_plugin_calls_total{plugin=\"jobset\",phase=\"build\"} 4
trainforge_plugin_calls_total{plugin=\"jobset\",phase=\"status\"} 5
trainforge_plugin_calls_totally_different 100
trainforge_reconcile_total{controller=\"trainjob\"} 7
";

    #[test]
    fn metrics_are_summed_per_family_and_label() {
        assert_eq!(metric_sum(METRICS, "trainforge_plugin_calls_total"), 12.0);
        assert_eq!(metric_sum(METRICS, "trainforge_reconcile_total"), 7.0);
        assert_eq!(metric_sum(METRICS, "missing"), 0.0);
        let by = metric_by(METRICS, "trainforge_plugin_calls_total", "phase");
        assert_eq!(by.get("build"), Some(&7.0));
        assert_eq!(by.get("status"), Some(&5.0));
        assert_eq!(by.len(), 2);
    }

    #[test]
    fn ratios_are_ours_over_theirs_and_na_without_theirs() {
        assert_eq!(ratio(1.0, 2.0), "0.50");
        assert_eq!(ratio(3.0, 1.5), "2.00");
        assert_eq!(ratio(0.0, 0.0), "n/a");
        assert_eq!(ratio(5.0, 0.0), "n/a");
    }

    #[test]
    fn percentiles_pick_the_rank() {
        let v: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(5));
        assert_eq!(percentile(&v, 0.9), Duration::from_millis(9));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
