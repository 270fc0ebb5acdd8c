//! `trainforge plugin run --record FILE | --replay FILE`: what a plugin's
//! `host.get-object` calls answered, recorded against a live cluster and
//! fed back offline, so that a plugin that reads cluster objects gets
//! deterministic tests and benches.
//!
//! Rules:
//! - recording serves each read from the cluster of the current kubeconfig
//!   (`KUBECONFIG`, or in-cluster), read-only (a `GET`, the kind resolved by
//!   API discovery), and keeps every answer, an absence included;
//! - the file is JSON: `{"recorded": [{"apiVersion", "kind", "namespace",
//!   "name", "object"}]}` (`object` null for an absence, `namespace` empty
//!   for a cluster-scoped object), sorted, so that it diffs well in a
//!   repository; a recorded Secret holds its data: the file is then as
//!   secret as the Secret (the CLI says so);
//! - replaying answers exactly what was recorded; a read that was not
//!   recorded fails, naming the object, rather than guessing an absence.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde_json::{Value, json};
use trainforge_api::plugin::KindRef;

use crate::plugin::ObjectSource;

/// What a read is recorded under: apiVersion, kind, namespace, name.
type Key = (String, String, String, String);

/// Errors of recording and replaying.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No cluster to record from (kubeconfig or client).
    #[error("connecting to the cluster to record from: {0}")]
    Connect(String),
    /// The recording could not be read.
    #[error("reading the recording {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The recording could not be written.
    #[error("writing the recording {path}: {message}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

fn key(kind: &KindRef, namespace: &str, name: &str) -> Key {
    (
        kind.api_version.clone(),
        kind.kind.clone(),
        namespace.to_owned(),
        name.to_owned(),
    )
}

/// The objects of a live cluster, read one `GET` at a time.
pub struct Live {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Live {
    /// A client for the current kubeconfig (or in-cluster configuration).
    pub fn connect() -> Result<Self, Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Connect(e.to_string()))?;
        let client = rt
            .block_on(kube::Client::try_default())
            .map_err(|e| Error::Connect(e.to_string()))?;
        Ok(Live { rt, client })
    }

    /// The kind's resource and whether it is namespaced, from discovery.
    async fn resolve(&self, kind: &KindRef) -> Result<(kube::api::ApiResource, bool), String> {
        let (group, version) = kind
            .api_version
            .split_once('/')
            .unwrap_or(("", kind.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind.kind);
        let (ar, caps) = discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| format!("{kind}: not served by the cluster: {e}"))?;
        Ok((ar, caps.scope == Scope::Namespaced))
    }
}

impl ObjectSource for Live {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        self.rt.block_on(async {
            let (ar, namespaced) = self.resolve(kind).await?;
            let api: Api<DynamicObject> = if namespaced {
                Api::namespaced_with(self.client.clone(), namespace, &ar)
            } else {
                Api::all_with(self.client.clone(), &ar)
            };
            let found = api
                .get_opt(name)
                .await
                .map_err(|e| format!("reading {kind} {namespace}/{name}: {e}"))?;
            found
                .map(|o| serde_json::to_string(&o).map_err(|e| e.to_string()))
                .transpose()
        })
    }

    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        self.rt.block_on(self.resolve(kind)).ok().map(|(_, n)| n)
    }
}

/// `inner`, with every answer kept (see the module rules).
pub struct Recording<S> {
    inner: S,
    answers: Mutex<BTreeMap<Key, Option<Value>>>,
}

impl<S: ObjectSource> Recording<S> {
    /// Record what `inner` answers.
    pub fn new(inner: S) -> Self {
        Recording {
            inner,
            answers: Mutex::new(BTreeMap::new()),
        }
    }

