"""Fixtures that many test modules share (a pytest plugin, registered in tests/conftest.py).

A module that needs a variant (other daemon settings, another teardown) defines its own
fixture of the same name, which takes precedence over these."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.daemon import DaemonProc, cli, running_daemon, stop_autostarted
from tests.support.pipeline import Env, module_env


def _left_over() -> dict[str, bool]:
    """What the daemon still holds: clusters, live managed jobs, services (one quick call each,
    in-process, so a clean test pays no CLI start for its teardown)."""
    from skyd.sdk.transport import Client

    def rows(c: Client, path: str) -> list[dict[str, Any]]:
        got = c.get(path, {"all_users": 1})
        if isinstance(got, dict):  # a listing wrapped in an object
            got = next((v for v in got.values() if isinstance(v, list)), [])
        return list(got or [])

    with Client(autostart=False) as c:
        clusters = rows(c, "/v1/status")
        jobs = rows(c, "/v1/jobs")
        services = rows(c, "/v1/services")
    live = [j for j in jobs if not str(j.get("status", "")).startswith(
        ("SUCCEEDED", "FAILED", "CANCELLED"))]
    return {"clusters": bool(clusters), "jobs": bool(live), "services": bool(services)}


@pytest.fixture(scope="module")
def shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One daemon for the whole module (its own SKYD_HOME, socket and config; the daemon's
    default refresh), with the module's ``SHARED_DAEMON_ENV`` on top."""
    env = {"SKYD_REFRESH_S": "10", **getattr(request.module, "SHARED_DAEMON_ENV", {})}
    with module_env(tmp_path_factory, **env) as e:
        yield e


@pytest.fixture
def daemon(request: pytest.FixtureRequest) -> Iterator[DaemonProc | None]:
    """A daemon of this test's own SKYD_HOME; or, in a module that sets ``SHARED_DAEMON_ENV``,
    the module's one daemon (``shared``). What the test left (services, managed jobs,
    clusters) is taken down after it."""
    if hasattr(request.module, "SHARED_DAEMON_ENV"):
        env: Env = request.getfixturevalue("shared")
        yield env.daemon
        take_down_leftovers()
        return
    request.getfixturevalue("skyd_home")
    with running_daemon() as d:
        yield d
        take_down_leftovers()
    stop_autostarted()  # a CLI call above may have started another daemon


def take_down_leftovers() -> None:
    """Take down what a test left on the daemon (services, live managed jobs, clusters), so
    the next test that shares it starts from nothing."""
    try:
        left = _left_over()
    except Exception:  # the test stopped the daemon itself: tear down through the CLI
        left = {"clusters": True, "jobs": True, "services": True}
    if left["services"]:
        cli("serve", "down", "-a", "-y", timeout=120)
    if left["jobs"]:
        cli("jobs", "cancel", "-a", "-y", timeout=120)
    if left["clusters"]:
        cli("down", "-a", "-y", timeout=120)


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """A moto server (AWS EC2 and S3 as botocore describes them) on 127.0.0.1: its URL."""
    from tests.fakes.awsproxy import start_moto

    server, url = start_moto()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3(moto: str) -> Any:
    """A boto3 S3 client of that moto server."""
    import boto3

    from tests.support.aws import REGION

    return boto3.client("s3", region_name=REGION, endpoint_url=moto,
                        aws_access_key_id="testing", aws_secret_access_key="testing")
