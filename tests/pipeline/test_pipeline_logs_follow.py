"""A follower of `skyd logs` that goes away (Ctrl-C, closed terminal) is normal: the daemon
logs one line for it, no traceback. Real daemon, real agent on `local`, real CLI."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support.daemon import SKYD_BIN
from tests.support.pipeline import Env, module_env


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def test_logs_follower_leaving_logs_one_line(env: Env) -> None:
    env.ok("launch", "-d", "-y", "-c", "lf-gone", "for i in $(seq 1 400); do echo tick $i; sleep 0.05; done")
    env.wait_job("lf-gone", 1, {"RUNNING"})
    proc = subprocess.Popen([str(SKYD_BIN), "logs", "lf-gone", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"tick")
    finally:
        proc.kill()
        proc.wait()
    time.sleep(1.5)  # the job keeps printing: the daemon writes to the closed connection
    log = (env.home / "logs" / "daemon.log").read_text()
    assert "Traceback" not in log and "ConnectionResetError" not in log, log[-3000:]
    assert log.count("the client went away") == 1, log[-3000:]
    env.ok("cancel", "lf-gone", "1")
