//! CRD generation (`trainforge crds`). Owned by the API work (issue 2).

/// Arguments of `trainforge crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {}

/// Errors of CRD generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {}

/// Run `trainforge crds`.
pub fn run(_args: &CrdsArgs) -> Result<(), Error> {
    Ok(())
}
