//! What a plugin is loaded from ([`PluginSource`]) and the read-only view
//! of cluster objects it is given ([`ObjectSource`]).

use super::Error;
use super::engine::Limits;
use super::observe::FailurePolicy;
use super::sandbox::Grants;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use trainforge_api::plugin::{KindRef, ObjectKey, Phase, object_key};

/// Read-only access to cluster objects for `host.get-object` (the
/// controller serves it from its reflector cache).
pub trait ObjectSource: Send + Sync {
    /// The object as JSON, `None` if absent; `Err` if the cache cannot answer.
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String>;
}

/// An [`ObjectSource`] with nothing in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn get(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// A fixed set of objects (CLI dry runs, tests).
#[derive(Debug, Default, Clone)]
pub struct StaticObjects(BTreeMap<ObjectKey, String>);

impl StaticObjects {
    /// Add an object (uses its apiVersion, kind, namespace and name).
    pub fn insert(&mut self, object: &Value) {
        self.0.insert(object_key(object), object.to_string());
    }
}

impl ObjectSource for StaticObjects {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        Ok(self
            .0
            .get(&(kind.clone(), namespace.to_owned(), name.to_owned()))
            .cloned())
    }
}

/// A plugin to load.
#[derive(Clone)]
pub struct PluginSource {
    /// A label for errors before the plugin has told its name (file name).
    pub label: String,
    /// Component bytes.
    pub bytes: Arc<[u8]>,
    /// Pinned sha256 (hex); refused with `DigestMismatch` if different.
    pub sha256: Option<String>,
    /// Plugin configuration (JSON), passed to every phase.
    pub config: String,
    /// Capabilities granted by the configuration.
    pub grants: Grants,
    /// Limits overriding the runtime defaults.
    pub limits: Option<Limits>,
    /// Objects served through `host.get-object`.
    pub objects: Arc<dyn ObjectSource>,
    /// What a pass does when this plugin fails (default `Fail`).
    pub failure_policy: FailurePolicy,
    /// Narrows the kinds the plugin declared in `emits`: `build` output is
    /// checked against the intersection (`None` = what it declared).
    pub allowed_emits: Option<Vec<KindRef>>,
    /// Phases to call, intersected with what the plugin implements
    /// (`None` = every phase it implements).
    pub phases: Option<Vec<Phase>>,
}

impl PluginSource {
    /// A source with default config (`{}`), no grants and no objects.
    pub fn new(label: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        PluginSource {
            label: label.into(),
            bytes: bytes.into(),
            sha256: None,
            config: "{}".into(),
            grants: Grants::default(),
            limits: None,
            objects: Arc::new(NoObjects),
            failure_policy: FailurePolicy::Fail,
            allowed_emits: None,
            phases: None,
        }
    }

    /// Read a component file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, Error> {
        let label = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(path).map_err(|e| Error::LoadFailed {
            plugin: label.clone(),
            message: format!("reading {}: {e}", path.display()),
        })?;
        Ok(PluginSource::new(label, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_defaults_keep_todays_behaviour() {
        let s = PluginSource::new("x", Vec::new());
        assert_eq!(s.failure_policy, FailurePolicy::Fail);
        assert!(s.allowed_emits.is_none() && s.phases.is_none());
    }
}
