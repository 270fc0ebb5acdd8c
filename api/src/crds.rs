//! The CustomResourceDefinitions of our kinds, generated from the Rust types:
//! `trainjobs`, `trainingruntimes` and `clustertrainingruntimes` in
//! `trainer.kubeflow.org`, and `clustertrainerplugins` in `trainforge.dev`.
//!
//! `trainforge crds` writes them to `crds/`; a test keeps the checked-in
//! files current.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::core::CustomResourceExt;
use serde_json::{Value, json};

use crate::cel::CelRule;
use crate::schema::{SchemaError, StructuralSchemas};
use crate::trainer::v1alpha1::cel;
use crate::trainer::v1alpha1::constants::CLUSTER_TRAINING_RUNTIME_KIND;
use crate::trainer::v1alpha1::{
    TrainJob, TrainJobSpec, TrainJobStatus, TrainingRuntime, TrainingRuntimeSpec,
};
use crate::trainforge::v1alpha1::{
    ClusterTrainerPlugin, ClusterTrainerPluginSpec, ClusterTrainerPluginStatus, TrainerPlugin,
    TrainerPluginPolicy, TrainerPluginPolicySpec, TrainerPluginSpec,
};

/// Errors while generating CRDs.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// Building a schema failed.
    #[error("schema of {kind}: {source}")]
    Schema {
        /// The kind whose schema failed.
        kind: &'static str,
        /// The cause.
        source: SchemaError,
    },
    /// The generated CRD has no version to attach the schema to.
    #[error("CRD of {0} has no version")]
    NoVersion(&'static str),
}

/// All CRDs Trainforge installs, in a stable order.
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Ok(vec![
        trainjob_crd()?,
        training_runtime_crd()?,
        cluster_training_runtime_crd()?,
        cluster_trainer_plugin_crd()?,
        trainer_plugin_crd()?,
        trainer_plugin_policy_crd()?,
    ])
}

/// The file name controller-gen uses for a CRD: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The `trainjobs.trainer.kubeflow.org` CRD.
pub fn trainjob_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = "TrainJob";
    let err = |source| CrdError::Schema { kind: KIND, source };
    let mut schemas = StructuralSchemas::new();
    let spec = schemas.schema_for::<TrainJobSpec>().map_err(err)?;
    let status = schemas.schema_for::<TrainJobStatus>().map_err(err)?;
    let root = root_schema(
        "TrainJob represents the configuration of a training job.",
        spec,
        Some(status),
        &[cel::TRAINJOB_NAME_RFC1035, cel::TRAINJOB_NAME_LENGTH],
    );
    with_schema(TrainJob::crd(), KIND, root)
}

/// The `trainingruntimes.trainer.kubeflow.org` CRD.
pub fn training_runtime_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = "TrainingRuntime";
    let root = runtime_root_schema(
        KIND,
        "TrainingRuntime represents a training runtime which can be referenced as part of `runtimeRef` API in TrainJob. This resource is a namespaced-scoped and can be referenced by TrainJob that created in the *same* namespace as the TrainingRuntime.",
    )?;
    with_schema(TrainingRuntime::crd(), KIND, root)
}

/// The `clustertrainingruntimes.trainer.kubeflow.org` CRD (same schema as
/// TrainingRuntime, cluster scoped).
pub fn cluster_training_runtime_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = CLUSTER_TRAINING_RUNTIME_KIND;
    let root = runtime_root_schema(
        KIND,
        "ClusterTrainingRuntime represents a training runtime which can be referenced as part of `runtimeRef` API in TrainJob. This resource is a cluster-scoped and can be referenced by TrainJob that created in *any* namespace.",
    )?;
    let mut crd = TrainingRuntime::crd();
    crd.metadata.name = Some("clustertrainingruntimes.trainer.kubeflow.org".into());
    crd.spec.scope = "Cluster".into();
    crd.spec.names.kind = KIND.into();
    crd.spec.names.plural = "clustertrainingruntimes".into();
    crd.spec.names.singular = Some("clustertrainingruntime".into());
    with_schema(crd, KIND, root)
}

