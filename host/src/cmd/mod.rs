//! The `trainforge` commands, the top floor: this file parses the command
//! line and dispatches; each subcommand is a module of its own.
//!
//! - [`operator`]: `trainforge operator`, the operator's start-up.
//! - [`render`]: `trainforge render`, the pipeline without a cluster.
//! - [`plugin`]: `trainforge plugin inspect|run|bench|precompile` (and the
//!   compile worker); [`goldens`]: `trainforge plugin test`; [`recording`]:
//!   `plugin run --record|--replay`; [`scaffold`]: `plugin new`; [`oci`]:
//!   `trainforge plugin push|pull|sign|verify|keygen`.
//! - [`crds`]: `trainforge crds`, the CRD YAML from the Rust API types.

pub mod crds;
pub mod goldens;
pub mod oci;
pub mod operator;
pub mod plugin;
pub mod progress;
pub mod recording;
pub mod render;
pub mod scaffold;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Trainforge: Kubeflow Trainer v2 with sandboxed Wasm plugins.
#[derive(Debug, Parser)]
#[command(name = "trainforge", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write (or check) the generated CRD YAML files.
    Crds(crate::cmd::crds::CrdsArgs),
    /// Print the objects the operator would apply for TrainJobs (no cluster).
    Render(crate::cmd::render::RenderArgs),
    /// Tools for plugin authors: inspect, run and benchmark a `.wasm` plugin;
    /// publish, sign and verify it as an OCI artifact.
    #[command(subcommand)]
    Plugin(crate::cmd::plugin::PluginCommand),
    /// Run the operator: the TrainJob controller, cluster and tenant plugins
    /// (ClusterTrainerPlugin, TrainerPlugin), the admission webhooks and the
    /// TrainJob status server.
    Operator(Box<crate::cmd::operator::OperatorArgs>),
}

/// Parse arguments, run the chosen subcommand and map its result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let operator = matches!(cli.command, Command::Operator(_));
    init_tracing(operator);
    if !operator {
        quiet_on_broken_pipe();
    }
    let result = match cli.command {
        Command::Operator(args) => crate::cmd::operator::main(*args).map_err(|e| e.to_string()),
        Command::Crds(args) => crate::cmd::crds::run(&args).map_err(|e| e.to_string()),
        Command::Render(args) => crate::cmd::render::run(&args).map_err(|e| e.to_string()),
        Command::Plugin(cmd) => crate::cmd::plugin::run(cmd).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `trainforge … | head`: once the reader of stdout is gone, `println!`
/// panics ("failed printing to stdout: Broken pipe"). A tool then ends
/// quietly with status 141, as Unix tools that SIGPIPE ends do (128 +
/// SIGPIPE). Restoring SIGPIPE's default action instead would take unsafe
/// code, which the workspace forbids; the operator keeps Rust's default
/// (a closed connection is an error, not the end of the process).
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Logs go to stderr (stdout carries command output such as YAML), coloured
/// only when stderr is a terminal;
/// `RUST_LOG` selects the level: `warn` by default for the tools, `info` for
/// the operator, whose logs are JSON lines (one per event, with the span
/// fields: TrainJob, plugin, phase) unless `TRAINFORGE_LOG_FORMAT=text`.
fn init_tracing(operator: bool) {
    let default = if operator { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // Ignore the error: a subscriber may already be set (e.g. in tests).
    let _ = if operator && std::env::var("TRAINFORGE_LOG_FORMAT").as_deref() != Ok("text") {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init()
    } else {
        builder.try_init()
    };
}
