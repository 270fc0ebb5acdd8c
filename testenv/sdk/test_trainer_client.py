"""The Kubeflow SDK's TrainerClient (Kubernetes backend) against Trainforge.

Every TrainJob is created through `TrainerClient.train`, and every check
of what the SDK reports goes through the SDK; the plain Kubernetes client
only looks at what the SDK does not show (the objects the operator owns,
the stored TrainJob body).
"""

import copy
import logging
import time

import pytest
from kubernetes import client as k8s

from conftest import (
    BUILTIN_RUNTIMES,
    CUSTOM_RUNTIMES,
    KWOK_FAIL_LABEL,
    MPI_RUNTIMES,
    NUM_NODES,
    POLL,
    RESOURCES,
    TIMEOUT,
    train_fn,
    wait_gone,
)
from kubeflow.trainer import CustomTrainer, TrainerClient
from kubeflow.trainer.options import (
    ActiveDeadlineSeconds,
    Annotations,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    Labels,
    Name,
    PodTemplatePatch,
    ReplicatedJobPatch,
    RuntimePatch,
    TrainingRuntimeSpecPatch,
)

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
# A namespaced copy of torch-distributed whose Jobs do not retry: a failing
# pod fails the Job, the JobSet and the TrainJob at once.
NO_RETRIES = "torch-no-retries"
# activeDeadlineSeconds of the job whose pods never finish.
DEADLINE = 10


def step_names(n: int) -> list[str]:
    return [f"node-{i}" for i in range(n)]


def node_pods_patch(labels: dict, annotations: dict | None = None) -> RuntimePatch:
    """Labels and annotations on the pod template of the `node` job."""
    metadata = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return RuntimePatch(
        training_runtime_spec=TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(
                spec=JobSetSpecPatch(
                    replicated_jobs=[
                        ReplicatedJobPatch(
                            name="node",
                            template=JobTemplatePatch(
                                spec=JobSpecPatch(template=PodTemplatePatch(metadata=metadata))
                            ),
                        )
                    ]
                )
            )
        )
    )


def fail_pods_patch() -> RuntimePatch:
    """kwok fails the `node` pods once they are Running."""
    return node_pods_patch({KWOK_FAIL_LABEL: "true"})


def long_running_patch() -> RuntimePatch:
    """kwok keeps the `node` pods Running for 10 minutes (then fails them)."""
    return node_pods_patch(
        {KWOK_FAIL_LABEL: "true"},
        {f"{KWOK_FAIL_LABEL}/delay": "600s", f"{KWOK_FAIL_LABEL}/jitter-delay": "600s"},
    )


@pytest.fixture(scope="session")
def no_retries_runtime(kube, namespace) -> str:
    """TrainingRuntime NO_RETRIES in the test namespace: the shipped
    torch-distributed with `backoffLimit: 0` on its Job template."""
    api = k8s.CustomObjectsApi(kube)
    cluster = api.get_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "torch-distributed"
    )
    spec = copy.deepcopy(cluster["spec"])
    for rj in spec["template"]["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["backoffLimit"] = 0
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingRuntime",
        "metadata": {"name": NO_RETRIES, "labels": cluster["metadata"]["labels"]},
        "spec": spec,
    }
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", body)
    return NO_RETRIES


@pytest.fixture(scope="session")
def failing(client, no_retries_runtime) -> str:
    """A TrainJob whose pods kwok fails."""
    return client.train(
        runtime=no_retries_runtime,
        trainer=CustomTrainer(func=train_fn, num_nodes=1, resources_per_node=RESOURCES),
        options=[fail_pods_patch()],
    )


@pytest.fixture(scope="session")
def all_jobs(client, submitted, failing) -> dict:
    """Every TrainJob of the suite, created before the first wait so that
    the operator runs them in parallel."""
    jobs = {**submitted, "failing": failing}
    # No trainer (spec.trainer omitted: the runtime's one node), with the
    # name, labels and annotations options.
    jobs["named"] = client.train(
        runtime="torch-distributed",
        options=[
            Name("sdk-named"),
            Labels({"trainforge.test/suite": "sdk"}),
            Annotations({"trainforge.test/note": "named by the SDK"}),
        ],
    )
    # Pods that stay Running.
    jobs["running"] = client.train(
        runtime="torch-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=NUM_NODES, resources_per_node=RESOURCES),
        options=[long_running_patch()],
    )
    # Pods that stay Running past the job's active deadline.
    jobs["deadline"] = client.train(
        runtime="torch-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=1, resources_per_node=RESOURCES),
        options=[long_running_patch(), ActiveDeadlineSeconds(DEADLINE)],
    )
    return jobs


