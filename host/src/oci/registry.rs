//! Talking to OCI registries (the I/O edge of [`super`]): pull a Wasm
//! artifact and its cosign signatures, push one, push a signature. HTTP,
//! authentication and the distribution protocol are `oci-client`'s; this
//! module bounds them (time, size, addresses) and checks what arrives
//! against [`super::artifact`] before anyone uses it.
//!
//! Rules:
//! - Every operation has its own client, and, when a guard is set, its own
//!   [`GuardProxy`] that every connection of that client goes through (the
//!   registry, blob redirects, token realms): an address the guard refuses
//!   is never connected to, and the operation fails naming it.
//! - Manifests are read by us, streaming, with their bound
//!   ([`artifact::MAX_MANIFEST_BYTES`]) enforced before more is buffered;
//!   blobs likewise with theirs.

use std::str::FromStr;
use std::time::Duration;

use futures::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::artifact::{self, Artifact, ArtifactError};
use super::cosign::{self, FoundSignature};
use super::proxy::GuardProxy;
use crate::ops::netguard::{MAX_REDIRECTS, NetGuard};

/// Deadline of one pull, push or signature lookup (every request in it).
pub const OCI_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for the next bytes of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Manifest media types asked for when pulling.
const ACCEPTED: &[&str] = &[
    artifact::OCI_MANIFEST_MEDIA_TYPE,
    artifact::OCI_INDEX_MEDIA_TYPE,
];

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The reference does not parse.
    #[error("{reference:?} is not an OCI reference: {message}")]
    Reference {
        /// The reference as written.
        reference: String,
        /// The parser's message.
        message: String,
    },
    /// The registry could not be reached, timed out or failed (retried).
    #[error("registry {registry}: {message}")]
    Unavailable {
        /// The registry host.
        registry: String,
        /// What happened.
        message: String,
    },
    /// The repository, tag, digest or blob does not exist.
    #[error("{0} not found in the registry")]
    NotFound(String),
    /// The registry refused the credentials (or their absence).
    #[error("registry {registry} refused access: {message}")]
    Denied {
        /// The registry host.
        registry: String,
        /// What it said.
        message: String,
    },
    /// The registry's address is one plugin sources may not reach.
    #[error("registry {registry}: {message}")]
    AddressNotAllowed {
        /// The registry host.
        registry: String,
        /// The guard's reason.
        message: String,
    },
    /// What was pulled is not a usable Wasm artifact.
    #[error("{reference}: {source}")]
    Artifact {
        /// The reference pulled.
        reference: String,
        /// What is wrong with it.
        source: ArtifactError,
    },
    /// The client could not be configured (a bad CA bundle).
    #[error("OCI client: {0}")]
    Config(String),
    /// A signature could not be made or stored.
    #[error("signature: {0}")]
    Signature(String),
}

/// How registries are reached.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (`host[:port]`) spoken to over plain HTTP (development
    /// and in-cluster registries); every other one over HTTPS.
    pub plain_http: Vec<String>,
    /// Extra CA certificates (PEM bundle) trusted besides the system's.
    pub extra_roots_pem: Option<Vec<u8>>,
    /// The address guard every registry host passes before it is
    /// contacted (`None`: any address, for the CLI run by a person).
    pub guard: Option<NetGuard>,
}

/// A pulled Wasm artifact.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component.
    pub bytes: Vec<u8>,
    /// The manifest digest (`sha256:<hex>`).
    pub manifest_digest: String,
    /// `registry/repository@sha256:<hex>`: what serves, whatever tag named it.
    pub pinned: String,
    /// `registry/repository` (what a signature payload names).
    pub repository: String,
}

/// An OCI registry client with the operator's bounds.
#[derive(Clone)]
pub struct Registry {
    opts: RegistryOptions,
    extra_roots: Vec<Certificate>,
}

/// One operation's clients, and the proxy they go through.
struct Session {
    client: Client,
    /// For manifests, which `oci-client` would buffer whole.
    http: reqwest::Client,
    /// Registries spoken to over plain HTTP.
    plain_http: Vec<String>,
    proxy: Option<GuardProxy>,
}

