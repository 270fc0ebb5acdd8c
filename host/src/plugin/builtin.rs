//! Builtin plugins, embedded in the operator binary at build time so a
//! default install needs no registry.
//!
//! `host/build.rs` builds every crate under `plugins/` (plus any crate
//! listed in `TRAINFORGE_EXTRA_BUILTIN_PLUGINS`, a `:`-separated list of
//! crate directories relative to the workspace root) for `wasm32-wasip2`
//! with the `plugin` profile, using its own `CARGO_TARGET_DIR`, and
//! generates an `include_bytes!` table.

use super::{Error, Grants, LoadedPlugin, ObjectSource, PluginRuntime, PluginSource};
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
        PluginSource::new(
            format!("builtin:{}", self.crate_name),
            Arc::<[u8]>::from(self.wasm),
        )
    }
}

/// Load every builtin plugin.
pub fn load_all(rt: &PluginRuntime) -> Result<Vec<super::LoadedPlugin>, Error> {
    all().iter().map(|b| rt.load(b.source())).collect()
}

/// Load every builtin plugin trusted with the capabilities it declares (e.g.
/// MPI's `random`), reading cluster objects from `objects` (`None`: no
/// objects, as in `render`). Each is loaded twice: once to read what it
/// declares, once with the grants (the second load hits the memory cache).
pub fn load_trusted(
    rt: &PluginRuntime,
    objects: Option<Arc<dyn ObjectSource>>,
) -> Result<Vec<LoadedPlugin>, Error> {
    let mut loaded = Vec::new();
    for b in all() {
        let probe = rt.load(b.source())?;
        let (grants, _unknown) =
            Grants::from_names(probe.descriptor().capabilities.iter().map(String::as_str));
        let mut src = b.source();
        src.grants = grants;
        if let Some(objects) = &objects {
            src.objects = objects.clone();
        }
        loaded.push(rt.load(src)?);
    }
    Ok(loaded)
}
