"""Fixtures of the Kubeflow SDK suite.

The suite drives the published `kubeflow` SDK (TrainerClient, Kubernetes
backend) against a cluster running the Trainforge operator with the shipped
runtimes. It is started by the Rust harness `host/tests/cluster/kubeflow_sdk.rs`,
which sets:

* KUBECONFIG: a kubeconfig whose current context's namespace is the test
  namespace (so `TrainerClient()` without arguments targets it);
* TRAINFORGE_SDK_NAMESPACE: that namespace (the suite refuses to run
  without it, so it never touches a namespace it did not get).

kwok "runs" the pods: they go Running then Succeeded at once, or Failed when
labelled with KWOK_FAIL_LABEL. Containers never start, so there are no logs.
"""

import os
import time

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kubeflow.trainer import CustomTrainer, TrainerClient

# kwok's pod-container-running-failed stage fails running pods carrying this
# label (testenv/src/kwok.rs FAIL_POD_LABEL).
KWOK_FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"

# Shipped ClusterTrainingRuntimes (manifests/runtimes) and the value of their
# trainer.kubeflow.org/framework label. torchtune runtimes are BuiltinTrainer
# runtimes; every other one takes a CustomTrainer.
CUSTOM_RUNTIMES = {
    "torch-distributed": "torch",
    "deepspeed-distributed": "deepspeed",
    "mlx-distributed": "mlx",
    "jax-distributed": "jax",
    "xgboost-distributed": "xgboost",
}
BUILTIN_RUNTIMES = {
    "torchtune-llama3.2-1b": "torchtune",
    "torchtune-llama3.2-3b": "torchtune",
    "torchtune-qwen2.5-1.5b": "torchtune",
}
MPI_RUNTIMES = {"deepspeed-distributed", "mlx-distributed"}

NUM_NODES = 2
# Numbers are sent as JSON numbers ("cpu": 1.0), strings stay strings.
RESOURCES = {"cpu": 1, "memory": "1Gi"}

# How long a kwok-run TrainJob may take to reach a terminal status.
TIMEOUT = int(os.environ.get("TRAINFORGE_SDK_TIMEOUT", "120"))
POLL = 1


def train_fn():
    """The training function the SDK ships inside the TrainJob's command."""
    print("hello from the Trainforge SDK suite")


@pytest.fixture(scope="session")
def namespace() -> str:
    ns = os.environ.get("TRAINFORGE_SDK_NAMESPACE")
    if not ns:
        pytest.fail(
            "TRAINFORGE_SDK_NAMESPACE is not set: run the suite through "
            "`cargo test -p trainforge --test cluster -- kubeflow_sdk::` (or `make test`)",
            pytrace=False,
        )
    if not os.environ.get("KUBECONFIG"):
        pytest.fail("KUBECONFIG is not set", pytrace=False)
    return ns


@pytest.fixture(scope="session")
def client(namespace) -> TrainerClient:
    """The SDK's default client: Kubernetes backend, namespace from KUBECONFIG."""
    return TrainerClient()


@pytest.fixture(scope="session")
def kube(namespace) -> k8s.ApiClient:
    """A plain Kubernetes client, to check what the SDK cannot see."""
    return k8s_config.new_client_from_config()


@pytest.fixture(scope="session")
def submitted(client) -> dict:
    """Every TrainJob of the suite that the operator must run to a terminal
    status, submitted at once so they run in parallel: one per CustomTrainer
    runtime, keyed by runtime name."""
    jobs = {}
    for name in CUSTOM_RUNTIMES:
        jobs[name] = client.train(
            runtime=name,
            trainer=CustomTrainer(
                func=train_fn,
                num_nodes=NUM_NODES,
                resources_per_node=RESOURCES,
                env={"TRAINFORGE_SDK_SUITE": "1"},
            ),
        )
    return jobs


def wait_gone(what: str, present, timeout: float = 60) -> None:
    """Poll `present()` (a list of what is still there) until it is empty."""
    deadline = time.monotonic() + timeout
    left = present()
    while left:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} still present after {timeout}s: {left}")
        time.sleep(0.5)
        left = present()
