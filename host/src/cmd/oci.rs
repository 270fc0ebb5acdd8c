//! `trainforge plugin keygen|push|pull|sign|verify`: publish a plugin as a
//! signed OCI artifact, and check one, the way the operator will.

use std::path::{Path, PathBuf};

use oci_client::secrets::RegistryAuth;

use indicatif::HumanBytes;

use crate::cmd::progress::{ProgressArgs, Reporter};
use crate::oci::cosign::{self, FoundSignature, SigningKey, Subject, TrustedKey};
use crate::oci::registry::{Pulled, Registry, RegistryError, RegistryOptions};

/// Largest component pushed or pulled (the operator's default limit).
const MAX_COMPONENT_BYTES: usize = crate::plugin::RuntimeConfig::DEFAULT_MAX_COMPONENT_BYTES;

/// How the registry is reached (shared by every subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP to the registry (a local development registry).
    #[arg(long)]
    pub plain_http: bool,
    /// CA certificates (PEM) trusted for the registry besides the system's.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Registry user name; the password is read from
    /// `$TRAINFORGE_REGISTRY_PASSWORD` (anonymous without a user).
    #[arg(long)]
    pub username: Option<String>,
}

/// `trainforge plugin keygen`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeygenArgs {
    /// Writes `<out>.key` (private, PKCS#8, mode 0600) and `<out>.pub`.
    #[arg(long, default_value = "trainforge")]
    pub out: PathBuf,
}

/// `trainforge plugin push`.
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// The component (`.wasm`).
    pub file: PathBuf,
    /// Where to: `oci://registry/repository:tag`.
    pub reference: String,
    /// Also sign it with this private key (as `sign` does).
    #[arg(long)]
    pub sign_key: Option<PathBuf>,
    /// How the registry is reached.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// What it prints while it runs.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `trainforge plugin pull`.
#[derive(Debug, Clone, clap::Args)]
pub struct PullArgs {
    /// `oci://registry/repository:tag` or `…@sha256:<digest>`.
    pub reference: String,
    /// Where the component goes.
    #[arg(long, short)]
    pub output: PathBuf,
    /// How the registry is reached.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// What it prints while it runs.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `trainforge plugin sign`.
#[derive(Debug, Clone, clap::Args)]
pub struct SignArgs {
    /// An `oci://` artifact (what its tag names now is signed, by digest),
    /// or a `.wasm` file (its signature is written to `<file>.sig`).
    pub target: String,
    /// The private key (unencrypted PKCS#8 ECDSA P-256 PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// How the registry is reached.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `trainforge plugin verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// An `oci://` artifact, or a `.wasm` file with `<file>.sig` beside it.
    pub target: String,
    /// A trusted public key (PEM; repeatable; named by its file stem).
    #[arg(long = "key", required = true)]
    pub keys: Vec<PathBuf>,
    /// How the registry is reached.
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// Errors of these subcommands.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key or signature is unusable.
    #[error(transparent)]
    Key(#[from] cosign::CosignError),
    /// The registry operation failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Verification failed: the operator's reason and message.
    #[error("{0}: {1}")]
    NotVerified(&'static str, String),
    /// A malformed argument.
    #[error("{0}")]
    Usage(String),
}

fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Io {
        path: path.to_owned(),
        source,
    })
}

fn write(path: &Path, bytes: &[u8], private: bool) -> Result<(), CliError> {
    let io = |source| CliError::Io {
        path: path.to_owned(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    use std::io::Write;
    opts.open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(io)
}

fn oci_reference(text: &str) -> Option<&str> {
    text.strip_prefix("oci://")
}

impl RegistryArgs {
    fn client(&self, reference: &str) -> Result<(Registry, RegistryAuth), CliError> {
        let r = crate::oci::registry::parse(reference)?;
        let extra_roots_pem = self.ca_file.as_deref().map(read).transpose()?;
        let registry = Registry::new(&RegistryOptions {
            plain_http: if self.plain_http {
                vec![r.registry().to_owned()]
            } else {
                Vec::new()
            },
            extra_roots_pem,
            guard: None,
        })?;
        let auth = match &self.username {
            None => RegistryAuth::Anonymous,
            Some(u) => RegistryAuth::Basic(
                u.clone(),
                std::env::var("TRAINFORGE_REGISTRY_PASSWORD").unwrap_or_default(),
            ),
        };
        Ok((registry, auth))
    }
}

fn tokio() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("starting the async runtime: {e}")))
}

/// `keygen`: a new ECDSA P-256 key pair.
pub fn keygen(a: &KeygenArgs) -> Result<(), CliError> {
    let (private, public) = cosign::generate()?;
    let (key, pub_) = (a.out.with_extension("key"), a.out.with_extension("pub"));
    write(&key, private.as_bytes(), true)?;
    write(&pub_, public.as_bytes(), false)?;
    println!("{}\n{}", key.display(), pub_.display());
    Ok(())
}