def test_client_targets_the_kubeconfig_namespace(client, namespace):
    assert client.backend.namespace == namespace


def test_client_reads_the_control_plane_version(namespace, caplog):
    """TrainerClient() reads data.kubeflow_trainer_version of the ConfigMap
    kubeflow-system/kubeflow-trainer-public and only warns when it cannot."""
    with caplog.at_level(logging.WARNING):
        TrainerClient()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, (
        "the install must ship ConfigMap kubeflow-system/kubeflow-trainer-public with "
        f"data.kubeflow_trainer_version, readable by the SDK's user: {warnings}"
    )


def test_list_runtimes_has_every_shipped_runtime(client):
    runtimes = {r.name: r for r in client.list_runtimes()}
    for name, framework in {**CUSTOM_RUNTIMES, **BUILTIN_RUNTIMES}.items():
        assert name in runtimes, sorted(runtimes)
        r = runtimes[name]
        assert r.kind.value == "ClusterTrainingRuntime", r
        assert r.trainer.framework == framework, r
        assert r.trainer.num_nodes == 1, r
        assert r.trainer.image, r
        expected = "BuiltinTrainer" if name in BUILTIN_RUNTIMES else "CustomTrainer"
        assert r.trainer.trainer_type.value == expected, r
    command = " ".join(runtimes["torch-distributed"].trainer.command)
    assert "torchrun" in command, command
    for name in MPI_RUNTIMES:
        command = " ".join(runtimes[name].trainer.command)
        assert command.startswith("mpirun"), (name, command)


def test_get_runtime(client):
    listed = {r.name: r for r in client.list_runtimes()}
    for name in CUSTOM_RUNTIMES:
        got = client.get_runtime(name)
        assert got == listed[name]
        assert got.trainer.command == listed[name].trainer.command
    with pytest.raises(RuntimeError, match="no-such-runtime"):
        client.get_runtime("no-such-runtime")


def test_get_runtime_prefers_the_namespaced_runtime(client, no_retries_runtime):
    r = client.get_runtime(no_retries_runtime)
    assert r.kind.value == "TrainingRuntime", r
    assert r.trainer.framework == "torch", r
    assert no_retries_runtime in [x.name for x in client.list_runtimes()]


@pytest.mark.parametrize("runtime", list(CUSTOM_RUNTIMES))
def test_train_runs_to_complete(client, kube, namespace, all_jobs, runtime):
    name = all_jobs[runtime]
    seen = []
    job = client.wait_for_job_status(
        name,
        status={"Complete"},
        timeout=TIMEOUT,
        polling_interval=POLL,
        callbacks=[lambda j: seen.append(j.status)],
    )
    assert job.status == "Complete"
    assert set(seen) <= {"Created", "Running", "Complete"}, seen

    job = client.get_job(name)
    assert job.name == name
    assert job.status == "Complete"
    assert job.runtime.name == runtime
    assert job.num_nodes == NUM_NODES
    # MPI runtimes: the launcher is node-0, the workers node-1..
    assert sorted(s.name for s in job.steps) == step_names(NUM_NODES), job.steps
    assert {s.status for s in job.steps} == {"Succeeded"}, job.steps
    pods = [s.pod_name for s in job.steps]
    assert all(pods) and len(set(pods)) == len(pods), job.steps

    # What the SDK sent, as the apiserver stored it.
    stored = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", name
    )
    assert stored["spec"]["runtimeRef"]["name"] == runtime
    assert stored["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    trainer = stored["spec"]["trainer"]
    assert trainer["numNodes"] == NUM_NODES
    assert float(trainer["resourcesPerNode"]["limits"]["cpu"]) == 1.0, trainer
    assert {"name": "TRAINFORGE_SDK_SUITE", "value": "1"} in trainer["env"], trainer
    launcher = "mpirun" if runtime in MPI_RUNTIMES else "bash"
    assert trainer["command"][0] == launcher, trainer["command"]


def test_list_jobs(client, all_jobs):
    for key, name in all_jobs.items():
        if key != "running":
            client.wait_for_job_status(
                name, status={"Complete", "Failed"}, timeout=TIMEOUT, polling_interval=POLL
            )
    listed = {j.name: j for j in client.list_jobs()}
    for runtime in CUSTOM_RUNTIMES:
        name = all_jobs[runtime]
        assert name in listed, sorted(listed)
        assert listed[name].status == "Complete", listed[name]
        assert listed[name].runtime.name == runtime
    assert listed[all_jobs["failing"]].status == "Failed"

    torch = client.get_runtime("torch-distributed")
    only_torch = client.list_jobs(runtime=torch)
    assert {j.runtime.name for j in only_torch} == {"torch-distributed"}, only_torch
    assert all_jobs["torch-distributed"] in [j.name for j in only_torch]
    assert all_jobs["jax-distributed"] not in [j.name for j in only_torch]


def test_failing_pods_make_the_job_failed(client, all_jobs):
    name = all_jobs["failing"]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="Failed"):
        client.wait_for_job_status(name, timeout=TIMEOUT, polling_interval=POLL)
    assert time.monotonic() - start < TIMEOUT
    job = client.wait_for_job_status(
        name, status={"Failed"}, timeout=TIMEOUT, polling_interval=POLL
    )
    assert job.status == "Failed"
    assert job.runtime.name == NO_RETRIES
    assert "Failed" in {s.status for s in job.steps}, job.steps


