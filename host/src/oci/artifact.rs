//! The Wasm OCI artifact layout, without I/O: the manifest and config a
//! pushed plugin gets, and the checks a pulled manifest and layer pass
//! before their bytes are used.
//!
//! Layout (the CNCF Wasm OCI artifact, as `wkg` writes it): an OCI image
//! manifest whose config has media type [`WASM_CONFIG_MEDIA_TYPE`] and whose
//! only layer is the component, media type [`WASM_LAYER_MEDIA_TYPE`]. The
//! older `wasm-to-oci` layer type [`LEGACY_WASM_LAYER_MEDIA_TYPE`] is
//! accepted when pulling.

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Config media type of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Layer media type of a Wasm component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Layer media type of the older `wasm-to-oci` layout (pull only).
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// An OCI image manifest.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (refused: a plugin is one artifact).
pub const OCI_INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// Largest manifest read (a Wasm artifact's is a few hundred bytes).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// Why a manifest or layer is not a usable Wasm artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The manifest is not an OCI image manifest.
    #[error("the manifest is not an OCI image manifest: {0}")]
    Manifest(String),
    /// The artifact is not a single Wasm component.
    #[error("not a Wasm artifact: {0}")]
    NotWasm(String),
    /// The layer is larger than the component limit.
    #[error("the Wasm layer is {size} bytes, larger than the {limit}-byte component limit")]
    TooLarge {
        /// Size the manifest declares (or that arrived).
        size: u64,
        /// The component limit.
        limit: usize,
    },
    /// Bytes do not hash to the digest that names them.
    #[error("{what} has digest {got}, expected {expected}")]
    DigestMismatch {
        /// The manifest or the layer.
        what: &'static str,
        /// The digest that names it.
        expected: String,
        /// The digest of what arrived.
        got: String,
    },
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Whether `d` is `sha256:` followed by 64 lowercase hex characters.
pub fn is_sha256_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Check that `bytes` hash to `expected` (`sha256:<hex>`).
pub fn check_digest(what: &'static str, bytes: &[u8], expected: &str) -> Result<(), ArtifactError> {
    let got = digest_of(bytes);
    if got == expected {
        Ok(())
    } else {
        Err(ArtifactError::DigestMismatch {
            what,
            expected: expected.to_owned(),
            got,
        })
    }
}

