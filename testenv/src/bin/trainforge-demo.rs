//! `trainforge-demo`: start the full test control plane, install our CRDs,
//! apply an example ClusterTrainingRuntime and stay up until Ctrl-C, so that
//! a user can `kubectl` into it. (The operator joins the demo later.)

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use trainforge_testenv::{Mode, TestEnv, manifests};

/// Start the Trainforge demo control plane.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Example manifests to apply (server-side apply; errors are reported, not fatal).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/clustertrainingruntime-multi-node.yaml"))]
    example: Vec<PathBuf>,
    /// Stop after this many seconds instead of waiting for Ctrl-C (0 = right
    /// after setup). `DEMO_EXIT=1` in the environment is the same as 0.
    #[arg(long)]
    exit_after: Option<u64>,
    /// Print startup and memory figures before waiting.
    #[arg(long)]
    figures: bool,
    /// Start api mode (etcd + kube-apiserver only) instead of full mode.
    #[arg(long)]
    api_only: bool,
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
    let code = run(&env, &args, exit_after).await;
    println!("demo: stopping the control plane");
    drop(env);
    println!("demo: stopped");
    code
}

async fn run(env: &TestEnv, args: &Args, exit_after: Option<u64>) -> ExitCode {
    let client = match env.client().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("demo: cannot build a client: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "demo: control plane up ({} mode) at {}",
        env.mode(),
        env.server_url()
    );
    println!("demo: CRDs installed: {}", env.crds().join(", "));
    for file in &args.example {
        match manifests::load_yaml_docs(file) {
            Err(e) => println!("demo: cannot read {}: {e}", file.display()),
            Ok(docs) => {
                for doc in docs {
                    let what = format!(
                        "{} {}",
                        doc.get("kind").and_then(|v| v.as_str()).unwrap_or("?"),
                        doc.pointer("/metadata/name")
                            .and_then(|v| v.as_str())
                            .unwrap_or("?")
                    );
                    match manifests::apply(&client, &doc, "trainforge-demo").await {
                        Ok(_) => println!("demo: applied {what} from {}", file.display()),
                        Err(e) => println!(
                            "demo: REJECTED {what} from {}: {e}\n      (expected until our CRDs are generated into crds/)",
                            file.display()
                        ),
                    }
                }
            }
        }
    }
    if args.figures {
        println!("{}", env.figures());
    }
    let kc = env.kubeconfig().display();
    println!("demo: kubeconfig: {kc}");
    println!("demo: try:  kubectl --kubeconfig {kc} get nodes,crds");
    println!("demo:       kubectl --kubeconfig {kc} get clustertrainingruntimes");
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
    ExitCode::SUCCESS
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
