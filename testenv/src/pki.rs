//! Certificates and credentials of one environment (crate `rcgen`).
//!
//! One CA signs: the serving certificate shared by kube-apiserver,
//! kube-controller-manager and kube-scheduler, and the JobSet webhook serving
//! certificate. The service-account key is ECDSA P-256. The admin user
//! authenticates with a bearer token from `--token-auth-file`, in group
//! `system:masters`.

use std::io::Read;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// Files written by [`Pki::create`] (absolute paths).
#[derive(Debug, Clone)]
pub struct Pki {
    /// CA certificate (PEM).
    pub ca_crt: PathBuf,
    /// CA certificate (PEM contents).
    pub ca_pem: String,
    /// Serving certificate for 127.0.0.1 / localhost / kubernetes.default.svc….
    pub serving_crt: PathBuf,
    /// Its key.
    pub serving_key: PathBuf,
    /// Directory with `tls.crt` / `tls.key` for webhook servers (127.0.0.1, localhost).
    pub webhook_cert_dir: PathBuf,
    /// Service-account signing key (PKCS#8 PEM).
    pub sa_key: PathBuf,
    /// Service-account public key (PEM).
    pub sa_pub: PathBuf,
    /// `--token-auth-file` contents' file.
    pub tokens_csv: PathBuf,
    /// The admin bearer token.
    pub admin_token: String,
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn random_hex(bytes: usize) -> Result<String, Error> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::io("reading /dev/urandom", e))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn leaf_params(cn: &str, sans: &[&str]) -> Result<CertificateParams, Error> {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

impl Pki {
    /// Generate everything into `dir` (created if needed).
    pub fn create(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let webhook_cert_dir = dir.join("webhook");
        std::fs::create_dir_all(&webhook_cert_dir)
            .map_err(|e| Error::io(format!("creating {}", webhook_cert_dir.display()), e))?;

        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "trainforge-testenv-ca");
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let ca_pem = ca.pem();

        let serving_key = KeyPair::generate()?;
        let serving = leaf_params(
            "kube-apiserver",
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "10.96.0.1",
            ],
        )?
        .signed_by(&serving_key, &ca)?;

        let webhook_key = KeyPair::generate()?;
        let webhook =
            leaf_params("webhook", &["127.0.0.1", "localhost"])?.signed_by(&webhook_key, &ca)?;

        let sa = KeyPair::generate()?;
        let admin_token = random_hex(24)?;

        let pki = Self {
            ca_crt: dir.join("ca.crt"),
            ca_pem: ca_pem.clone(),
            serving_crt: dir.join("serving.crt"),
            serving_key: dir.join("serving.key"),
            webhook_cert_dir: webhook_cert_dir.clone(),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
            tokens_csv: dir.join("tokens.csv"),
            admin_token,
        };
        write(&pki.ca_crt, &ca_pem)?;
        write(&pki.serving_crt, &serving.pem())?;
        write(&pki.serving_key, &serving_key.serialize_pem())?;
        write(&webhook_cert_dir.join("tls.crt"), &webhook.pem())?;
        write(
            &webhook_cert_dir.join("tls.key"),
            &webhook_key.serialize_pem(),
        )?;
        write(&pki.sa_key, &sa.serialize_pem())?;
        write(&pki.sa_pub, &sa.public_key_pem())?;
        write(
            &pki.tokens_csv,
            &format!(
                "{},testenv-admin,testenv-admin,\"system:masters\"\n",
                pki.admin_token
            ),
        )?;
        Ok(pki)
    }
}

/// Standard base64 with padding (for `caBundle`).
pub fn base64_encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
