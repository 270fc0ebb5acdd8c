//! Getting a plugin component's bytes (the `Fetched` stage): a builtin by
//! name, a ConfigMap's `binaryData` key, an `https://` URL or a `file://`
//! path. Every source is bounded by the runtime's component size limit.

use std::sync::{Arc, Once};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use trainforge_api::trainforge::v1alpha1::{ConfigMapSource, PluginSourceSpec, reason};

use super::netguard::{NetGuard, Refused};
use crate::plugin::{FileError, builtin};

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
        }
    }
}

/// Component bytes and where they came from.
#[derive(Clone)]
pub struct Fetched {
    /// The component.
    pub bytes: Arc<[u8]>,
    /// A short description of the origin, for messages (`builtin plugin-torch`).
    pub origin: String,
    /// Whether it is a builtin (trusted without a pinned digest).
    pub builtin: bool,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetched")
            .field("origin", &self.origin)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Fetches components; one per controller.
#[derive(Clone)]
pub struct Fetcher {
    client: kube::Client,
    http: reqwest::Client,
    guard: NetGuard,
    max_bytes: usize,
}

/// How `https://` sources are fetched.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// Networks https sources may reach although they are loopback,
    /// link-local, private or otherwise special (see [`super::netguard`]).
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Extra CA certificates (PEM) trusted besides the system's.
    pub extra_roots_pem: Option<Vec<u8>>,
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

/// Install rustls' ring provider as the process default (once; a provider
/// installed earlier by someone else is kept).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _already_installed = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The builtin plugin called `name` (`torch` or `plugin-torch`).
pub fn find_builtin(name: &str) -> Option<&'static builtin::BuiltinPlugin> {
    builtin::all()
        .iter()
        .find(|b| b.crate_name == name || b.crate_name.strip_prefix("plugin-") == Some(name))
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
        install_crypto_provider();
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
        Ok(Fetcher {
            client,
            http,
            guard,
            max_bytes,
        })
    }

    /// Fetch the component named by `source`.
    pub async fn fetch(&self, source: &PluginSourceSpec) -> Result<Fetched, FetchError> {
        if let Some(name) = &source.builtin {
            let b = find_builtin(name).ok_or_else(|| FetchError::UnknownBuiltin {
                name: name.clone(),
                available: builtin::all()
                    .iter()
                    .map(|b| b.crate_name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
            return Ok(Fetched {
                bytes: Arc::from(b.wasm),
                origin: format!("builtin {}", b.crate_name),
                builtin: true,
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
            bytes: Arc::from(bytes.0),
            origin: format!("{what} key {}", src.key),
            builtin: false,
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
            bytes: Arc::from(bytes),
            origin: what,
            builtin: false,
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
            bytes: Arc::from(body),
            origin: url.to_owned(),
            builtin: false,
        })
    }
}