impl Session {
    /// `result`, with a failure explained by the guard's refusal when the
    /// proxy refused a hop during the operation.
    fn explain<T>(
        &self,
        r: &Reference,
        result: Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        match (result, self.proxy.as_ref().and_then(GuardProxy::refused)) {
            (Err(e @ RegistryError::Artifact { .. }), _) => Err(e),
            (Err(_), Some(message)) => Err(RegistryError::AddressNotAllowed {
                registry: r.registry().to_owned(),
                message,
            }),
            (result, _) => result,
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

/// Parse `reference` (`registry/repository:tag` or `…@sha256:…`, without
/// the `oci://` prefix).
pub fn parse(reference: &str) -> Result<Reference, RegistryError> {
    Reference::from_str(reference).map_err(|e| RegistryError::Reference {
        reference: reference.to_owned(),
        message: e.to_string(),
    })
}

fn repository_of(r: &Reference) -> String {
    format!("{}/{}", r.registry(), r.repository())
}

impl Registry {
    /// A client configured by `opts`.
    pub fn new(opts: &RegistryOptions) -> Result<Self, RegistryError> {
        crate::ops::crypto::install_crypto_provider();
        let mut extra = Vec::new();
        if let Some(pem) = &opts.extra_roots_pem {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| RegistryError::Config(format!("CA bundle: {e}")))?;
                extra.push(Certificate {
                    encoding: CertificateEncoding::Der,
                    data: cert.as_ref().to_vec(),
                });
            }
        }
        let registry = Registry {
            opts: opts.clone(),
            extra_roots: extra,
        };
        // A bad CA bundle is refused here, not at the first pull.
        registry.clients(None)?;
        Ok(registry)
    }

    /// The clients of one operation, through `proxy` when given.
    fn clients(&self, proxy: Option<&str>) -> Result<(Client, reqwest::Client), RegistryError> {
        let config = ClientConfig {
            protocol: if self.opts.plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(self.opts.plain_http.clone())
            },
            extra_root_certificates: self.extra_roots.clone(),
            read_timeout: Some(READ_TIMEOUT),
            connect_timeout: Some(CONNECT_TIMEOUT),
            max_concurrent_download: 2,
            max_concurrent_upload: 2,
            // POST + one PUT per blob: every registry supports it (chunked
            // PATCH uploads are optional and some answer without a Location).
            use_monolithic_push: true,
            https_proxy: proxy.map(str::to_owned),
            http_proxy: proxy.map(str::to_owned),
            ..ClientConfig::default()
        };
        let client = Client::try_from(config).map_err(|e| RegistryError::Config(e.to_string()))?;
        let mut http = reqwest::Client::builder()
            .read_timeout(READ_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS));
        if let Some(pem) = &self.opts.extra_roots_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| RegistryError::Config(format!("CA bundle: {e}")))?;
            http = http.tls_certs_merge(certs);
        }
        if let Some(url) = proxy {
            let proxy =
                reqwest::Proxy::all(url).map_err(|e| RegistryError::Config(e.to_string()))?;
            http = http.proxy(proxy);
        }
        let http = http
            .build()
            .map_err(|e| RegistryError::Config(e.to_string()))?;
        Ok((client, http))
    }

    /// A new operation's clients: through its own [`GuardProxy`] when the
    /// registry options have a guard.
    async fn session(&self) -> Result<Session, RegistryError> {
        let proxy = match &self.opts.guard {
            Some(guard) => Some(
                GuardProxy::start(guard.clone())
                    .await
                    .map_err(|e| RegistryError::Config(e.to_string()))?,
            ),
            None => None,
        };
        let (client, http) = self.clients(proxy.as_ref().map(GuardProxy::url))?;
        Ok(Session {
            client,
            http,
            plain_http: self.opts.plain_http.clone(),
            proxy,
        })
    }

    /// Run `op` in a new session, under [`OCI_TIMEOUT`], its failure
    /// explained by the guard when it refused a hop.
    async fn run<T>(
        &self,
        r: &Reference,
        op: impl AsyncFnOnce(&Session) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        bounded(r, async {
            let session = self.session().await?;
            let result = op(&session).await;
            session.explain(r, result)
        })
        .await
    }

    /// Refuse a registry whose host is, or resolves to, an address plugin
    /// sources may not reach.
    async fn check_host(&self, r: &Reference) -> Result<(), RegistryError> {
        let Some(guard) = &self.opts.guard else {
            return Ok(());
        };
        guard
            .check_host(r.resolve_registry())
            .await
            .map_err(|e| RegistryError::AddressNotAllowed {
                registry: r.registry().to_owned(),
                message: e.0,
            })
    }

    /// Pull the Wasm artifact `reference` names: its manifest (checked
    /// against the digest in the reference, if any), then its one layer
    /// (refused above `max_bytes` before it is downloaded, and checked
    /// against its digest and the Wasm magic).
    pub async fn pull(
        &self,
        reference: &str,
        auth: &RegistryAuth,
        max_bytes: usize,
    ) -> Result<Pulled, RegistryError> {
        self.pull_reporting(reference, auth, max_bytes, None).await
    }

    /// [`Registry::pull`], telling `progress` how much of the component's
    /// layer has arrived as it arrives.
    pub async fn pull_reporting(
        &self,
        reference: &str,
        auth: &RegistryAuth,
        max_bytes: usize,
        progress: Option<Progress>,
    ) -> Result<Pulled, RegistryError> {
        let r = parse(reference)?;
        self.check_host(&r).await?;
        self.run(&r, async |s| {
            pull_in(s, &r, auth, max_bytes, progress.as_ref()).await
        })
        .await
    }

    /// The cosign signatures stored for `pulled` (none when its signature
    /// tag does not exist).
    pub async fn signatures(
        &self,
        pulled: &Pulled,
        auth: &RegistryAuth,
    ) -> Result<Vec<FoundSignature>, RegistryError> {
        let r = signature_reference(pulled)?;
        self.check_host(&r).await?;
        self.run(&r, async |s| signatures_in(s, &r, auth).await)
            .await
    }

    /// Push `component` to `reference` as a Wasm artifact; returns it as
    /// it would be pulled (pinned to the manifest digest pushed).
    pub async fn push(
        &self,
        reference: &str,
        component: &[u8],
        auth: &RegistryAuth,
    ) -> Result<Pulled, RegistryError> {
        self.push_reporting(reference, component, auth, None).await
    }

    /// [`Registry::push`], telling `progress` how much of the component
    /// has been sent as the registry takes it.
    pub async fn push_reporting(
        &self,
        reference: &str,
        component: &[u8],
        auth: &RegistryAuth,
        progress: Option<Progress>,
    ) -> Result<Pulled, RegistryError> {
        let r = parse(reference)?;
        self.check_host(&r).await?;
        artifact::check_wasm_magic(component).map_err(|source| RegistryError::Artifact {
            reference: r.whole(),
            source,
        })?;
        let a = Artifact::new(component).map_err(|source| RegistryError::Artifact {
            reference: r.whole(),
            source,
        })?;
        self.run(&r, async |s| {
            s.client
                .auth(&r, auth, oci_client::RegistryOperation::Push)
                .await
                .map_err(|e| classify(&r, "auth", e))?;
            s.client
                .push_blob(&r, a.config.clone(), &a.config_descriptor.digest)
                .await
                .map_err(|e| classify(&r, "config blob", e))?;
            let size = component.len() as u64;
            s.client
                .push_blob_stream(
                    &r,
                    upload_chunks(component, progress.clone()),
                    &a.layer_descriptor.digest,
                    Some(size),
                )
                .await
                .map_err(|e| classify(&r, "layer blob", e))?;
            push_manifest(s, &r, a.manifest.clone()).await
        })
        .await?;
        let repository = repository_of(&r);
        let manifest_digest = a.digest();
        Ok(Pulled {
            bytes: component.to_vec(),
            pinned: format!("{repository}@{manifest_digest}"),
            manifest_digest,
            repository,
        })
    }

    /// Store `signature` (base64) of `payload` for `pulled` under its
    /// signature tag, keeping signatures already there.
    pub async fn push_signature(
        &self,
        pulled: &Pulled,
        payload: &[u8],
        signature: &str,
        auth: &RegistryAuth,
    ) -> Result<(), RegistryError> {
        let r = signature_reference(pulled)?;
        self.check_host(&r).await?;
        self.run(&r, async |s| {
            let token = s
                .client
                .auth(&r, auth, oci_client::RegistryOperation::Push)
                .await
                .map_err(|e| classify(&r, "auth", e))?;
            let mut layers =
                match manifest(s, &r, auth, token.as_deref(), "signature manifest").await {
                    Ok(raw) => serde_json::from_slice::<OciImageManifest>(&raw)
                        .map(|m| m.layers)
                        .unwrap_or_default(),
                    Err(RegistryError::NotFound(_)) => Vec::new(),
                    Err(other) => return Err(other),
                };
            let digest = artifact::digest_of(payload);
            if !layers.iter().any(|l| {
                l.digest == digest
                    && l.annotations
                        .as_ref()
                        .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
                        == Some(&signature.to_owned())
            }) {
                layers.push(OciDescriptor {
                    media_type: cosign::SIMPLE_SIGNING_MEDIA_TYPE.to_owned(),
                    digest: digest.clone(),
                    size: i64::try_from(payload.len()).unwrap_or(i64::MAX),
                    annotations: Some(
                        [(
                            cosign::SIGNATURE_ANNOTATION.to_owned(),
                            signature.to_owned(),
                        )]
                        .into_iter()
                        .collect(),
                    ),
                    ..OciDescriptor::default()
                });
            }
            s.client
                .push_blob(&r, payload.to_vec(), &digest)
                .await
                .map_err(|e| classify(&r, "signature payload", e))?;
            let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
            let config = serde_json::to_vec(&serde_json::json!({
                "architecture": "", "os": "", "config": {},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }))
            .map_err(|e| RegistryError::Signature(e.to_string()))?;
            let config_digest = artifact::digest_of(&config);
            s.client
                .push_blob(&r, config.clone(), &config_digest)
                .await
                .map_err(|e| classify(&r, "signature config", e))?;
            let manifest = OciImageManifest {
                schema_version: 2,
                media_type: Some(artifact::OCI_MANIFEST_MEDIA_TYPE.to_owned()),
                config: OciDescriptor {
                    media_type: "application/vnd.oci.image.config.v1+json".to_owned(),
                    digest: config_digest,
                    size: i64::try_from(config.len()).unwrap_or(i64::MAX),
                    ..OciDescriptor::default()
                },
                layers,
                ..OciImageManifest::default()
            };
            let raw = serde_json::to_vec(&manifest)
                .map_err(|e| RegistryError::Signature(e.to_string()))?;
            push_manifest(s, &r, raw).await
        })
        .await
    }
}

