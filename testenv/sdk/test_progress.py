"""TrainJob progress (upstream's `TrainJobStatus` feature) with the SDK's
in-pod reporter, `kubeflow.trainer.update_trainjob_status`.

The harness starts the operator with its status server on and sets
TRAINFORGE_STATUS_SERVER_URL (the base URL it gives pods). kwok runs no
containers, so the test plays the training pod: it reads what the operator
put into the pod template (env, the projected token's audience, the CA
ConfigMap), gets a token for that audience from the API server (as the
kubelet would for the projected volume), and reports through the SDK. The
refusals are upstream's status codes, sent with `requests` (an SDK
dependency), since the SDK's reporter only returns True or False.
"""

import os
import time

import pytest
import requests
from kubernetes import client as k8s

import kubeflow.trainer
from conftest import POLL, RESOURCES, TIMEOUT, train_fn
from kubeflow.trainer import CustomTrainer

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
MOUNT = "/var/run/secrets/kubeflow/trainer"
REPORTER_SA = "progress-reporter"


def audience(namespace: str, name: str) -> str:
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


@pytest.fixture(scope="module")
def server_url() -> str:
    url = os.environ.get("TRAINFORGE_STATUS_SERVER_URL")
    if not url:
        pytest.fail(
            "TRAINFORGE_STATUS_SERVER_URL is not set: the harness starts the operator "
            "with its status server and sets it",
            pytrace=False,
        )
    return url


@pytest.fixture(scope="module")
def reporter_sa(kube, namespace) -> str:
    core = k8s.CoreV1Api(kube)
    try:
        core.create_namespaced_service_account(
            namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=REPORTER_SA))
        )
    except k8s.ApiException as e:
        if e.status != 409:
            raise
    return REPORTER_SA


def token_for(kube, namespace, sa, aud) -> str:
    """A service-account token for `aud`, as the kubelet projects one."""
    core = k8s.CoreV1Api(kube)
    req = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[aud], expiration_seconds=3600)
    )
    return core.create_namespaced_service_account_token(sa, namespace, req).status.token


def trainer_status(kube, namespace, name):
    obj = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", name
    )
    return (obj.get("status") or {}).get("trainerStatus")


def node_pod_spec(kube, namespace, name) -> dict:
    """The pod template of the JobSet's `node` job, once the JobSet exists."""
    custom = k8s.CustomObjectsApi(kube)
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            js = custom.get_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name
            )
            break
        except k8s.ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(POLL)
    for rj in js["spec"]["replicatedJobs"]:
        if rj["name"] == "node":
            return rj["template"]["spec"]["template"]["spec"]
    raise AssertionError(f"no node job in {js['spec']['replicatedJobs']}")


@pytest.fixture(scope="module")
def jobs(client) -> dict:
    """Two TrainJobs: `reporting`, whose pod the tests play, and `other`."""
    trainer = CustomTrainer(func=train_fn, num_nodes=1, resources_per_node=RESOURCES)
    return {
        key: client.train(runtime="torch-distributed", trainer=trainer)
        for key in ["reporting", "other"]
    }


