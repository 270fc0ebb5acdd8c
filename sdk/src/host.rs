//! The host functions a plugin may call, behind a trait so plugin logic runs
//! the same in Wasm ([`WasmHost`]) and in native tests
//! ([`crate::testing::MockHost`]).

use serde_json::Value;
use std::fmt;
use trainforge_api::plugin::KindRef;

/// Log levels of [`Host::log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Trace.
    Trace,
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Warning.
    Warn,
    /// Error.
    Error,
}

/// Failures of host calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// Not declared in the descriptor or not granted.
    Denied(String),
    /// The host could not serve the request now.
    Unavailable(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Denied(m) => write!(f, "denied: {m}"),
            HostError::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

impl std::error::Error for HostError {}

/// The narrow host interface.
pub trait Host {
    /// Read one object from the operator cache; `None` if it does not exist.
    fn get_object(
        &self,
        kind: &KindRef,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, HostError>;
    /// Random bytes from the host (needs the `random` capability).
    fn random_bytes(&self, len: u32) -> Result<Vec<u8>, HostError>;
    /// Log a message.
    fn log(&self, level: LogLevel, message: &str);
}

/// The host when running as a Wasm component: calls the WIT imports.
#[derive(Debug, Default, Clone, Copy)]
pub struct WasmHost;

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::*;
    use crate::bindings::trainforge::plugin::{host, types};

    fn err(e: types::HostError) -> HostError {
        match e {
            types::HostError::Denied(m) => HostError::Denied(m),
            types::HostError::Unavailable(m) => HostError::Unavailable(m),
        }
    }

    impl Host for WasmHost {
        fn get_object(
            &self,
            kind: &KindRef,
            namespace: &str,
            name: &str,
        ) -> Result<Option<Value>, HostError> {
            let k = types::KindRef {
                api_version: kind.api_version.clone(),
                kind: kind.kind.clone(),
            };
            match host::get_object(&k, namespace, name).map_err(err)? {
                None => Ok(None),
                Some(s) => serde_json::from_str(&s)
                    .map(Some)
                    .map_err(|e| HostError::Unavailable(format!("host returned bad JSON: {e}"))),
            }
        }

        fn random_bytes(&self, len: u32) -> Result<Vec<u8>, HostError> {
            host::random_bytes(len).map_err(err)
        }

        fn log(&self, level: LogLevel, message: &str) {
            let l = match level {
                LogLevel::Trace => types::LogLevel::Trace,
                LogLevel::Debug => types::LogLevel::Debug,
                LogLevel::Info => types::LogLevel::Info,
                LogLevel::Warn => types::LogLevel::Warn,
                LogLevel::Error => types::LogLevel::Error,
            };
            host::log(l, message);
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Host for WasmHost {
    fn get_object(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<Value>, HostError> {
        Err(HostError::Unavailable(
            "WasmHost is only available inside Wasm".into(),
        ))
    }
    fn random_bytes(&self, _: u32) -> Result<Vec<u8>, HostError> {
        Err(HostError::Unavailable(
            "WasmHost is only available inside Wasm".into(),
        ))
    }
    fn log(&self, _: LogLevel, _: &str) {}
}
