"""kill -9 of the daemon mid-request, then restart: nothing silently dropped."""

from __future__ import annotations

from pathlib import Path

from skyd.sdk.transport import Client
from tests.test_daemon_support import DaemonProc, running_daemon, wait_for

PLUGIN = {"SKYD_EXTRA_PLUGINS": "tests.test_daemon_plugin"}


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
