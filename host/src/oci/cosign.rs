//! Key-based signatures in cosign's format, without I/O: what `cosign sign
//! --key` / `cosign verify --key` and `cosign sign-blob` / `verify-blob`
//! exchange, so that either tool can sign what the other verifies.
//!
//! - An OCI artifact's signature is a "simple signing" JSON payload naming
//!   the manifest digest, signed with ECDSA P-256 / SHA-256 (ASN.1 DER,
//!   base64); it is stored as a layer of the `sha256-<hex>.sig` tag with
//!   the signature in the [`SIGNATURE_ANNOTATION`] annotation.
//! - A blob's signature (a component outside a registry) is the same
//!   signature over the component's bytes, base64.
//!
//! Keys: PEM `PUBLIC KEY` (PKIX) to verify, unencrypted PKCS#8 `PRIVATE
//! KEY` to sign; ECDSA P-256, cosign's default. The cryptography is ring's;
//! only the payload and key framing are ours.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, UnparsedPublicKey,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};
use serde_json::{Value, json};
use trainforge_api::trainforge::v1alpha1::reason;
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

/// Annotation of a signature layer holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Media type of a signature layer (the simple signing payload).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The payload's `critical.type`.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";
/// Largest payload read from a registry (cosign's are a few hundred bytes).
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;
/// Signatures checked at most per artifact.
pub const MAX_SIGNATURES: usize = 16;

// DER of the ecPublicKey / prime256v1 algorithm identifier's two OIDs.
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_PRIME256V1: &str = "1.2.840.10045.3.1.7";

/// Why a key or signature cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CosignError {
    /// A public key is not a PEM ECDSA P-256 PKIX key.
    #[error("public key {name:?}: {message}")]
    PublicKey {
        /// The key's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The private key is not an unencrypted PKCS#8 ECDSA P-256 key.
    #[error("private key: {0}")]
    PrivateKey(String),
    /// Signing failed.
    #[error("signing: {0}")]
    Sign(String),
    /// A digest is not `sha256:<hex>`.
    #[error("{0:?} is not a sha256 digest")]
    Digest(String),
}

/// The tag cosign stores an artifact's signatures under.
pub fn signature_tag(manifest_digest: &str) -> Result<String, CosignError> {
    if !super::artifact::is_sha256_digest(manifest_digest) {
        return Err(CosignError::Digest(manifest_digest.to_owned()));
    }
    Ok(format!("{}.sig", manifest_digest.replacen(':', "-", 1)))
}

/// The simple signing payload for the artifact `repository` (registry and
/// path) at `manifest_digest`.
pub fn payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    let v = json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    });
    v.to_string().into_bytes()
}

/// The manifest digest a payload signs, if it is a cosign payload.
fn payload_digest(payload: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    let critical = v.get("critical")?;
    if critical.get("type")?.as_str()? != PAYLOAD_TYPE {
        return None;
    }
    Some(
        critical
            .pointer("/image/docker-manifest-digest")?
            .as_str()?
            .to_owned(),
    )
}

/// A private key that signs.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl SigningKey {
    /// Read an unencrypted PKCS#8 `PRIVATE KEY` PEM (ECDSA P-256).
    pub fn from_pem(pem: &[u8]) -> Result<Self, CosignError> {
        if pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED") {
            return Err(CosignError::PrivateKey(
                "encrypted keys (cosign's own format) are not read; use an unencrypted PKCS#8 ECDSA P-256 key (`trainforge plugin keygen`, or `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`) and `cosign import-key-pair` it for cosign".to_owned(),
            ));
        }
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem).map_err(|e| {
            CosignError::PrivateKey(format!(
                "no PKCS#8 `PRIVATE KEY` PEM block ({e}); convert a SEC1 key with `openssl pkcs8 -topk8 -nocrypt`"
            ))
        })?;
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            der.secret_pkcs8_der(),
            &rng,
        )
        .map_err(|e| CosignError::PrivateKey(format!("not an ECDSA P-256 key: {e}")))?;
        Ok(SigningKey { pair, rng })
    }

    /// The base64 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Result<String, CosignError> {
        let sig = self
            .pair
            .sign(&self.rng, message)
            .map_err(|e| CosignError::Sign(e.to_string()))?;
        Ok(B64.encode(sig.as_ref()))
    }

    /// The public key as a trusted key named `name` (to check a signature
    /// just made).
    pub fn public(&self, name: &str) -> TrustedKey {
        use ring::signature::KeyPair;
        TrustedKey {
            name: name.to_owned(),
            point: self.pair.public_key().as_ref().to_vec(),
        }
    }
}

