//! The demo's training pod reporting its progress (upstream's
//! `TrainJobStatus` feature): kwok runs no containers, so the demo does
//! what the pod's code would with what the operator gave the pod — the
//! URL and CA paths in its env, a token projected for its TrainJob's
//! audience (asked of the API server, as the kubelet would), the CA from
//! the TrainJob's `<name>-tls-config` ConfigMap — posts a report, and shows
//! the TrainJob's `status.trainerStatus`.

#[allow(clippy::wildcard_imports)]
use super::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use live_view::{jobset_resource, trainjob_resource};

/// Operator flags that turn the status server on at `addr`.
pub(crate) fn operator_args(addr: std::net::SocketAddr) -> Vec<String> {
    vec![
        format!("--status-server-bind-address={addr}"),
        format!("--status-server-url=https://{addr}"),
    ]
}

/// Report progress for TrainJob `ns/name` as its trainer pod would, and
/// return its `status.trainerStatus` afterwards.
pub(crate) async fn report(
    client: &kube::Client,
    dir: &Path,
    ns: &str,
    name: &str,
) -> Result<Value, DemoError> {
    let fail = |what: String| DemoError::Progress(format!("{ns}/{name}: {what}"));
    let jobsets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &jobset_resource());
    let js =
        serde_json::to_value(jobsets.get(name).await?).map_err(|e| fail(format!("JobSet: {e}")))?;
    // The trainer pods' template: the replicated job `node`.
    let pod = js
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .and_then(|jobs| jobs.iter().find(|j| j["name"] == "node"))
        .and_then(|j| j.pointer("/template/spec/template/spec"))
        .ok_or_else(|| fail("the JobSet has no replicated job `node`".into()))?;
    let env = |var: &str| {
        pod.pointer("/containers/0/env")
            .and_then(Value::as_array)
            .and_then(|e| e.iter().find(|v| v["name"] == var))
            .and_then(|v| v["value"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("the trainer container has no {var}")))
    };
    let url = env("KUBEFLOW_TRAINER_SERVER_URL")?;
    let audience = pod
        .pointer("/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .find_map(|s| {
            s.pointer("/serviceAccountToken/audience")
                .and_then(Value::as_str)
        })
        .ok_or_else(|| fail("the trainer pods project no token".into()))?
        .to_owned();
    let ca = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(&format!("{name}-tls-config"))
        .await?
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .ok_or_else(|| fail("no ca.crt in the CA ConfigMap".into()))?;
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(
            "default",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: Some(vec![audience]),
                    expiration_seconds: Some(3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            },
        )
        .await?
        .status
        .map(|s| s.token)
        .ok_or_else(|| fail("the TokenRequest returned no token".into()))?;

    // The pod's HTTPS client: the server's CA, the token as bearer.
    let (base, path) = url
        .find("/apis/")
        .map(|i| url.split_at(i))
        .ok_or_else(|| fail(format!("unexpected URL {url}")))?;
    let ca_file = dir.join(format!("progress-{ns}-{name}-ca.crt"));
    std::fs::write(&ca_file, ca).map_err(|e| fail(format!("{}: {e}", ca_file.display())))?;
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "status", "cluster": {"server": base,
            "certificate-authority": ca_file.to_string_lossy()}}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "status", "user": "pod"}}],
    });
    let kubeconfig: Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| fail(format!("client config: {e}")))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(format!("client config: {e}")))?;
    let pod_client = kube::Client::try_from(config)?;
    let body = serde_json::json!({"trainerStatus": {
        "progressPercentage": 100,
        "estimatedRemainingSeconds": 0,
        "metrics": [{"name": "loss", "value": "0.042"}, {"name": "accuracy", "value": "0.987"}],
    }});
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| fail(format!("request: {e}")))?;
    pod_client.request_text(request).await?;

    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &trainjob_resource());
    let tj = serde_json::to_value(trainjobs.get(name).await?)
        .map_err(|e| fail(format!("TrainJob: {e}")))?;
    tj.pointer("/status/trainerStatus")
        .cloned()
        .ok_or_else(|| fail("no status.trainerStatus after the report".into()))
}