/// [`Registry::pull`] in session `s`.
async fn pull_in(
    s: &Session,
    r: &Reference,
    auth: &RegistryAuth,
    max_bytes: usize,
    progress: Option<&Progress>,
) -> Result<Pulled, RegistryError> {
    let whole = r.whole();
    let bad = |source| RegistryError::Artifact {
        reference: whole.clone(),
        source,
    };
    // Credentials (or an anonymous bearer token) for this repository.
    let token = s
        .client
        .auth(r, auth, oci_client::RegistryOperation::Pull)
        .await
        .map_err(|e| classify(r, "auth", e))?;
    let raw = manifest(s, r, auth, token.as_deref(), "manifest").await?;
    // The digest is ours, over the bytes that arrived: a registry's
    // header is not trusted.
    let manifest_digest = artifact::digest_of(&raw);
    if let Some(want) = r.digest() {
        artifact::check_digest("the manifest", &raw, want).map_err(bad)?;
    }
    let layer = artifact::wasm_layer(&raw, max_bytes).map_err(bad)?;
    let bytes = blob(s, r, &layer, max_bytes, progress).await?;
    artifact::check_digest("the layer", &bytes, &layer.digest).map_err(bad)?;
    artifact::check_wasm_magic(&bytes).map_err(bad)?;
    let repository = repository_of(r);
    Ok(Pulled {
        bytes,
        pinned: format!("{repository}@{manifest_digest}"),
        manifest_digest,
        repository,
    })
}

