"""Helpers for the neocloud tests (no tests in here): the environment that points each
provider at its fake, and the in-process harness (one SKYD_HOME, so the agent zipapp is
built once; the network guard on; nothing left on the fake afterwards)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import Cloud, ProvisionRequest
from skyd.clouds.catalog import load_catalog
from skyd.clouds.offering import Offering
from tests.fakes.neobase import NeoFake
from tests.support.gcp import netguard

POLL = "0.05"


def runpod_env(fake: Any, key: str | None = None) -> dict[str, str]:
    return {"RUNPOD_API_KEY": key or next(iter(fake.keys)), "SKYD_RUNPOD_API_URL": fake.api_url,
            "SKYD_RUNPOD_POLL_S": POLL, "RUNPOD_CONFIG": "/nonexistent/runpod.toml"}


def vultr_env(fake: Any, key: str | None = None) -> dict[str, str]:
    return {"VULTR_API_KEY": key or next(iter(fake.keys)), "SKYD_VULTR_API_URL": fake.api_url,
            "SKYD_VULTR_POLL_S": POLL, "SKYD_VULTR_SSH_PORT": str(fake.ssh_port),
            "SKYD_NODE_READY_POLL_S": POLL}


def hotaisle_env(fake: Any, key: str | None = None) -> dict[str, str]:
    return {"HOTAISLE_API_KEY": key or next(iter(fake.keys)), "HOTAISLE_TEAM": fake.team,
            "SKYD_HOTAISLE_API_URL": fake.api_url, "SKYD_HOTAISLE_POLL_S": POLL,
            "SKYD_HOTAISLE_SSH_PORT": str(fake.ssh_port)}


def offer(cloud: str, itype: str, region: str | None = None) -> Offering:
    for o in load_catalog().by_cloud(cloud):
        if o.instance_type == itype and (region is None or o.region == region):
            return o
    raise AssertionError(f"no {cloud} row {itype}")


def request(name: str, off: Offering, *, n: int = 1, spot: bool = False, **kw: Any) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=spot,
                            token="tok-" + name, tag=f"{name}-abc123", **kw)


@asynccontextmanager
async def in_process(cloud_cls: type[Cloud], fake: NeoFake, env: dict[str, str], home: Path,
                     tmp: Path, mp: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    for k, v in env.items():
        mp.setenv(k, v)
    mp.setenv("SKYD_HOME", str(home))
    mp.setenv("SKYD_CONFIG_DIR", str(tmp / "config"))
    fake.clear()
    before = len(netguard.VIOLATIONS)
    c = cloud_cls()
    try:
        yield c
    finally:
        await c.close()
        fake.clear()
    assert netguard.VIOLATIONS[before:] == []
    assert fake.live() == [], fake.live()


def driver_fixtures(fake_cls: type[NeoFake], cloud_cls: type[Cloud],
                    env: Callable[[Any], dict[str, str]], *, first_ip: int) -> tuple[Any, Any, Any]:
    """The ``fake``, ``home`` and ``cloud`` fixtures of a driver test module (assign them
    at module level): one fake API per module, one SKYD_HOME per module (the agent zipapp is
    built once), and a cloud per test through `in_process`."""
    label = fake_cls.provider

    @pytest.fixture(scope="module", name="fake")
    def fake_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NeoFake]:
        f = fake_cls(tmp_path_factory.mktemp(label), first_ip=first_ip).start()
        try:
            yield f
        finally:
            f.stop()

    @pytest.fixture(scope="module", name="home")
    def home_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.mktemp(label + "-home")

    @pytest.fixture(name="cloud")
    async def cloud_fixture(fake: NeoFake, home: Path, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
        async with in_process(cloud_cls, fake, env(fake), home, tmp_path, monkeypatch) as c:
            yield c

    return fake_fixture, home_fixture, cloud_fixture


async def healthy(cloud: Cloud, handle: Any) -> bool:
    from skyd.nodeagent.client import AgentClient

    for rank in range(len(handle.nodes)):
        host, port = await cloud.provisioner().agent_endpoint(handle, rank)
        assert host.startswith("127.")
        async with AgentClient(host, port, handle.token) as c:
            if not await c.health(timeout=10):
                return False
    return True
