//! Host bindings generated from `wit/plugin.wit`.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use self::trainforge::plugin::types as wit;

/// World `plugin-with-names`: `plugin` plus the optional `naming` export,
/// sharing `plugin`'s types and host imports. Instantiated only for the
/// load-time `object-names` call of a plugin that announces it.
pub mod with_names {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin-with-names",
        with: {
            "trainforge:plugin/types": super::trainforge::plugin::types,
            "trainforge:plugin/host": super::trainforge::plugin::host,
        },
    });
}
