//! Structural OpenAPI v3 schemas for our CRDs, generated from the Rust types.
//!
//! `schemars` produces the raw schemas (our doc comments become descriptions,
//! field attributes add CEL rules, list types, bounds and defaults). This module
//! then turns them into what the Kubernetes API server wants, the way
//! controller-gen does for upstream:
//!
//! * every `$ref` is inlined (CRD schemas cannot have references);
//! * `Option<T>` is just `T` (no `nullable`: the API server prunes `null`s, as
//!   for upstream's CRDs);
//! * embedded `ObjectMeta` becomes controller-gen's "embedded object meta"
//!   (`labels`, `annotations`, `name`, `namespace`, `finalizers`), so labels and
//!   annotations in templates are kept rather than pruned;
//! * `Quantity` and `IntOrString` get controller-gen's compact int-or-string
//!   schemas (k8s-openapi's Quantity schema carries a 2 KB description that
//!   would otherwise be repeated hundreds of times);
//! * descriptions inside embedded Kubernetes types are dropped to keep each CRD
//!   far below etcd's request limit (our own types keep theirs);
//! * embedded Kubernetes types get the list and map types, explicit defaults
//!   and required fields of the API server's own schema
//!   ([`crate::k8s_markers`]), so server-side apply merges `containers`,
//!   `env`, `ports`, `volumes`, … by key and defaults `ports[].protocol` to
//!   `TCP`, exactly as it does in a Pod.

use schemars::{
    JsonSchema, SchemaGenerator,
    generate::{Contract, SchemaSettings},
};
use serde_json::{Map, Value, json};

use crate::k8s_markers::{self, Markers, MarkersError};

