//! The `trainforge` binary: a thin shell over [`trainforge::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    trainforge::cli::main()
}