/// A new ECDSA P-256 key pair: `(private PKCS#8 PEM, public PKIX PEM)`.
pub fn generate() -> Result<(String, String), CosignError> {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CosignError::Sign(format!("generating a key: {e}")))?;
    Ok((pair.serialize_pem(), pair.public_key_pem()))
}

/// A public key signatures are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// Its name (reported as the signer).
    pub name: String,
    point: Vec<u8>,
}

impl TrustedKey {
    /// Read a PEM `PUBLIC KEY` (PKIX, ECDSA P-256) called `name`.
    pub fn from_pem(name: &str, pem: &str) -> Result<Self, CosignError> {
        let bad = |message: String| CosignError::PublicKey {
            name: name.to_owned(),
            message,
        };
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| bad(format!("no `PUBLIC KEY` PEM block: {e}")))?;
        let (_, spki) = SubjectPublicKeyInfo::from_der(der.as_ref())
            .map_err(|e| bad(format!("not a PKIX public key: {e}")))?;
        let alg = spki.algorithm.algorithm.to_id_string();
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .map(|o| o.to_id_string());
        if alg != OID_EC_PUBLIC_KEY || curve.as_deref() != Some(OID_PRIME256V1) {
            return Err(bad(format!(
                "algorithm {alg} (curve {}): only ECDSA P-256 keys (cosign's default) are supported",
                curve.as_deref().unwrap_or("none")
            )));
        }
        Ok(TrustedKey {
            name: name.to_owned(),
            point: spki.subject_public_key.data.to_vec(),
        })
    }

    /// Whether `other` is the same key (whatever either is called).
    pub fn same_key(&self, other: &TrustedKey) -> bool {
        self.point == other.point
    }

    /// Whether `signature_b64` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(message, signature)
            .is_ok()
    }
}

/// One signature found next to an artifact: for an OCI artifact the
/// payload it signs, for a blob the blob itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSignature {
    /// The simple signing payload (`None`: a blob signature).
    pub payload: Option<Vec<u8>>,
    /// The base64 signature as found.
    pub signature: String,
}