def test_train_without_trainer_and_with_metadata_options(client, kube, namespace, all_jobs):
    name = all_jobs["named"]
    assert name == "sdk-named"
    job = client.wait_for_job_status(name, timeout=TIMEOUT, polling_interval=POLL)
    assert job.num_nodes == 1, job
    assert [s.name for s in job.steps] == ["node-0"], job.steps
    stored = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", name
    )
    assert "trainer" not in stored["spec"], stored["spec"]
    assert stored["metadata"]["labels"]["trainforge.test/suite"] == "sdk"
    assert stored["metadata"]["annotations"]["trainforge.test/note"] == "named by the SDK"


def test_running_job(client, all_jobs):
    """Pods kwok keeps Running: the SDK infers Running from them (the
    operator sets no condition while the job runs)."""
    name = all_jobs["running"]
    job = client.wait_for_job_status(
        name, status={"Running"}, timeout=TIMEOUT, polling_interval=POLL
    )
    assert job.status == "Running"
    assert sorted(s.name for s in job.steps) == step_names(NUM_NODES), job.steps
    assert {s.status for s in job.steps} == {"Running"}, job.steps
    with pytest.raises(TimeoutError):
        client.wait_for_job_status(name, timeout=3, polling_interval=POLL)


def test_a_job_resumed_as_kueue_does_reads_running(client, kube, namespace):
    """Suspend and resume by `spec.suspend`, as Kueue admits a job: while
    suspended the SDK reads `Created`; once resumed and its pods run, the
    operator drops `Suspended=False`, so `wait_for_job_status({"Running"})`
    returns (upstream keeps it and the SDK reads `Created` for the whole run:
    kubeflow/trainer#3666, kubeflow/sdk#803)."""
    custom = k8s.CustomObjectsApi(kube)
    name = client.train(
        runtime="torch-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=NUM_NODES, resources_per_node=RESOURCES),
        options=[long_running_patch()],
    )

    def set_suspend(value: bool):
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainjobs", name, {"spec": {"suspend": value}}
        )

    set_suspend(True)
    deadline = time.monotonic() + TIMEOUT
    while True:
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
        conds = (stored.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Suspended" and c["status"] == "True" for c in conds):
            break
        assert time.monotonic() < deadline, stored.get("status")
        time.sleep(POLL)
    assert client.get_job(name).status == "Created"
    set_suspend(False)
    job = client.wait_for_job_status(
        name, status={"Running"}, timeout=TIMEOUT, polling_interval=POLL
    )
    assert job.status == "Running"
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
    assert not (stored.get("status") or {}).get("conditions"), stored["status"]
    client.delete_job(name)


def test_active_deadline_fails_the_job(client, kube, namespace, all_jobs):
    name = all_jobs["deadline"]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="Failed"):
        client.wait_for_job_status(name, timeout=TIMEOUT, polling_interval=POLL)
    assert time.monotonic() - start < TIMEOUT
    stored = k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", name
    )
    assert stored["spec"]["activeDeadlineSeconds"] == DEADLINE
    failed = [c for c in stored["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "DeadlineExceeded", stored["status"]


def test_invalid_spec_is_refused_at_create(client):
    """Admission refuses the spec (reserved PET_NNODES on a torch runtime)
    when the SDK creates the TrainJob, naming the webhook and the field, as
    Kubeflow Trainer's webhook does; nothing is stored."""
    before = {j.name for j in client.list_jobs()}
    with pytest.raises(RuntimeError) as refused:
        client.train(
            runtime="torch-distributed",
            trainer=CustomTrainer(
                func=train_fn, num_nodes=1, resources_per_node=RESOURCES, env={"PET_NNODES": "3"}
            ),
        )
    cause = refused.value.__cause__
    text = f"{refused.value} {cause}"
    assert getattr(cause, "status", None) == 403, text
    assert "validator.trainjob.trainer.kubeflow.org" in text, text
    assert "spec.trainer.env" in text and "PET_NNODES" in text, text
    assert {j.name for j in client.list_jobs()} == before


def test_get_job_events(client, all_jobs):
    name = all_jobs["torch-distributed"]
    client.wait_for_job_status(name, timeout=TIMEOUT, polling_interval=POLL)
    events = client.get_job_events(name)
    assert events, (
        "get_job_events returned nothing: the SDK only sees core/v1 Events with "
        "firstTimestamp set about the TrainJob, its JobSet, Jobs or Pods"
    )
    times = [e.event_time for e in events]
    assert all(times) and times == sorted(times), events
    mine = [e for e in events if e.involved_object_kind == "TrainJob"]
    assert mine, f"no TrainJob events among {events}"
    assert all(e.involved_object_name == name for e in mine), mine
    assert "Completed" in {e.reason for e in mine}, mine

    failing = all_jobs["failing"]
    client.wait_for_job_status(failing, status={"Failed"}, timeout=TIMEOUT, polling_interval=POLL)
    assert [
        e for e in client.get_job_events(failing) if e.involved_object_kind == "TrainJob"
    ], "no TrainJob events for the failed job"


def test_get_job_logs_is_not_served_by_kwok(client, all_jobs):
    """kwok runs no containers and serves no pods/log, so the SDK cannot
    read logs: it raises RuntimeError for the pod's log."""
    name = all_jobs["torch-distributed"]
    job = client.wait_for_job_status(name, timeout=TIMEOUT, polling_interval=POLL)
    pod = next(s.pod_name for s in job.steps if s.name == "node-0")
    with pytest.raises(RuntimeError, match=f"Failed to read logs for the pod .*/{pod}"):
        list(client.get_job_logs(name))


def namespace_objects(kube, namespace) -> list[tuple[str, str, str, list[str]]]:
    """(kind, name, uid, owner uids) of every JobSet, Job, Pod, ConfigMap,
    Secret and Service in `namespace`."""
    custom, core, batch = k8s.CustomObjectsApi(kube), k8s.CoreV1Api(kube), k8s.BatchV1Api(kube)
    jobsets = custom.list_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets"
    )["items"]
    objects = [
        (
            "JobSet",
            j["metadata"]["name"],
            j["metadata"]["uid"],
            [o["uid"] for o in j["metadata"].get("ownerReferences", [])],
        )
        for j in jobsets
    ]
    for kind, items in [
        ("Job", batch.list_namespaced_job(namespace).items),
        ("Pod", core.list_namespaced_pod(namespace).items),
        ("ConfigMap", core.list_namespaced_config_map(namespace).items),
        ("Secret", core.list_namespaced_secret(namespace).items),
        ("Service", core.list_namespaced_service(namespace).items),
    ]:
        objects += [
            (
                kind,
                o.metadata.name,
                o.metadata.uid,
                [r.uid for r in o.metadata.owner_references or []],
            )
            for o in items
        ]
    return objects


def owned_objects(kube, namespace, trainjob_uid) -> list[str]:
    """`Kind/name` of every object in `namespace` owned, directly or through
    its owners, by the TrainJob with uid `trainjob_uid`."""
    objects = namespace_objects(kube, namespace)
    owners, owned, grew = {trainjob_uid}, {}, True
    while grew:
        grew = False
        for kind, name, uid, refs in objects:
            if uid not in owners and owners.intersection(refs):
                owners.add(uid)
                owned[uid] = f"{kind}/{name}"
                grew = True
    return sorted(owned.values())


@pytest.mark.parametrize("key", ["torch-distributed", "deepspeed-distributed", "running"])
def test_delete_job_removes_the_job_and_its_children(client, kube, namespace, all_jobs, key):
    """Complete jobs (torch; MPI, which also owns a Secret) and a running one."""
    name = all_jobs[key]
    client.wait_for_job_status(
        name, status={"Complete", "Running"}, timeout=TIMEOUT, polling_interval=POLL
    )
    custom = k8s.CustomObjectsApi(kube)
    uid = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)[
        "metadata"
    ]["uid"]
    children = owned_objects(kube, namespace, uid)
    kinds = {c.split("/")[0] for c in children}
    assert {"JobSet", "Job", "Pod", "ConfigMap"} <= kinds, children

    client.delete_job(name)

    def trainjob_left():
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
        except k8s.ApiException as e:
            if e.status == 404:
                return []
            raise
        return [f"TrainJob/{name}"]

    wait_gone("the TrainJob", trainjob_left)
    assert name not in [j.name for j in client.list_jobs()]
    with pytest.raises(RuntimeError):
        client.get_job(name)
    wait_gone(
        f"children of TrainJob {name}",
        lambda: [
            f"{kind}/{n}" for kind, n, _, _ in namespace_objects(kube, namespace)
            if f"{kind}/{n}" in children
        ],
    )
