//! What a plugin is loaded from ([`PluginSource`]) and the read-only view
//! of cluster objects it is given ([`ObjectSource`]).

use super::Error;
use super::FailurePolicy;
use super::engine::Limits;
use super::grants::Grants;
use bytes::Bytes;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use trainforge_api::plugin::{KindRef, ObjectKey, Phase, object_key};

/// Read-only access to cluster objects for `host.get-object` (the
/// controller serves it from its reflector cache).
pub trait ObjectSource: Send + Sync {
    /// The object as JSON, `None` if absent; `Err` if the cache cannot answer.
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String>;

    /// Whether `kind` is namespaced, when known (from API discovery). The
    /// host falls back to its list of well-known cluster-scoped kinds.
    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        let _ = kind;
        None
    }
}

/// An [`ObjectSource`] with nothing in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn get(&self, _: &KindRef, _: &str, _: &str) -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// A fixed set of objects (CLI dry runs, tests). A kind counts as
/// namespaced when its objects have a namespace.
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

    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        self.0
            .keys()
            .find(|(k, _, _)| k == kind)
            .map(|(_, ns, _)| !ns.is_empty())
    }
}

/// A plugin to load.
#[derive(Clone)]
pub struct PluginSource {
    /// A label for errors before the plugin has told its name (file name,
    /// or the name of the object configuring it).
    pub label: String,
    /// Component bytes (a builtin's are the embedded ones, not a copy).
    pub bytes: Bytes,
    /// Pinned sha256 (hex); refused with `DigestMismatch` if different.
    pub sha256: Option<String>,
    /// Whether the bytes are one of the plugins embedded in this binary.
    /// Only those may use the builtin plugins' names.
    pub builtin: bool,
    /// Plugin configuration (JSON), passed to every phase.
    pub config: String,
    /// Capabilities and pod privileges granted by the configuration.
    pub grants: Grants,
    /// Limits overriding the runtime defaults.
    pub limits: Option<Limits>,
    /// Objects served through `host.get-object`.
    pub objects: Arc<dyn ObjectSource>,
    /// What a pass does when this plugin fails (default `Fail`).
    pub failure_policy: FailurePolicy,
    /// The administrator's list of kinds the plugin may emit: narrows what
    /// it declares, and is the explicit grant kinds such as Pods need
    /// (`None` = what it declares, minus kinds that need one).
    pub allowed_emits: Option<Vec<KindRef>>,
    /// The administrator's list of kinds the plugin may read: narrows what
    /// it declares, and is the explicit grant Secrets and cluster-scoped
    /// kinds need (`None` = what it declares, minus those).
    pub allowed_reads: Option<Vec<KindRef>>,
    /// Phases to call, intersected with what the plugin implements
    /// (`None` = every phase it implements).
    pub phases: Option<Vec<Phase>>,
    /// The namespace of the `TrainerPlugin` this is a tenant plugin of
    /// (`None` for a cluster plugin). The call observer sees the plugin as
    /// `<namespace>/<name>`.
    pub tenant: Option<String>,
    /// Cancels this load's compilation of a tenant's component: a queued
    /// one never starts, a running one's worker is killed (its
    /// `TrainerPlugin` was deleted or changed meanwhile).
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// Told this load's place in the tenants' compile slot while its
    /// compile waits, then that it compiles (a tenant's component not in
    /// the cache; nothing is told otherwise).
    pub compile_place: Option<tokio::sync::watch::Sender<super::CompilePlace>>,
    /// Whether the builtin plugins' names are reserved for them (`true`):
    /// a component that is not that builtin and names itself after one is
    /// refused. Only the CLI's author tools, which load one component on
    /// its own to look at, run or time it (`plugin inspect|run|bench`), set
    /// `false`: a reserved name matters where plugins serve together.
    pub reserve_builtin_names: bool,
}

impl PluginSource {
    /// A source with default config (`{}`), no grants and no objects.
    pub fn new(label: impl Into<String>, bytes: impl Into<Bytes>) -> Self {
        PluginSource {
            label: label.into(),
            bytes: bytes.into(),
            sha256: None,
            builtin: false,
            config: "{}".into(),
            grants: Grants::default(),
            limits: None,
            objects: Arc::new(NoObjects),
            failure_policy: FailurePolicy::Fail,
            allowed_emits: None,
            allowed_reads: None,
            phases: None,
            tenant: None,
            cancel: None,
            compile_place: None,
            reserve_builtin_names: true,
        }
    }

    /// Read a component file (a regular file of at most `max_bytes`).
    pub fn from_file(path: &Path, max_bytes: usize) -> Result<Self, Error> {
        let label = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = read_component_file(path, max_bytes).map_err(|e| Error::LoadFailed {
            plugin: label.clone(),
            message: e.to_string(),
        })?;
        Ok(PluginSource::new(label, bytes))
    }
}

/// Why a component file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path does not exist.
    #[error("{path}: not found")]
    NotFound {
        /// The path.
        path: String,
    },
    /// The path is not a regular file (a device, FIFO, socket or directory).
    #[error("{path}: not a regular file")]
    NotRegular {
        /// The path.
        path: String,
    },
    /// The file is larger than the limit.
    #[error("{path}: larger than the {limit}-byte component limit")]
    TooLarge {
        /// The path.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Read a component from a file: only a regular file (so `/dev/zero` or a
/// FIFO cannot stream forever), and never more than `max_bytes` (checked on
/// the bytes read, not only on the size the file claims).
pub fn read_component_file(path: &Path, max_bytes: usize) -> Result<Vec<u8>, FileError> {
    let shown = path.display().to_string();
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound {
            path: shown.clone(),
        },
        _ => FileError::Io {
            path: shown.clone(),
            source,
        },
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // The metadata of the open file, not of the path: no race with a swap.
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular { path: shown });
    }
    let too_large = || FileError::TooLarge {
        path: shown.clone(),
        limit: max_bytes,
    };
    if usize::try_from(meta.len()).map_or(true, |n| n > max_bytes) {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    file.take(limit).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_defaults() {
        let s = PluginSource::new("x", Vec::new());
        assert_eq!(s.failure_policy, FailurePolicy::Fail);
        assert!(s.allowed_emits.is_none() && s.allowed_reads.is_none() && s.phases.is_none());
        assert!(!s.builtin);
    }

    #[test]
    fn component_files_are_regular_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.wasm");
        std::fs::write(&f, vec![7u8; 100]).unwrap();
        assert_eq!(read_component_file(&f, 100).unwrap().len(), 100);
        assert!(matches!(
            read_component_file(&f, 99),
            Err(FileError::TooLarge { .. })
        ));
        assert!(matches!(
            read_component_file(Path::new("/dev/zero"), 1 << 20),
            Err(FileError::NotRegular { .. })
        ));
        assert!(matches!(
            read_component_file(dir.path(), 1 << 20),
            Err(FileError::NotRegular { .. })
        ));
        assert!(matches!(
            read_component_file(&dir.path().join("none"), 1),
            Err(FileError::NotFound { .. })
        ));
    }

    #[test]
    fn static_objects_know_scope_from_their_objects() {
        let mut s = StaticObjects::default();
        s.insert(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}));
        s.insert(
            &serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
        );
        assert_eq!(s.namespaced(&KindRef::new("v1", "ConfigMap")), Some(true));
        assert_eq!(s.namespaced(&KindRef::new("v1", "Node")), Some(false));
        assert_eq!(s.namespaced(&KindRef::new("v1", "Secret")), None);
    }
}
