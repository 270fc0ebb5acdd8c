//! The admission webhooks' certificates: a self-managed CA and a serving
//! certificate it signs, kept in one Secret and rotated by every replica.
//!
//! Rules of the bundle (pure part: [`generate`], [`renew_serving`],
//! [`renew_all`], [`decide`]):
//! - The CA is ECDSA P-256, valid [`CA_LIFETIME`], with a unique common
//!   name (`trainforge-webhook-ca@<unix seconds>`) so that an old and a new
//!   CA never share a subject. The serving certificate is ECDSA P-256,
//!   valid [`SERVING_LIFETIME`] (never past its CA), for exactly the
//!   configured DNS names and IP addresses, with `serverAuth` usage.
//!   Both start [`CLOCK_SKEW`] before `now`.
//! - [`decide`] returns [`Decision::RenewAll`] when the current CA (the
//!   first certificate of `ca.crt`) or its key does not parse, the key does
//!   not match it, or the CA is past 2/3 of its lifetime; otherwise
//!   [`Decision::RenewServing`] when the serving certificate or key does not
//!   parse or match, is not signed by the current CA, names other DNS
//!   names / IP addresses than configured, or is past 2/3 of its lifetime;
//!   otherwise [`Decision::Keep`].
//! - A serving renewal keeps the CA (and so the webhooks' `caBundle`).
//!   A CA renewal puts the new CA first in `ca.crt` and keeps after it every
//!   earlier CA of `ca.crt` that still parses and has not expired (at most
//!   [`MAX_OLD_CAS`]): the webhooks' `caBundle` trusts both while replicas
//!   switch to the new serving certificate. Expired CAs are dropped at the
//!   next write.
//!
//! Rules of the Secret and the webhook configurations ([`CertRotator`]):
//! - One Secret (default [`DEFAULT_SECRET_NAME`]) in the operator's
//!   namespace holds `tls.crt`, `tls.key`, `ca.crt` (the CA bundle) and
//!   `ca.key` (so that any replica can renew). It is created with type
//!   `kubernetes.io/tls`; an existing Secret keeps its type.
//! - Absent: a replica creates it; on `409 AlreadyExists` (another replica
//!   was first) it re-reads and adopts the winner's. Present: it is
//!   replaced only when [`decide`] says so, with the read `resourceVersion`
//!   as precondition; on `409 Conflict` the replica re-reads and decides
//!   again. So concurrent replicas end with one bundle.
//! - Each check (on start, then every [`CertOptions::check_interval`], or
//!   every [`RETRY_INTERVAL`] while something is not in place) sets the CA
//!   bundle as `caBundle` of every webhook of the named
//!   MutatingWebhookConfigurations and ValidatingWebhookConfigurations,
//!   patching only those that differ (a merge patch carrying the read
//!   `resourceVersion`). A configuration that does not exist yet is
//!   retried later, not an error. The `caBundle` is patched before the
//!   listener switches to a certificate from a new CA.
//! - [`from_dir`] is the other mode: the certificate is managed elsewhere
//!   (cert-manager mounts the Secret); the operator only reads `tls.crt` and
//!   `tls.key` from a directory and reloads them when they change.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::ops::tls::{self, Resolver};

/// Default name of the Secret holding the webhook certificates.
pub const DEFAULT_SECRET_NAME: &str = "trainforge-webhook-cert";
/// Default MutatingWebhookConfiguration whose `caBundle` is managed.
pub const DEFAULT_MUTATING_CONFIGURATION: &str = "defaulter.trainer.kubeflow.org";
/// Default ValidatingWebhookConfiguration whose `caBundle` is managed.
pub const DEFAULT_VALIDATING_CONFIGURATION: &str = "validator.trainer.kubeflow.org";
/// Default time between two checks of the Secret and configurations.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// Time between checks while the Secret could not be written or a
/// configuration is missing or could not be patched.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);
/// Time between two reads of the certificate directory ([`from_dir`]).
pub const DIR_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Validity of a generated CA.
pub const CA_LIFETIME: time::Duration = time::Duration::days(365);
/// Validity of a generated serving certificate.
pub const SERVING_LIFETIME: time::Duration = time::Duration::days(30);
/// How far before `now` generated certificates start to be valid.
pub const CLOCK_SKEW: time::Duration = time::Duration::minutes(5);
/// Most earlier CAs kept in `ca.crt` after a CA renewal.
pub const MAX_OLD_CAS: usize = 2;

