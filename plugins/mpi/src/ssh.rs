//! The SSH key pair of an MPI TrainJob: a fresh ECDSA P-521 key, as
//! upstream, generated from **host** randomness (`host.random-bytes`; WASI
//! random is not available to plugins) through a ChaCha20 CSPRNG.
//!
//! - private key: SEC1 PEM (`-----BEGIN EC PRIVATE KEY-----`), as Go's
//!   `x509.MarshalECPrivateKey` + `pem.Encode`;
//! - public key: an OpenSSH authorized-keys line
//!   `ecdsa-sha2-nistp521 <base64>\n`, as Go's `ssh.MarshalAuthorizedKey`.

use base64ct::{Base64, Encoding};
use p521::SecretKey;
use p521::elliptic_curve::sec1::ToEncodedPoint;
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use sec1::der::EncodePem;
use sec1::der::asn1::ObjectIdentifier;
use sec1::der::pem::LineEnding;
use sec1::{EcParameters, EcPrivateKey};
use trainforge_sdk::PluginError;

/// SSH key type name of ECDSA over P-521.
pub const SSH_KEY_TYPE: &str = "ecdsa-sha2-nistp521";
/// SSH curve identifier of P-521.
const SSH_CURVE: &str = "nistp521";
/// OID of the named curve secp521r1 (P-521).
pub const SECP521R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");
/// Bytes of host randomness used as the CSPRNG seed.
pub const SEED_LEN: usize = 32;

/// A generated key pair, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    /// SEC1 PEM of the private key.
    pub private_pem: String,
    /// Authorized-keys line of the public key (ends with `\n`).
    pub authorized_key: String,
}

/// Generate a key pair from a 32-byte seed of host randomness.
pub fn generate(seed: &[u8]) -> Result<KeyPair, PluginError> {
    let seed: [u8; SEED_LEN] = seed.try_into().map_err(|_| {
        PluginError::Internal(format!(
            "expected {SEED_LEN} random bytes, got {}",
            seed.len()
        ))
    })?;
    let mut rng = ChaCha20Rng::from_seed(seed);
    let key = SecretKey::random(&mut rng);
    let point = key.public_key().to_encoded_point(false);
    let scalar = key.to_bytes();
    // RFC 5915 ECPrivateKey with the curve OID and the public key, like Go's
    // x509.MarshalECPrivateKey (OpenSSL/OpenSSH need the parameters).
    let der = EcPrivateKey {
        private_key: &scalar,
        parameters: Some(EcParameters::NamedCurve(SECP521R1)),
        public_key: Some(point.as_bytes()),
    };
    let pem = der
        .to_pem(LineEnding::LF)
        .map_err(|e| PluginError::Internal(format!("encoding the SSH private key: {e}")))?;
    Ok(KeyPair {
        private_pem: pem,
        authorized_key: authorized_key_line(point.as_bytes()),
    })
}

/// `ecdsa-sha2-nistp521 <base64(wire)>\n` for an uncompressed SEC1 point.
pub fn authorized_key_line(point: &[u8]) -> String {
    let mut wire = Vec::new();
    for part in [SSH_KEY_TYPE.as_bytes(), SSH_CURVE.as_bytes(), point] {
        // SSH `string`: u32 big-endian length, then the bytes. Parts are
        // far below 4 GiB; saturate instead of panicking regardless.
        wire.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        wire.extend_from_slice(part);
    }
    format!("{SSH_KEY_TYPE} {}\n", Base64::encode_string(&wire))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(b: u8) -> Vec<u8> {
        (0..SEED_LEN as u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(b))
            .collect()
    }

    #[test]
    fn keys_parse_back_and_match() {
        let kp = generate(&seed(1)).expect("generates");
        assert!(
            kp.private_pem
                .starts_with("-----BEGIN EC PRIVATE KEY-----\n"),
            "{}",
            kp.private_pem
        );
        assert!(
            kp.private_pem
                .trim_end()
                .ends_with("-----END EC PRIVATE KEY-----")
        );
        let sk = SecretKey::from_sec1_pem(&kp.private_pem).expect("PEM parses back");
        // The named curve is present (OpenSSL cannot load the key without it).
        use sec1::der::Decode;
        let (_, der) = sec1::der::Document::from_pem(&kp.private_pem).expect("PEM");
        let parsed = EcPrivateKey::from_der(der.as_bytes()).expect("DER");
        assert_eq!(parsed.parameters, Some(EcParameters::NamedCurve(SECP521R1)));
        assert_eq!(parsed.private_key.len(), 66);
        assert!(kp.authorized_key.ends_with('\n'));
        let pk = ssh_key::PublicKey::from_openssh(kp.authorized_key.trim_end())
            .expect("authorized key parses");
        assert_eq!(
            pk.algorithm(),
            ssh_key::Algorithm::Ecdsa {
                curve: ssh_key::EcdsaCurve::NistP521
            }
        );
        let ecdsa = pk.key_data().ecdsa().expect("ECDSA key");
        assert_eq!(
            ecdsa.as_sec1_bytes(),
            sk.public_key().to_encoded_point(false).as_bytes()
        );
    }

    #[test]
    fn seed_decides_the_key() {
        assert_eq!(
            generate(&seed(1)).expect("a"),
            generate(&seed(1)).expect("b")
        );
        assert_ne!(
            generate(&seed(1)).expect("a"),
            generate(&seed(2)).expect("b")
        );
        assert!(matches!(generate(&[0u8; 3]), Err(PluginError::Internal(_))));
    }
}