    /// The recorded Secrets, as `namespace/name` (their data is in the
    /// recording).
    pub fn secrets(&self) -> Vec<String> {
        self.answers
            .lock()
            .map(|a| {
                a.iter()
                    .filter(|((v, k, _, _), o)| v == "v1" && k == "Secret" && o.is_some())
                    .map(|((_, _, ns, name), _)| format!("{ns}/{name}"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Write what was recorded to `path`.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let write = |message: String| Error::Write {
            path: path.to_owned(),
            message,
        };
        let recorded: Vec<Value> = self
            .answers
            .lock()
            .map_err(|_| write("the recording's state is poisoned".into()))?
            .iter()
            .map(|((api_version, kind, namespace, name), object)| {
                json!({"apiVersion": api_version, "kind": kind, "namespace": namespace,
                    "name": name, "object": object})
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "recorded": recorded }))
            .map_err(|e| write(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| write(e.to_string()))
    }
}

impl<S: ObjectSource> ObjectSource for Recording<S> {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        let answer = self.inner.get(kind, namespace, name)?;
        let parsed = answer
            .as_deref()
            .map(serde_json::from_str::<Value>)
            .transpose()
            .map_err(|e| format!("{kind} {namespace}/{name}: not JSON: {e}"))?;
        if let Ok(mut a) = self.answers.lock() {
            a.insert(key(kind, namespace, name), parsed);
        }
        Ok(answer)
    }

    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        self.inner.namespaced(kind)
    }
}

/// The answers of a recording, fed back (see the module rules).
#[derive(Debug)]
pub struct Replay {
    file: PathBuf,
    answers: BTreeMap<Key, Option<String>>,
}

impl Replay {
    /// Read the recording at `path`.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let read = |message: String| Error::Read {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| read(e.to_string()))?;
        let entries = doc["recorded"]
            .as_array()
            .ok_or_else(|| read("no \"recorded\" list".into()))?;
        let mut answers = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            let field = |f: &str| {
                e[f].as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| read(format!("recorded[{i}].{f}: not a string")))
            };
            let k = (
                field("apiVersion")?,
                field("kind")?,
                field("namespace")?,
                field("name")?,
            );
            let object = match &e["object"] {
                Value::Null => None,
                o @ Value::Object(_) => Some(o.to_string()),
                _ => return Err(read(format!("recorded[{i}].object: not an object or null"))),
            };
            answers.insert(k, object);
        }
        Ok(Replay {
            file: path.to_owned(),
            answers,
        })
    }
}

impl ObjectSource for Replay {
    fn get(&self, kind: &KindRef, namespace: &str, name: &str) -> Result<Option<String>, String> {
        self.answers
            .get(&key(kind, namespace, name))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{kind} {namespace}/{name} was not recorded in {} (record again with --record)",
                    self.file.display()
                )
            })
    }

    fn namespaced(&self, kind: &KindRef) -> Option<bool> {
        self.answers
            .keys()
            .find(|(v, k, _, _)| *v == kind.api_version && *k == kind.kind)
            .map(|(_, _, ns, _)| !ns.is_empty())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::plugin::StaticObjects;

    /// What was read, an absence included, comes back the same from the
    /// file; what was not read is refused, naming it.
    #[test]
    fn a_recording_replays_what_was_read_and_refuses_the_rest() {
        let mut cluster = StaticObjects::default();
        cluster.insert(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "job-ssh", "namespace": "team"}, "data": {"k": "dg=="}}));
        let rec = Recording::new(cluster);
        let secret = KindRef::new("v1", "Secret");
        let pc = KindRef::new("scheduling.k8s.io/v1", "PriorityClass");
        let found = rec.get(&secret, "team", "job-ssh").unwrap().unwrap();
        assert!(rec.get(&pc, "", "high").unwrap().is_none());
        assert_eq!(rec.secrets(), ["team/job-ssh"]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rec.json");
        rec.save(&file).unwrap();

        let replay = Replay::load(&file).unwrap();
        let again = replay.get(&secret, "team", "job-ssh").unwrap().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&again).unwrap(),
            serde_json::from_str::<Value>(&found).unwrap()
        );
        assert_eq!(replay.get(&pc, "", "high").unwrap(), None);
        assert_eq!(replay.namespaced(&secret), Some(true));
        assert_eq!(replay.namespaced(&pc), Some(false));
        let e = replay.get(&secret, "team", "other").unwrap_err();
        assert!(e.contains("v1/Secret team/other was not recorded"), "{e}");
    }

    #[test]
    fn a_malformed_recording_is_refused_naming_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rec.json");
        std::fs::write(&file, r#"{"recorded": [{"apiVersion": "v1", "kind": "Secret", "namespace": "a", "name": 3, "object": null}]}"#).unwrap();
        let e = Replay::load(&file).unwrap_err().to_string();
        assert!(e.contains("recorded[0].name"), "{e}");
        std::fs::write(&file, "[]").unwrap();
        assert!(
            Replay::load(&file)
                .unwrap_err()
                .to_string()
                .contains("\"recorded\"")
        );
    }
}
