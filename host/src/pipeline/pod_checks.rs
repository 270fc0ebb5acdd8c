//! What the API server would refuse in the pods a TrainJob asks for, found
//! in the TrainJob itself before any plugin runs.
//!
//! Rule: a TrainJob whose own fields would make its pods invalid is refused
//! at admission (and by the controller's second line) naming the field,
//! instead of being admitted and then failing, unseen, when the JobSet's
//! Jobs create pods. Checked anywhere in `spec` (the trainer, the
//! initializers, `runtimePatches`, the v2.1 overrides), as Kubernetes
//! checks pods:
//! - an `env` entry's `name`: printable ASCII other than `=` (Kubernetes
//!   1.34's relaxed rule, the most any supported server accepts);
//! - `resources`/`resourcesPerNode` `requests` and `limits`: none negative, extended resources (any name but `cpu`, `memory`,
//!   `ephemeral-storage`, `hugepages-*`) whole numbers, requests at most
//!   the limits;
//! - `labels` (of any `metadata`, and `spec.labels`): qualified-name keys
//!   and values of at most 63 characters of `[A-Za-z0-9._-]` starting and
//!   ending alphanumerically; `annotations`: qualified-name keys, at most
//!   256 KiB in all;
//! - `trainer.numNodes` (or the runtime's `mlPolicy.numNodes`): at most
//!   [`MAX_NODES`], so that no plugin is asked to lay out more nodes than a
//!   JobSet can run (a billion nodes used to end as a plugin's memory limit,
//!   naming no field).

use kube_quantity::ParsedQuantity;
use serde_json::{Map, Value};
use trainforge_api::plugin::FieldError;

/// The most nodes a TrainJob may have: Kubernetes runs an indexed Job of at
/// most 100000 completions.
pub const MAX_NODES: i64 = 100_000;

/// The most bytes of annotations one object may carry (Kubernetes').
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Every problem of `spec` (a TrainJob's, as JSON; paths start at `spec`),
/// and of the effective node count `runtime_nodes` when the TrainJob does
/// not set its own.
pub fn problems(spec: &Value, runtime_nodes: Option<i64>) -> Vec<FieldError> {
    let mut out = Vec::new();
    match spec.pointer("/trainer/numNodes").and_then(Value::as_i64) {
        Some(n) if n > MAX_NODES => out.push(FieldError::invalid(
            "spec.trainer.numNodes",
            format!("{n}: must be at most {MAX_NODES} (the most completions of an indexed Job)"),
        )),
        Some(_) => {}
        None => {
            if let Some(n) = runtime_nodes.filter(|n| *n > MAX_NODES) {
                out.push(FieldError::invalid(
                    "spec.runtimeRef",
                    format!(
                        "the runtime's mlPolicy.numNodes {n} must be at most {MAX_NODES} (the most completions of an indexed Job)"
                    ),
                ));
            }
        }
    }
    walk(spec, "spec", None, &mut out);
    out
}

fn walk(v: &Value, path: &str, parent: Option<&str>, out: &mut Vec<FieldError>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = format!("{path}.{k}");
                match k.as_str() {
                    "env" => env(x, &here, out),
                    "resources" | "resourcesPerNode" => resources(x, &here, out),
                    "labels" if parent == Some("metadata") || path == "spec" => {
                        labels(x, &here, out)
                    }
                    "annotations" if parent == Some("metadata") || path == "spec" => {
                        annotations(x, &here, out)
                    }
                    _ => {}
                }
                walk(x, &here, Some(k), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                walk(x, &format!("{path}[{i}]"), parent, out);
            }
        }
        _ => {}
    }
}

fn env(v: &Value, path: &str, out: &mut Vec<FieldError>) {
    for (i, e) in v.as_array().into_iter().flatten().enumerate() {
        let Some(name) = e.get("name").and_then(Value::as_str) else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| (' '..='~').contains(&c) && c != '=') {
            out.push(FieldError::invalid(
                format!("{path}[{i}].name"),
                format!(
                    "{name:?}: a valid environment variable name must consist only of printable ASCII characters other than '='"
                ),
            ));
        }
    }
}

/// Resource names whose quantities may have fractions.
fn is_native(resource: &str) -> bool {
    matches!(resource, "cpu" | "memory" | "ephemeral-storage") || resource.starts_with("hugepages-")
}

