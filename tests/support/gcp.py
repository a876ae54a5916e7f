"""Helpers for the GCP tests (no tests in here): the fake Compute API with its token
endpoint, the environment that points the gcp driver at it, and a daemon whose every
connection outside 127.0.0.0/8 is refused and recorded (tests/fakes/netguard)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fakes.gce import FakeGCE
from tests.fakes.netguard import sitecustomize as netguard
from tests.support.daemon import REPO, DaemonProc
from tests.support.pipeline import Env, module_env

GUARD_DIR = Path(__file__).resolve().parents[1] / "fakes" / "netguard"
netguard.install()  # this process too: the driver tests run the provisioner in it


def gcp_environ(gce: FakeGCE, creds: Path, guard_log: Path) -> dict[str, str]:
    return {
        "GOOGLE_APPLICATION_CREDENTIALS": str(creds),
        "SKYD_GCP_COMPUTE_URL": gce.url,
        "SKYD_GCP_OSLOGIN_URL": gce.oslogin_url,
        "SKYD_GCP_SSH_PORT": str(gce.ssh_port),
        "SKYD_GCP_POLL_S": "0.05",
        "SKYD_NETGUARD_LOG": str(guard_log),
        "CLOUDSDK_CONFIG": str(creds.parent / "gcloud"),  # no user gcloud config is read
    }


class GuardedDaemon(DaemonProc):
    """The daemon with the network guard on its PYTHONPATH."""

    def __init__(self, **env: str) -> None:
        super().__init__(**env)
        self.env["PYTHONPATH"] = f"{GUARD_DIR}{os.pathsep}{REPO}"


class GEnv(Env):
    def start_daemon(self) -> DaemonProc:
        self.daemon = GuardedDaemon().start()
        return self.daemon


@contextmanager
def gcp_module_env(tmp_path_factory: pytest.TempPathFactory, gce: FakeGCE) -> Iterator[GEnv]:
    base = tmp_path_factory.mktemp("gcpenv")
    creds = gce.service_account_file(base / "sa.json")
    log = base / "netguard.log"
    env_vars = gcp_environ(gce, creds, log) | {"SKYD_PROVISION_TIMEOUT_S": "60"}
    with guarded_module_env(tmp_path_factory, log, env_vars) as e:
        yield e


@contextmanager
def guarded_module_env(tmp_path_factory: pytest.TempPathFactory, log: Path,
                       env_vars: dict[str, str]) -> Iterator[GEnv]:
    """module_env (tests/support/pipeline.py) with the guarded daemon; on exit, the
    guard's log must be empty."""
    log.write_text("")
    env_vars = env_vars | {"SKYD_NETGUARD_LOG": str(log)}
    import tests.support.pipeline as tps

    real = tps.Env
    tps.Env = GEnv  # type: ignore[misc]  # module_env builds this class
    try:
        with module_env(tmp_path_factory, **env_vars) as e:
            assert isinstance(e, GEnv)
            e.guard_log = log  # type: ignore[attr-defined]
            yield e
    finally:
        tps.Env = real  # type: ignore[misc]
    assert log.read_text() == "", f"connections outside 127.0.0.0/8: {log.read_text()}"
