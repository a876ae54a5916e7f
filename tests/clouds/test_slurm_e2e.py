"""Slurm as infra against a real slurmctld + two slurmd on loopback (tests/fakes/slurm.py),
reached through a real OpenSSH login host. Needs root, slurm-wlm, munge, openssh-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.fakes.slurm import SlurmFixture, unavailable_reason
from tests.support.ssh_e2e import cli, cluster_row, daemon

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmFixture]:
    # sshd and slurmd read files here as the test user: not under pytest's 0700 tmp
    root = Path(tempfile.mkdtemp(prefix="skyd-slurm-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    fx = SlurmFixture(root)
    try:
        fx.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        shutil.rmtree(root, ignore_errors=True)
        # installed but not starting is a failure, not a skip (its daemons use fixed loopback
        # ports: is another Slurm tier running on this machine?)
        pytest.fail(f"slurm tier: the fixture could not start: {e}")
    try:
        yield fx
    finally:
        fx.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cfg(slurm: SlurmFixture, skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmFixture]:
    conf = skyd_home.parent / "slurm_config"
    conf.write_text(slurm.slurm_config())
    monkeypatch.setenv("SKYD_SLURM_CONFIG", str(conf))
    yield slurm
    left = slurm.squeue()
    slurm.cancel_all()
    assert left == [], f"left in squeue: {left}"
    assert anyio.run(_leftovers, slurm) == [], "processes of the test user left"


async def test_launch_exec_queue_logs_down(cfg: SlurmFixture) -> None:
    async with daemon():
        r = await cli("launch", "-y", "-c", "s1", "--infra", "slurm/loop/gpu", "--gpus", "MI300X:1",
                      "echo first-$((6*7)) rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES", timeout=180)
        assert r.returncode == 0, r
        assert "first-42 rocr=" in r.stdout and "hip=0" in r.stdout, r
        assert len(cfg.squeue()) == 1
        r = await cli("exec", "s1", "echo again-$SKYPILOT_NODE_RANK")
        assert r.returncode == 0 and "again-0" in r.stdout, r
        # a process that escapes its job's session (linuxproc cannot see it): down still kills it.
        # The job waits until it has its own session: a job's end ends its process group, and
        # on a loaded machine the background child could still be in it (not yet escaped).
        r = await cli("exec", "s1", "rm -f esc.pid; "
                      "setsid sh -c 'echo $$ > esc.pid; exec sleep 300' >/dev/null 2>&1 "
                      "</dev/null & while [ ! -s esc.pid ]; do sleep 0.05; done; echo spawned")
        assert r.returncode == 0 and "spawned" in r.stdout, r
        r = await cli("queue", "s1")
        assert r.returncode == 0 and "SUCCEEDED" in r.stdout, r
        assert any("sleep 300" in x for x in await _leftovers(cfg, wait_s=0)), "the escapee runs"
        r = await cli("logs", "s1", "1", "--no-follow")
        assert r.returncode == 0 and "first-42" in r.stdout, r
        r = await cli("status", "-r", "-o", "json")
        row = cluster_row(r.json(), "s1")
        assert row["status"] == "UP", r
        r = await cli("down", "-y", "s1", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []
    assert await _leftovers(cfg) == []
    assert not (cfg.home / ".skyd" / "nodes").exists() or not list((cfg.home / ".skyd" / "nodes").iterdir())


async def _leftovers(fx: SlurmFixture, wait_s: float = 10.0) -> list[str]:
    """The test user's processes still alive after ``down`` (its closing ssh sessions aside)."""
    import anyio

    out: list[str] = []
    with anyio.move_on_after(wait_s):
        while True:
            out = []
            for pid in fx.user_pids():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if not cmd.startswith("sshd"):
                    out.append(f"{pid} {cmd[:200]}")
            if not out:
                return out
            await anyio.sleep(0.2)
    return out