/// [`Registry::signatures`] in session `s`.
async fn signatures_in(
    s: &Session,
    r: &Reference,
    auth: &RegistryAuth,
) -> Result<Vec<FoundSignature>, RegistryError> {
    let token = s
        .client
        .auth(r, auth, oci_client::RegistryOperation::Pull)
        .await
        .map_err(|e| classify(r, "auth", e))?;
    let raw = match manifest(s, r, auth, token.as_deref(), "signature manifest").await {
        Ok(raw) => raw,
        Err(RegistryError::NotFound(_)) => return Ok(Vec::new()),
        Err(other) => return Err(other),
    };
    let m: OciImageManifest = serde_json::from_slice(&raw)
        .map_err(|e| RegistryError::Signature(format!("signature manifest {}: {e}", r.whole())))?;
    let mut found = Vec::new();
    for layer in m
        .layers
        .iter()
        .filter(|l| l.media_type == cosign::SIMPLE_SIGNING_MEDIA_TYPE)
        .take(cosign::MAX_SIGNATURES)
    {
        let Some(sig) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(cosign::SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        let payload = blob(s, r, layer, cosign::MAX_PAYLOAD_BYTES, None).await?;
        if artifact::check_digest("a signature payload", &payload, &layer.digest).is_err() {
            continue;
        }
        found.push(FoundSignature {
            payload: Some(payload),
            signature: sig.clone(),
        });
    }
    Ok(found)
}

/// The manifest `r` names, read streaming: a declared length above
/// [`artifact::MAX_MANIFEST_BYTES`] is refused before the body is read,
/// and a body that grows past it is cut there. `token` is the bearer
/// token `oci-client` got for the operation (else `auth`'s basic
/// credentials are sent); both go to the registry's host only (the HTTP
/// client drops them on a redirect elsewhere).
async fn manifest(
    s: &Session,
    r: &Reference,
    auth: &RegistryAuth,
    token: Option<&str>,
    what: &str,
) -> Result<Vec<u8>, RegistryError> {
    let registry = r.resolve_registry();
    let unavailable = |message: String| RegistryError::Unavailable {
        registry: r.registry().to_owned(),
        message: format!("{what}: {message}"),
    };
    let too_large = |size: u64| RegistryError::Artifact {
        reference: r.whole(),
        source: ArtifactError::Manifest(format!(
            "{size} bytes or more, more than {}",
            artifact::MAX_MANIFEST_BYTES
        )),
    };
    let scheme = if s.plain_http.iter().any(|h| h == registry) {
        "http"
    } else {
        "https"
    };
    let name = r.digest().or(r.tag()).unwrap_or("latest");
    let url = format!(
        "{scheme}://{registry}/v2/{}/manifests/{name}",
        r.repository()
    );
    let mut req = s
        .http
        .get(&url)
        .header(reqwest::header::ACCEPT, ACCEPTED.join(", "));
    match (token, auth) {
        (Some(token), _) => req = req.bearer_auth(token),
        (None, RegistryAuth::Basic(user, password)) => req = req.basic_auth(user, Some(password)),
        (None, _) => {}
    }
    let mut resp = req.send().await.map_err(|e| unavailable(error_chain(&e)))?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(RegistryError::NotFound(format!("{what} of {}", r.whole())));
    }
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(RegistryError::Denied {
            registry: r.registry().to_owned(),
            message: format!("{what}: HTTP {status}"),
        });
    }
    if !status.is_success() {
        return Err(unavailable(format!("HTTP {status}")));
    }
    let limit = artifact::MAX_MANIFEST_BYTES;
    if let Some(len) = resp.content_length().filter(|&n| n > limit as u64) {
        return Err(too_large(len));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| unavailable(format!("reading: {}", error_chain(&e))))?
    {
        if out.len() + chunk.len() > limit {
            return Err(too_large((out.len() + chunk.len()) as u64));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A blob, at most `layer.size` and `max` bytes whatever the registry
/// sends.
async fn blob(
    s: &Session,
    r: &Reference,
    layer: &OciDescriptor,
    max: usize,
    progress: Option<&Progress>,
) -> Result<Vec<u8>, RegistryError> {
    let declared = usize::try_from(layer.size).unwrap_or(usize::MAX).min(max);
    let mut stream = s
        .client
        .pull_blob_stream(r, layer)
        .await
        .map_err(|e| classify(r, "blob", e))?;
    let mut out = Vec::with_capacity(declared.min(4 << 20));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| RegistryError::Unavailable {
            registry: r.registry().to_owned(),
            message: format!("reading blob {}: {e}", layer.digest),
        })?;
        if out.len() + chunk.len() > declared {
            return Err(RegistryError::Artifact {
                reference: r.whole(),
                source: ArtifactError::TooLarge {
                    size: (out.len() + chunk.len()) as u64,
                    limit: declared,
                },
            });
        }
        out.extend_from_slice(&chunk);
        if let Some(p) = progress {
            p(out.len() as u64, declared as u64);
        }
    }
    Ok(out)
}