/// Errors while building a structural schema.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A `$ref` pointed at a definition the generator did not produce.
    #[error("schema reference {0:?} has no definition")]
    MissingDefinition(String),
    /// References nest deeper than any Kubernetes type does: a recursive type.
    #[error("schema references nest deeper than {0} levels (recursive type?)")]
    TooDeep(usize),
    /// The finished schema does not fit `JSONSchemaProps`.
    #[error("generated schema is not a valid JSONSchemaProps: {0}")]
    Props(#[from] serde_json::Error),
    /// The Kubernetes markers could not be read.
    #[error(transparent)]
    Markers(#[from] MarkersError),
}

const DEFINITIONS_PATH: &str = "/components/schemas";
const REF_PREFIX: &str = "#/components/schemas/";
const MAX_DEPTH: usize = 64;

/// Schema names (from k8s-openapi) that get a hand-written replacement.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";

/// Prefix of k8s-openapi schema names: descriptions below these are dropped.
const K8S_PREFIX: &str = "io.k8s.";

/// controller-gen's pattern for `resource.Quantity`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A generator for several root schemas that share definitions.
pub struct StructuralSchemas {
    generator: SchemaGenerator,
}

impl Default for StructuralSchemas {
    fn default() -> Self {
        Self::new()
    }
}

impl StructuralSchemas {
    /// A generator with our settings: OpenAPI 3 definitions path, no
    /// transforms (we post-process ourselves), deserialize contract (a field
    /// is required unless it is optional or has a serde default).
    pub fn new() -> Self {
        let settings = SchemaSettings::openapi3().with(|s| {
            s.definitions_path = DEFINITIONS_PATH.into();
            s.meta_schema = None;
            s.transforms = Vec::new();
            s.inline_subschemas = false;
            s.contract = Contract::Deserialize;
        });
        Self {
            generator: SchemaGenerator::new(settings),
        }
    }

    /// The raw (not yet structural) schema of `T`; resolve it with [`Self::finish`].
    pub fn raw<T: JsonSchema>(&mut self) -> Value {
        self.generator.subschema_for::<T>().to_value()
    }

    /// The structural schema of `T`.
    pub fn schema_for<T: JsonSchema>(&mut self) -> Result<Value, SchemaError> {
        let raw = self.raw::<T>();
        self.finish(raw)
    }

    /// Inline references and normalise `raw` into a structural schema.
    pub fn finish(&mut self, raw: Value) -> Result<Value, SchemaError> {
        let definitions = self.generator.definitions().clone();
        let markers = k8s_markers::embedded()?;
        let mut out = inline(raw, &definitions, &markers, 0, false)?;
        normalise(&mut out);
        Ok(out)
    }
}

/// Replace `{"$ref": ..., siblings}` by the referenced definition with the
/// siblings merged over it; recurse into every subschema.
fn inline(
    mut schema: Value,
    definitions: &Map<String, Value>,
    markers: &Markers,
    depth: usize,
    in_k8s: bool,
) -> Result<Value, SchemaError> {
    if depth > MAX_DEPTH {
        return Err(SchemaError::TooDeep(MAX_DEPTH));
    }
    remove_null(&mut schema);
    let Value::Object(mut obj) = schema else {
        return Ok(schema);
    };
    let mut in_k8s = in_k8s;
    if let Some(Value::String(reference)) = obj.remove("$ref") {
        let name = reference
            .strip_prefix(REF_PREFIX)
            .unwrap_or(&reference)
            .to_string();
        let base = match name.as_str() {
            OBJECT_META => embedded_object_meta(),
            QUANTITY => quantity_schema(),
            INT_OR_STRING => int_or_string_schema(),
            _ => definitions
                .get(&name)
                .cloned()
                .ok_or_else(|| SchemaError::MissingDefinition(name.clone()))?,
        };
        let siblings = std::mem::take(&mut obj);
        // Our own field's description survives even on an embedded k8s type.
        let description = if in_k8s {
            None
        } else {
            siblings.get("description").cloned()
        };
        let mut merged = match base {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        k8s_markers::apply(markers, &name, &mut merged);
        merge_siblings(&mut merged, siblings);
        in_k8s = in_k8s || name.starts_with(K8S_PREFIX);
        let mut out = inline(
            Value::Object(merged),
            definitions,
            markers,
            depth + 1,
            in_k8s,
        )?;
        if let (Some(d), Value::Object(o)) = (description, &mut out) {
            o.insert("description".into(), d);
        }
        return Ok(out);
    }
    if in_k8s {
        obj.remove("description");
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.remove(key) {
            let sub = if sub.is_object() {
                inline(sub, definitions, markers, depth, in_k8s)?
            } else {
                sub
            };
            obj.insert(key.into(), sub);
        }
    }
    if let Some(Value::Object(props)) = obj.remove("properties") {
        let mut out = Map::new();
        for (k, v) in props {
            out.insert(k, inline(v, definitions, markers, depth, in_k8s)?);
        }
        obj.insert("properties".into(), Value::Object(out));
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.remove(key) {
            let mut out = Vec::new();
            for v in subs {
                out.push(inline(v, definitions, markers, depth, in_k8s)?);
            }
            obj.insert(key.into(), Value::Array(out));
        }
    }
    Ok(Value::Object(obj))
}

/// Merge `$ref` siblings (field-level attributes) over the definition;
/// CEL rule lists are concatenated, everything else overrides.
fn merge_siblings(base: &mut Map<String, Value>, siblings: Map<String, Value>) {
    for (k, v) in siblings {
        if k == "x-kubernetes-validations"
            && let (Some(Value::Array(existing)), Value::Array(more)) = (base.get_mut(&k), &v)
        {
            existing.extend(more.iter().cloned());
            continue;
        }
        base.insert(k, v);
    }
}

/// `Option<T>`: drop the `null` alternative schemars adds (`type: [T, "null"]`
/// or `anyOf: [T, {type: null}]`), hoisting `T` into the field's schema.
fn remove_null(schema: &mut Value) {
    let Value::Object(obj) = schema else { return };
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let t = types.remove(0);
            obj.insert("type".into(), t);
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let is_null = |v: &Value| v.get("type").is_some_and(|t| t == "null");
    if let Some(Value::Array(alternatives)) = obj.get("anyOf")
        && alternatives.iter().any(is_null)
    {
        let mut rest: Vec<Value> = alternatives
            .iter()
            .filter(|v| !is_null(v))
            .cloned()
            .collect();
        obj.remove("anyOf");
        if rest.len() == 1 {
            let inner = rest.remove(0);
            let siblings = std::mem::take(obj);
            let mut merged = match inner {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            merge_siblings(&mut merged, siblings);
            *obj = merged;
            remove_null(schema);
        } else {
            obj.insert("anyOf".into(), Value::Array(rest));
        }
    }
}

/// Final clean-up on the inlined schema: drop keywords the API server does
/// not accept in structural schemas.
fn normalise(schema: &mut Value) {
    let Value::Object(obj) = schema else { return };
    obj.remove("title");
    obj.remove("$schema");
    obj.remove("uniqueItems");
    if obj.get("default").is_some_and(Value::is_null) {
        obj.remove("default");
    }
    // An empty struct (`jax: {}`) is an object without properties.
    if obj.get("additionalProperties") == Some(&Value::Bool(false)) {
        obj.remove("additionalProperties");
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get_mut(key) {
            normalise(sub);
        }
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(normalise);
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.get_mut(key) {
            subs.iter_mut().for_each(normalise);
        }
    }
}

/// controller-gen's schema for an embedded `metav1.ObjectMeta`
/// (`crd:generateEmbeddedObjectMeta=true`).
pub fn embedded_object_meta() -> Value {
    json!({
        "type": "object",
        "properties": {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        }
    })
}

/// controller-gen's schema for `resource.Quantity`.
pub fn quantity_schema() -> Value {
    json!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// controller-gen's schema for `intstr.IntOrString`.
pub fn int_or_string_schema() -> Value {
    json!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
    })
}

/// A `schemars` transform for structs that carry unknown keys in a
/// `#[serde(flatten)] BTreeMap<String, Value>`: keep the typed properties and
/// let the API server preserve everything else.
pub fn preserve_unknown_fields(schema: &mut schemars::Schema) {
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("additionalProperties");
        obj.remove("unevaluatedProperties");
        obj.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
}