fn resources(v: &Value, path: &str, out: &mut Vec<FieldError>) {
    let mut parsed: [Map<String, Value>; 2] = [Map::new(), Map::new()];
    let mut quantities: [Vec<(String, ParsedQuantity)>; 2] = [Vec::new(), Vec::new()];
    for (slot, which) in ["requests", "limits"].iter().enumerate() {
        let Some(m) = v.get(*which).and_then(Value::as_object) else {
            continue;
        };
        parsed[slot] = m.clone();
        for (resource, q) in m {
            let field = format!("{path}.{which}[{resource}]");
            let text = match q {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            // The CRD's schema refuses what is no quantity at all; one this
            // parser cannot read is left to the API server.
            let Ok(quantity) = ParsedQuantity::try_from(text.as_str()) else {
                continue;
            };
            let value = quantity.to_bytes_f64().unwrap_or(0.0);
            if value < 0.0 {
                out.push(FieldError::invalid(
                    field,
                    format!("{text}: must be greater than or equal to 0"),
                ));
            } else if !is_native(resource) && value.fract() != 0.0 {
                out.push(FieldError::invalid(
                    field,
                    format!(
                        "{text}: must be an integer (a fraction of {resource} cannot be requested)"
                    ),
                ));
            } else {
                quantities[slot].push((resource.clone(), quantity));
            }
        }
    }
    let [requests, limits] = quantities;
    for (resource, request) in &requests {
        if let Some((_, limit)) = limits.iter().find(|(r, _)| r == resource)
            && request > limit
        {
            out.push(FieldError::invalid(
                format!("{path}.requests[{resource}]"),
                format!("{request}: must be less than or equal to {resource} limit of {limit}"),
            ));
        }
    }
}

/// A DNS-1123 subdomain of at most 253 characters.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// At most `max` characters of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends (empty when `empty_ok`).
fn name_part(s: &str, max: usize, empty_ok: bool) -> bool {
    if s.is_empty() {
        return empty_ok;
    }
    s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A qualified name: `[prefix/]name`, the prefix a DNS subdomain.
fn qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix) && name_part(name, 63, false),
        None => name_part(key, 63, false),
    }
}

const QUALIFIED: &str = "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9._-] beginning and ending with an alphanumeric character";

fn labels(v: &Value, path: &str, out: &mut Vec<FieldError>) {
    for (k, x) in v.as_object().into_iter().flatten() {
        if !qualified_name(k) {
            out.push(FieldError::invalid(path, format!("{k:?}: {QUALIFIED}")));
        }
        if let Some(value) = x.as_str()
            && !name_part(value, 63, true)
        {
            out.push(FieldError::invalid(
                format!("{path}[{k}]"),
                format!(
                    "a label value must be at most 63 characters of [A-Za-z0-9._-] beginning and ending with an alphanumeric character ({} given)",
                    value.chars().count()
                ),
            ));
        }
    }
}

