"""kill -9 of the daemon mid-request, then restart: nothing silently dropped."""

from __future__ import annotations

import time
from pathlib import Path

from skyd.sdk.transport import Client
from tests.support.daemon import DaemonProc, running_daemon, wait_for

PLUGIN = {"SKYD_EXTRA_PLUGINS": "tests.daemon.test_daemon_plugin"}


def test_kill9_then_restart_fails_or_resumes(skyd_home: Path) -> None:
    d = DaemonProc(**PLUGIN).start()
    try:
        with Client(autostart=False) as c:
            plain = c.submit("sleep", {"seconds": 60})
            resumable = c.submit("test.resumable_sleep", {"seconds": 0.5, "log_every": 0.1})
            wait_for(lambda: c.get(f"/v1/requests/{plain}")["status"] == "RUNNING")
            wait_for(lambda: c.get(f"/v1/requests/{resumable}")["status"] == "RUNNING")
        d.kill9()
    finally:
        d.cleanup()
    with running_daemon(**PLUGIN), Client(autostart=False) as c:
        row = c.get(f"/v1/requests/{plain}")
        assert row["status"] == "FAILED"
        assert row["error"]["message"] == "daemon restarted"
        evs = list(c.events(plain))
        assert evs[-1]["type"] == "error" and evs[-1]["error"]["message"] == "daemon restarted"
        # The resumable verb was re-invoked with its payload and ctx.resumed set.
        evs = list(c.events(resumable))
        assert evs[-1]["type"] == "result", evs[-1]
        assert evs[-1]["result"]["resumed"] is True
        assert any(e.get("text", "").startswith("resumed") for e in evs)
        seqs = [e["seq"] for e in evs]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert c.get(f"/v1/requests/{resumable}")["status"] == "SUCCEEDED"


def test_a_stray_cancellation_ends_its_request_and_task_not_the_daemon(skyd_home: Path) -> None:
    """A library's native cancel (a grpclib call whose connection was lost) escaping a
    request and a root-group task: each ends alone, with its traceback in daemon.log."""
    from skyd import paths

    with running_daemon(**PLUGIN) as d, Client(autostart=False) as c:
        rid = c.submit("test.lost_connection", {})
        row = wait_for(lambda: (r := c.get(f"/v1/requests/{rid}"))["status"] in
                       ("SUCCEEDED", "FAILED", "CANCELLED") and r, timeout=20)  # fmt: skip
        assert row["status"] == "FAILED", row
        assert "internal error: CancelledError" in row["error"]["message"]
        assert "daemon.log" in row["error"]["hint"]
        log = paths.daemon_log()
        wait_for(lambda: "task test-lost-connection ended by a stray cancellation" in log.read_text())
        time.sleep(0.5)
        assert d.proc is not None and d.proc.poll() is None, "the daemon exited"
        assert c.get(f"/v1/requests/{rid}")["id"] == rid  # it still answers
        text = log.read_text()
        assert f"request {rid} (test.lost_connection) ended by a stray cancellation" in text
        assert "Traceback" in text and "stopping" not in text
