//! `trainforge.dev/v1alpha1`: `ClusterTrainerPlugin`, the tenant
//! `TrainerPlugin` and the `TrainerPluginPolicy` that caps it.

pub mod cel;
pub mod cluster_trainer_plugin;
pub mod status;
pub mod trainer_plugin;
pub mod trainer_plugin_policy;

pub use cluster_trainer_plugin::{
    ClusterTrainerPlugin, ClusterTrainerPluginSpec, ConfigMapSource, FailurePolicy, PluginGrants,
    PluginLimits, PluginSourceSpec, PluginVerification, PodSecurityGrants, VerificationKey,
};
pub use status::{ClusterTrainerPluginStatus, DescribedPlugin, PluginRollout, condition, reason};
pub use trainer_plugin::{TrainerPlugin, TrainerPluginSpec};
pub use trainer_plugin_policy::{
    POLICY_NAME, PodSecurityLevel, PolicyLimits, TenantSourceKind, TrainerPluginPolicy,
    TrainerPluginPolicySpec,
};

/// The API version of the kinds in this module.
pub const API_VERSION: &str = "trainforge.dev/v1alpha1";

/// The kind name of [`ClusterTrainerPlugin`].
pub const CLUSTER_TRAINER_PLUGIN_KIND: &str = "ClusterTrainerPlugin";

/// The kind name of [`TrainerPlugin`].
pub const TRAINER_PLUGIN_KIND: &str = "TrainerPlugin";

/// The kind name of [`TrainerPluginPolicy`].
pub const TRAINER_PLUGIN_POLICY_KIND: &str = "TrainerPluginPolicy";

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::cel;
    use crate::crds::{cluster_trainer_plugin_crd, file_name};

    fn walk(node: &Value, path: &str, visit: &mut dyn FnMut(&str, &Value)) {
        visit(path, node);
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(v, &format!("{path}.{k}"), visit);
            }
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), visit);
        }
    }

    #[test]
    fn crd_is_cluster_scoped_structural_and_carries_its_rules() {
        let crd = serde_json::to_value(cluster_trainer_plugin_crd().unwrap()).unwrap();
        assert_eq!(
            file_name(&cluster_trainer_plugin_crd().unwrap()),
            "trainforge.dev_clustertrainerplugins.yaml"
        );
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["group"], "trainforge.dev");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let root = &version["schema"]["openAPIV3Schema"];
        let mut rules = Vec::new();
        walk(root, "", &mut |path, node| {
            let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
            let preserve =
                node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            assert!(
                node.get("type").is_some_and(Value::is_string) || int_or_string || preserve,
                "{path}: no type"
            );
            assert!(
                node.get("oneOf").is_none() && node.get("allOf").is_none(),
                "{path}: oneOf/allOf"
            );
            assert!(
                node.get("anyOf").is_none() || int_or_string,
                "{path}: anyOf"
            );
            assert!(node.get("$ref").is_none(), "{path}: $ref");
            if let Some(Value::Array(vs)) = node.get("x-kubernetes-validations") {
                for v in vs {
                    rules.push((
                        path.to_owned(),
                        v["rule"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
        });
        let at = |p: &str, rule: cel::CelRule| {
            assert!(
                rules.contains(&(p.to_owned(), rule.rule.to_owned())),
                "{p}: missing {}; rules: {rules:?}",
                rule.rule
            );
        };
        at(".spec", cel::SHA256_UNLESS_BUILTIN);
        at(".spec.source", cel::ONE_SOURCE);
        at(".spec.source.url", cel::URL_SCHEME);
        at(".spec.sha256", cel::SHA256_HEX);
        at(".spec.limits.timeout", cel::TIMEOUT_RANGE);
        at(".spec.limits.memory", cel::MEMORY_RANGE);
        // Each rule once in the spec (and again in `status.servingSpec`).
        assert_eq!(
            rules.iter().filter(|(p, _)| p.starts_with(".spec")).count(),
            cel::ALL.len()
        );
        at(".status.servingSpec.source", cel::ONE_SOURCE);
        let spec = &root["properties"]["spec"]["properties"];
        assert_eq!(
            spec["failurePolicy"]["enum"],
            serde_json::json!(["Fail", "Ignore"])
        );
        assert_eq!(spec["failurePolicy"]["default"], "Fail");
        assert_eq!(spec["order"]["default"], 0);
        assert_eq!(spec["phases"]["items"]["enum"][0], "enforce-ml-policy");
        assert_eq!(spec["config"]["x-kubernetes-preserve-unknown-fields"], true);
        let conditions = &root["properties"]["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
    }
}
