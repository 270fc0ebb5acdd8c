//! CEL validation rules (`x-kubernetes-validations`) of the
//! `ClusterTrainerPlugin` CRD: the API server rejects a bad plugin
//! configuration (HTTP 422) before the controller ever sees it.

pub use crate::cel::CelRule;

/// `spec.source` names exactly one place the component comes from.
pub const ONE_SOURCE: CelRule = CelRule {
    rule: "[has(self.builtin), has(self.configMap), has(self.url)].filter(x, x).size() == 1",
    message: "exactly one of source.builtin, source.configMap or source.url must be set",
};

/// A component that is not builtin must be pinned by digest: by
/// `spec.sha256`, or (an OCI artifact) by its manifest digest in the
/// reference or a signature check that pins the tag's digest once.
pub const SHA256_UNLESS_BUILTIN: CelRule = CelRule {
    rule: "has(self.source.builtin) || has(self.sha256) || (has(self.source.url) && self.source.url.startsWith('oci://') && (self.source.url.contains('@sha256:') || has(self.verification)))",
    message: "sha256 is required unless source.builtin is set, or source.url is an oci:// reference pinned by @sha256: or checked by spec.verification",
};

/// `spec.sha256` is a bare lowercase hex sha256.
pub const SHA256_HEX: CelRule = CelRule {
    rule: "self.matches('^[0-9a-f]{64}$')",
    message: "sha256 must be 64 lowercase hexadecimal characters",
};

/// `source.url` is fetched over https, pulled from an OCI registry or read
/// from the operator's file system.
pub const URL_SCHEME: CelRule = CelRule {
    rule: "self.matches('^(https|oci|file)://.+$')",
    message: "source.url must use the https://, oci:// or file:// scheme",
};

/// `source.pullSecret` only goes with an `oci://` URL.
pub const PULL_SECRET_WITH_OCI: CelRule = CelRule {
    rule: "!has(self.pullSecret) || (has(self.url) && self.url.startsWith('oci://'))",
    message: "source.pullSecret applies to oci:// URLs only",
};

/// `limits.timeout`: integer milliseconds or a duration string, 10ms to 30s.
pub const TIMEOUT_RANGE: CelRule = CelRule {
    rule: "type(self) == int ? (self >= 10 && self <= 30000) : (self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10ms') && duration(self) <= duration('30s'))",
    message: "limits.timeout must be milliseconds (10 to 30000) or a duration such as 500ms or 2s (10ms to 30s)",
};

/// `limits.memory`: integer MiB or a quantity, up to 1 GiB.
pub const MEMORY_RANGE: CelRule = CelRule {
    rule: "type(self) == int ? (self >= 1 && self <= 1024) : (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')) && quantity(self).compareTo(quantity('1Gi')) <= 0)",
    message: "limits.memory must be MiB (1 to 1024) or a quantity such as 128Mi (at most 1Gi)",
};

/// Only the `TrainerPluginPolicy` named `default` is read; refuse others
/// so that nobody believes a second policy applies.
pub const POLICY_NAMED_DEFAULT: CelRule = CelRule {
    rule: "self.metadata.name == 'default'",
    message: "the operator reads only the TrainerPluginPolicy named default",
};

/// Every rule of this module, for documentation and tests.
pub const ALL: &[CelRule] = &[
    ONE_SOURCE,
    SHA256_UNLESS_BUILTIN,
    SHA256_HEX,
    URL_SCHEME,
    PULL_SECRET_WITH_OCI,
    TIMEOUT_RANGE,
    MEMORY_RANGE,
];
