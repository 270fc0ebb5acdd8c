//! Structural defaulting from our generated CRD schemas, as the API server
//! does on create: an absent field whose schema has a `default` gets it, in
//! objects nested at any depth (through `properties`, `items` and
//! `additionalProperties`). `trainforge render`, `trainforge plugin run` and
//! the SDK's test builders use it so that objects read from files or written
//! in tests look exactly as they would when read back from a cluster (e.g. a
//! runtime's replicated jobs get JobSet's `replicas: 1` and `groupName:
//! default`).
//!
//! The schemas are the ones `trainforge crds` writes, so there is one source
//! of truth for defaults.

use crate::crds::{CrdError, all_crds};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

/// Why defaults could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum DefaultsError {
    /// The CRDs could not be generated.
    #[error("generating CRDs: {0}")]
    Crd(#[from] CrdError),
}

/// The schemas of our kinds, by kind, for [`apply`].
#[derive(Debug, Clone)]
pub struct Defaulter {
    schemas: Vec<(String, JSONSchemaProps)>,
}

impl Defaulter {
    /// Schemas of every kind we serve (the served `v1alpha1` version).
    pub fn new() -> Result<Self, DefaultsError> {
        let mut schemas = Vec::new();
        for crd in all_crds()? {
            let kind = crd.spec.names.kind.clone();
            if let Some(schema) = crd
                .spec
                .versions
                .into_iter()
                .find(|v| v.served)
                .and_then(|v| v.schema)
                .and_then(|s| s.open_api_v3_schema)
            {
                schemas.push((kind, schema));
            }
        }
        Ok(Defaulter { schemas })
    }

    /// Default `object` if it is of one of our kinds; other objects are left alone.
    pub fn apply(&self, object: &mut Value) {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some((_, schema)) = self.schemas.iter().find(|(k, _)| Some(k) == kind.as_ref()) {
            apply(object, schema);
        }
    }
}

/// Fill the defaults of `schema` into `value`, recursively.
pub fn apply(value: &mut Value, schema: &JSONSchemaProps) {
    match value {
        Value::Object(map) => {
            if let Some(props) = &schema.properties {
                for (name, prop) in props {
                    if !map.contains_key(name)
                        && let Some(default) = &prop.default
                    {
                        map.insert(name.clone(), default.0.clone());
                    }
                    if let Some(child) = map.get_mut(name) {
                        apply(child, prop);
                    }
                }
            }
            if let Some(JSONSchemaPropsOrBool::Schema(extra)) = &schema.additional_properties {
                let known = schema.properties.as_ref();
                for (name, child) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(name)) {
                        apply(child, extra);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
                for v in items {
                    apply(v, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runtime_jobs_get_jobset_defaults_and_trainjob_gets_its_own() {
        let d = Defaulter::new().unwrap();
        let mut rt = json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "r"},
            "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {}}]}}}
        });
        d.apply(&mut rt);
        let job = &rt["spec"]["template"]["spec"]["replicatedJobs"][0];
        assert_eq!(job["replicas"], json!(1));
        assert_eq!(job["groupName"], json!("default"));

        let mut tj = json!({"kind": "TrainJob", "metadata": {"name": "j"}, "spec": {"runtimeRef": {"name": "r"}}});
        d.apply(&mut tj);
        assert_eq!(
            tj["spec"]["runtimeRef"]["kind"],
            json!("ClusterTrainingRuntime")
        );
        assert_eq!(
            tj["spec"]["runtimeRef"]["apiGroup"],
            json!("trainer.kubeflow.org")
        );
        assert_eq!(tj["spec"]["suspend"], json!(false));
        assert_eq!(
            tj["spec"]["managedBy"],
            json!("trainer.kubeflow.org/trainjob-controller")
        );
    }

    #[test]
    fn present_values_are_kept_and_other_kinds_untouched() {
        let d = Defaulter::new().unwrap();
        let mut tj = json!({"kind": "TrainJob", "spec": {"runtimeRef": {"name": "r", "kind": "TrainingRuntime"}, "suspend": true}});
        d.apply(&mut tj);
        assert_eq!(tj["spec"]["runtimeRef"]["kind"], json!("TrainingRuntime"));
        assert_eq!(tj["spec"]["suspend"], json!(true));
        let mut cm = json!({"kind": "ConfigMap", "data": {}});
        d.apply(&mut cm);
        assert_eq!(cm, json!({"kind": "ConfigMap", "data": {}}));
    }
}
