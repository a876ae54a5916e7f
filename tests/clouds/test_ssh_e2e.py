"""`skyd launch --infra ssh/<pool>` end to end: the daemon as a real subprocess, the real CLI,
fake SSH hosts (asyncssh servers on 127.0.0.x running real processes) and real agents."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skyd.clouds.ssh.state import allocations_sync
from tests.fakes.sshhost import fake_hosts, make_keypair, write_pools
from tests.support.ssh_e2e import cli, cluster_row, daemon, node_dirs

pytestmark = pytest.mark.anyio


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _owners(cluster: str) -> list[str]:
    return sorted(k for k, c in allocations_sync().items() if c == cluster)


async def test_launch_one_then_three_nodes_logs_exec_down(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "data.txt").write_text("payload")
    (tmp_path / "one.yaml").write_text(
        f"workdir: {wd}\nresources:\n  infra: ssh/lab\n"
        "setup: echo setup-done\n"
        "run: |\n  cat data.txt; echo \" ips=$SKYPILOT_NODE_IPS rank=$SKYPILOT_NODE_RANK\"\n"
    )
    (tmp_path / "three.yaml").write_text(
        "num_nodes: 3\nresources:\n  infra: ssh/lab\n"
        "setup: echo setup-rank-$SKYPILOT_SETUP_NODE_RANK\n"
        "run: |\n  echo run-rank-$SKYPILOT_NODE_RANK\n"
        "  echo \"$SKYPILOT_NODE_IPS\" | tr '\\n' ' ' | sed 's/^/ips: /'; echo\n"
    )
    async with fake_hosts(tmp_path, 4, pub) as hosts:
        write_pools(skyd_home.parent / "config", {"lab": hosts}, priv)
        by_ip = {h.host: h for h in hosts}
        async with daemon():
            # -- one node, from YAML (infra: ssh/lab), with a workdir -----------------------
            r = await cli("launch", "-y", "-c", "one", str(tmp_path / "one.yaml"))
            assert r.returncode == 0, r
            assert "SUCCEEDED" in r.stderr + r.stdout
            (key,) = _owners("one")
            ip = key.split("@")[1].split(":")[0]
            assert f"payload ips={ip} rank=0" in r.stdout
            (nd,) = node_dirs(by_ip[ip].home)
            assert (nd / "workdir" / "data.txt").read_text() == "payload"

            # -- three nodes: gang job, setup on every node, IPs in rank order ---------------
            r = await cli("launch", "-y", "-c", "three", str(tmp_path / "three.yaml"))
            assert r.returncode == 0, r
            keys = _owners("three")
            assert len(keys) == 3 and key not in keys  # two clusters never share a host
            rank_ip: dict[int, str] = {}
            for h in hosts:
                for d in node_dirs(h.home):
                    if d.name.startswith("three-"):
                        rank_ip[int(d.name.rsplit("-", 1)[1])] = h.host
            ips = [rank_ip[i] for i in range(3)]
            assert f"ips: {' '.join(ips)}" in r.stdout, r
            for rank, rip in rank_ip.items():  # per-node logs: setup + run of that rank only
                (d,) = [x for x in node_dirs(by_ip[rip].home) if x.name == f"three-{rank}"]
                log = (d / "jobs" / "1" / f"rank-{rank}.log").read_text()
                assert f"setup-rank-{rank}" in log and f"run-rank-{rank}" in log
            r = await cli("logs", "three", "1", "--node", "1", "--no-follow")
            assert r.returncode == 0, r
            assert "setup-rank-1" in r.stdout and "run-rank-1" in r.stdout
            assert "rank-0" not in r.stdout and "rank-2" not in r.stdout
            r = await cli("logs", "three", "1", "--no-follow")
            assert all(f"run-rank-{i}" in r.stdout for i in range(3)), r

            # -- exec reuses the cluster: same hosts, same agents, next job id ---------------
            head = by_ip[ips[0]]
            (hd,) = [x for x in node_dirs(head.home) if x.name == "three-0"]
            pid = json.loads((hd / "agent.json").read_text())["pid"]
            r = await cli("exec", "three", "echo exec-on-$SKYPILOT_NODE_RANK")
            assert r.returncode == 0, r
            assert all(f"exec-on-{i}" in r.stdout for i in range(3))
            assert _owners("three") == keys
            assert json.loads((hd / "agent.json").read_text())["pid"] == pid
            q = (await cli("queue", "three", "-o", "json")).json()
            jobs = q[0]["jobs"] if isinstance(q, list) else q["jobs"]
            assert sorted((j["job_id"], j["status"]) for j in jobs) == [(1, "SUCCEEDED"), (2, "SUCCEEDED")]

            # -- a full pool: a clear error naming the pool and the fix; nothing allocated ----
            r = await cli("launch", "-y", "-c", "more", "--num-nodes", "2", "--infra", "ssh/lab", "true")
            assert r.returncode != 0
            err = r.stderr + r.stdout
            assert "SSH pool 'lab'" in err and "skyd down" in err, r
            assert _owners("more") == []
            st = (await cli("status", "-o", "json")).json()
            assert "more" not in {c["name"] for c in (st if isinstance(st, list) else st["clusters"])}

            # -- stop keeps the hosts; start brings the agents back ---------------------------
            r = await cli("stop", "-y", "one")
            assert r.returncode == 0, r
            assert _owners("one") == [key]
            r = await cli("status", "-r", "-o", "json")
            assert cluster_row(r.json(), "one")["status"] == "STOPPED"
            r = await cli("start", "-y", "one")
            assert r.returncode == 0, r
            r = await cli("exec", "one", "echo back")
            assert r.returncode == 0 and "back" in r.stdout, r

            # -- down releases the hosts and removes the agents and their files ---------------
            pids = [json.loads((d / "agent.json").read_text())["pid"]
                    for h in hosts for d in node_dirs(h.home)]  # fmt: skip
            r = await cli("down", "-y", "one", "three")
            assert r.returncode == 0, r
            assert allocations_sync() == {}
            for h in hosts:
                assert not (h.home / ".skyd").exists(), h.host
            assert not any(_alive(p) for p in pids)


async def test_gpu_request_lands_on_the_matching_host(skyd_home: Path, tmp_path: Path) -> None:
    """Pool hosts are zero-cost candidates with their probed GPUs; nothing is probed before
    the daemon starts, so planning has to get the facts itself."""
    priv, pub = make_keypair(tmp_path / "k")
    async with (
        fake_hosts(tmp_path / "cpu", 1, pub) as (cpu,),
        fake_hosts(tmp_path / "nv", 1, pub, gpu="h100x8", first=3) as (nv,),
        fake_hosts(tmp_path / "amd", 1, pub, gpu="mi300x", first=4) as (amd,),
    ):
        write_pools(skyd_home.parent / "config", {"lab": [cpu, nv, amd]}, priv)
        assert not (skyd_home / "ssh" / "hosts.json").exists()
        async with daemon():
            r = await cli("launch", "-y", "-c", "g", "--gpus", "H100:8", "--infra", "ssh",
                          "echo cuda=$CUDA_VISIBLE_DEVICES")  # fmt: skip
            assert r.returncode == 0, r
            assert "cuda=0,1,2,3,4,5,6,7" in r.stdout, r
            assert _owners("g") == [f"skyd@{nv.host}:{nv.port}"]
            row = cluster_row((await cli("status", "-o", "json")).json(), "g")
            assert row["accelerators"] == {"H100": 8.0} and row["hourly_cost"] == 0.0
            r = await cli("launch", "-y", "-c", "a", "--gpus", "MI300X:8", "--infra", "ssh/lab",
                          "echo hip=$HIP_VISIBLE_DEVICES")  # fmt: skip
            assert r.returncode == 0, r
            assert "hip=0,1,2,3,4,5,6,7" in r.stdout, r
            assert _owners("a") == [f"skyd@{amd.host}:{amd.port}"]
            r = await cli("launch", "-y", "-c", "c", "--infra", "ssh/lab", "echo plain")
            assert r.returncode == 0 and _owners("c") == [f"skyd@{cpu.host}:{cpu.port}"], r
            # A second H100:8 cluster: the only H100 host is taken -> the pool and the fix.
            r = await cli("launch", "-y", "-c", "g2", "--gpus", "H100:8", "--infra", "ssh/lab", "true")
            assert r.returncode != 0 and "SSH pool 'lab'" in r.stderr and "H100:8" in r.stderr, r
            r = await cli("down", "-y", "-a")
            assert r.returncode == 0, r
            assert allocations_sync() == {}
