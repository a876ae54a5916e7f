"""Two fake Kubernetes API servers as two kubeconfig contexts (a-lab, b-lab) and a module's
daemon that sees them: what the Kubernetes end-to-end modules share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tests.fakes.kubeapi import FakeKube
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.launches import nothing_left_on

Kubes = tuple[FakeKube, FakeKube]


@contextmanager
def two_kubes(tmp_path_factory: pytest.TempPathFactory, nodes: Callable[[FakeKube, FakeKube], None]) -> Iterator[Kubes]:
    """Start both API servers, let ``nodes`` add their nodes; at the end nothing skyd made may
    be left on either."""
    a = FakeKube(tmp_path_factory.mktemp("kube-a")).start()
    b = FakeKube(tmp_path_factory.mktemp("kube-b")).start()
    with nothing_left_on(a, b):
        nodes(a, b)
        yield a, b


@contextmanager
def kube_module_env(tmp_path_factory: pytest.TempPathFactory, kubes: Kubes) -> Iterator[GEnv]:
    """A daemon (network guard on) whose kubeconfig has the contexts a-lab and b-lab."""
    a, b = kubes
    base = tmp_path_factory.mktemp("k8senv")
    cfg = a.kubeconfig(base / "kubeconfig", {"a-lab": "skyd", "b-lab": "skyd"}, servers={"b-lab": b.url})
    env_vars = {"KUBECONFIG": str(cfg), "SKYD_K8S_POLL_S": "0.1", "SKYD_PROVISION_TIMEOUT_S": "90"}
    with guarded_module_env(tmp_path_factory, base / "netguard.log", env_vars) as e:
        yield e