fn annotations(v: &Value, path: &str, out: &mut Vec<FieldError>) {
    let mut bytes = 0;
    for (k, x) in v.as_object().into_iter().flatten() {
        if !qualified_name(&k.to_ascii_lowercase()) {
            out.push(FieldError::invalid(path, format!("{k:?}: {QUALIFIED}")));
        }
        bytes += k.len() + x.as_str().map_or(0, str::len);
    }
    if bytes > MAX_ANNOTATIONS_BYTES {
        out.push(FieldError {
            error_type: trainforge_api::plugin::FieldErrorType::TooLong,
            ..FieldError::invalid(
                path,
                format!(
                    "{bytes} bytes: annotations may be at most {MAX_ANNOTATIONS_BYTES} bytes in all"
                ),
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fields with problems, sorted.
    fn fields(spec: Value) -> Vec<String> {
        let mut f: Vec<String> = problems(&spec, None).into_iter().map(|e| e.field).collect();
        f.sort();
        f
    }

    #[test]
    fn env_names_are_printable_ascii_without_equals() {
        let spec = json!({"trainer": {"env": [
            {"name": "OK_1.x-y"}, {"name": "with space ok"}, {"name": "a=b"},
            {"name": "héllo"}, {"name": ""}, {"name": "tab\there"}]}});
        assert_eq!(
            fields(spec),
            [
                "spec.trainer.env[2].name",
                "spec.trainer.env[3].name",
                "spec.trainer.env[4].name",
                "spec.trainer.env[5].name"
            ]
        );
        // Anywhere in the spec: an initializer's, a runtime patch's.
        let deep = json!({"runtimePatches": [{"trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"template": {"spec": {"template": {"spec": {"containers": [
                {"name": "node", "env": [{"name": "ünicode"}]}]}}}}}]}}}}]});
        assert_eq!(
            fields(deep),
            [
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].name"
            ]
        );
    }

    #[test]
    fn quantities_are_non_negative_extended_ones_whole_and_requests_within_limits() {
        let spec = json!({"trainer": {"resourcesPerNode": {
            "requests": {"cpu": "-1", "memory": "1Gi", "nvidia.com/gpu": "0.5", "example.com/x": 2},
            "limits": {"memory": "512Mi", "cpu": "500m", "nvidia.com/gpu": "1"}}}});
        let p = problems(&spec, None);
        let got: Vec<(&str, &str)> = p
            .iter()
            .map(|e| (e.field.as_str(), e.detail.as_str()))
            .collect();
        assert!(
            got.iter()
                .any(|(f, d)| *f == "spec.trainer.resourcesPerNode.requests[cpu]"
                    && d.contains("greater than or equal to 0")),
            "{got:?}"
        );
        assert!(
            got.iter().any(
                |(f, d)| *f == "spec.trainer.resourcesPerNode.requests[nvidia.com/gpu]"
                    && d.contains("integer")
            ),
            "{got:?}"
        );
        assert!(
            got.iter().any(
                |(f, d)| *f == "spec.trainer.resourcesPerNode.requests[memory]"
                    && d.contains("less than or equal to memory limit")
            ),
            "{got:?}"
        );
        assert_eq!(p.len(), 3, "{got:?}");
        let fine = json!({"trainer": {"resourcesPerNode": {
            "requests": {"cpu": "0.5", "memory": "1.5Gi", "nvidia.com/gpu": "1", "hugepages-2Mi": "1Mi"},
            "limits": {"cpu": "2", "nvidia.com/gpu": 1}}}});
        assert_eq!(fields(fine), Vec::<String>::new());
        // Every notation Kubernetes reads is read (exponents, suffixes).
        let notations = json!({"trainer": {"resourcesPerNode": {
            "requests": {"cpu": "1e3m", "memory": "1E", "example.com/x": "2k"},
            "limits": {"cpu": "1.5", "memory": "2E", "example.com/x": "1e4"}}}});
        assert_eq!(fields(notations), Vec::<String>::new());
    }

    #[test]
    fn labels_and_annotations_are_checked_as_kubernetes_checks_them() {
        let long = "x".repeat(300);
        let spec = json!({
            "labels": {"team": "a", "bad key!": "v"},
            "podTemplateOverrides": [{"metadata": {
                "labels": {"ok": long, "example.com/fine": "yes", "": "empty"},
                "annotations": {"Example.com/Upper": "ok", "no//": "x"}}}],
            // A nodeSelector is no label map of the pod's own.
            "trainer": {"nodeSelector": {"bad key!": "v"}}});
        assert_eq!(
            fields(spec),
            [
                "spec.labels",
                "spec.podTemplateOverrides[0].metadata.annotations",
                "spec.podTemplateOverrides[0].metadata.labels",
                "spec.podTemplateOverrides[0].metadata.labels[ok]"
            ]
        );
        let big = json!({"annotations": {"a": "y".repeat(MAX_ANNOTATIONS_BYTES)}});
        assert_eq!(fields(big), ["spec.annotations"]);
    }

    #[test]
    fn node_counts_are_bounded_by_the_trainjob_or_its_runtime() {
        assert_eq!(
            fields(json!({"trainer": {"numNodes": 1_000_000_000}})),
            ["spec.trainer.numNodes"]
        );
        assert_eq!(
            fields(json!({"trainer": {"numNodes": MAX_NODES}})),
            Vec::<String>::new()
        );
        let from_runtime: Vec<String> = problems(&json!({}), Some(MAX_NODES + 1))
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(from_runtime, ["spec.runtimeRef"]);
        // The TrainJob's own count wins over the runtime's.
        assert!(problems(&json!({"trainer": {"numNodes": 2}}), Some(MAX_NODES + 1)).is_empty());
    }
}