/// Secret key of the serving certificate (PEM).
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving private key (PEM, PKCS#8).
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the CA bundle (PEM; the current CA first).
pub const CA_CRT: &str = "ca.crt";
/// Secret key of the current CA's private key (PEM, PKCS#8).
pub const CA_KEY: &str = "ca.key";

/// Conflicting writes tolerated in one pass before giving up until the next.
const MAX_CONFLICTS: usize = 5;

/// Errors of certificate management, named by the failed step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Generating a key or signing a certificate failed.
    #[error("generating the {what}: {source}")]
    Generate {
        /// What was generated.
        what: &'static str,
        /// The cause.
        source: rcgen::Error,
    },
    /// Stored PEM did not parse (or did not match) where it must.
    #[error("parsing the {what}: {reason}")]
    Parse {
        /// What was parsed.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// Reading the Secret failed.
    #[error("reading Secret {namespace}/{name}: {source}")]
    ReadSecret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// Creating or replacing the Secret failed.
    #[error("writing Secret {namespace}/{name}: {source}")]
    WriteSecret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// Other writers kept changing the Secret during one pass.
    #[error("Secret {namespace}/{name} changed under every one of {MAX_CONFLICTS} writes")]
    SecretContended {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Reading a webhook configuration failed.
    #[error("reading {kind} {name}: {source}")]
    ReadConfiguration {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// Patching a webhook configuration's `caBundle` failed.
    #[error("patching the caBundle of {kind} {name}: {source}")]
    PatchConfiguration {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The cause.
        source: kube::Error,
    },
    /// A webhook configuration's webhooks could not be encoded for the patch.
    #[error("encoding the webhooks of {kind} {name}: {reason}")]
    Encode {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Other writers kept changing a webhook configuration during one pass.
    #[error("{kind} {name} changed under every one of {MAX_CONFLICTS} patches")]
    ConfigurationContended {
        /// `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// Reading a certificate file failed.
    #[error("reading {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The certificate and key could not be loaded for serving.
    #[error("loading the serving certificate: {0}")]
    Load(#[from] tls::Error),
    /// Shutdown was asked before a certificate was loaded.
    #[error("shut down before a webhook certificate was loaded")]
    Cancelled,
}

/// The PEM texts of a certificate bundle, as stored in the Secret.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Bundle {
    /// `ca.crt`: the current CA first, then earlier CAs still trusted.
    pub ca_bundle: String,
    /// `ca.key`: the current CA's private key.
    pub ca_key: String,
    /// `tls.crt`: the serving certificate.
    pub cert: String,
    /// `tls.key`: the serving private key.
    pub key: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Private keys never reach logs.
        f.debug_struct("Bundle")
            .field("ca_bundle", &self.ca_bundle)
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

/// What to do with a stored bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It is fine.
    Keep,
    /// Issue a new serving certificate from the current CA (why).
    RenewServing(&'static str),
    /// Issue a new CA and serving certificate (why).
    RenewAll(&'static str),
}

fn generate_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error::Generate { what, source }
}

/// A random positive 16-byte serial number.
fn serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    // Falls back to a time-derived serial if the OS has no randomness.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
        bytes = nanos.to_be_bytes();
    }
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

/// A new CA: (certificate PEM, private key PEM).
pub fn generate_ca(now: OffsetDateTime) -> Result<(String, String), Error> {
    let key = KeyPair::generate().map_err(generate_err("CA key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "trainforge");
    params.distinguished_name.push(
        DnType::CommonName,
        format!("trainforge-webhook-ca@{}", now.unix_timestamp()),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - CLOCK_SKEW;
    params.not_after = now + CA_LIFETIME;
    params.serial_number = Some(serial());
    let cert = params
        .self_signed(&key)
        .map_err(generate_err("CA certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `dns_names` and `ip_addresses` signed by the CA
/// (`ca_pem`, its first certificate, and `ca_key_pem`): (certificate PEM,
/// private key PEM). Valid `lifetime` ([`SERVING_LIFETIME`] by default) but
/// never past the CA.
pub fn issue_serving(
    ca_pem: &str,
    ca_key_pem: &str,
    dns_names: &[String],
    ip_addresses: &[IpAddr],
    now: OffsetDateTime,
    lifetime: time::Duration,
) -> Result<(String, String), Error> {
    let ca_der = first_certificate(ca_pem, "CA certificate")?;
    let ca_not_after = {
        let ca = parse_der(&ca_der, "CA certificate")?;
        OffsetDateTime::from_unix_timestamp(ca.validity().not_after.timestamp()).map_err(|e| {
            Error::Parse {
                what: "CA certificate",
                reason: e.to_string(),
            }
        })?
    };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| Error::Parse {
        what: "CA private key",
        reason: e.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key).map_err(|e| Error::Parse {
        what: "CA certificate",
        reason: e.to_string(),
    })?;
    let key = KeyPair::generate().map_err(generate_err("serving key"))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        dns_names
            .first()
            .cloned()
            .unwrap_or_else(|| "trainforge-webhook".to_owned()),
    );
    let mut sans = Vec::with_capacity(dns_names.len() + ip_addresses.len());
    for name in dns_names {
        let name = name
            .clone()
            .try_into()
            .map_err(generate_err("serving DNS name"))?;
        sans.push(SanType::DnsName(name));
    }
    sans.extend(ip_addresses.iter().map(|ip| SanType::IpAddress(*ip)));
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    // Back-dated for clocks behind ours, by at most a quarter of the
    // lifetime (short test lifetimes stay mostly ahead).
    params.not_before = now - CLOCK_SKEW.min(lifetime / 4);
    params.not_after = (now + lifetime).min(ca_not_after);
    params.serial_number = Some(serial());
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate_err("serving certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A fresh bundle: a new CA and a serving certificate it signs.
pub fn generate(
    dns_names: &[String],
    ip_addresses: &[IpAddr],
    now: OffsetDateTime,
    serving_lifetime: time::Duration,
) -> Result<Bundle, Error> {
    renew_all(None, dns_names, ip_addresses, now, serving_lifetime)
}

/// `old` with a new serving certificate from its current CA.
pub fn renew_serving(
    old: &Bundle,
    dns_names: &[String],
    ip_addresses: &[IpAddr],
    now: OffsetDateTime,
    serving_lifetime: time::Duration,
) -> Result<Bundle, Error> {
    let (cert, key) = issue_serving(
        &old.ca_bundle,
        &old.ca_key,
        dns_names,
        ip_addresses,
        now,
        serving_lifetime,
    )?;
    Ok(Bundle {
        ca_bundle: prune_ca_bundle(&old.ca_bundle, now, usize::MAX),
        ca_key: old.ca_key.clone(),
        cert,
        key,
    })
}

/// A new CA and serving certificate; `ca.crt` also keeps the CAs of `old`
/// that parse and have not expired (at most [`MAX_OLD_CAS`], newest first).
pub fn renew_all(
    old: Option<&Bundle>,
    dns_names: &[String],
    ip_addresses: &[IpAddr],
    now: OffsetDateTime,
    serving_lifetime: time::Duration,
) -> Result<Bundle, Error> {
    let (ca, ca_key) = generate_ca(now)?;
    let (cert, key) = issue_serving(&ca, &ca_key, dns_names, ip_addresses, now, serving_lifetime)?;
    let mut ca_bundle = ca;
    if let Some(old) = old {
        ca_bundle.push_str(&prune_ca_bundle(&old.ca_bundle, now, MAX_OLD_CAS));
    }
    Ok(Bundle {
        ca_bundle,
        ca_key,
        cert,
        key,
    })
}

/// The certificates of `pem` that parse and have not expired at `now`, at
/// most `max`, re-encoded as PEM in their order.
fn prune_ca_bundle(pem: &str, now: OffsetDateTime, max: usize) -> String {
    let now = now.unix_timestamp();
    let mut out = String::new();
    let mut kept = 0;
    for der in CertificateDer::pem_slice_iter(pem.as_bytes()).map_while(Result::ok) {
        if kept >= max {
            break;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
            continue;
        };
        if cert.validity().not_after.timestamp() <= now {
            continue;
        }
        out.push_str(&to_pem(&der));
        kept += 1;
    }
    out
}

fn to_pem(der: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut b64 = String::new();
    let _ = write!(b64, "{}", Base64(der));
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Standard base64 with padding.
struct Base64<'a>(&'a [u8]);

impl std::fmt::Display for Base64<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for chunk in self.0.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let idx = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
            f.write_fmt(format_args!("{}{}", idx(18), idx(12)))?;
            f.write_fmt(format_args!(
                "{}{}",
                if chunk.len() > 1 { idx(6) } else { '=' },
                if chunk.len() > 2 { idx(0) } else { '=' }
            ))?;
        }
        Ok(())
    }
}

fn first_certificate(pem: &str, what: &'static str) -> Result<CertificateDer<'static>, Error> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| Error::Parse {
            what,
            reason: "no CERTIFICATE block".into(),
        })?
        .map_err(|e| Error::Parse {
            what,
            reason: e.to_string(),
        })
}

fn parse_der<'a>(der: &'a [u8], what: &'static str) -> Result<X509Certificate<'a>, Error> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| Error::Parse {
            what,
            reason: e.to_string(),
        })
}

/// Whether `key_pem` is the private key of `cert`.
fn key_matches(cert: &X509Certificate<'_>, key_pem: &str) -> bool {
    KeyPair::from_pem(key_pem)
        .is_ok_and(|key| key.subject_public_key_info() == cert.public_key().raw)
}

/// Whether at least 2/3 of `cert`'s lifetime has passed at `now` (or it is
/// not valid yet, or its validity is empty).
fn past_two_thirds(cert: &X509Certificate<'_>, now: i64) -> bool {
    let from = cert.validity().not_before.timestamp();
    let to = cert.validity().not_after.timestamp();
    if to <= from || now < from {
        return true;
    }
    let lifetime = i128::from(to) - i128::from(from);
    (i128::from(now) - i128::from(from)) * 3 >= lifetime * 2
}

/// The DNS names (lower-cased, sorted) and IP addresses (sorted) of `cert`.
fn sans_of(cert: &X509Certificate<'_>) -> Option<(Vec<String>, Vec<IpAddr>)> {
    let ext = cert.subject_alternative_name().ok()??;
    let mut names = Vec::new();
    let mut ips = Vec::new();
    for name in &ext.value.general_names {
        match name {
            GeneralName::DNSName(n) => names.push(n.to_ascii_lowercase()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*bytes).ok()?)),
                16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*bytes).ok()?)),
                _ => return None,
            },
            _ => {}
        }
    }
    names.sort();
    names.dedup();
    ips.sort();
    ips.dedup();
    Some((names, ips))
}

