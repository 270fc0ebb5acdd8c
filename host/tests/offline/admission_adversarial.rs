//! Admission with hostile plugins: a `validate` that never returns or
//! traps follows the plugin's failure policy within the request budget,
//! through the real HTTP router.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::plugin_common::*;
use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower::ServiceExt as _;
use trainforge::admission::{AdmissionState, PluginsNow, RuntimeLookup, router};
use trainforge::ops::metrics::Metrics;
use trainforge::plugin::{
    FailurePolicy, Limits, PluginRuntime, PluginSet, PluginSource, RuntimeConfig,
};
use trainforge_api::trainer::v1alpha1::{ClusterTrainingRuntime, TrainingRuntime};

struct Fixed(Arc<PluginSet>);
impl PluginsNow for Fixed {
    fn current(&self) -> Arc<PluginSet> {
        self.0.clone()
    }
}

struct OneRuntime;
impl RuntimeLookup for OneRuntime {
    fn training_runtime(&self, _: &str, _: &str) -> Result<Option<TrainingRuntime>, String> {
        Ok(None)
    }
    fn cluster_training_runtime(
        &self,
        name: &str,
    ) -> Result<Option<ClusterTrainingRuntime>, String> {
        Ok((name == "minimal").then(|| serde_json::from_value(runtime()).unwrap()))
    }
}

/// A runtime whose calls may take 20 s (longer than any admission budget).
fn patient_runtime() -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        limits: Limits {
            timeout: Duration::from_secs(20),
            ..Limits::default()
        },
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn hostile(rt: &PluginRuntime, name: &str, attack: &str, policy: FailurePolicy) -> PluginSet {
    let mut src = PluginSource::new(
        "hostile.wasm",
        hostile_declaring(&json!({"name": name, "phases": ["validate"]})),
    );
    src.config = json!({"attack": attack}).to_string();
    src.failure_policy = policy;
    PluginSet::new(vec![rt.load(src).unwrap()]).unwrap()
}

async fn review(set: PluginSet, budget: Duration) -> (Value, Duration) {
    let state = AdmissionState::new(
        Arc::new(Fixed(Arc::new(set))),
        Arc::new(OneRuntime),
        Arc::new(Metrics::new()),
        budget,
    );
    let mut job = trainjob();
    job["metadata"]["namespace"] = json!("team");
    let body = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": "job", "namespace": "team", "operation": "CREATE", "userInfo": {},
            "object": job}}))
    .unwrap();
    let start = Instant::now();
    let resp = router(Arc::new(state))
        .oneshot(
            Request::post("/validate-trainer-kubeflow-org-v1alpha1-trainjob")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let took = start.elapsed();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (serde_json::from_slice(&bytes).unwrap(), took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_validate_is_cut_at_the_request_budget() {
    let rt = patient_runtime();
    let (out, took) = review(
        hostile(&rt, "slow-validator", "loop-validate", FailurePolicy::Fail),
        Duration::from_millis(300),
    )
    .await;
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(out["response"]["allowed"], false, "{out}");
    let m = out["response"]["status"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("plugin \"slow-validator\" failed in validate (Timeout)")
            && m.contains("time limit"),
        "{m}"
    );

    let (out, took) = review(
        hostile(
            &rt,
            "slow-validator",
            "loop-validate",
            FailurePolicy::Ignore,
        ),
        Duration::from_millis(300),
    )
    .await;
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(out["response"]["allowed"], true, "{out}");
    let w = out["response"]["warnings"].to_string();
    assert!(w.contains("slow-validator") && w.contains("Timeout"), "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_validate_follows_the_failure_policy() {
    let rt = patient_runtime();
    let (out, _) = review(
        hostile(&rt, "trapper", "trap-validate", FailurePolicy::Fail),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(out["response"]["allowed"], false, "{out}");
    let m = out["response"]["status"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("plugin \"trapper\" failed in validate (Trap)"),
        "{m}"
    );
    let (out, _) = review(
        hostile(&rt, "trapper", "trap-validate", FailurePolicy::Ignore),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(out["response"]["allowed"], true, "{out}");
    assert!(
        out["response"]["warnings"].to_string().contains("trapper"),
        "{out}"
    );
}