/// Told, as a blob moves, how many of its bytes have (first) and how many
/// it has in all (second); for the author commands' progress.
pub type Progress = std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Bytes of one piece of an upload: the unit `progress` hears about.
const UPLOAD_CHUNK: usize = 256 * 1024;

/// `component` as the stream a blob upload reads, in [`UPLOAD_CHUNK`]
/// pieces, telling `progress` as each is taken (the HTTP body reads the
/// next piece once the last is on its way).
fn upload_chunks(
    component: &[u8],
    progress: Option<Progress>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, OciDistributionError>> + Send + 'static {
    let whole = bytes::Bytes::copy_from_slice(component);
    let total = whole.len() as u64;
    let pieces: Vec<bytes::Bytes> = (0..whole.len())
        .step_by(UPLOAD_CHUNK)
        .map(|start| whole.slice(start..(start + UPLOAD_CHUNK).min(whole.len())))
        .collect();
    let mut sent = 0u64;
    futures::stream::iter(pieces.into_iter().map(move |piece| {
        sent += piece.len() as u64;
        if let Some(p) = &progress {
            p(sent, total);
        }
        Ok(piece)
    }))
}

async fn push_manifest(s: &Session, r: &Reference, manifest: Vec<u8>) -> Result<(), RegistryError> {
    let ct = reqwest::header::HeaderValue::from_static(artifact::OCI_MANIFEST_MEDIA_TYPE);
    s.client
        .push_manifest_raw(r, manifest, ct)
        .await
        .map_err(|e| classify(r, "manifest push", e))?;
    Ok(())
}