/// `push`: upload the component; prints `oci://…@sha256:…`.
pub fn push(a: &PushArgs) -> Result<(), CliError> {
    let reference = oci_reference(&a.reference).ok_or_else(|| {
        CliError::Usage(format!(
            "{:?}: expected oci://registry/repository:tag",
            a.reference
        ))
    })?;
    let component = read(&a.file)?;
    if component.len() > MAX_COMPONENT_BYTES {
        return Err(CliError::Usage(format!(
            "{} is {} bytes, more than the operator's {MAX_COMPONENT_BYTES}-byte component limit",
            a.file.display(),
            component.len()
        )));
    }
    let key = a.sign_key.as_deref().map(read).transpose()?;
    let key = key.as_deref().map(SigningKey::from_pem).transpose()?;
    let (registry, auth) = a.registry.client(reference)?;
    let report = Reporter::new(a.progress);
    tokio()?.block_on(async {
        report.step(format_args!(
            "pushing {} ({}) to {}…",
            a.file.display(),
            HumanBytes(component.len() as u64),
            a.reference
        ));
        let transfer = report.transfer("pushing");
        let pulled = registry
            .push_reporting(reference, &component, &auth, transfer.progress())
            .await?;
        transfer.finish(
            format_args!("pushed manifest {}", pulled.manifest_digest),
            component.len(),
        );
        if let Some(key) = &key {
            let started = std::time::Instant::now();
            report.step(format_args!("signing {}…", pulled.manifest_digest));
            sign_pulled(&registry, &pulled, key, &auth).await?;
            report.step(format_args!(
                "signed in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        report.step(format_args!(
            "component sha256 {}",
            crate::plugin::sha256_hex(&component)
        ));
        println!("oci://{}", pulled.pinned);
        Ok(())
    })
}

/// `pull`: download and check the component; prints `oci://…@sha256:…`.
pub fn pull(a: &PullArgs) -> Result<(), CliError> {
    let reference = oci_reference(&a.reference)
        .ok_or_else(|| CliError::Usage(format!("{:?}: expected oci://…", a.reference)))?;
    let (registry, auth) = a.registry.client(reference)?;
    let report = Reporter::new(a.progress);
    report.step(format_args!("pulling {}…", a.reference));
    let transfer = report.transfer("pulling");
    let pulled = tokio()?.block_on(registry.pull_reporting(
        reference,
        &auth,
        MAX_COMPONENT_BYTES,
        transfer.progress(),
    ))?;
    transfer.finish(
        format_args!("pulled manifest {}", pulled.manifest_digest),
        pulled.bytes.len(),
    );
    write(&a.output, &pulled.bytes, false)?;
    report.step(format_args!(
        "component sha256 {}",
        crate::plugin::sha256_hex(&pulled.bytes)
    ));
    println!("oci://{}", pulled.pinned);
    Ok(())
}

async fn sign_pulled(
    registry: &Registry,
    pulled: &Pulled,
    key: &SigningKey,
    auth: &RegistryAuth,
) -> Result<(), CliError> {
    let payload = cosign::payload(&pulled.repository, &pulled.manifest_digest);
    let signature = key.sign(&payload)?;
    registry
        .push_signature(pulled, &payload, &signature, auth)
        .await?;
    Ok(())
}

/// `sign`: sign an artifact by digest (stored under its signature tag) or
/// a file (`<file>.sig`).
pub fn sign(a: &SignArgs) -> Result<(), CliError> {
    let key = SigningKey::from_pem(&read(&a.key)?)?;
    match oci_reference(&a.target) {
        Some(reference) => {
            let (registry, auth) = a.registry.client(reference)?;
            tokio()?.block_on(async {
                let pulled = registry.pull(reference, &auth, MAX_COMPONENT_BYTES).await?;
                sign_pulled(&registry, &pulled, &key, &auth).await?;
                println!("oci://{}", pulled.pinned);
                Ok(())
            })
        }
        None => {
            let file = PathBuf::from(&a.target);
            let signature = key.sign(&read(&file)?)?;
            let out = sig_path(&file);
            write(&out, format!("{signature}\n").as_bytes(), false)?;
            println!("{}", out.display());
            Ok(())
        }
    }
}

fn sig_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// `verify`: check the signature as the operator's `spec.verification`
/// would; prints which key signed.
pub fn verify(a: &VerifyArgs) -> Result<(), CliError> {
    let mut keys = Vec::new();
    for path in &a.keys {
        let name = path.file_stem().map_or_else(
            || path.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        let pem = String::from_utf8(read(path)?)
            .map_err(|_| CliError::Usage(format!("{}: not UTF-8 PEM", path.display())))?;
        keys.push(TrustedKey::from_pem(&name, &pem)?);
    }
    let (signer, what) = match oci_reference(&a.target) {
        Some(reference) => {
            let (registry, auth) = a.registry.client(reference)?;
            let (pulled, found) = tokio()?.block_on(async {
                let pulled = registry.pull(reference, &auth, MAX_COMPONENT_BYTES).await?;
                let found = registry.signatures(&pulled, &auth).await?;
                Ok::<_, CliError>((pulled, found))
            })?;
            let signer = cosign::verify(&keys, Subject::Manifest(&pulled.manifest_digest), &found)
                .map_err(|(r, m)| CliError::NotVerified(r, m))?;
            (signer, format!("oci://{}", pulled.pinned))
        }
        None => {
            let file = PathBuf::from(&a.target);
            let bytes = read(&file)?;
            let found: Vec<FoundSignature> = match std::fs::read_to_string(sig_path(&file)) {
                Ok(s) => vec![FoundSignature {
                    payload: None,
                    signature: s.trim().to_owned(),
                }],
                Err(_) => Vec::new(),
            };
            let signer = cosign::verify(&keys, Subject::Blob(&bytes), &found)
                .map_err(|(r, m)| CliError::NotVerified(r, m))?;
            (signer, file.display().to_string())
        }
    };
    println!("{what}: signed by key {signer:?}");
    Ok(())
}
