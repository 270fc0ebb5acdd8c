//! `trainforge plugin ...` subcommands for plugin authors.

/// `trainforge plugin` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {}

/// Errors of the plugin CLI.
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Run a `trainforge plugin` subcommand.
pub fn run(cmd: PluginCommand) -> Result<(), Error> {
    match cmd {}
}
