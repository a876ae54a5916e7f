"""Managed jobs through the real daemon (subprocess, HTTP over the Unix socket), with the
in-process simulation as the cluster launcher (SKYD_JOBS_SIM=1)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from skyd.sdk.transport import Client
from tests.support.daemon import running_daemon, wait_for

# Simulated jobs last 4 s: long enough to be seen RUNNING (and cancelled) on a loaded machine.
ENV = {"SKYD_EXTRA_PLUGINS": "skyd.jobs.verbs", "SKYD_JOBS_SIM": "1", "SKYD_JOBS_POLL": "0.05",
       "SKYD_JOBS_SIM_DURATION": "4"}


def _result(c: Client, rid: str) -> Any:
    for ev in c.events(rid):
        if ev["type"] == "result":
            return ev["result"]
        assert ev["type"] != "error", ev
    raise AssertionError("no result")


def _status(c: Client, jid: int) -> str:
    return str(c.get(f"/v1/jobs/{jid}")["status"])


def test_launch_queue_cancel_logs_and_kill9(skyd_home: Path) -> None:
    with running_daemon(**ENV) as d, Client(autostart=False) as c:
        a = _result(c, c.submit("jobs.launch", {"command": "echo hi", "name": "a"}))["job_id"]
        b = _result(c, c.submit("jobs.launch", {"yaml": "name: b\nrun: sleep 1\n"}))["job_id"]
        wait_for(lambda: _status(c, a) == "RUNNING" and _status(c, b) == "RUNNING", 10)
        assert _result(c, c.submit("jobs.cancel", {"ids": [b]})) == {"cancelled": [b]}
        wait_for(lambda: _status(c, b) == "CANCELLED", 10)
        rows = c.get("/v1/jobs")
        assert [r["id"] for r in rows] == [b, a] and "dag" not in rows[0]
        assert c.get("/v1/jobs", {"status": "CANCELLED"})[0]["id"] == b
        logs = "".join(x["text"] for x in c.stream_ndjson(f"/v1/jobs/{a}/logs", {"follow": 0}))
        assert f"skyd-jobs-{a}-0" in logs
        d.kill9()  # the job keeps "running" on the simulated cloud
    t0 = time.monotonic()
    with running_daemon(**ENV), Client(autostart=False) as c:
        wait_for(lambda: _status(c, a) == "SUCCEEDED", 15)
        job = c.get(f"/v1/jobs/{a}")
        assert len(job["attempts"]) == 1 and job["recoveries"] == 0  # re-attached
        ctl = "".join(x["text"] for x in c.stream_ndjson(f"/v1/jobs/{a}/logs", {"controller": 1}))
        assert "-> RUNNING" in ctl and "-> SUCCEEDED" in ctl
    assert time.monotonic() - t0 < 30
