//! Host bindings generated from `wit/plugin.wit`.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use self::trainforge::plugin::types as wit;