async def test_gang_job_over_a_two_node_allocation(cfg: SlurmFixture) -> None:
    async with daemon():
        r = await cli("launch", "-y", "-c", "g2", "--infra", "slurm/loop/gpu", "--num-nodes", "2",
                      "echo rank=$SKYPILOT_NODE_RANK of=$SKYPILOT_NUM_NODES node=$SLURMD_NODENAME",
                      timeout=180)  # fmt: skip
        assert r.returncode == 0, r
        assert "rank=0 of=2" in r.stdout and "rank=1 of=2" in r.stdout, r
        nodes = {ln.split("node=")[1].strip() for ln in r.stdout.splitlines() if "node=" in ln}
        assert nodes == {"sn1", "sn2"}, r  # one agent per allocated node
        r = await cli("down", "-y", "g2", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []
    assert await _leftovers(cfg) == []


async def test_impossible_request_fails_at_once_with_the_reason_and_fails_over(
    cfg: SlurmFixture, skyd_home: Path
) -> None:
    conf = skyd_home.parent / "config"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "config.yaml").write_text("slurm:\n  sbatch_options:\n    mem: 999999\n")  # no node has it
    async with daemon():
        r = await cli("launch", "-y", "-c", "big", "--infra", "slurm/loop", "echo never", timeout=120)
        assert r.returncode != 0, r
        out = r.stdout + r.stderr
        assert "Requested node configuration is not available" in out, r  # refused at sbatch
        assert "gpu" in out and "cpu" in out, r  # both partitions were tried
        (conf / "config.yaml").write_text("slurm:\n  sbatch_options:\n    job-name: mine\n")
        r = await cli("launch", "-y", "-c", "big", "--infra", "slurm/loop", "echo never", timeout=120)
        assert r.returncode != 0 and "'job-name' is set by skyd" in r.stdout + r.stderr, r
        (conf / "config.yaml").unlink()
        # accepted by sbatch, but more nodes than the partition has: fails at once, not pending
        r = await cli("launch", "-y", "-c", "big", "--infra", "slurm/loop/gpu", "--num-nodes", "3",
                      "echo never", timeout=120)  # fmt: skip
        assert r.returncode != 0 and "can never start: Partition" in r.stdout + r.stderr, r
        r = await cli("status", "-o", "json")
        assert all(row["name"] != "big" for row in _rows(r.json())), r
    assert cfg.squeue() == []