/// What a signature must cover.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// An OCI artifact by manifest digest.
    Manifest(&'a str),
    /// A component's bytes.
    Blob(&'a [u8]),
}

/// A failed verification: the `Verified=False` reason and message.
pub type Refusal = (&'static str, String);

/// The name of the first key in `keys` that signed `subject` in one of
/// `found`; otherwise why not: no signature (`SignatureMissing`), only
/// malformed ones or ones for another artifact (`SignatureInvalid`), or
/// well-formed ones no key verifies (`UntrustedSignature`).
pub fn verify(
    keys: &[TrustedKey],
    subject: Subject<'_>,
    found: &[FoundSignature],
) -> Result<String, Refusal> {
    if found.is_empty() {
        let m = match subject {
            Subject::Manifest(d) => format!(
                "no signature found for {d} (tag {})",
                signature_tag(d).unwrap_or_default()
            ),
            Subject::Blob(_) => "no signature found next to the component".to_owned(),
        };
        return Err((reason::SIGNATURE_MISSING, m));
    }
    let mut invalid = Vec::new();
    let mut well_formed = 0usize;
    for (i, f) in found.iter().take(MAX_SIGNATURES).enumerate() {
        let Ok(sig) = B64.decode(f.signature.trim()) else {
            invalid.push(format!("signature {i} is not base64"));
            continue;
        };
        let message: &[u8] = match (subject, &f.payload) {
            (Subject::Manifest(want), Some(p)) => match payload_digest(p) {
                Some(d) if d == want => p,
                Some(d) => {
                    invalid.push(format!("signature {i} signs {d}, not {want}"));
                    continue;
                }
                None => {
                    invalid.push(format!("signature {i} has no cosign payload"));
                    continue;
                }
            },
            (Subject::Blob(bytes), None) => bytes,
            (Subject::Manifest(_), None) | (Subject::Blob(_), Some(_)) => {
                invalid.push(format!("signature {i} is of another kind"));
                continue;
            }
        };
        well_formed += 1;
        if let Some(k) = keys.iter().find(|k| k.verifies(message, &sig)) {
            return Ok(k.name.clone());
        }
    }
    let names = keys
        .iter()
        .map(|k| k.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if well_formed == 0 {
        return Err((reason::SIGNATURE_INVALID, invalid.join("; ")));
    }
    let mut m =
        format!("{well_formed} signature(s) found; none verifies with a trusted key ({names})");
    if !invalid.is_empty() {
        m.push_str("; also: ");
        m.push_str(&invalid.join("; "));
    }
    Err((reason::UNTRUSTED_SIGNATURE, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (SigningKey, TrustedKey) {
        let (private, public) = generate().unwrap();
        (
            SigningKey::from_pem(private.as_bytes()).unwrap(),
            TrustedKey::from_pem(name, &public).unwrap(),
        )
    }

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn signed(key: &SigningKey, digest: &str) -> FoundSignature {
        let p = payload("registry.example/plugins/hello", digest);
        FoundSignature {
            signature: key.sign(&p).unwrap(),
            payload: Some(p),
        }
    }

    #[test]
    fn an_artifact_signed_by_a_trusted_key_names_it() {
        let (vendor, vendor_pub) = pair("vendor");
        let (_, other_pub) = pair("other");
        let found = [signed(&vendor, D1)];
        let keys = [other_pub.clone(), vendor_pub.clone()];
        assert_eq!(
            verify(&keys, Subject::Manifest(D1), &found).unwrap(),
            "vendor"
        );
        // The key just made verifies too.
        assert_eq!(
            vendor.public("me"),
            TrustedKey {
                name: "me".into(),
                ..vendor_pub
            }
        );
    }

    #[test]
    fn each_failure_has_its_own_reason() {
        let (vendor, vendor_pub) = pair("vendor");
        let (stranger, _) = pair("stranger");
        let keys = [vendor_pub];
        let reason_of =
            |found: &[FoundSignature]| verify(&keys, Subject::Manifest(D1), found).unwrap_err().0;
        assert_eq!(reason_of(&[]), reason::SIGNATURE_MISSING);
        // A signature of another artifact, replayed.
        assert_eq!(reason_of(&[signed(&vendor, D2)]), reason::SIGNATURE_INVALID);
        // Garbage.
        let junk = FoundSignature {
            payload: Some(b"{}".to_vec()),
            signature: "***".into(),
        };
        assert_eq!(reason_of(&[junk]), reason::SIGNATURE_INVALID);
        // A key nobody trusts.
        assert_eq!(
            reason_of(&[signed(&stranger, D1)]),
            reason::UNTRUSTED_SIGNATURE
        );
        // The payload altered after signing.
        let mut tampered = signed(&vendor, D1);
        tampered.payload = Some(
            String::from_utf8(tampered.payload.unwrap())
                .unwrap()
                .replace("hello", "hell0")
                .into_bytes(),
        );
        assert_eq!(reason_of(&[tampered]), reason::UNTRUSTED_SIGNATURE);
        // A good one among bad ones still verifies.
        assert!(
            verify(
                &keys,
                Subject::Manifest(D1),
                &[signed(&stranger, D1), signed(&vendor, D1)]
            )
            .is_ok()
        );
    }

    #[test]
    fn blob_signatures() {
        let (vendor, vendor_pub) = pair("vendor");
        let blob = b"\0asm component";
        let sig = FoundSignature {
            payload: None,
            signature: vendor.sign(blob).unwrap(),
        };
        assert_eq!(
            verify(
                std::slice::from_ref(&vendor_pub),
                Subject::Blob(blob),
                std::slice::from_ref(&sig)
            )
            .unwrap(),
            "vendor"
        );
        let err = verify(&[vendor_pub], Subject::Blob(b"\0asm other"), &[sig]).unwrap_err();
        assert_eq!(err.0, reason::UNTRUSTED_SIGNATURE);
    }

    #[test]
    fn keys_that_cannot_be_used_are_named() {
        let ed25519 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)
            .unwrap()
            .public_key_pem();
        let e = TrustedKey::from_pem("old", &ed25519).unwrap_err();
        assert!(
            matches!(&e, CosignError::PublicKey { name, message } if name == "old" && message.contains("only ECDSA P-256")),
            "{e}"
        );
        assert!(matches!(
            TrustedKey::from_pem("x", "not pem"),
            Err(CosignError::PublicKey { .. })
        ));
        let encrypted = b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        assert!(
            matches!(SigningKey::from_pem(encrypted), Err(CosignError::PrivateKey(m)) if m.contains("encrypted"))
        );
        assert_eq!(
            signature_tag(D1).unwrap(),
            "sha256-1111111111111111111111111111111111111111111111111111111111111111.sig"
        );
        assert!(signature_tag("latest").is_err());
    }
}
