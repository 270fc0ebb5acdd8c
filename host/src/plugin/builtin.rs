//! Builtin plugins, embedded in the operator binary at build time so a
//! default install needs no registry.
//!
//! `host/build.rs` builds every crate under `plugins/` (plus any crate
//! listed in `TRAINFORGE_EXTRA_BUILTIN_PLUGINS`, a `:`-separated list of
//! crate directories relative to the workspace root) for `wasm32-wasip2`
//! with the `plugin` profile, using its own `CARGO_TARGET_DIR`, and
//! generates an `include_bytes!` table.

use super::pod_policy::PodGrants;
use super::{Grants, PluginSource};
use trainforge_api::plugin::KindRef;

/// One embedded plugin component.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinPlugin {
    /// Crate name the component was built from.
    pub crate_name: &'static str,
    /// Component bytes.
    pub wasm: &'static [u8],
    /// Lower-case hex SHA-256 of `wasm`, taken when the binary was built.
    pub sha256: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));

/// Every embedded plugin, in crate-name order.
pub fn all() -> &'static [BuiltinPlugin] {
    BUILTIN_PLUGINS
}

/// The builtin plugin called `name` (`torch` or `plugin-torch`).
pub fn find(name: &str) -> Option<&'static BuiltinPlugin> {
    all()
        .iter()
        .find(|b| b.crate_name == name || b.crate_name.strip_prefix("plugin-") == Some(name))
}

/// The build-time digest of `bytes` when they are one of the embedded
/// components themselves (the same memory, not a copy): the operator then
/// never reads them to hash them, so their pages stay out of its memory.
/// `None` for any other bytes, which are hashed as usual.
pub fn embedded_digest(bytes: &[u8]) -> Option<&'static str> {
    all()
        .iter()
        .find(|b| std::ptr::eq(b.wasm, bytes))
        .map(|b| b.sha256)
}

/// The sha256 of a component, lower-case hex: the build-time digest for an
/// embedded builtin's own memory ([`embedded_digest`]), else hashed.
pub fn component_digest(bytes: &[u8]) -> String {
    embedded_digest(bytes).map_or_else(|| super::sha256_hex(bytes), str::to_owned)
}

/// The plugin name a builtin uses (its crate name without `plugin-`).
pub fn plugin_name(crate_name: &str) -> &str {
    crate_name.strip_prefix("plugin-").unwrap_or(crate_name)
}

/// Names reserved for the builtin plugins: a component that is not one of
/// them may not describe itself with any of these names.
pub fn names() -> Vec<String> {
    all()
        .iter()
        .map(|b| plugin_name(b.crate_name).to_owned())
        .collect()
}

/// What a builtin plugin needs beyond the defaults to do what upstream does
/// (the shipped `ClusterTrainerPlugin`s grant exactly this).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuiltinNeeds {
    /// `host.random-bytes` (MPI's SSH keys).
    pub random: bool,
    /// The status server's address and CA (`trainjobstatus`).
    pub status_server: bool,
    /// Kinds it reads that need an explicit `allowedReads` (Secrets,
    /// cluster-scoped kinds); `None` when it needs no list.
    pub allowed_reads: Option<Vec<KindRef>>,
    /// Kinds it emits that are off the default allow-list
    /// ([`super::kinds::DEFAULT_EMITS`]); `None` when it needs no list.
    pub allowed_kinds: Option<Vec<KindRef>>,
    /// Pod grants (Flux's installer init container and its image).
    pub pod: PodGrants,
}

/// The image prefix of the Flux views the `flux` builtin's installer init
/// container runs (`FLUX_VIEW_IMAGE`: its default
/// `ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy` and the other
/// views of that project, `flux-view-rocky:…`, `flux-view-ubuntu:…`).
pub const FLUX_VIEW_IMAGES: &str = "ghcr.io/converged-computing/flux-view-";

/// What the builtin plugin called `name` (`torch` or `plugin-torch`) needs.
pub fn needs(name: &str) -> BuiltinNeeds {
    match plugin_name(name) {
        // The installer init container `flux-installer` and its image.
        "flux" => BuiltinNeeds {
            pod: PodGrants {
                containers: vec!["flux-installer".into()],
                images: vec![FLUX_VIEW_IMAGES.into()],
                ..PodGrants::default()
            },
            ..BuiltinNeeds::default()
        },
        "trainjobstatus" => BuiltinNeeds {
            status_server: true,
            ..BuiltinNeeds::default()
        },
        "mpi" => BuiltinNeeds {
            random: true,
            allowed_reads: Some(vec![KindRef::new("v1", "Secret")]),
            ..BuiltinNeeds::default()
        },
        // The elastic policy's HorizontalPodAutoscaler.
        "torch" => BuiltinNeeds {
            allowed_kinds: Some(vec![KindRef::new(
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
            )]),
            ..BuiltinNeeds::default()
        },
        "volcano" => BuiltinNeeds {
            allowed_reads: Some(vec![
                KindRef::new("scheduling.volcano.sh/v1beta1", "PodGroup"),
                KindRef::new("scheduling.k8s.io/v1", "PriorityClass"),
            ]),
            ..BuiltinNeeds::default()
        },
        _ => BuiltinNeeds::default(),
    }
}

impl BuiltinPlugin {
    /// A [`PluginSource`] for this builtin (default config, no grants).
    pub fn source(&self) -> PluginSource {
        let mut src = PluginSource::new(format!("builtin:{}", self.crate_name), self.wasm);
        src.builtin = true;
        src
    }

    /// A [`PluginSource`] with exactly what this builtin needs granted
    /// ([`needs`]).
    pub fn trusted_source(&self) -> PluginSource {
        let needs = needs(self.crate_name);
        let mut src = self.source();
        src.grants = Grants {
            random: needs.random,
            status_server: needs.status_server,
            pod: needs.pod,
            ..Grants::default()
        };
        src.allowed_reads = needs.allowed_reads;
        src.allowed_emits = needs.allowed_kinds;
        src
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_digests_are_the_embedded_bytes_digests() {
        assert!(!all().is_empty(), "no builtin plugins embedded");
        for b in all() {
            assert_eq!(
                b.sha256,
                crate::plugin::sha256_hex(b.wasm),
                "{}",
                b.crate_name
            );
            assert_eq!(embedded_digest(b.wasm), Some(b.sha256));
            // A copy is not trusted to be the embedded component.
            let copy: Vec<u8> = b.wasm.to_vec();
            assert_eq!(embedded_digest(&copy), None, "{}", b.crate_name);
            assert_eq!(component_digest(b.wasm), b.sha256);
            assert_eq!(component_digest(&copy), b.sha256, "a copy is hashed");
        }
        assert_eq!(embedded_digest(b"\0asm"), None);
    }
}