async def test_container_image_on_a_cluster_without_a_container_runtime_is_one_message(
        cfg: SlurmFixture) -> None:
    # this cluster has neither pyxis (its srun lists no --container-image) nor apptainer
    async with daemon():
        r = await cli("launch", "-y", "-c", "ctr", "--infra", "slurm/loop", "--image-id", "docker:ubuntu:22.04",
                      "echo never", timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and "slurm/loop offers no container runtime" in out, out
        assert "pyxis" in out and "apptainer" in out and "drop image_id" in out, out
        assert "Traceback" not in out
        r = await cli("status", "-o", "json")
        assert all(row["name"] != "ctr" for row in _rows(r.json())), r
    assert cfg.squeue() == []  # nothing was submitted


async def test_pending_allocation_shows_the_scheduler_reason(cfg: SlurmFixture) -> None:
    import anyio

    from tests.support.daemon import SKYD_BIN

    async with daemon():
        r = await cli("launch", "-y", "-c", "hog", "--infra", "slurm/loop/gpu", "--num-nodes", "2",
                      "--gpus", "MI300X:2", "echo hogging", timeout=180)  # fmt: skip
        assert r.returncode == 0, r
        seen: list[str] = []
        async with await anyio.open_process(
            [str(SKYD_BIN), "launch", "-y", "-c", "waits", "--infra", "slurm/loop/gpu", "--gpus", "MI300X:1",
             "echo finally-ran"], env=dict(os.environ),
        ) as p:  # fmt: skip
            assert p.stdout is not None
            with anyio.fail_after(60):
                buf = b""
                while b"PENDING: Resources" not in buf:
                    buf += await p.stdout.receive()
            seen.append(buf.decode())
            assert "PENDING: Resources" in seen[0], seen
            r = await cli("status", "-o", "json")
            row = next(x for x in _rows(r.json()) if x["name"] == "waits")
            assert "Resources" in str(row), row
            assert any(" PENDING Resources" in ln for ln in cfg.squeue()), cfg.squeue()
            r = await cli("down", "-y", "hog", timeout=120)  # frees the GPUs: the pending one starts
            assert r.returncode == 0, r
            with anyio.fail_after(120):
                rest = b""
                try:
                    while b"finally-ran" not in rest:
                        rest += await p.stdout.receive()
                except anyio.EndOfStream:
                    pass
            assert b"finally-ran" in rest, rest
            await p.wait()
        r = await cli("down", "-y", "waits", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []


async def test_scancel_from_outside_is_a_preemption_and_the_managed_job_recovers(
    cfg: SlurmFixture, tmp_path: Path
) -> None:
    import json

    import anyio

    mark = cfg.home / "preempt-mark"
    f = tmp_path / "mj.yaml"
    f.write_text("name: mj\nresources:\n  infra: slurm/loop/gpu\n"
                 f"run: |\n  if [ -f {mark} ]; then echo second-run; exit 0; fi\n"
                 f"  touch {mark}; echo first-run; sleep 600\n")  # fmt: skip
    try:
        async with daemon(SKYD_JOBS_POLL="0.5", SKYD_JOBS_BACKOFF="0.5"):
            r = await cli("jobs", "launch", "-d", "-o", "json", str(f), timeout=60)
            assert r.returncode == 0, r
            jid = int(json.loads(r.stdout)["job_id"])

            async def job() -> dict[str, object]:
                r = await cli("jobs", "queue", "-o", "json")
                rows = r.json()
                rows = rows.get("jobs", rows) if isinstance(rows, dict) else rows
                return next(j for j in rows if int(j.get("job_id", j.get("id", -1))) == jid)

            seen: list[str] = []

            async def watch(until: set[str], timeout: float) -> None:
                with anyio.fail_after(timeout):
                    while True:
                        s = str((await job())["status"])
                        if not seen or seen[-1] != s:
                            seen.append(s)
                        if s in until:
                            return
                        await anyio.sleep(0.3)

            await watch({"RUNNING"}, 180)
            with anyio.fail_after(30):
                while not mark.exists():
                    await anyio.sleep(0.2)
            (first,) = cfg.squeue()
            cfg.cmd("scancel", first.split()[0])  # the "scheduler" takes the allocation away
            await watch({"SUCCEEDED", "FAILED", "FAILED_NO_RESOURCE", "CANCELLED"}, 240)
            assert "RECOVERING" in seen and seen[-1] == "SUCCEEDED", seen
            r = await cli("jobs", "logs", str(jid), "--no-follow")
            assert "second-run" in r.stdout, r
            with anyio.fail_after(60):
                while cfg.squeue():
                    await anyio.sleep(0.5)
    finally:
        mark.unlink(missing_ok=True)
    assert await _leftovers(cfg) == []


def _rows(doc: object) -> list[dict[str, object]]:
    if isinstance(doc, dict) and "clusters" in doc:
        return list(doc["clusters"])
    return list(doc)  # type: ignore[call-overload]


async def test_check_and_show_gpus_read_the_cluster(cfg: SlurmFixture) -> None:
    import json

    r = await cli("show-gpus", "--infra", "slurm", "-o", "json", timeout=60)
    assert r.returncode == 0, r
    rows = {(x["cluster"], x["partition"]): x for x in json.loads(r.stdout)}
    assert rows[("loop", "gpu")]["accelerator"] == "MI300X", rows  # gres gpu:mi300x -> canonical
    assert (rows[("loop", "gpu")]["total"], rows[("loop", "gpu")]["free"]) == (4, 4), rows
    assert (rows[("loop", "cpu")]["total"], rows[("loop", "cpu")]["per_node"]) == (2, 2), rows
    async with daemon():
        r = await cli("check", timeout=60)
        assert r.returncode == 0, r
        assert "1/1 Slurm cluster(s) reachable" in r.stdout, r
        assert "mi300x:2/node -> MI300X" in r.stdout, r


async def test_stop_gives_the_allocation_back_and_start_takes_a_new_one(cfg: SlurmFixture) -> None:
    async with daemon():
        r = await cli("launch", "-y", "-c", "st", "--infra", "slurm/loop/cpu", "echo one > kept.txt",
                      timeout=180)  # fmt: skip
        assert r.returncode == 0, r
        (before,) = cfg.squeue()
        r = await cli("stop", "-y", "st", timeout=120)
        assert r.returncode == 0, r
        assert cfg.squeue() == []
        r = await cli("status", "-r", "-o", "json")
        assert cluster_row(r.json(), "st")["status"] == "STOPPED", r
        r = await cli("start", "-y", "st", timeout=180)
        assert r.returncode == 0, r
        (after,) = cfg.squeue()
        assert after.split()[0] != before.split()[0]  # a new allocation
        r = await cli("exec", "st", "cat kept.txt")  # the node dir survived on the shared home
        assert r.returncode == 0 and "one" in r.stdout, r
        r = await cli("down", "-y", "st", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []


async def test_daemon_killed_while_pending_leaves_no_second_allocation(cfg: SlurmFixture) -> None:
    """kill -9 while the allocation is PENDING: after a restart the job carrying the cluster's
    tag is taken over or cancelled, never doubled, and `down` leaves nothing."""
    from tests.support.daemon import SKYD_BIN

    async with daemon():
        r = await cli("launch", "-y", "-c", "hog2", "--infra", "slurm/loop/gpu", "--num-nodes", "2",
                      "--gpus", "MI300X:2", "echo hogging", timeout=180)  # fmt: skip
        assert r.returncode == 0, r
    async with daemon() as d:
        async with await anyio.open_process(
            [str(SKYD_BIN), "launch", "-y", "-c", "w2", "--infra", "slurm/loop/gpu", "--gpus", "MI300X:1",
             "echo w2-ran"], env=dict(os.environ),
        ) as p:  # fmt: skip
            assert p.stdout is not None
            with anyio.fail_after(60):
                buf = b""
                while b"PENDING: Resources" not in buf:
                    buf += await p.stdout.receive()
            # The CLI first: a CLI that outlives its daemon re-attaches by starting a new
            # one, which would race the restart below.
            p.kill()
            await p.wait()
            await anyio.to_thread.run_sync(d.kill9)
    assert sum("skyd-w2-" in ln for ln in cfg.squeue()) == 1
    async with daemon():
        with anyio.fail_after(60):  # the leak pass / resumed launch settles the half-made cluster
            while True:
                w2 = [ln for ln in cfg.squeue() if "skyd-w2-" in ln]
                assert len(w2) <= 1, w2
                r = await cli("status", "-o", "json")
                rows = [x for x in _rows(r.json()) if x["name"] == "w2"]
                if not w2 or rows:
                    break
                await anyio.sleep(0.5)
        r = await cli("down", "-y", "hog2", timeout=120)
        assert r.returncode == 0, r
        await anyio.sleep(2)
        assert sum("skyd-w2-" in ln for ln in cfg.squeue()) <= 1
        r = await cli("status", "-o", "json")
        if any(x["name"] == "w2" for x in _rows(r.json())):
            r = await cli("down", "-y", "w2", timeout=120)
            assert r.returncode == 0, r
    with anyio.fail_after(30):
        while cfg.squeue():
            await anyio.sleep(0.5)


async def test_provision_again_by_tag_takes_the_allocation_over(cfg: SlurmFixture, skyd_home: Path) -> None:
    from skyd.clouds.base import NODE_RUNNING, ProvisionRequest
    from skyd.clouds.offering import Offering
    from skyd.clouds.slurm.provisioner import SlurmProvisioner

    prov = SlurmProvisioner()
    off = Offering(cloud="slurm", instance_type="cpu", accelerator=None, accelerator_count=0.0, vcpus=2,
                   memory_gib=1, region="loop", zone="cpu", price=0.0, spot_price=None)  # fmt: skip
    logs: list[str] = []
    try:
        h1 = await prov.provision(ProvisionRequest("tk", 1, off, False, token="first-token", tag="tk-1"), logs.append)
        h2 = await prov.provision(ProvisionRequest("tk", 1, off, False, token="other", tag="tk-1"), logs.append)
        assert h2.extra["job_id"] == h1.extra["job_id"] and h2.token == "first-token"
        assert any("Found Slurm allocation" in m for m in logs), logs
        assert await prov.query(h2) == [NODE_RUNNING]
        await prov.terminate(h2, logs.append)
        assert cfg.squeue() == []
    finally:
        cfg.cancel_all()
        await prov.close()
