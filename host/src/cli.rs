//! Command-line entry point. Each subcommand's arguments and behaviour live in
//! the module that owns the feature; this file only dispatches.

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
    Crds(crate::crdgen::CrdsArgs),
    /// Print the objects the operator would apply for TrainJobs (no cluster).
    Render(crate::render::RenderArgs),
    /// Tools for plugin authors: inspect, run and benchmark a `.wasm` plugin.
    #[command(subcommand)]
    Plugin(crate::plugin::cli::PluginCommand),
}

/// Parse arguments, run the chosen subcommand and map its result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Crds(args) => crate::crdgen::run(&args).map_err(|e| e.to_string()),
        Command::Render(args) => crate::render::run(&args).map_err(|e| e.to_string()),
        Command::Plugin(cmd) => crate::plugin::cli::run(cmd).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout carries command output such as YAML);
/// `RUST_LOG` selects the level, `warn` by default.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Ignore the error: a subscriber may already be set (e.g. in tests).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
