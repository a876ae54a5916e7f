"""Faults and bad input on the `ssh` infra, through the daemon and the real CLI.

- a killed agent / an unreachable host: the cluster shows INIT (unhealthy) after the
  refresher runs, the job queue survives, `skyd status -r` brings it back;
- unreachable host, wrong key, no python3, pool typo: a clear error naming the host (or
  pool) and the fix, nothing allocated and nothing left on the hosts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import anyio
import pytest
import yaml

from skyd.clouds.ssh.state import allocations_sync
from tests.fakes.sshhost import FakeSSHHost, fake_hosts, make_keypair, write_pools
from tests.support.ssh_e2e import cli, cluster_row, daemon, node_dirs

pytestmark = pytest.mark.anyio


async def _wait_status(name: str, want: str, timeout: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    row: dict[str, object] = {}
    while time.monotonic() < deadline:
        row = cluster_row((await cli("status", "-o", "json")).json(), name)
        if row["status"] == want:
            return row
        await anyio.sleep(0.2)
    raise AssertionError(f"{name} is {row.get('status')}, not {want}: {row}")


def _jobs(r: object) -> list[tuple[int, str]]:
    q = r[0] if isinstance(r, list) else r
    return sorted((int(j["job_id"]), str(j["status"])) for j in q["jobs"])  # type: ignore[index]


async def test_killed_agent_and_unreachable_host(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 2, pub) as hosts:
        write_pools(skyd_home.parent / "config", {"lab": hosts}, priv)
        async with daemon(SKYD_REFRESH_S="0.3"):
            r = await cli("launch", "-y", "-c", "f", "--num-nodes", "2", "--infra", "ssh/lab", "echo first")
            assert r.returncode == 0, r
            head = next(h for h in hosts for d in node_dirs(h.home) if d.name == "f-0")
            worker = next(h for h in hosts if h is not head)
            (hd,) = node_dirs(head.home)

            # kill -9 the head's agent: unhealthy, not STOPPED (nobody stopped it)
            pid = json.loads((hd / "agent.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            row = await _wait_status("f", "INIT")
            assert "unhealthy" in str(row["status_reason"])
            r = await cli("status", "-r", "-o", "json")
            assert cluster_row(r.json(), "f")["status"] == "UP", r
            assert json.loads((hd / "agent.json").read_text())["pid"] != pid
            assert _jobs((await cli("queue", "f", "-o", "json")).json()) == [(1, "SUCCEEDED")]

            # the worker becomes unreachable (its processes live on): INIT until it is back
            (wd,) = node_dirs(worker.home)
            wpid = json.loads((wd / "agent.json").read_text())["pid"]
            await worker.suspend()
            await _wait_status("f", "INIT")
            r = await cli("status", "-r", "-o", "json")
            row = cluster_row(r.json(), "f")
            assert row["status"] == "INIT" and worker.host in str(row["status_reason"]), row
            await worker.resume()
            r = await cli("status", "-r", "-o", "json")
            assert cluster_row(r.json(), "f")["status"] == "UP", r
            assert json.loads((wd / "agent.json").read_text())["pid"] == wpid  # same agent
            r = await cli("exec", "f", "echo after-$SKYPILOT_NODE_RANK")
            assert r.returncode == 0 and "after-1" in r.stdout, r
            assert _jobs((await cli("queue", "f", "-o", "json")).json()) == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]
            assert (await cli("down", "-y", "f")).returncode == 0
            assert allocations_sync() == {}


async def test_bad_input_names_the_host_and_the_fix(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with (
        FakeSSHHost(tmp_path / "good", "127.0.0.2", pub) as good,
        FakeSSHHost(tmp_path / "locked", "127.0.0.3", pub) as locked,
        FakeSSHHost(tmp_path / "nopy", "127.0.0.4", pub, missing=["python3"]) as nopy,
    ):
        locked.reject_auth = True
        cfg = skyd_home.parent / "config"
        write_pools(cfg, {"lab": [good]}, priv)
        doc = yaml.safe_load((cfg / "ssh_node_pools.yaml").read_text())
        doc["dead"] = {"user": "skyd", "identity_file": str(priv), "hosts": [{"ip": "127.0.0.9", "port": 9}]}
        doc["locked"] = {"user": "skyd", "identity_file": str(priv),
                         "hosts": [{"ip": locked.host, "port": locked.port}]}  # fmt: skip
        doc["nopy"] = {"user": "skyd", "identity_file": str(priv), "hosts": [{"ip": nopy.host, "port": nopy.port}],
                       }  # fmt: skip
        doc["mixed"] = {"user": "skyd", "identity_file": str(priv),
                        "hosts": [{"ip": good.host, "port": good.port}, {"ip": nopy.host, "port": nopy.port}]}  # fmt: skip
        (cfg / "ssh_node_pools.yaml").write_text(yaml.safe_dump(doc))
        async with daemon():
            cases = {
                "dead": ("127.0.0.9", "unreachable", "sshd"),
                "locked": (locked.host, "authentication failed", "authorized_keys"),
                "nopy": (nopy.host, "python3", "install python3"),
            }
            for pool, (host, what, fix) in cases.items():
                r = await cli("launch", "-y", "-c", f"x-{pool}", "--infra", f"ssh/{pool}", "true")
                err = r.stderr + r.stdout
                assert r.returncode != 0, r
                assert host in err and what in err and fix in err, (pool, r)
            # two nodes, one without python3: the good host is cleaned up and released
            r = await cli("launch", "-y", "-c", "x-mixed", "--num-nodes", "2", "--infra", "ssh/mixed", "true")
            assert r.returncode != 0 and nopy.host in r.stderr and "install python3" in r.stderr, r
            r = await cli("launch", "-y", "-c", "typo", "--infra", "ssh/lbb", "true")
            assert r.returncode != 0 and "lbb" in r.stderr, r
            assert allocations_sync() == {}
            for h in (good, locked, nopy):
                assert not (h.home / ".skyd").exists(), h.host
            st = (await cli("status", "-o", "json")).json()
            assert (st if isinstance(st, list) else st["clusters"]) == []
            # the good host is still usable
            r = await cli("launch", "-y", "-c", "ok", "--infra", "ssh/lab", "echo fine")
            assert r.returncode == 0 and "fine" in r.stdout, r
            assert (await cli("down", "-y", "ok")).returncode == 0
