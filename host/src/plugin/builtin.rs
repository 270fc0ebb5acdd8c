//! Builtin plugins, embedded in the operator binary at build time so a
//! default install needs no registry.
//!
//! `host/build.rs` builds every crate under `plugins/` (plus any crate
//! listed in `TRAINFORGE_EXTRA_BUILTIN_PLUGINS`, a `:`-separated list of
//! crate directories relative to the workspace root) for `wasm32-wasip2`
//! with the `plugin` profile, using its own `CARGO_TARGET_DIR`, and
//! generates an `include_bytes!` table.

use super::{Error, PluginRuntime, PluginSource};
use std::sync::Arc;

/// One embedded plugin component.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinPlugin {
    /// Crate name the component was built from.
    pub crate_name: &'static str,
    /// Component bytes.
    pub wasm: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));

/// Every embedded plugin, in crate-name order.
pub fn all() -> &'static [BuiltinPlugin] {
    BUILTIN_PLUGINS
}

impl BuiltinPlugin {
    /// A [`PluginSource`] for this builtin (default config, no grants).
    pub fn source(&self) -> PluginSource {
        PluginSource::new(format!("builtin:{}", self.crate_name), Arc::<[u8]>::from(self.wasm))
    }
}

/// Load every builtin plugin.
pub fn load_all(rt: &PluginRuntime) -> Result<Vec<super::LoadedPlugin>, Error> {
    all().iter().map(|b| rt.load(b.source())).collect()
}
