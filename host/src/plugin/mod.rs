//! The sandboxed Wasm plugin runtime. Owned by the plugin-runtime work (issue 3).

pub mod cli;
