//! Tenant plugins with no cluster, for `trainforge render` and
//! `trainforge plugin run`: a team tries its `TrainerPlugin` and component
//! before installing them. The ceiling, the options, the load and the check
//! of what the plugin declares are the operator's own; only the namespace's
//! labels are unknown offline, so the policy's `namespaceSelector` is not
//! checked.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::core::Selector;
use trainforge_api::trainforge::v1alpha1::{TrainerPlugin, TrainerPluginPolicySpec};

use super::ceiling::Ceiling;
use super::state::{TenantEntry, TenantPlugins};
use crate::controller::catalog::spec::plugin_source;
use crate::controller::catalog::{Attempt, Entry, Serving};
use crate::plugin::{self, LoadedPlugin, ObjectSource, PluginRuntime, PluginSet};

/// Why a tenant plugin cannot be tried offline.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The ceiling refuses the spec or what the plugin declares.
    #[error("TrainerPlugin {namespace}/{name} refused by the ceiling ({reason}): {message}")]
    Refused {
        /// The `TrainerPlugin`'s namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The condition reason the operator would set.
        reason: &'static str,
        /// What exceeds the ceiling.
        message: String,
    },
    /// `spec.selector` is not a usable label selector.
    #[error("TrainerPlugin {namespace}/{name}: spec.selector: {message}")]
    Selector {
        /// The `TrainerPlugin`'s namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        message: String,
    },
    /// The component did not load.
    #[error(transparent)]
    Load(#[from] plugin::Error),
}

/// A `TrainerPlugin` loaded offline.
#[derive(Debug, Clone)]
pub struct OfflineTenant {
    /// Its namespace (`default_namespace` when the object has none).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The plugin, loaded as the operator would.
    pub plugin: LoadedPlugin,
    entry: TenantEntry,
}

/// Load `bytes` as the tenant plugin `tp` configures, under the ceiling of
/// `policy` (the operator's defaults when `None`). `objects` serves its
/// reads.
pub fn load(
    rt: &PluginRuntime,
    tp: &TrainerPlugin,
    bytes: bytes::Bytes,
    policy: Option<&TrainerPluginPolicySpec>,
    default_namespace: &str,
    objects: Arc<dyn ObjectSource>,
) -> Result<OfflineTenant, OfflineError> {
    let namespace = tp
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace.to_owned());
    let name = tp.metadata.name.clone().unwrap_or_default();
    let default_policy = TrainerPluginPolicySpec::default();
    let ceiling = Ceiling::new(Some(policy.unwrap_or(&default_policy)), &rt.config().limits)
        .every_namespace();
    let refused = |(reason, message): (&'static str, String)| OfflineError::Refused {
        namespace: namespace.clone(),
        name: name.clone(),
        reason,
        message,
    };
    let selector = tp
        .spec
        .selector
        .clone()
        .map(Selector::try_from)
        .transpose()
        .map_err(|e| OfflineError::Selector {
            namespace: namespace.clone(),
            name: name.clone(),
            message: e.to_string(),
        })?;
    let opts = ceiling
        .options(&namespace, &BTreeMap::new(), &tp.spec.plugin)
        .map_err(refused)?;
    // The operator's --require-plugin-signatures is not known offline.
    ceiling
        .admit_keys(&tp.spec.plugin, false)
        .map_err(refused)?;
    let mut src = plugin_source(
        format!("{namespace}/{name}"),
        bytes,
        tp.spec.plugin.sha256.clone(),
        false,
        &opts,
        objects,
    );
    src.tenant = Some(namespace.clone());
    let plugin = rt.load(src)?;
    ceiling.check_plugin(&plugin).map_err(refused)?;
    let serving = Serving::new(
        plugin.clone(),
        tp.spec.plugin.clone(),
        1,
        opts.order,
        opts.phases.as_deref(),
    );
    let entry = TenantEntry {
        entry: Entry {
            uid: format!("offline:{namespace}/{name}"),
            attempt: Some(Attempt::succeeded(1, Vec::new())),
            serving: Some(serving),
        },
        selector,
        options: Some(opts),
    };
    Ok(OfflineTenant {
        namespace,
        name,
        plugin,
        entry,
    })
}

/// The store the operator would have with `tenants` in service beside the
/// `cluster`'s plugins (one that clashes with those or with an earlier one
/// of its namespace is refused as the operator refuses it, and logged).
pub fn store(tenants: &[OfflineTenant], cluster: &PluginSet) -> TenantPlugins {
    let store = TenantPlugins::new(1);
    store.set_initial([]);
    for t in tenants {
        let e = store.commit(&t.namespace, &t.name, t.entry.clone(), cluster);
        if let Some((reason, message)) = e.entry.attempt.and_then(|a| a.failure) {
            tracing::warn!(namespace = %t.namespace, plugin = %t.name, %reason, %message, "TrainerPlugin not served");
        }
    }
    store
}