/// The rotation policy (see the module rules).
pub fn decide(
    bundle: &Bundle,
    dns_names: &[String],
    ip_addresses: &[IpAddr],
    now: OffsetDateTime,
) -> Decision {
    let now = now.unix_timestamp();
    let Ok(ca_der) = first_certificate(&bundle.ca_bundle, "CA certificate") else {
        return Decision::RenewAll("the CA certificate does not parse");
    };
    let Ok(ca) = parse_der(&ca_der, "CA certificate") else {
        return Decision::RenewAll("the CA certificate does not parse");
    };
    if !key_matches(&ca, &bundle.ca_key) {
        return Decision::RenewAll("the CA key does not parse or match the CA");
    }
    if past_two_thirds(&ca, now) {
        return Decision::RenewAll("the CA is past 2/3 of its lifetime");
    }
    let Ok(cert_der) = first_certificate(&bundle.cert, "serving certificate") else {
        return Decision::RenewServing("the serving certificate does not parse");
    };
    let Ok(cert) = parse_der(&cert_der, "serving certificate") else {
        return Decision::RenewServing("the serving certificate does not parse");
    };
    if !key_matches(&cert, &bundle.key) {
        return Decision::RenewServing("the serving key does not parse or match the certificate");
    }
    if cert.verify_signature(Some(ca.public_key())).is_err() {
        return Decision::RenewServing("the serving certificate is not signed by the current CA");
    }
    let mut want_names: Vec<String> = dns_names.iter().map(|n| n.to_ascii_lowercase()).collect();
    want_names.sort();
    want_names.dedup();
    let mut want_ips = ip_addresses.to_vec();
    want_ips.sort();
    want_ips.dedup();
    if sans_of(&cert) != Some((want_names, want_ips)) {
        return Decision::RenewServing("the serving certificate names other hosts");
    }
    if past_two_thirds(&cert, now) {
        return Decision::RenewServing("the serving certificate is past 2/3 of its lifetime");
    }
    Decision::Keep
}