/// The `clustertrainerplugins.trainforge.dev` CRD (cluster scoped, status
/// subresource).
pub fn cluster_trainer_plugin_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = crate::trainforge::v1alpha1::CLUSTER_TRAINER_PLUGIN_KIND;
    let err = |source| CrdError::Schema { kind: KIND, source };
    let mut schemas = StructuralSchemas::new();
    let spec = schemas
        .schema_for::<ClusterTrainerPluginSpec>()
        .map_err(err)?;
    let status = schemas
        .schema_for::<ClusterTrainerPluginStatus>()
        .map_err(err)?;
    let root = root_schema(
        "ClusterTrainerPlugin configures one framework plugin (a Wasm component) that the operator fetches, verifies, compiles and serves; editing it swaps the plugin at run time, keeping the last good version serving if the new one fails.",
        spec,
        Some(status),
        &[],
    );
    with_schema(ClusterTrainerPlugin::crd(), KIND, root)
}

/// The `trainerplugins.trainforge.dev` CRD (namespaced, status
/// subresource): a `ClusterTrainerPlugin` spec plus a TrainJob selector.
pub fn trainer_plugin_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = crate::trainforge::v1alpha1::TRAINER_PLUGIN_KIND;
    let err = |source| CrdError::Schema { kind: KIND, source };
    let mut schemas = StructuralSchemas::new();
    let spec = schemas.schema_for::<TrainerPluginSpec>().map_err(err)?;
    let status = schemas
        .schema_for::<ClusterTrainerPluginStatus>()
        .map_err(err)?;
    let root = root_schema(
        "TrainerPlugin configures one framework plugin (a Wasm component) for the TrainJobs of its namespace, within the ceiling of the cluster's TrainerPluginPolicy.",
        spec,
        Some(status),
        &[],
    );
    with_schema(TrainerPlugin::crd(), KIND, root)
}

/// The `trainerpluginpolicies.trainforge.dev` CRD (cluster scoped; only the
/// object named `default` is accepted).
pub fn trainer_plugin_policy_crd() -> Result<CustomResourceDefinition, CrdError> {
    const KIND: &str = crate::trainforge::v1alpha1::TRAINER_PLUGIN_POLICY_KIND;
    let err = |source| CrdError::Schema { kind: KIND, source };
    let mut schemas = StructuralSchemas::new();
    let spec = schemas
        .schema_for::<TrainerPluginPolicySpec>()
        .map_err(err)?;
    let root = root_schema(
        "TrainerPluginPolicy is the ceiling on tenant plugins (TrainerPlugin): which namespaces may have them, which sources, phases and kinds they may use, their largest limits and grants, and the pod security level of what they change. Only the object named default is read.",
        spec,
        None,
        &[crate::trainforge::v1alpha1::cel::POLICY_NAMED_DEFAULT],
    );
    with_schema(TrainerPluginPolicy::crd(), KIND, root)
}

fn runtime_root_schema(kind: &'static str, description: &str) -> Result<Value, CrdError> {
    let mut schemas = StructuralSchemas::new();
    let spec = schemas
        .schema_for::<TrainingRuntimeSpec>()
        .map_err(|source| CrdError::Schema { kind, source })?;
    Ok(root_schema(description, spec, None, &[]))
}

/// The object-level schema: `apiVersion`, `kind`, `metadata`, `spec` (required)
/// and optionally `status`, plus object-level CEL rules.
fn root_schema(description: &str, spec: Value, status: Option<Value>, rules: &[CelRule]) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("apiVersion".into(), json!({
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
    }));
    properties.insert("kind".into(), json!({
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
    }));
    properties.insert("metadata".into(), json!({"type": "object"}));
    properties.insert("spec".into(), spec);
    if let Some(status) = status {
        properties.insert("status".into(), status);
    }
    let mut root = json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": ["spec"],
    });
    if !rules.is_empty()
        && let Some(obj) = root.as_object_mut()
    {
        obj.insert("x-kubernetes-validations".into(), json!(rules));
    }
    root
}

fn with_schema(
    mut crd: CustomResourceDefinition,
    kind: &'static str,
    root: Value,
) -> Result<CustomResourceDefinition, CrdError> {
    let props: JSONSchemaProps = serde_json::from_value(root).map_err(|e| CrdError::Schema {
        kind,
        source: SchemaError::Props(e),
    })?;
    let version = crd
        .spec
        .versions
        .first_mut()
        .ok_or(CrdError::NoVersion(kind))?;
    version.schema = Some(CustomResourceValidation {
        open_api_v3_schema: Some(props),
    });
    Ok(crd)
}
