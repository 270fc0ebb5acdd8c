//! AdmissionReview in and out, and the verdict a webhook reaches.
//!
//! - [`parse_review`]: the request body → [`Request`] (the object as JSON,
//!   so handlers never depend on every field decoding). A body that is not
//!   an `AdmissionReview` with a `request` is a [`ReviewError`]: no review
//!   can be answered for it.
//! - [`Verdict`]: allowed or denied, with code, reason, message, warnings
//!   and an optional JSON patch. Denials for invalid objects use HTTP code
//!   403, reason `Forbidden` and the field errors as Kubernetes aggregates
//!   them ([`super::fielderr`]), as Go admission webhooks answer.
//! - [`response_body`]: the `AdmissionReview` answer, with the patch
//!   base64-encoded as the API server expects.

use base64::Engine as _;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::Status;
use serde_json::Value;
use trainforge_api::plugin::FieldError;

pub use kube::core::admission::Operation;

use super::fielderr::{aggregate, render_field_error};

/// Why a request body cannot be answered with a review.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not an `AdmissionReview` JSON document.
    #[error("the body is not an AdmissionReview: {0}")]
    Decode(String),
    /// The review has no `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
    /// The answer could not be serialised (should not happen).
    #[error("serialising the AdmissionReview answer: {0}")]
    Encode(String),
}

/// One admission request, its object as JSON.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request as kube decoded it (for the answer's uid and types).
    pub raw: AdmissionRequest<DynamicObject>,
    /// The object being admitted (`Null` when absent, as on DELETE).
    pub object: Value,
    /// The stored object on UPDATE and DELETE.
    pub old_object: Option<Value>,
}

impl Request {
    /// The request's operation.
    pub fn operation(&self) -> Operation {
        self.raw.operation.clone()
    }

    /// `group`, `kind` of the object, as the API server gives them.
    pub fn group_kind(&self) -> (&str, &str) {
        (&self.raw.kind.group, &self.raw.kind.kind)
    }
}

/// Decode a request body.
pub fn parse_review(body: &[u8]) -> Result<Request, ReviewError> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| ReviewError::Decode(e.to_string()))?;
    let raw: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| ReviewError::NoRequest)?;
    let to_json = |o: &Option<DynamicObject>| {
        o.as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| ReviewError::Decode(e.to_string()))
    };
    let object = to_json(&raw.object)?.unwrap_or(Value::Null);
    let old_object = to_json(&raw.old_object)?;
    Ok(Request {
        raw,
        object,
        old_object,
    })
}

/// What a webhook decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// HTTP code of the denial (0 when allowed).
    pub code: u16,
    /// Status reason of the denial (`Forbidden`, `BadRequest`, ...).
    pub reason: String,
    /// The denial's message.
    pub message: String,
    /// Warnings for the client (sent whether allowed or not).
    pub warnings: Vec<String>,
    /// The JSON patch of a mutating webhook, if anything changes.
    pub patch: Option<json_patch::Patch>,
}

impl Verdict {
    /// Admit with `warnings`.
    pub fn allow(warnings: Vec<String>) -> Self {
        Verdict {
            allowed: true,
            code: 0,
            reason: String::new(),
            message: String::new(),
            warnings,
            patch: None,
        }
    }

    /// Admit with a patch (or none).
    pub fn patched(patch: Option<json_patch::Patch>, warnings: Vec<String>) -> Self {
        Verdict {
            patch,
            ..Verdict::allow(warnings)
        }
    }

    /// Deny as invalid: 403 `Forbidden`, the field errors aggregated.
    pub fn forbidden(errors: &[FieldError], warnings: Vec<String>) -> Self {
        Verdict::deny(
            403,
            "Forbidden",
            aggregate(errors.iter().map(render_field_error)),
            warnings,
        )
    }

    /// Deny with the given code, reason and message.
    pub fn deny(
        code: u16,
        reason: &str,
        message: impl Into<String>,
        warnings: Vec<String>,
    ) -> Self {
        Verdict {
            allowed: false,
            code,
            reason: reason.to_owned(),
            message: message.into(),
            warnings,
            patch: None,
        }
    }
}

/// The JSON of an `AdmissionReview` answering `request` with `verdict`.
pub fn response_body(request: &Request, verdict: &Verdict) -> Result<Vec<u8>, ReviewError> {
    let mut resp = AdmissionResponse::from(&request.raw);
    if !verdict.allowed {
        resp.allowed = false;
        resp.result = Status::failure(&verdict.message, &verdict.reason).with_code(verdict.code);
    }
    if !verdict.warnings.is_empty() {
        resp.warnings = Some(verdict.warnings.clone());
    }
    if let Some(p) = &verdict.patch {
        resp = resp
            .with_patch(p.clone())
            .map_err(|e| ReviewError::Encode(e.to_string()))?;
    }
    let mut json =
        serde_json::to_value(resp.into_review()).map_err(|e| ReviewError::Encode(e.to_string()))?;
    // The API server reads `patch` as base64 (Go `[]byte`).
    if let Some(slot) = json.pointer_mut("/response/patch") {
        let bytes: Vec<u8> =
            serde_json::from_value(slot.take()).map_err(|e| ReviewError::Encode(e.to_string()))?;
        *slot = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    serde_json::to_vec(&json).map_err(|e| ReviewError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    pub(crate) fn review(op: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
                "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
                "name": "j", "namespace": "ns", "operation": op, "userInfo": {"username": "u"},
                "object": object, "oldObject": old, "dryRun": false}}))
        .unwrap()
    }

    #[test]
    fn round_trip_with_patch_and_denial() {
        let req = parse_review(&review(
            "CREATE",
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "metadata": {"name": "j"}, "spec": {"x": 1}}),
            None,
        ))
        .unwrap();
        assert_eq!(req.object["spec"]["x"], 1);
        assert_eq!(req.operation(), Operation::Create);
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/spec/y", "value": 2}])).unwrap();
        let out: Value = serde_json::from_slice(
            &response_body(&req, &Verdict::patched(Some(patch), Vec::new())).unwrap(),
        )
        .unwrap();
        assert_eq!(out["response"]["uid"], "u-1");
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            json!([{"op": "add", "path": "/spec/y", "value": 2}])
        );
        let denied: Value = serde_json::from_slice(
            &response_body(
                &req,
                &Verdict::deny(403, "Forbidden", "no", vec!["w".into()]),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(denied["response"]["status"]["reason"], "Forbidden");
        assert_eq!(denied["response"]["status"]["message"], "no");
        assert_eq!(denied["response"]["warnings"], json!(["w"]));
        assert_eq!(denied["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(denied["kind"], "AdmissionReview");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            parse_review(b"not json"),
            Err(ReviewError::Decode(_))
        ));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::NoRequest)
        ));
    }
}