/// The component layer a pulled manifest names: the manifest is an OCI
/// image manifest with exactly one layer, of a Wasm media type, sha256
/// addressed, at most `limit` bytes.
pub fn wasm_layer(manifest: &[u8], limit: usize) -> Result<OciDescriptor, ArtifactError> {
    let value: serde_json::Value = serde_json::from_slice(manifest)
        .map_err(|e| ArtifactError::Manifest(format!("not JSON: {e}")))?;
    let media_type = value.get("mediaType").and_then(|m| m.as_str());
    if media_type == Some(OCI_INDEX_MEDIA_TYPE) || value.get("manifests").is_some() {
        return Err(ArtifactError::NotWasm(
            "an image index, not a single artifact (push the component itself)".to_owned(),
        ));
    }
    let m: OciImageManifest =
        serde_json::from_value(value).map_err(|e| ArtifactError::Manifest(e.to_string()))?;
    let [layer] = m.layers.as_slice() else {
        return Err(ArtifactError::NotWasm(format!(
            "{} layers (a Wasm artifact has exactly one)",
            m.layers.len()
        )));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE && layer.media_type != LEGACY_WASM_LAYER_MEDIA_TYPE
    {
        return Err(ArtifactError::NotWasm(format!(
            "layer media type {:?} (expected {WASM_LAYER_MEDIA_TYPE})",
            layer.media_type
        )));
    }
    if !is_sha256_digest(&layer.digest) {
        return Err(ArtifactError::Manifest(format!(
            "layer digest {:?} is not sha256:<64 hex>",
            layer.digest
        )));
    }
    let size = u64::try_from(layer.size)
        .map_err(|_| ArtifactError::Manifest(format!("layer size {} is negative", layer.size)))?;
    if usize::try_from(size).map_or(true, |s| s > limit) {
        return Err(ArtifactError::TooLarge { size, limit });
    }
    Ok(layer.clone())
}

/// Check that `bytes` are a Wasm binary (the `\0asm` magic).
pub fn check_wasm_magic(bytes: &[u8]) -> Result<(), ArtifactError> {
    if bytes.starts_with(b"\0asm") {
        Ok(())
    } else {
        Err(ArtifactError::NotWasm(
            "the layer does not start with the Wasm magic bytes".to_owned(),
        ))
    }
}

/// What pushing `component` uploads: the config blob, and the manifest
/// bytes (whose digest names the artifact).
pub struct Artifact {
    /// The config blob.
    pub config: Vec<u8>,
    /// The config's descriptor.
    pub config_descriptor: OciDescriptor,
    /// The layer's descriptor.
    pub layer_descriptor: OciDescriptor,
    /// The manifest, as pushed.
    pub manifest: Vec<u8>,
}

impl Artifact {
    /// The artifact of `component`.
    pub fn new(component: &[u8]) -> Result<Self, ArtifactError> {
        let layer_digest = digest_of(component);
        let config = serde_json::to_vec(&json!({
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
        }))
        .map_err(|e| ArtifactError::Manifest(e.to_string()))?;
        let descriptor = |media_type: &str, digest: String, size: usize| OciDescriptor {
            media_type: media_type.to_owned(),
            digest,
            size: i64::try_from(size).unwrap_or(i64::MAX),
            ..OciDescriptor::default()
        };
        let config_descriptor =
            descriptor(WASM_CONFIG_MEDIA_TYPE, digest_of(&config), config.len());
        let layer_descriptor = descriptor(WASM_LAYER_MEDIA_TYPE, layer_digest, component.len());
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST_MEDIA_TYPE.to_owned()),
            config: config_descriptor.clone(),
            layers: vec![layer_descriptor.clone()],
            ..OciImageManifest::default()
        };
        let manifest =
            serde_json::to_vec(&manifest).map_err(|e| ArtifactError::Manifest(e.to_string()))?;
        Ok(Artifact {
            config,
            config_descriptor,
            layer_descriptor,
            manifest,
        })
    }

    /// The manifest's digest: what `oci://…@sha256:…` names.
    pub fn digest(&self) -> String {
        digest_of(&self.manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1 << 20;

    #[test]
    fn a_pushed_artifact_passes_the_pull_checks() {
        let wasm = b"\0asm\x0d\0\x01\0rest";
        let a = Artifact::new(wasm).unwrap();
        let layer = wasm_layer(&a.manifest, LIMIT).unwrap();
        assert_eq!(layer.digest, digest_of(wasm));
        assert_eq!(layer.size, wasm.len() as i64);
        check_digest("the layer", wasm, &layer.digest).unwrap();
        check_wasm_magic(wasm).unwrap();
        assert!(is_sha256_digest(&a.digest()));
        let m: serde_json::Value = serde_json::from_slice(&a.manifest).unwrap();
        assert_eq!(m["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(m["layers"][0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
    }

    fn manifest(layers: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": WASM_CONFIG_MEDIA_TYPE, "digest": digest_of(b"{}"), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn manifests_that_are_not_one_wasm_layer_are_refused_by_reason() {
        let d = digest_of(b"x");
        let tar = manifest(
            json!([{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": 1}]),
        );
        assert!(
            matches!(wasm_layer(&tar, LIMIT), Err(ArtifactError::NotWasm(m)) if m.contains("layer media type"))
        );
        let two = manifest(json!([
            {"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": d, "size": 1},
            {"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": d, "size": 1},
        ]));
        assert!(
            matches!(wasm_layer(&two, LIMIT), Err(ArtifactError::NotWasm(m)) if m.contains("2 layers"))
        );
        let none = manifest(json!([]));
        assert!(matches!(
            wasm_layer(&none, LIMIT),
            Err(ArtifactError::NotWasm(_))
        ));
        let big =
            manifest(json!([{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": d, "size": 50 << 20}]));
        assert!(matches!(
            wasm_layer(&big, LIMIT),
            Err(ArtifactError::TooLarge { size, limit: LIMIT }) if size == 50 << 20
        ));
        let negative =
            manifest(json!([{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": d, "size": -1}]));
        assert!(matches!(
            wasm_layer(&negative, LIMIT),
            Err(ArtifactError::Manifest(_))
        ));
        let md5 =
            manifest(json!([{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": "md5:abc", "size": 1}]));
        assert!(matches!(
            wasm_layer(&md5, LIMIT),
            Err(ArtifactError::Manifest(_))
        ));
        let legacy =
            manifest(json!([{"mediaType": LEGACY_WASM_LAYER_MEDIA_TYPE, "digest": d, "size": 1}]));
        assert!(wasm_layer(&legacy, LIMIT).is_ok());
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX_MEDIA_TYPE, "manifests": []
        }))
        .unwrap();
        assert!(
            matches!(wasm_layer(&index, LIMIT), Err(ArtifactError::NotWasm(m)) if m.contains("index"))
        );
        assert!(matches!(
            wasm_layer(b"<html>", LIMIT),
            Err(ArtifactError::Manifest(_))
        ));
    }

    #[test]
    fn digests_and_magic() {
        assert!(matches!(
            check_digest("the layer", b"a", &digest_of(b"b")),
            Err(ArtifactError::DigestMismatch {
                what: "the layer",
                ..
            })
        ));
        assert!(check_wasm_magic(b"\x7fELF").is_err());
        assert!(!is_sha256_digest("sha256:ABC"));
        assert!(!is_sha256_digest(&format!("sha256:{}", "A".repeat(64))));
        assert!(is_sha256_digest(&digest_of(b"")));
    }
}
