//! The pure side of a status-server request: its route, its bearer token,
//! its body, and the `metav1.Status` answers (no I/O).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use trainforge_api::trainer::v1alpha1::TrainerStatus;

/// Largest body accepted (upstream's 64 KiB); larger is `413`.
pub const MAX_BODY_BYTES: usize = 64 << 10;

/// The TrainJob a request is about, from its path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// The TrainJob of `POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/
/// {namespace}/trainjobs/{name}/status`; `None` for any other method or
/// path (upstream answers those `404 Not found`). Namespace and name must
/// be non-empty path segments.
pub fn route(method: &Method, path: &str) -> Option<Target> {
    if method != Method::POST {
        return None;
    }
    let rest = path.strip_prefix("/apis/trainer.kubeflow.org/v1alpha1/namespaces/")?;
    let (namespace, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("trainjobs/")?;
    let name = rest.strip_suffix("/status")?;
    let segment = |s: &str| !s.is_empty() && !s.contains('/');
    (segment(namespace) && segment(name)).then(|| Target {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// The token of an `Authorization` header: exactly two whitespace-separated
/// fields, the first `Bearer` in any case (upstream's parsing).
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let mut fields = header?.split_whitespace();
    let (scheme, token) = (fields.next()?, fields.next()?);
    (fields.next().is_none() && scheme.eq_ignore_ascii_case("bearer")).then_some(token)
}

/// What a body asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// No `trainerStatus`: answered `200` with the request, nothing written.
    Nothing,
    /// Replace `status.trainerStatus` with this.
    Replace(TrainerStatus),
}

/// Decode an `UpdateTrainJobStatusRequest` (`{"trainerStatus": {…}}`;
/// unknown fields ignored, as upstream). A body that is not that is
/// `Err` with the decoder's reason (`422 Invalid payload`). The ranges
/// (`progressPercentage` 0–100, …) are the CRD's, enforced by the API
/// server on the write.
pub fn decode(body: &[u8]) -> Result<Update, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Request {
        #[serde(default)]
        trainer_status: Option<TrainerStatus>,
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("the body is not a JSON object".into());
    }
    let r: Request = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok(match r.trainer_status {
        None => Update::Nothing,
        Some(s) => Update::Replace(s),
    })
}

/// The server-side apply body that makes `status.trainerStatus` exactly
/// `status` (a field it leaves out is removed: the field manager owns the
/// whole of it). `lastUpdatedTime` is kept to the second, as a
/// `metav1.Time` keeps it (the SDK sends microseconds); a missing one is
/// `now` (the CRD requires one).
pub fn apply_body(target: &Target, mut status: TrainerStatus, now: &str) -> Value {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{RoundMode, TimestampRound, Unit};
    let to_second = TimestampRound::new()
        .smallest(Unit::Second)
        .mode(RoundMode::Trunc);
    status.last_updated_time = status
        .last_updated_time
        .map(|t| t.0)
        .or_else(|| now.parse().ok())
        .map(|t| Time(t.round(to_second).unwrap_or(t)));
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": target.name, "namespace": target.namespace},
        "status": {"trainerStatus": status},
    })
}

/// A `metav1.Status` failure answer: `code`, its reason, `message`.
pub fn failure(code: StatusCode, message: &str) -> Value {
    let reason = match code {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::FORBIDDEN => "Forbidden",
        StatusCode::UNPROCESSABLE_ENTITY => "Invalid",
        StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
        StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
        _ => "InternalError",
    };
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    const PATH: &str =
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job-1/status";

    #[test]
    fn only_a_post_to_a_trainjob_status_path_is_routed() {
        assert_eq!(
            route(&Method::POST, PATH),
            Some(Target {
                namespace: "team-a".into(),
                name: "job-1".into()
            })
        );
        for (m, p) in [
            (Method::GET, PATH),
            (Method::PUT, PATH),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/job-1",
            ),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces//trainjobs/job-1/status",
            ),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs//status",
            ),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/b/c/status",
            ),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/jobsets/b/status",
            ),
            (
                Method::POST,
                "/apis/trainer.kubeflow.org/v1/namespaces/a/trainjobs/b/status",
            ),
            (Method::POST, "/healthz"),
        ] {
            assert_eq!(route(&m, p), None, "{m} {p}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_any_case_with_exactly_two_fields() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer \t abc")), Some("abc"));
        assert_eq!(bearer(Some("BEARER abc")), Some("abc"));
        for h in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Basic abc"),
            Some("Bearer a b"),
            Some("abc"),
        ] {
            assert_eq!(bearer(h), None, "{h:?}");
        }
    }

    #[test]
    fn bodies_decode_into_an_update_or_a_reason() {
        assert_eq!(decode(b"{}").unwrap(), Update::Nothing);
        assert_eq!(decode(br#"{"other": 1}"#).unwrap(), Update::Nothing);
        let Update::Replace(s) = decode(
            br#"{"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 120,
                "metrics": [{"name": "loss", "value": "0.25"}],
                "lastUpdatedTime": "2026-11-28T08:00:00Z"}}"#,
        )
        .unwrap() else {
            panic!("not an update")
        };
        assert_eq!(s.progress_percentage, Some(42));
        assert_eq!(s.metrics.unwrap()[0].value, "0.25");
        // Out of range still decodes: the API server's schema refuses it.
        assert!(decode(br#"{"trainerStatus": {"progressPercentage": 101}}"#).is_ok());
        for bad in [
            &b"not json"[..],
            br#"{"trainerStatus": {"progressPercentage": "half"}}"#,
            br#"{"trainerStatus": {"progressPercentage": 4.5}}"#,
            br#"{"trainerStatus": {"metrics": [{"name": "loss"}]}}"#,
            br#"[]"#,
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_apply_body_owns_the_whole_trainer_status() {
        let t = Target {
            namespace: "ns".into(),
            name: "j".into(),
        };
        let s = TrainerStatus {
            progress_percentage: Some(5),
            ..TrainerStatus::default()
        };
        let sdk = TrainerStatus {
            last_updated_time: Some(
                serde_json::from_value(json!("2026-11-28T07:30:00.987654+00:00")).unwrap(),
            ),
            ..TrainerStatus::default()
        };
        assert_eq!(
            apply_body(&t, sdk, "2026-11-28T08:00:00Z")["status"]["trainerStatus"]["lastUpdatedTime"],
            "2026-11-28T07:30:00Z",
            "the SDK's time, to the second"
        );
        assert_eq!(
            apply_body(&t, s, "2026-11-28T08:00:00Z"),
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "j", "namespace": "ns"},
                "status": {"trainerStatus": {"progressPercentage": 5,
                    "lastUpdatedTime": "2026-11-28T08:00:00Z"}}})
        );
    }

    #[test]
    fn failures_are_metav1_statuses() {
        let s = failure(StatusCode::NOT_FOUND, "Train job not found");
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["kind"], "Status");
        assert_eq!(failure(StatusCode::PAYLOAD_TOO_LARGE, "x")["code"], 413);
    }
}
