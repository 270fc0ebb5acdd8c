//! A builder for [`Descriptor`].

use trainforge_api::plugin::{Descriptor, KindRef, OBJECT_NAMES, ObjectName, Phase, WIT_VERSION};

/// Builds a [`Descriptor`] with the SDK's WIT version filled in.
#[derive(Debug, Clone)]
pub struct DescriptorBuilder(Descriptor);

impl DescriptorBuilder {
    /// Start a descriptor for plugin `name` at version `version`.
    pub fn new(name: &str, version: &str) -> Self {
        DescriptorBuilder(Descriptor {
            name: name.to_owned(),
            version: version.to_owned(),
            wit_version: WIT_VERSION.to_owned(),
            ..Descriptor::default()
        })
    }

    /// A policy key served (e.g. `mlPolicy.torch`).
    pub fn policy_key(mut self, key: &str) -> Self {
        self.0.policy_keys.push(key.to_owned());
        self
    }

    /// A phase implemented.
    pub fn phase(mut self, phase: Phase) -> Self {
        self.0.phases.push(phase.as_str().to_owned());
        self
    }

    /// A kind `build` may emit.
    pub fn emits(mut self, api_version: &str, kind: &str) -> Self {
        self.0.emits.push(KindRef::new(api_version, kind));
        self
    }

    /// A kind read through the host cache.
    pub fn reads(mut self, api_version: &str, kind: &str) -> Self {
        self.0.reads.push(KindRef::new(api_version, kind));
        self
    }

    /// A kind whose changes re-trigger the owning TrainJob.
    pub fn watches(mut self, api_version: &str, kind: &str) -> Self {
        self.0.watches.push(KindRef::new(api_version, kind));
        self
    }

    /// A naming rule: every object of this kind the plugin emits for
    /// TrainJob `t` is named `t` + `suffix` (`""`: exactly `t`). The host
    /// then refuses that name from every other TrainJob's plugins, so no
    /// one can create the object first. Announces the `object-names` phase.
    pub fn object_name(mut self, api_version: &str, kind: &str, suffix: &str) -> Self {
        self.0
            .object_names
            .push(ObjectName::new(KindRef::new(api_version, kind), suffix));
        if !self.0.phases.iter().any(|p| p == OBJECT_NAMES) {
            self.0.phases.push(OBJECT_NAMES.to_owned());
        }
        self
    }

    /// A host capability requested (e.g. `random`).
    pub fn capability(mut self, cap: &str) -> Self {
        self.0.capabilities.push(cap.to_owned());
        self
    }

    /// The descriptor.
    pub fn build(self) -> Descriptor {
        self.0
    }
}