@pytest.fixture(scope="module")
def pod(kube, namespace, jobs, server_url, reporter_sa, tmp_path_factory) -> dict:
    """What a trainer pod of the `reporting` TrainJob gets, checked, with its
    token and CA written where its env points (paths rebased under a
    temporary directory)."""
    name = jobs["reporting"]
    spec = node_pod_spec(kube, namespace, name)
    aud = audience(namespace, name)
    [node] = [c for c in spec["containers"] if c["name"] == "node"]
    env = {e["name"]: e.get("value") for e in node.get("env", [])}
    url = f"{server_url}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == url, env
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == f"{MOUNT}/ca.crt", env
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{MOUNT}/token", env
    assert {"name": "kubeflow-trainer-token", "mountPath": MOUNT, "readOnly": True} in node[
        "volumeMounts"
    ], node["volumeMounts"]
    [vol] = [v for v in spec["volumes"] if v["name"] == "kubeflow-trainer-token"]
    sources = vol["projected"]["sources"]
    assert {
        "serviceAccountToken": {"audience": aud, "expirationSeconds": 3600, "path": "token"}
    } in sources, sources
    assert {
        "configMap": {"name": f"{name}-tls-config", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    } in sources, sources
    ca = k8s.CoreV1Api(kube).read_namespaced_config_map(f"{name}-tls-config", namespace).data[
        "ca.crt"
    ]
    assert "BEGIN CERTIFICATE" in ca
    files = tmp_path_factory.mktemp("trainer")
    (files / "ca.crt").write_text(ca)
    (files / "token").write_text(token_for(kube, namespace, reporter_sa, aud))
    return {
        "name": name,
        "url": url,
        "ca": str(files / "ca.crt"),
        "token": (files / "token").read_text(),
        "token_file": str(files / "token"),
    }


def post(pod, body=None, token=None, url=None, data=None, auth=None):
    headers = {"Authorization": auth or f"Bearer {token or pod['token']}"}
    if data is not None:
        return requests.post(
            url or pod["url"], data=data, headers=headers, verify=pod["ca"], timeout=10
        )
    return requests.post(url or pod["url"], json=body, headers=headers, verify=pod["ca"], timeout=10)


# Upstream's status server scenarios (test/integration/statusserver), one
# test each, named after them; docs/conformance.md lists them.


def test_should_update_the_trainjob_status_when_the_request_is_valid(kube, namespace, pod):
    """upstream: "Should update the TrainJob status when the request is valid"."""
    r = post(pod, {"trainerStatus": {"progressPercentage": 50}})
    assert r.status_code == 200, r.text
    status = trainer_status(kube, namespace, pod["name"])
    assert status["progressPercentage"] == 50, status
    assert status["lastUpdatedTime"], status


def test_should_overwrite_existing_status_not_merge_when_posting_a_new_update(kube, namespace, pod):
    """upstream: "Should overwrite existing status, not merge, when posting a
    new update": a second update without a field clears it."""
    r = post(pod, {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 9}})
    assert r.status_code == 200, r.text
    assert trainer_status(kube, namespace, pod["name"])["estimatedRemainingSeconds"] == 9
    r = post(pod, {"trainerStatus": {"progressPercentage": 50}})
    assert r.status_code == 200, r.text
    assert r.json() == {"trainerStatus": {"progressPercentage": 50}}
    status = trainer_status(kube, namespace, pod["name"])
    assert status["progressPercentage"] == 50, status
    assert "estimatedRemainingSeconds" not in status and "metrics" not in status, status


def test_should_accept_an_empty_update_request_but_not_overwrite_existing_status(kube, namespace, pod):
    """upstream: "Should accept an empty update request but not overwrite
    existing status"."""
    r = post(pod, {"trainerStatus": {"progressPercentage": 40}})
    assert r.status_code == 200, r.text
    r = post(pod, {})
    assert r.status_code == 200, r.text
    assert trainer_status(kube, namespace, pod["name"])["progressPercentage"] == 40


def test_should_reject_a_request_with_progresspercentage_over_100_with_a_useful_error_message(
    kube, namespace, pod
):
    """upstream: "Should reject a request with progressPercentage > 100 with a
    useful error message": 422 Invalid naming the TrainJob, status untouched."""
    before = trainer_status(kube, namespace, pod["name"])
    r = post(pod, {"trainerStatus": {"progressPercentage": 101}})
    assert r.status_code == 422, r.text
    assert r.json()["reason"] == "Invalid" and pod["name"] in r.json()["message"], r.text
    assert trainer_status(kube, namespace, pod["name"]) == before


def test_undecodable_and_oversized_bodies_are_refused(kube, namespace, pod):
    """Ours beyond upstream's scenarios: undecodable bodies are 422, a body
    past 64 KiB is 413, and nothing is written."""
    before = trainer_status(kube, namespace, pod["name"])
    for bad in [b"not json", b'{"trainerStatus": {"progressPercentage": "half"}}']:
        r = post(pod, data=bad)
        assert r.status_code == 422, r.text
        assert r.json()["message"] == "Invalid payload"
    r = post(pod, data=b'{"trainerStatus": {"metrics": [' + b'{"name":"x","value":"y"},' * 4000 + b"]}}")
    assert r.status_code == 413, r.text
    assert trainer_status(kube, namespace, pod["name"]) == before