/// The bundle stored in `secret` (missing keys are empty).
pub fn bundle_of(secret: &Secret) -> Bundle {
    let get = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    Bundle {
        ca_bundle: get(CA_CRT),
        ca_key: get(CA_KEY),
        cert: get(TLS_CRT),
        key: get(TLS_KEY),
    }
}

fn secret_data(bundle: &Bundle) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (
            TLS_CRT.to_owned(),
            ByteString(bundle.cert.clone().into_bytes()),
        ),
        (
            TLS_KEY.to_owned(),
            ByteString(bundle.key.clone().into_bytes()),
        ),
        (
            CA_CRT.to_owned(),
            ByteString(bundle.ca_bundle.clone().into_bytes()),
        ),
        (
            CA_KEY.to_owned(),
            ByteString(bundle.ca_key.clone().into_bytes()),
        ),
    ])
}

/// How the operator manages webhook certificates.
#[derive(Debug, Clone)]
pub struct CertOptions {
    /// Namespace of the Secret (the operator's).
    pub secret_namespace: String,
    /// Name of the Secret.
    pub secret_name: String,
    /// DNS names of the serving certificate.
    pub dns_names: Vec<String>,
    /// IP addresses of the serving certificate.
    pub ip_addresses: Vec<IpAddr>,
    /// MutatingWebhookConfigurations whose `caBundle` is managed.
    pub mutating_configurations: Vec<String>,
    /// ValidatingWebhookConfigurations whose `caBundle` is managed.
    pub validating_configurations: Vec<String>,
    /// Time between two checks.
    pub check_interval: Duration,
    /// Lifetime of a serving certificate (renewed past 2/3 of it).
    pub serving_lifetime: time::Duration,
}

impl CertOptions {
    /// The defaults for the webhook Service `service` in `namespace`: the
    /// DNS names `<service>.<namespace>.svc` and
    /// `<service>.<namespace>.svc.cluster.local`, the default Secret and
    /// configuration names and check interval.
    pub fn for_service(namespace: &str, service: &str) -> Self {
        Self {
            secret_namespace: namespace.to_owned(),
            secret_name: DEFAULT_SECRET_NAME.to_owned(),
            dns_names: vec![
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ],
            ip_addresses: Vec::new(),
            mutating_configurations: vec![DEFAULT_MUTATING_CONFIGURATION.to_owned()],
            validating_configurations: vec![DEFAULT_VALIDATING_CONFIGURATION.to_owned()],
            check_interval: DEFAULT_CHECK_INTERVAL,
            serving_lifetime: SERVING_LIFETIME,
        }
    }
}

