//! `trainforge-demo`: the whole product on one machine, in one command.
//!
//! 1. start the full test control plane (etcd, kube-apiserver,
//!    controller-manager, scheduler, JobSet, kwok) with our CRDs installed;
//! 2. apply the default plugin configuration (`manifests/plugins/*.yaml`) and
//!    the examples other than TrainJobs (by default the shipped
//!    `torch-distributed` runtime, `examples/clustertrainingruntime-multi-node.yaml`
//!    and the Flux runtime `examples/clustertrainingruntime-flux.yaml`);
//! 3. start the operator (`trainforge operator`, log in the environment's
//!    `logs/operator.log`) and wait for its `/readyz`; with `--oci-plugin`,
//!    first start a local OCI registry, push and sign that component with
//!    `trainforge plugin push --sign-key`, and, once the operator is ready,
//!    load it through a `ClusterTrainerPlugin` (`oci://` tag, signature
//!    verified);
//! 4. apply the example TrainJobs (by default `default/demo` of
//!    `examples/trainjob-torch-distributed.yaml` and `default/flux-demo` of
//!    `examples/trainjob-flux.yaml`) and print a live view of each
//!    (state, JobSet, pod phases) until it is `Complete` or `Failed`, then its
//!    `status.jobsStatus`; then report its progress as its trainer pod would
//!    (the operator runs its TrainJob status server) and print
//!    `status.trainerStatus`;
//! 5. print the kubeconfig and stay up until Ctrl-C (or `--exit-after`).
//!
//! A TrainJob that fails, or is not finished after `--timeout` seconds, or an
//! operator that never gets ready, makes the demo exit with a failure code and
//! say why: the TrainJob's conditions and Warning Events, the ClusterTrainerPlugins
//! that are not ready, the operator's `/readyz?verbose` and its WARN/ERROR log
//! lines. A TrainJob that shows no change for a while gets the same diagnosis
//! while the demo goes on waiting; an operator that exits, the tail of its log.
//! With `--api-only` only etcd and kube-apiserver run and the operator is not
//! started.

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
use trainforge_testenv::webhooks::Front;
use trainforge_testenv::{Mode, TestEnv, manifests, ports};

mod apply;
mod diagnose;
mod live_view;
mod operator;
mod progress;
mod publish;

use apply::{apply_docs, apply_plugins, is_trainjob, load_examples};
use diagnose::{diagnose, http_get};
use live_view::live_view;
use operator::Operator;

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
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/clustertrainingruntime-flux.yaml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/trainjob-torch-distributed.yaml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/trainjob-flux.yaml"),
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
    /// A plugin component (`.wasm`) to publish to a local OCI registry,
    /// signed, and load as the `ClusterTrainerPlugin` `example-minimal`
    /// (full mode; `make demo` passes the example plugin).
    #[arg(long)]
    oci_plugin: Option<PathBuf>,
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
    #[error("the operator was not ready after {secs}s ({url}); why:\n{why}")]
    NotReady {
        /// The bound.
        secs: u64,
        /// The probe URL.
        url: String,
        /// [`diagnose::diagnose`] without a TrainJob.
        why: String,
    },
    /// A TrainJob did not finish in time.
    #[error("TrainJob {job} not finished after {secs}s (last seen: {last}); why:\n{why}")]
    Timeout {
        /// `namespace/name`.
        job: String,
        /// The bound.
        secs: u64,
        /// The last live-view line.
        last: String,
        /// [`diagnose::diagnose`] of the TrainJob.
        why: String,
    },
    /// A TrainJob reached `Failed`.
    #[error("TrainJob {job} Failed: {reason}: {message}; why:\n{why}")]
    JobFailed {
        /// `namespace/name`.
        job: String,
        /// The condition's reason.
        reason: String,
        /// The condition's message.
        message: String,
        /// [`diagnose::diagnose`] of the TrainJob.
        why: String,
    },
    /// Ctrl-C or SIGTERM before the TrainJobs finished.
    #[error("interrupted")]
    Interrupted,
    /// Publishing or loading the `--oci-plugin` failed.
    #[error("the OCI plugin: {0}")]
    Publish(String),
    /// Reporting progress as a training pod failed.
    #[error("TrainJob progress: {0}")]
    Progress(String),
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
        if let Ok(client) = env.client().await
            && let Err(e) = trainforge_testenv::webhooks::unregister(&client, &repo_root()).await
        {
            println!("demo: removing the webhook configurations: {e}");
        }
        op.stop().await;
    }
    println!("demo: stopping the control plane");
    drop(env);
    println!("demo: stopped");
    code
}

/// The repository (the shipped webhook configurations are read from its
/// `manifests/webhook`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
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
    // The example plugin's registry, kept until the demo ends.
    let registry = &mut None;
    match operator_bin {
        None => {
            apply_docs(&client, &trainjob_docs).await;
            println!(
                "demo: api mode: the operator is not started (it needs the full control plane)"
            );
        }
        Some(bin) => {
            let published = match &args.oci_plugin {
                None => None,
                Some(wasm) => {
                    let p = publish::publish(env, bin, wasm).await?;
                    println!(
                        "demo: local OCI registry at {}; pushed and signed {} as {}",
                        p.registry.addr(),
                        shown(wasm),
                        p.pinned
                    );
                    Some(p)
                }
            };
            let mut extra = published
                .as_ref()
                .map(publish::Published::operator_args)
                .unwrap_or_default();
            // The TrainJob status server, at an address the demo reaches.
            let status_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ports::free_port()?));
            extra.extend(progress::operator_args(status_addr));
            // The admission webhooks, as shipped, called through a local
            // front (the Service of a real cluster). Registered before the
            // operator starts: it writes its CA bundle into them.
            let front = Front::start()?;
            trainforge_testenv::webhooks::register(&client, &repo_root(), front.addr()).await?;
            println!(
                "demo: admission webhooks registered (https://{}, operator-managed certificates)",
                front.addr()
            );
            let op = operator.insert(Operator::start(env, bin, &front, &extra)?);
            // The front lives as long as the demo.
            std::mem::forget(front);
            println!(
                "demo: operator {} started (pid {}), log {}",
                shown(bin),
                op.pid,
                op.log.display()
            );
            let started = Instant::now();
            tokio::select! {
                r = op.wait_ready(&client, Duration::from_secs(args.timeout)) => r?,
                _ = shutdown_signal() => return Err(DemoError::Interrupted),
            }
            println!(
                "demo: operator ready in {:.1}s (http://{}/readyz, /metrics)",
                started.elapsed().as_secs_f64(),
                op.addr
            );
            if let Some(p) = &published {
                tokio::select! {
                    r = publish::load(&client, p, Duration::from_secs(args.timeout)) => r?,
                    _ = shutdown_signal() => return Err(DemoError::Interrupted),
                }
            }
            // The registry lives as long as the demo.
            *registry = published;
            let trainjobs = apply_docs(&client, &trainjob_docs).await;
            if !trainjobs.is_empty() {
                tokio::select! {
                    r = live_view(&client, op, &trainjobs, Duration::from_secs(args.timeout)) => r?,
                    _ = shutdown_signal() => return Err(DemoError::Interrupted),
                }
                for (ns, name) in &trainjobs {
                    let status = progress::report(&client, env.dir(), ns, name).await?;
                    println!(
                        "demo: {ns}/{name}: progress reported as its trainer pod would \
                         (token for its own status endpoint, the operator's CA): status.trainerStatus {status}"
                    );
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
