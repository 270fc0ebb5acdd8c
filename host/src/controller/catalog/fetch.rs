//! Getting a plugin component's bytes (the `Fetched` stage): a builtin by
//! name, a ConfigMap's `binaryData` key, an `https://` URL, an `oci://`
//! artifact or a `file://` path, and, when the spec asks for verification,
//! the signatures stored next to it. Every source is bounded by the
//! runtime's component size limit.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use oci_client::secrets::RegistryAuth;
use trainforge_api::trainforge::v1alpha1::{ConfigMapSource, PluginSourceSpec, reason};

use crate::oci::artifact::ArtifactError;
use crate::oci::cosign::FoundSignature;
use crate::oci::registry::{self, Registry, RegistryError, RegistryOptions};
use crate::ops::netguard::{NetGuard, Refused};
use crate::plugin::{FileError, builtin};
use bytes::Bytes;

/// Largest blob signature read next to a component (cosign's are ~100
/// bytes of base64).
pub const MAX_SIGNATURE_BYTES: usize = 8 * 1024;

/// Timeout of one HTTPS download (connect + body).
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the bytes could not be fetched; [`FetchError::reason`] is the
/// `Fetched=False` condition reason.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No builtin plugin has that name.
    #[error("no builtin plugin {name:?} (builtins: {available})")]
    UnknownBuiltin {
        /// The requested name.
        name: String,
        /// The embedded plugins' names.
        available: String,
    },
    /// The ConfigMap, its key, or the file does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The component is larger than the limit.
    #[error("{what} is larger than the {limit}-byte component limit")]
    TooLarge {
        /// Where it came from.
        what: String,
        /// The limit.
        limit: usize,
    },
    /// The API server, file system or network failed (retried).
    #[error("{0}")]
    Failed(String),
    /// The spec names no source (the CRD's rules prevent this).
    #[error("spec.source names no component")]
    NoSource,
    /// An https source (or a redirect) leads to an address plugin sources
    /// may not reach, loops or leaves https.
    #[error("{0}")]
    AddressNotAllowed(String),
    /// Pulling an `oci://` artifact failed.
    #[error("{0}")]
    Registry(#[from] RegistryError),
    /// The `pullSecret` is missing or unusable.
    #[error("pullSecret {name:?} in namespace {namespace}: {message}")]
    PullSecret {
        /// The Secret's name.
        name: String,
        /// The operator's namespace.
        namespace: String,
        /// What is wrong.
        message: String,
    },
}

impl FetchError {
    /// The `Fetched=False` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::UnknownBuiltin { .. } => reason::UNKNOWN_BUILTIN,
            FetchError::NotFound(_) => reason::NOT_FOUND,
            FetchError::TooLarge { .. } => reason::TOO_LARGE,
            FetchError::Failed(_) | FetchError::NoSource => reason::FETCH_ERROR,
            FetchError::AddressNotAllowed(_) => reason::ADDRESS_NOT_ALLOWED,
            FetchError::PullSecret { .. } => reason::PULL_SECRET_ERROR,
            FetchError::Registry(e) => match e {
                RegistryError::Reference { .. } => reason::INVALID_SPEC,
                RegistryError::NotFound(_) => reason::NOT_FOUND,
                RegistryError::AddressNotAllowed { .. } => reason::ADDRESS_NOT_ALLOWED,
                RegistryError::Artifact { source, .. } => match source {
                    ArtifactError::TooLarge { .. } => reason::TOO_LARGE,
                    ArtifactError::DigestMismatch { .. } => reason::DIGEST_MISMATCH,
                    ArtifactError::NotWasm(_) | ArtifactError::Manifest(_) => reason::NOT_WASM,
                },
                RegistryError::Unavailable { .. }
                | RegistryError::Denied { .. }
                | RegistryError::Config(_)
                | RegistryError::Signature(_) => reason::REGISTRY_ERROR,
            },
        }
    }
}

