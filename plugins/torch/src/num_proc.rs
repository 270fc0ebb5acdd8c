//! `numProcPerNode` → the value of `PET_NPROC_PER_NODE`, for both API
//! generations (v2.0/v2.1 and current).
//!
//! The request is `trainer.numProcPerNode` if set, else the older
//! generation's `mlPolicy.torch.numProcPerNode`, else `auto`. Both are
//! int-or-string; the strings accepted are `auto`, `cpu` and `gpu`.
//!
//! | request | GPUs per node | result |
//! |---|---|---|
//! | integer `n` | any | `n` |
//! | `auto` | > 0 | `auto` (torchrun resolves it to the GPU count) |
//! | `auto` | 0 | `max(1, ceil(cpu))` |
//! | `cpu` | any | `max(1, ceil(cpu))` |
//! | `gpu` | any | `gpu` (passed through; torchrun counts the GPUs) |

use std::fmt;
use trainforge_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The message of an invalid string (upstream v2.0/v2.1 webhook).
pub const INVALID_MESSAGE: &str = "must have an int value or [auto cpu gpu]";

/// What the TrainJob/runtime asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `auto`.
    Auto,
    /// `cpu`.
    Cpu,
    /// `gpu`.
    Gpu,
    /// An explicit count.
    Int(i64),
}

/// The resolved value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumProc {
    /// The literal `auto`.
    Auto,
    /// The literal `gpu`.
    Gpu,
    /// A count.
    Int(i64),
}

impl fmt::Display for NumProc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumProc::Auto => f.write_str("auto"),
            NumProc::Gpu => f.write_str("gpu"),
            NumProc::Int(n) => write!(f, "{n}"),
        }
    }
}

/// Parse one int-or-string; `Err` carries [`INVALID_MESSAGE`].
pub fn parse(v: &IntOrString) -> Result<Request, &'static str> {
    match v {
        IntOrString::Int(n) => Ok(Request::Int(i64::from(*n))),
        IntOrString::String(s) => match s.as_str() {
            "auto" => Ok(Request::Auto),
            "cpu" => Ok(Request::Cpu),
            "gpu" => Ok(Request::Gpu),
            _ => Err(INVALID_MESSAGE),
        },
    }
}

/// The effective request: the TrainJob's, else the runtime policy's, else
/// `auto`. `Err((field, message))` names the offending field.
pub fn request(
    trainer: Option<&IntOrString>,
    policy: Option<&IntOrString>,
) -> Result<Request, (&'static str, &'static str)> {
    if let Some(v) = trainer {
        return parse(v).map_err(|m| ("spec.trainer.numProcPerNode", m));
    }
    if let Some(v) = policy {
        return parse(v).map_err(|m| ("mlPolicy.torch.numProcPerNode", m));
    }
    Ok(Request::Auto)
}

/// Resolve a request against the node's CPU and GPU counts (see the table).
pub fn resolve(request: Request, cpu: i64, gpu: i64) -> NumProc {
    match request {
        Request::Int(n) => NumProc::Int(n),
        Request::Auto if gpu > 0 => NumProc::Auto,
        Request::Auto | Request::Cpu => NumProc::Int(cpu.max(1)),
        Request::Gpu => NumProc::Gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn resolution_table() {
        // (request, cpu, gpu) -> value; cpu is already rounded up by the caller.
        let cases = [
            (Request::Auto, 3, 0, "3"),    // 2.5 CPUs
            (Request::Auto, 1, 0, "1"),    // 0.7 CPUs
            (Request::Auto, 0, 0, "1"),    // no CPU resources
            (Request::Auto, 8, 4, "auto"), // GPUs present
            (Request::Cpu, 6, 2, "6"),
            (Request::Cpu, 0, 0, "1"),
            (Request::Gpu, 6, 0, "gpu"),
            (Request::Int(4), 16, 8, "4"),
        ];
        for (req, cpu, gpu, want) in cases {
            assert_eq!(
                resolve(req, cpu, gpu).to_string(),
                want,
                "{req:?} cpu={cpu} gpu={gpu}"
            );
        }
    }

    #[test]
    fn trainjob_wins_over_runtime_and_auto_is_the_default() {
        assert_eq!(
            request(Some(&IntOrString::Int(2)), Some(&s("cpu"))),
            Ok(Request::Int(2))
        );
        assert_eq!(request(None, Some(&s("gpu"))), Ok(Request::Gpu));
        assert_eq!(request(None, None), Ok(Request::Auto));
    }

    #[test]
    fn unknown_strings_name_the_field() {
        assert_eq!(
            request(Some(&s("many")), None),
            Err(("spec.trainer.numProcPerNode", INVALID_MESSAGE))
        );
        assert_eq!(
            request(None, Some(&s("4"))),
            Err(("mlPolicy.torch.numProcPerNode", INVALID_MESSAGE))
        );
    }
}