/// Make the Secret hold a bundle [`decide`] keeps at `now`, creating or
/// renewing it as needed (see the module rules on concurrency); the bundle
/// it holds afterwards.
pub async fn ensure_secret(
    client: &Client,
    opts: &CertOptions,
    now: OffsetDateTime,
) -> Result<Bundle, Error> {
    let ns = &opts.secret_namespace;
    let name = &opts.secret_name;
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let read_err = |source| Error::ReadSecret {
        namespace: ns.clone(),
        name: name.clone(),
        source,
    };
    let write_err = |source| Error::WriteSecret {
        namespace: ns.clone(),
        name: name.clone(),
        source,
    };
    for _ in 0..MAX_CONFLICTS {
        let Some(mut secret) = api.get_opt(name).await.map_err(read_err)? else {
            let bundle = generate(
                &opts.dns_names,
                &opts.ip_addresses,
                now,
                opts.serving_lifetime,
            )?;
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "trainforge".to_owned(),
                    )])),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(secret_data(&bundle)),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %name, namespace = %ns, "created the webhook certificate Secret with a new CA");
                    return Ok(bundle);
                }
                Err(e) if is_conflict(&e) => {
                    tracing::debug!(secret = %name, "another replica created the webhook Secret first; adopting it");
                    continue;
                }
                Err(e) => return Err(write_err(e)),
            }
        };
        let stored = bundle_of(&secret);
        let renewed = match decide(&stored, &opts.dns_names, &opts.ip_addresses, now) {
            Decision::Keep => return Ok(stored),
            Decision::RenewServing(why) => {
                tracing::info!(secret = %name, reason = why, "renewing the webhook serving certificate");
                renew_serving(
                    &stored,
                    &opts.dns_names,
                    &opts.ip_addresses,
                    now,
                    opts.serving_lifetime,
                )?
            }
            Decision::RenewAll(why) => {
                tracing::info!(secret = %name, reason = why, "renewing the webhook CA and serving certificate");
                renew_all(
                    Some(&stored),
                    &opts.dns_names,
                    &opts.ip_addresses,
                    now,
                    opts.serving_lifetime,
                )?
            }
        };
        // Replace carries the read resourceVersion: a concurrent write → 409.
        secret
            .data
            .get_or_insert_with(BTreeMap::new)
            .extend(secret_data(&renewed));
        match api.replace(name, &PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(secret = %name, namespace = %ns, "wrote the renewed webhook certificates");
                return Ok(renewed);
            }
            Err(e) if is_conflict(&e) => {
                tracing::debug!(secret = %name, "the webhook Secret changed meanwhile; deciding again");
            }
            Err(e) => return Err(write_err(e)),
        }
    }
    Err(Error::SecretContended {
        namespace: ns.clone(),
        name: name.clone(),
    })
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// What [`sync_ca_bundles`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Configurations patched (`Kind/name`).
    pub patched: Vec<String>,
    /// Configurations already holding the CA bundle.
    pub unchanged: Vec<String>,
    /// Configurations that do not exist (yet).
    pub missing: Vec<String>,
}

/// A webhook configuration kind whose webhooks carry a `caBundle`.
trait WebhookConfiguration:
    kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
    const KIND: &'static str;
    /// Set `ca` on every webhook; whether anything changed; the webhooks as
    /// JSON.
    fn set_ca_bundle(&mut self, ca: &[u8]) -> (bool, serde_json::Result<serde_json::Value>);
}

macro_rules! webhook_configuration {
    ($ty:ty, $kind:literal) => {
        impl WebhookConfiguration for $ty {
            const KIND: &'static str = $kind;
            fn set_ca_bundle(
                &mut self,
                ca: &[u8],
            ) -> (bool, serde_json::Result<serde_json::Value>) {
                let mut changed = false;
                for webhook in self.webhooks.iter_mut().flatten() {
                    let current = webhook.client_config.ca_bundle.as_ref().map(|b| &b.0[..]);
                    if current != Some(ca) {
                        webhook.client_config.ca_bundle = Some(ByteString(ca.to_vec()));
                        changed = true;
                    }
                }
                (changed, serde_json::to_value(&self.webhooks))
            }
        }
    };
}

webhook_configuration!(MutatingWebhookConfiguration, "MutatingWebhookConfiguration");
webhook_configuration!(
    ValidatingWebhookConfiguration,
    "ValidatingWebhookConfiguration"
);

/// Set `ca_bundle` (PEM) as `caBundle` of every webhook of the configured
/// configurations, patching only those that differ.
pub async fn sync_ca_bundles(
    client: &Client,
    opts: &CertOptions,
    ca_bundle: &str,
) -> Result<SyncReport, Error> {
    let mut report = SyncReport::default();
    for name in &opts.mutating_configurations {
        sync_one::<MutatingWebhookConfiguration>(client, name, ca_bundle, &mut report).await?;
    }
    for name in &opts.validating_configurations {
        sync_one::<ValidatingWebhookConfiguration>(client, name, ca_bundle, &mut report).await?;
    }
    Ok(report)
}