/// `e` and its sources, each once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut chain = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !chain.iter().any(|t| t.contains(&text)) {
            chain.push(text);
        }
        cur = c.source();
    }
    chain.join(": ")
}

/// Where cosign keeps `pulled`'s signatures: its repository, tag
/// `sha256-<hex>.sig`.
fn signature_reference(pulled: &Pulled) -> Result<Reference, RegistryError> {
    let base = parse(&pulled.pinned)?;
    let tag = cosign::signature_tag(&pulled.manifest_digest)
        .map_err(|e| RegistryError::Signature(e.to_string()))?;
    Ok(Reference::with_tag(
        base.registry().to_owned(),
        base.repository().to_owned(),
        tag,
    ))
}

/// Run `f` under [`OCI_TIMEOUT`].
async fn bounded<T>(
    r: &Reference,
    f: impl std::future::Future<Output = Result<T, RegistryError>>,
) -> Result<T, RegistryError> {
    tokio::time::timeout(OCI_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| {
            Err(RegistryError::Unavailable {
                registry: r.registry().to_owned(),
                message: format!("no answer within {}s", OCI_TIMEOUT.as_secs()),
            })
        })
}

/// An `oci-client` error as a [`RegistryError`]: a missing manifest or
/// blob is `NotFound`, refused credentials `Denied`, anything else
/// (connection, TLS, 5xx) `Unavailable`.
fn classify(r: &Reference, what: &str, e: OciDistributionError) -> RegistryError {
    let registry = r.registry().to_owned();
    let not_found = |code: &OciErrorCode| {
        matches!(
            code,
            OciErrorCode::ManifestUnknown
                | OciErrorCode::BlobUnknown
                | OciErrorCode::NameUnknown
                | OciErrorCode::NotFound
        )
    };
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => {
            RegistryError::NotFound(format!("{what} of {}", r.whole()))
        }
        OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|e| not_found(&e.code)) =>
        {
            RegistryError::NotFound(format!("{what} of {}", r.whole()))
        }
        OciDistributionError::ServerError { code: 404, .. } => {
            RegistryError::NotFound(format!("{what} of {}", r.whole()))
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => RegistryError::Denied {
            registry,
            message: format!("{what}: {e}"),
        },
        OciDistributionError::RegistryError { envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)) =>
        {
            RegistryError::Denied {
                registry,
                message: format!("{what}: {envelope}"),
            }
        }
        other => RegistryError::Unavailable {
            registry,
            message: format!("{what}: {}", error_chain(&other)),
        },
    }
}