def test_should_reject_an_update_to_a_non_existing_trainjob_with_a_useful_error_message(
    kube, namespace, pod, reporter_sa, server_url
):
    """upstream: "Should reject an update to a non-existing TrainJob with a
    useful error message"."""
    ghost = "no-such-trainjob"
    url = f"{server_url}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{ghost}/status"
    token = token_for(kube, namespace, reporter_sa, audience(namespace, ghost))
    r = post(pod, {"trainerStatus": {"progressPercentage": 1}}, token=token, url=url)
    assert r.status_code == 404, r.text
    assert r.json()["message"] == "Train job not found"
    with pytest.raises(k8s.ApiException) as e:
        k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", ghost
        )
    assert e.value.status == 404
    # Any other route is 404 too.
    r = requests.get(pod["url"], verify=pod["ca"], timeout=10)
    assert r.status_code == 404 and r.json()["message"] == "Not found", r.text


def test_tokens_not_bound_to_this_trainjob_are_403(kube, namespace, pod, jobs, reporter_sa):
    """No token, another scheme, a token for another audience (the API
    server's, `vault`) or for another TrainJob: 403, nothing written."""
    before = trainer_status(kube, namespace, pod["name"])
    body = {"trainerStatus": {"progressPercentage": 99}}
    other = audience(namespace, jobs["other"])
    for why, kwargs in [
        ("no token", {"auth": "Bearer"}),
        ("basic auth", {"auth": "Basic dXNlcjpwYXNz"}),
        ("garbage token", {"token": "not-a-token"}),
        ("vault audience", {"token": token_for(kube, namespace, reporter_sa, "vault")}),
        ("another TrainJob's token", {"token": token_for(kube, namespace, reporter_sa, other)}),
    ]:
        r = post(pod, body, **kwargs)
        assert r.status_code == 403, f"{why}: {r.status_code} {r.text}"
        assert r.json()["reason"] == "Forbidden", why
    r = requests.post(pod["url"], json=body, verify=pod["ca"], timeout=10)
    assert r.status_code == 403, r.text
    assert trainer_status(kube, namespace, pod["name"]) == before


def test_a_trainjob_that_reports_too_often_is_slowed_down(pod):
    """At most a burst of writes per TrainJob, then 429 with Retry-After."""
    answers = [post(pod, {"trainerStatus": {"progressPercentage": 60}}) for _ in range(30)]
    codes = [r.status_code for r in answers]
    assert codes[0] == 200 and set(codes) == {200, 429}, codes
    limited = next(r for r in answers if r.status_code == 429)
    assert int(limited.headers["Retry-After"]) >= 1, limited.headers
    assert limited.json()["reason"] == "TooManyRequests", limited.text


def test_should_inject_runtime_configuration_which_allows_the_runtime_status_endpoint_to_be_called(
    client, kube, namespace, pod, monkeypatch
):
    """upstream e2e: "should inject runtime configuration which allows the
    runtime status endpoint to be called": with what the operator injected
    (checked by the `pod` fixture: env, projected token, CA), the SDK's
    in-pod reporter posts progress 42 %, 120 s remaining, loss and accuracy;
    the TrainJob shows them and runs to Complete, keeping them."""
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", pod["url"])
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", pod["ca"])
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", pod["token_file"])
    time.sleep(1.5)  # the rate test above spent the burst; 5 writes a second come back
    sent = kubeflow.trainer.update_trainjob_status(
        progress_percent=42,
        estimated_remaining_seconds=120,
        metrics={"loss": 0.123, "accuracy": 0.95},
    )
    assert sent is True
    want = {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.123"}, {"name": "accuracy", "value": "0.95"}],
    }
    status = trainer_status(kube, namespace, pod["name"])
    assert {k: status.get(k) for k in want} == want, status
    job = client.wait_for_job_status(
        pod["name"], status={"Complete"}, timeout=TIMEOUT, polling_interval=POLL
    )
    assert job.status == "Complete"
    status = trainer_status(kube, namespace, pod["name"])
    assert {k: status.get(k) for k in want} == want, status