async fn sync_one<K: WebhookConfiguration>(
    client: &Client,
    name: &str,
    ca_bundle: &str,
    report: &mut SyncReport,
) -> Result<(), Error> {
    let api: Api<K> = Api::all(client.clone());
    let label = format!("{}/{name}", K::KIND);
    for _ in 0..MAX_CONFLICTS {
        let Some(mut config) =
            api.get_opt(name)
                .await
                .map_err(|source| Error::ReadConfiguration {
                    kind: K::KIND,
                    name: name.to_owned(),
                    source,
                })?
        else {
            tracing::debug!(configuration = %label, "webhook configuration not found; retried later");
            report.missing.push(label);
            return Ok(());
        };
        let rv = config.meta().resource_version.clone();
        let (changed, webhooks) = config.set_ca_bundle(ca_bundle.as_bytes());
        if !changed {
            report.unchanged.push(label);
            return Ok(());
        }
        let webhooks = webhooks.map_err(|e| Error::Encode {
            kind: K::KIND,
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        // The whole list with the read resourceVersion: a concurrent edit → 409.
        let patch = json!({"metadata": {"resourceVersion": rv}, "webhooks": webhooks});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(configuration = %label, "patched the webhooks' caBundle");
                report.patched.push(label);
                return Ok(());
            }
            Err(e) if is_conflict(&e) => {
                tracing::debug!(configuration = %label, "configuration changed meanwhile; retrying");
            }
            Err(source) => {
                return Err(Error::PatchConfiguration {
                    kind: K::KIND,
                    name: name.to_owned(),
                    source,
                });
            }
        }
    }
    Err(Error::ConfigurationContended {
        kind: K::KIND,
        name: name.to_owned(),
    })
}

/// Keeps the webhook certificate Secret and the configurations' `caBundle`
/// current (see the module rules).
#[derive(Debug)]
pub struct CertRotator;

impl CertRotator {
    /// Ensure the Secret, patch the configurations and load the certificate;
    /// return once a certificate is loaded (retrying failures every
    /// [`RETRY_INTERVAL`]), then keep checking in the background until
    /// `shutdown`. `Err` only when shut down first or the loaded PEM is
    /// unusable.
    pub async fn start(
        client: Client,
        opts: CertOptions,
        shutdown: CancellationToken,
    ) -> Result<Arc<Resolver>, Error> {
        let span = tracing::info_span!("webhook_certs", secret = %opts.secret_name);
        let bundle = loop {
            match ensure_secret(&client, &opts, OffsetDateTime::now_utc()).await {
                Ok(b) => break b,
                Err(e) => {
                    span.in_scope(
                        || tracing::warn!(error = %e, "webhook certificate not ready; retrying"),
                    );
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return Err(Error::Cancelled),
                () = tokio::time::sleep(RETRY_INTERVAL) => {}
            }
        };
        let mut healthy = sync(&client, &opts, &bundle.ca_bundle, &span).await;
        let resolver = Arc::new(Resolver::from_pem(
            bundle.cert.as_bytes(),
            bundle.key.as_bytes(),
        )?);
        resolver.set_ca_bundle(Some(bundle.ca_bundle.clone()));
        let task_resolver = resolver.clone();
        tokio::spawn(async move {
            let mut loaded = bundle;
            loop {
                let wait = if healthy {
                    opts.check_interval
                } else {
                    RETRY_INTERVAL.min(opts.check_interval)
                };
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
                let bundle = match ensure_secret(&client, &opts, OffsetDateTime::now_utc()).await {
                    Ok(b) => b,
                    Err(e) => {
                        span.in_scope(
                            || tracing::warn!(error = %e, "checking the webhook certificate"),
                        );
                        healthy = false;
                        continue;
                    }
                };
                // caBundle first, so that a new CA is trusted before it is served.
                healthy = sync(&client, &opts, &bundle.ca_bundle, &span).await;
                task_resolver.set_ca_bundle(Some(bundle.ca_bundle.clone()));
                if bundle.cert != loaded.cert || bundle.key != loaded.key {
                    match task_resolver.update(bundle.cert.as_bytes(), bundle.key.as_bytes()) {
                        Ok(()) => {
                            span.in_scope(|| {
                                tracing::info!("serving the renewed webhook certificate")
                            });
                            loaded = bundle;
                        }
                        Err(e) => {
                            span.in_scope(|| tracing::warn!(error = %e, "loading the renewed webhook certificate"));
                            healthy = false;
                        }
                    }
                }
            }
        });
        Ok(resolver)
    }
}

/// [`sync_ca_bundles`], logged; whether every configuration holds the bundle.
async fn sync(client: &Client, opts: &CertOptions, ca: &str, span: &tracing::Span) -> bool {
    match sync_ca_bundles(client, opts, ca).await {
        Ok(report) => report.missing.is_empty(),
        Err(e) => {
            span.in_scope(|| tracing::warn!(error = %e, "setting the webhooks' caBundle"));
            false
        }
    }
}

/// Read `tls.crt` and `tls.key` from `dir` (certificates managed outside
/// the operator, e.g. a mounted cert-manager Secret) and reload them when
/// their content changes (read every [`DIR_POLL_INTERVAL`] until
/// `shutdown`). A pair that does not load (e.g. read mid-update) keeps the
/// current certificate and is read again at the next poll.
pub async fn from_dir(dir: &Path, shutdown: CancellationToken) -> Result<Arc<Resolver>, Error> {
    from_dir_every(dir, DIR_POLL_INTERVAL, shutdown).await
}

/// [`from_dir`] with another poll interval.
pub async fn from_dir_every(
    dir: &Path,
    poll: Duration,
    shutdown: CancellationToken,
) -> Result<Arc<Resolver>, Error> {
    let dir = dir.to_path_buf();
    let mut loaded = read_pair(&dir).await?;
    let resolver = Arc::new(Resolver::from_pem(&loaded.0, &loaded.1)?);
    resolver.set_ca_bundle(read_ca(&dir).await);
    tracing::info!(dir = %dir.display(), "serving the webhook certificate from files");
    let task_resolver = resolver.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
            }
            task_resolver.set_ca_bundle(read_ca(&dir).await);
            let pair = match read_pair(&dir).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the webhook certificate files");
                    continue;
                }
            };
            if pair == loaded {
                continue;
            }
            match task_resolver.update(&pair.0, &pair.1) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "serving the changed webhook certificate");
                    loaded = pair;
                }
                Err(e) => tracing::warn!(error = %e, "loading the changed webhook certificate"),
            }
        }
    });
    Ok(resolver)
}