/// Credentials for `registry` from a `.dockerconfigjson` document
/// (`auths.<host>.auth` = base64 `user:password`, or `username` and
/// `password`); anonymous when it names none for that host.
pub fn auth_from_docker_config(config: &[u8], registry: &str) -> Result<RegistryAuth, String> {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_slice(config)
        .map_err(|e| format!(".dockerconfigjson is not JSON: {e}"))?;
    let auths = v
        .get("auths")
        .and_then(|a| a.as_object())
        .ok_or_else(|| ".dockerconfigjson has no auths".to_owned())?;
    let entry = auths.iter().find(|(k, _)| {
        let host = k
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        host == registry
    });
    let Some((_, entry)) = entry else {
        return Ok(RegistryAuth::Anonymous);
    };
    if let (Some(u), Some(p)) = (
        entry.get("username").and_then(|u| u.as_str()),
        entry.get("password").and_then(|p| p.as_str()),
    ) {
        return Ok(RegistryAuth::Basic(u.to_owned(), p.to_owned()));
    }
    let encoded = entry
        .get("auth")
        .and_then(|a| a.as_str())
        .ok_or_else(|| format!("auths.{registry} has neither auth nor username/password"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("auths.{registry}.auth is not base64: {e}"))?;
    let text =
        String::from_utf8(decoded).map_err(|_| format!("auths.{registry}.auth is not UTF-8"))?;
    let (u, p) = text
        .split_once(':')
        .ok_or_else(|| format!("auths.{registry}.auth is not user:password"))?;
    Ok(RegistryAuth::Basic(u.to_owned(), p.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_credentials() {
        let cfg = br#"{"auths":{"registry.example:5000":{"auth":"dXNlcjpwYXNz"},"https://other.example/v1/":{"username":"a","password":"b"}}}"#;
        assert!(matches!(
            auth_from_docker_config(cfg, "registry.example:5000").unwrap(),
            RegistryAuth::Basic(u, p) if u == "user" && p == "pass"
        ));
        assert!(matches!(
            auth_from_docker_config(cfg, "other.example").unwrap(),
            RegistryAuth::Basic(u, p) if u == "a" && p == "b"
        ));
        assert!(matches!(
            auth_from_docker_config(cfg, "third.example").unwrap(),
            RegistryAuth::Anonymous
        ));
        assert!(auth_from_docker_config(b"[]", "x").is_err());
        assert!(
            auth_from_docker_config(br#"{"auths":{"x":{"auth":"bm9jb2xvbg=="}}}"#, "x").is_err()
        );
    }

    #[test]
    fn references() {
        let r = parse("127.0.0.1:5000/plugins/hello:v1").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("127.0.0.1:5000", "plugins/hello", Some("v1"))
        );
        assert_eq!(repository_of(&r), "127.0.0.1:5000/plugins/hello");
        assert!(parse("UPPER/Case:tag").is_err());
    }
}
