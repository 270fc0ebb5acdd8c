//! The operator's admission webhooks in a test control plane.
//!
//! In a cluster the API server calls the webhook Service, and the Service
//! spreads connections over the ready operator pods. Here there is no
//! kube-proxy, so [`Front`] plays the Service: a TCP pass-through on
//! `127.0.0.1` that spreads connections over the operators that are up (TLS
//! goes straight through: the API server checks the operator's own
//! certificate against the CA bundle the operator wrote). [`register`]
//! applies the shipped webhook configurations with their Service reference
//! replaced by `url: https://127.0.0.1:<front port><path>`.
//!
//! Tests of what the TrainJob controller does with objects admission would
//! refuse create them in a namespace labelled [`BYPASS_LABEL`]`=off`: the
//! registered TrainJob webhooks skip those namespaces (a test-only
//! `namespaceSelector`; the shipped configurations have none).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::Error;
use crate::manifests::{load_yaml_docs, yaml_files};

/// Namespaces labelled `trainforge.test/admission=off` skip the TrainJob
/// webhooks registered by [`register`].
pub const BYPASS_LABEL: &str = "trainforge.test/admission";

/// Field manager of the registered configurations.
const FIELD_MANAGER: &str = "trainforge-testenv";

/// A TCP pass-through on `127.0.0.1` over a changing set of backends (the
/// operators that are up), round robin. Connections go to a backend that
/// accepts them; with no backend up, a connection is closed at once (the
/// API server then applies the webhook's failure policy).
pub struct Front {
    addr: SocketAddr,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    connections: Arc<AtomicU64>,
}

impl Front {
    /// Listen on a free port of `127.0.0.1`; the pass-through runs on its
    /// own thread for as long as the process.
    pub fn start() -> Result<Front, Error> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io("binding the webhook front".to_owned(), e))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("configuring the webhook front".to_owned(), e))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| Error::io("reading the webhook front's address".to_owned(), e))?;
        let backends: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let shared = backends.clone();
        let connections: Arc<AtomicU64> = Arc::default();
        let accepted = connections.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| Error::io("starting the webhook front's runtime".to_owned(), e))?;
        std::thread::Builder::new()
            .name("webhook-front".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let mut next = 0usize;
                    loop {
                        let Ok((inbound, _)) = listener.accept().await else {
                            continue;
                        };
                        accepted.fetch_add(1, Ordering::Relaxed);
                        let candidates = shared.lock().map(|b| b.clone()).unwrap_or_default();
                        next = next.wrapping_add(1);
                        tokio::spawn(forward(inbound, candidates, next));
                    }
                });
            })
            .map_err(|e| Error::io("spawning the webhook front".to_owned(), e))?;
        Ok(Front {
            addr,
            backends,
            connections,
        })
    }

    /// Where the API server connects.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far (the API server keeps connections
    /// alive: this counts connections, not admission requests).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Route connections to `backend` too (an operator came up).
    pub fn add(&self, backend: SocketAddr) {
        if let Ok(mut b) = self.backends.lock()
            && !b.contains(&backend)
        {
            b.push(backend);
        }
    }

    /// Stop routing to `backend` (its operator went down).
    pub fn remove(&self, backend: SocketAddr) {
        if let Ok(mut b) = self.backends.lock() {
            b.retain(|a| *a != backend);
        }
    }
}

/// Copy bytes both ways between `inbound` and the first of `candidates`
/// (starting at `start`) that accepts a connection.
async fn forward(mut inbound: tokio::net::TcpStream, candidates: Vec<SocketAddr>, start: usize) {
    let n = candidates.len();
    for i in 0..n {
        let target = candidates[(start + i) % n];
        let connect = tokio::net::TcpStream::connect(target);
        if let Ok(Ok(mut outbound)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            return;
        }
    }
}

/// Point `hook` (a webhook of a webhook configuration) at
/// `https://<front><its service path>`, with `ca_bundle` if given: the
/// environment has no Services, the front forwards to the webhook server.
pub(crate) fn call_through(hook: &mut Value, front: SocketAddr, ca_bundle: Option<&str>) {
    let path = hook
        .pointer("/clientConfig/service/path")
        .and_then(Value::as_str)
        .unwrap_or("/")
        .to_owned();
    let mut config = json!({ "url": format!("https://{front}{path}") });
    if let Some(ca) = ca_bundle {
        config["caBundle"] = json!(ca);
    }
    hook["clientConfig"] = config;
}

/// The shipped webhook configurations (`manifests/webhook/*.yaml` under
/// `root`), each webhook calling `https://<front><path>`, TrainJob webhooks
/// skipping namespaces labelled [`BYPASS_LABEL`]`=off`. No CA bundle: the
/// operator writes it.
pub fn configurations(root: &Path, front: SocketAddr) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for file in yaml_files(&root.join("manifests/webhook"))? {
        for mut doc in load_yaml_docs(&file)? {
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration" {
                continue;
            }
            if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
                meta.remove("annotations");
            }
            let Some(hooks) = doc.get_mut("webhooks").and_then(Value::as_array_mut) else {
                return Err(Error::manifest(&file, format!("{kind} without webhooks")));
            };
            for hook in hooks {
                call_through(hook, front, None);
                let trainjobs = hook
                    .get("rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("resources").and_then(Value::as_array))
                    .flatten()
                    .any(|r| r == "trainjobs");
                if trainjobs {
                    hook["namespaceSelector"] = json!({"matchExpressions": [
                        {"key": BYPASS_LABEL, "operator": "NotIn", "values": ["off"]}
                    ]});
                }
            }
            out.push(doc);
        }
    }
    if out.is_empty() {
        return Err(Error::manifest(
            root.join("manifests/webhook"),
            "no webhook configuration found",
        ));
    }
    Ok(out)
}

/// Apply [`configurations`] (server-side, as `trainforge-testenv`).
pub async fn register(client: &kube::Client, root: &Path, front: SocketAddr) -> Result<(), Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for doc in configurations(root, front)? {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if doc["kind"] == "MutatingWebhookConfiguration" {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &pp, &Patch::Apply(&doc))
                .await?;
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &pp, &Patch::Apply(&doc))
                .await?;
        }
    }
    Ok(())
}

/// Delete the configurations [`register`] applied (so a `Fail` webhook
/// without a server blocks nothing once the operators are gone).
pub async fn unregister(client: &kube::Client, root: &Path) -> Result<(), Error> {
    let any: SocketAddr = ([127, 0, 0, 1], 1).into();
    delete_configurations(client, &configurations(root, any)?).await
}

/// Delete the webhook configurations `docs` (by kind and name; gone
/// already is fine).
pub async fn delete_configurations(client: &kube::Client, docs: &[Value]) -> Result<(), Error> {
    let dp = DeleteParams::default();
    for doc in docs {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let gone = if doc["kind"] == "MutatingWebhookConfiguration" {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ())
        } else {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ())
        };
        match gone {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