/// `ca.crt` of `dir` (a cert-manager Secret has one), if readable.
async fn read_ca(dir: &Path) -> Option<String> {
    tokio::fs::read_to_string(dir.join(CA_CRT))
        .await
        .ok()
        .filter(|pem| !pem.trim().is_empty())
}

async fn read_pair(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let read = |file: &str| {
        let path = dir.join(file);
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| Error::ReadFile { path, source })
        }
    };
    Ok((read(TLS_CRT).await?, read(TLS_KEY).await?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn sans() -> (Vec<String>, Vec<IpAddr>) {
        (
            vec![
                "trainforge-webhook-service.trainforge-system.svc".to_owned(),
                "trainforge-webhook-service.trainforge-system.svc.cluster.local".to_owned(),
            ],
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )
    }

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn certs_in(pem: &str) -> usize {
        CertificateDer::pem_slice_iter(pem.as_bytes()).count()
    }

    #[test]
    fn fresh_bundle_is_kept() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        assert_eq!(decide(&b, &dns, &ips, t0()), Decision::Keep);
        assert_eq!(
            decide(&b, &dns, &ips, t0() + time::Duration::days(19)),
            Decision::Keep
        );
        assert_eq!(certs_in(&b.ca_bundle), 1);
        // order and case of names do not matter
        let mut shuffled: Vec<String> = dns.iter().rev().map(|n| n.to_uppercase()).collect();
        shuffled.push(dns[0].clone());
        assert_eq!(decide(&b, &shuffled, &ips, t0()), Decision::Keep);
    }

    #[test]
    fn serving_past_two_thirds_is_renewed_with_the_same_ca() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let later = t0() + time::Duration::days(21);
        assert!(matches!(
            decide(&b, &dns, &ips, later),
            Decision::RenewServing(_)
        ));
        let r = renew_serving(&b, &dns, &ips, later, SERVING_LIFETIME).unwrap();
        assert_eq!(r.ca_bundle, b.ca_bundle, "the CA (and caBundle) is kept");
        assert_eq!(r.ca_key, b.ca_key);
        assert_ne!(r.cert, b.cert);
        assert_eq!(decide(&r, &dns, &ips, later), Decision::Keep);
    }

    #[test]
    fn other_sans_renew_the_serving_certificate() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let fewer = &dns[..1];
        assert!(matches!(
            decide(&b, fewer, &ips, t0()),
            Decision::RenewServing(_)
        ));
        assert!(matches!(
            decide(&b, &dns, &[], t0()),
            Decision::RenewServing(_)
        ));
        let r = renew_serving(&b, fewer, &[], t0(), SERVING_LIFETIME).unwrap();
        assert_eq!(decide(&r, fewer, &[], t0()), Decision::Keep);
    }

    #[test]
    fn a_foreign_or_broken_serving_certificate_is_renewed() {
        let (dns, ips) = sans();
        let a = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let foreign = Bundle {
            cert: b.cert.clone(),
            key: b.key.clone(),
            ..a.clone()
        };
        assert_eq!(
            decide(&foreign, &dns, &ips, t0()),
            Decision::RenewServing("the serving certificate is not signed by the current CA")
        );
        let wrong_key = Bundle {
            key: b.key.clone(),
            ..a.clone()
        };
        assert!(matches!(
            decide(&wrong_key, &dns, &ips, t0()),
            Decision::RenewServing(_)
        ));
        let garbage = Bundle {
            cert: "garbage".into(),
            ..a.clone()
        };
        assert!(matches!(
            decide(&garbage, &dns, &ips, t0()),
            Decision::RenewServing(_)
        ));
    }

    #[test]
    fn ca_near_expiry_renews_all_and_keeps_the_old_ca_trusted() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let later = t0() + time::Duration::days(250);
        assert_eq!(
            decide(&b, &dns, &ips, later),
            Decision::RenewAll("the CA is past 2/3 of its lifetime")
        );
        let r = renew_all(Some(&b), &dns, &ips, later, SERVING_LIFETIME).unwrap();
        assert_eq!(certs_in(&r.ca_bundle), 2, "new CA + old CA");
        assert!(r.ca_bundle.ends_with(&b.ca_bundle), "old CA after the new");
        assert_ne!(r.ca_key, b.ca_key);
        assert_eq!(decide(&r, &dns, &ips, later), Decision::Keep);
        // The serving certificate is issued by the new CA (first in the bundle).
        let only_new = Bundle {
            ca_bundle: r.ca_bundle.replace(&b.ca_bundle, ""),
            ..r.clone()
        };
        assert_eq!(decide(&only_new, &dns, &ips, later), Decision::Keep);

        // Once the old CA has expired, the next write drops it.
        let much_later = t0() + time::Duration::days(400);
        let rr = renew_serving(&r, &dns, &ips, much_later, SERVING_LIFETIME).unwrap();
        assert_eq!(certs_in(&rr.ca_bundle), 1);
    }

    #[test]
    fn serving_never_outlives_its_ca() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let late = t0() + time::Duration::days(360);
        let r = renew_serving(&b, &dns, &ips, late, SERVING_LIFETIME).unwrap();
        let der = first_certificate(&r.cert, "x").unwrap();
        let cert = parse_der(&der, "x").unwrap();
        let ca_der = first_certificate(&b.ca_bundle, "x").unwrap();
        let ca = parse_der(&ca_der, "x").unwrap();
        assert_eq!(
            cert.validity().not_after.timestamp(),
            ca.validity().not_after.timestamp()
        );
    }

    #[test]
    fn garbage_renews_all() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        for broken in [
            Bundle::default(),
            Bundle {
                ca_bundle: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
                ..b.clone()
            },
            Bundle {
                ca_key: "nope".into(),
                ..b.clone()
            },
            Bundle {
                ca_key: b.key.clone(),
                ..b.clone()
            },
        ] {
            assert!(
                matches!(decide(&broken, &dns, &ips, t0()), Decision::RenewAll(_)),
                "{broken:?}"
            );
            let r = renew_all(Some(&broken), &dns, &ips, t0(), SERVING_LIFETIME).unwrap();
            assert_eq!(decide(&r, &dns, &ips, t0()), Decision::Keep);
        }
    }

    #[test]
    fn pem_round_trip() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        assert_eq!(prune_ca_bundle(&b.ca_bundle, t0(), usize::MAX), b.ca_bundle);
        for n in 0..7usize {
            let data: Vec<u8> = (0..n as u8).collect();
            let pem = to_pem(&data);
            let back: Vec<u8> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .next()
                .unwrap()
                .unwrap()
                .to_vec();
            assert_eq!(back, data);
        }
    }

    #[test]
    fn debug_hides_private_keys() {
        let (dns, ips) = sans();
        let b = generate(&dns, &ips, t0(), SERVING_LIFETIME).unwrap();
        let shown = format!("{b:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    }

    #[tokio::test]
    async fn from_dir_reloads_changed_files() {
        let (dns, ips) = sans();
        let now = OffsetDateTime::now_utc();
        let dir = tempfile::tempdir().unwrap();
        let a = generate(&dns, &ips, now, SERVING_LIFETIME).unwrap();
        std::fs::write(dir.path().join(TLS_CRT), &a.cert).unwrap();
        std::fs::write(dir.path().join(TLS_KEY), &a.key).unwrap();
        let shutdown = CancellationToken::new();
        let resolver = from_dir_every(dir.path(), Duration::from_millis(50), shutdown.clone())
            .await
            .unwrap();
        let first = resolver.leaf_der().unwrap();

        // A half-written pair (new cert, old key) keeps the current one.
        let b = renew_serving(&a, &dns, &ips, now, SERVING_LIFETIME).unwrap();
        std::fs::write(dir.path().join(TLS_CRT), &b.cert).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(resolver.leaf_der().unwrap(), first);
        std::fs::write(dir.path().join(TLS_KEY), &b.key).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while resolver.leaf_der().unwrap() == first {
            assert!(tokio::time::Instant::now() < deadline, "not reloaded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();

        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            from_dir(empty.path(), CancellationToken::new()).await,
            Err(Error::ReadFile { .. })
        ));
    }
}