/// Component bytes and where they came from.
#[derive(Clone)]
pub struct Fetched {
    /// The component (a builtin's are the embedded bytes, not a copy).
    pub bytes: Bytes,
    /// A short description of the origin, for messages (`builtin plugin-torch`).
    pub origin: String,
    /// Whether it is a builtin (trusted without a pinned digest).
    pub builtin: bool,
    /// For an `oci://` source: the URL by manifest digest (what serves,
    /// whatever tag the spec names), and that digest.
    pub pinned: Option<(String, String)>,
    /// Signatures found next to the component (`None`: not looked for).
    pub signatures: Option<Vec<FoundSignature>>,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetched")
            .field("origin", &self.origin)
            .field("bytes", &self.bytes.len())
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

/// Fetches components; one per controller.
#[derive(Clone)]
pub struct Fetcher {
    client: kube::Client,
    http: reqwest::Client,
    registry: Registry,
    guard: NetGuard,
    max_bytes: usize,
    secrets_namespace: String,
    require_signatures: bool,
}

/// How plugin sources are fetched, and what they must carry.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// Networks https and OCI sources may reach although they are
    /// loopback, link-local, private or otherwise special (see
    /// [`crate::ops::netguard`]).
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Extra CA certificates (PEM) trusted besides the system's (https
    /// servers and registries).
    pub extra_roots_pem: Option<Vec<u8>>,
    /// Registries (`host[:port]`) pulled from over plain HTTP.
    pub plain_http_registries: Vec<String>,
    /// Namespace of the `pullSecret`s (the operator's own; empty: none
    /// can be read).
    pub secrets_namespace: String,
    /// Every plugin that is not builtin must be signed by a key of its
    /// `spec.verification` (a spec without one is refused).
    pub require_signatures: bool,
}

/// A failed https request as a [`FetchError`]: a refusal of the address
/// guard or a redirect rule is `AddressNotAllowed`; anything else names
/// every cause (a certificate error is only visible in the chain).
fn classify(url: &str, e: &reqwest::Error) -> FetchError {
    let mut chain = Vec::new();
    let mut refused = None;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<Refused>() {
            refused = Some(r.0.clone());
        }
        let text = err.to_string();
        if !chain.iter().any(|c: &String| c.contains(&text)) {
            chain.push(text);
        }
        cur = err.source();
    }
    match refused {
        Some(r) => FetchError::AddressNotAllowed(format!("GET {url}: {r}")),
        None => FetchError::Failed(format!("GET {url}: {}", chain.join(": "))),
    }
}

impl Fetcher {
    /// A fetcher reading ConfigMaps through `client` and refusing components
    /// larger than `max_bytes`; https sources reach public addresses only.
    pub fn new(client: kube::Client, max_bytes: usize) -> Result<Self, super::Error> {
        Self::with_options(client, max_bytes, &FetchOptions::default())
    }

