"""The request event log is written in batches off the event loop; still, whatever a
follower was shown is in the file: `kill -9` of the daemon, then `requests logs`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyd.sdk.transport import Client
from tests.support.daemon import DaemonProc, cli, running_daemon


def test_events_a_follower_saw_survive_kill9(skyd_home: Path) -> None:
    d = DaemonProc().start()
    seen: list[dict[str, Any]] = []
    try:
        with Client(autostart=False) as c:
            rid = c.submit("sleep", {"seconds": 60, "log_every": 0.005})
            for ev in c.events(rid, follow=True):
                seen.append(ev)
                if len(seen) == 200:
                    break
        d.kill9()  # while the request keeps emitting
    finally:
        d.cleanup()
    with running_daemon(), Client(autostart=False) as c:
        evs = list(c.events(rid))
        assert evs[:200] == seen
        assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
        assert evs[-1]["type"] == "error" and evs[-1]["error"]["message"] == "daemon restarted"
        out = cli("requests", "logs", rid)
        assert "slept 1.0s of 60s" in out.stdout  # the 200th line: what the follower saw last