    /// [`Fetcher::new`] with `opts` for https sources.
    pub fn with_options(
        client: kube::Client,
        max_bytes: usize,
        opts: &FetchOptions,
    ) -> Result<Self, super::Error> {
        crate::ops::crypto::install_crypto_provider();
        let guard = NetGuard::new(opts.allowed_networks.clone());
        let mut builder = reqwest::Client::builder()
            .https_only(true)
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .redirect(guard.redirect_policy())
            .dns_resolver(guard.clone())
            .no_proxy();
        if let Some(pem) = &opts.extra_roots_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| super::Error::HttpClient(format!("CA bundle: {e}")))?;
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
            .build()
            .map_err(|e| super::Error::HttpClient(e.to_string()))?;
        let registry = Registry::new(&RegistryOptions {
            plain_http: opts.plain_http_registries.clone(),
            extra_roots_pem: opts.extra_roots_pem.clone(),
            guard: Some(guard.clone()),
        })
        .map_err(|e| super::Error::HttpClient(e.to_string()))?;
        Ok(Fetcher {
            client,
            http,
            registry,
            guard,
            max_bytes,
            secrets_namespace: opts.secrets_namespace.clone(),
            require_signatures: opts.require_signatures,
        })
    }

    /// Whether every plugin that is not builtin must be signed.
    pub fn require_signatures(&self) -> bool {
        self.require_signatures
    }

    /// Fetch the component named by `source`, and its signatures when
    /// `signatures` is set (an `oci://` artifact's signature tag, else
    /// a blob signature next to it: `<url>.sig`, the ConfigMap key
    /// `<key>.sig`).
    pub async fn fetch(
        &self,
        source: &PluginSourceSpec,
        signatures: bool,
    ) -> Result<Fetched, FetchError> {
        if let Some(reference) = source.url.as_deref().and_then(|u| u.strip_prefix("oci://")) {
            return self
                .oci(reference, source.pull_secret.as_deref(), signatures)
                .await;
        }
        let mut fetched = self.fetch_bytes(source).await?;
        if signatures && !fetched.builtin {
            fetched.signatures = Some(self.blob_signature(source).await?.into_iter().collect());
        }
        Ok(fetched)
    }

    async fn fetch_bytes(&self, source: &PluginSourceSpec) -> Result<Fetched, FetchError> {
        if let Some(name) = &source.builtin {
            let b = builtin::find(name).ok_or_else(|| FetchError::UnknownBuiltin {
                name: name.clone(),
                available: builtin::all()
                    .iter()
                    .map(|b| b.crate_name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            return Ok(Fetched {
                bytes: Bytes::from_static(b.wasm),
                origin: format!("builtin {}", b.crate_name),
                builtin: true,
                pinned: None,
                signatures: None,
            });
        }
        if let Some(cm) = &source.config_map {
            return self.config_map(cm).await;
        }
        if let Some(url) = &source.url {
            if let Some(path) = url.strip_prefix("file://") {
                return self.file(path).await;
            }
            if url.starts_with("https://") {
                return self.https(url).await;
            }
            return Err(FetchError::Failed(format!(
                "unsupported URL scheme in {url:?} (https:// or file:// only)"
            )));
        }
        Err(FetchError::NoSource)
    }

    fn too_large(&self, what: String) -> FetchError {
        FetchError::TooLarge {
            what,
            limit: self.max_bytes,
        }
    }

    async fn config_map(&self, src: &ConfigMapSource) -> Result<Fetched, FetchError> {
        let what = format!("ConfigMap {}/{}", src.namespace, src.name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &src.namespace);
        let cm = api
            .get_opt(&src.name)
            .await
            .map_err(|e| FetchError::Failed(format!("reading {what}: {e}")))?
            .ok_or_else(|| FetchError::NotFound(format!("{what} not found")))?;
        let bytes = cm
            .binary_data
            .and_then(|mut d| d.remove(&src.key))
            .ok_or_else(|| {
                FetchError::NotFound(format!("{what} has no binaryData key {:?}", src.key))
            })?;
        if bytes.0.len() > self.max_bytes {
            return Err(self.too_large(format!("{what} key {:?}", src.key)));
        }
        Ok(Fetched {
            bytes: Bytes::from(bytes.0),
            origin: format!("{what} key {}", src.key),
            builtin: false,
            pinned: None,
            signatures: None,
        })
    }

    /// A regular file of at most the component limit (never a device or
    /// FIFO: `file:///dev/zero` would stream forever), read off the async
    /// threads.
    async fn file(&self, path: &str) -> Result<Fetched, FetchError> {
        let what = format!("file://{path}");
        let (owned, max) = (std::path::PathBuf::from(path), self.max_bytes);
        let read =
            tokio::task::spawn_blocking(move || crate::plugin::read_component_file(&owned, max))
                .await
                .map_err(|e| FetchError::Failed(format!("{what}: {e}")))?;
        let bytes = read.map_err(|e| match e {
            FileError::NotFound { .. } => FetchError::NotFound(e.to_string()),
            FileError::TooLarge { .. } => self.too_large(what.clone()),
            FileError::NotRegular { .. } | FileError::Io { .. } => {
                FetchError::Failed(format!("{what}: {e}"))
            }
        })?;
        Ok(Fetched {
            bytes: Bytes::from(bytes),
            origin: what,
            builtin: false,
            pinned: None,
            signatures: None,
        })
    }

    async fn https(&self, url: &str) -> Result<Fetched, FetchError> {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| FetchError::Failed(format!("{url:?} is not a URL: {e}")))?;
        self.guard
            .check_url(&parsed)
            .map_err(|e| FetchError::AddressNotAllowed(format!("GET {url}: {e}")))?;
        let failed = |e: reqwest::Error| classify(url, &e);
        let mut resp = self.http.get(parsed).send().await.map_err(failed)?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(FetchError::NotFound(format!("GET {url}: {status}")));
        }
        if !status.is_success() {
            return Err(FetchError::Failed(format!("GET {url}: {status}")));
        }
        if resp
            .content_length()
            .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > self.max_bytes))
        {
            return Err(self.too_large(url.to_owned()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(self.too_large(url.to_owned()));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            bytes: Bytes::from(body),
            origin: url.to_owned(),
            builtin: false,
            pinned: None,
            signatures: None,
        })
    }

    /// Pull `oci://<reference>` (and its signatures when asked).
    async fn oci(
        &self,
        reference: &str,
        pull_secret: Option<&str>,
        signatures: bool,
    ) -> Result<Fetched, FetchError> {
        let parsed = registry::parse(reference)?;
        let auth = match pull_secret {
            None => RegistryAuth::Anonymous,
            Some(name) => self.pull_auth(name, parsed.registry()).await?,
        };
        let pulled = self.registry.pull(reference, &auth, self.max_bytes).await?;
        let found = if signatures {
            Some(self.registry.signatures(&pulled, &auth).await?)
        } else {
            None
        };
        Ok(Fetched {
            origin: format!("oci://{}", pulled.pinned),
            pinned: Some((format!("oci://{}", pulled.pinned), pulled.manifest_digest)),
            bytes: Bytes::from(pulled.bytes),
            builtin: false,
            signatures: found,
        })
    }

    /// Registry credentials for `registry` from the `kubernetes.io/dockerconfigjson`
    /// Secret `name` in the operator's namespace.
    async fn pull_auth(&self, name: &str, registry: &str) -> Result<RegistryAuth, FetchError> {
        let failed = |message: String| FetchError::PullSecret {
            name: name.to_owned(),
            namespace: self.secrets_namespace.clone(),
            message,
        };
        if self.secrets_namespace.is_empty() {
            return Err(failed("the operator reads no pull secrets".to_owned()));
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.secrets_namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|e| failed(format!("reading it: {e}")))?
            .ok_or_else(|| failed("not found".to_owned()))?;
        let config = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .ok_or_else(|| {
                failed("no .dockerconfigjson key (type kubernetes.io/dockerconfigjson)".to_owned())
            })?;
        registry::auth_from_docker_config(&config.0, registry).map_err(failed)
    }

    /// The blob signature stored next to a component that is not in a
    /// registry (`None`: there is none).
    async fn blob_signature(
        &self,
        source: &PluginSourceSpec,
    ) -> Result<Option<FoundSignature>, FetchError> {
        let text = if let Some(cm) = &source.config_map {
            let sig = ConfigMapSource {
                key: format!("{}.sig", cm.key),
                ..cm.clone()
            };
            match self.config_map(&sig).await {
                Ok(f) => Some(f.bytes.to_vec()),
                Err(FetchError::NotFound(_)) => {
                    // `kubectl create configmap --from-file` puts text in `data`.
                    let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &cm.namespace);
                    api.get_opt(&cm.name)
                        .await
                        .map_err(|e| {
                            FetchError::Failed(format!(
                                "reading ConfigMap {}/{}: {e}",
                                cm.namespace, cm.name
                            ))
                        })?
                        .and_then(|c| c.data)
                        .and_then(|mut d| d.remove(&sig.key))
                        .map(String::into_bytes)
                }
                Err(e) => return Err(e),
            }
        } else if let Some(url) = &source.url {
            let sig = format!("{url}.sig");
            let limited = Fetcher {
                max_bytes: MAX_SIGNATURE_BYTES,
                ..self.clone()
            };
            let got = if let Some(path) = sig.strip_prefix("file://") {
                limited.file(path).await
            } else {
                limited.https(&sig).await
            };
            match got {
                Ok(f) => Some(f.bytes.to_vec()),
                Err(FetchError::NotFound(_)) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        Ok(text.and_then(|t| {
            let s = String::from_utf8(t).ok()?;
            Some(FoundSignature {
                payload: None,
                signature: s.trim().to_owned(),
            })
        }))
    }
}
