"""Node agent: 3-node gang jobs, kill -9 and re-adoption, autostop, zipapp."""

# ruff: noqa: UP031

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from skyd.nodeagent.client import AgentClient, start_agent_detached_blocking
from skyd.nodeagent.zipapp import build_zipapp
from tests.nodeagent.test_nodeagent_helpers import (
    AgentFactory,
    agents,
    pid_alive,
    read_log,
    wait_gone,
    wait_status,
)  # fmt: skip

__all__ = ["agents"]
pytestmark = pytest.mark.anyio


def gang_spec(nodes: list, run: str, setup: str = "") -> dict:
    refs = [{"rank": i, "address": n.address, "internal_ip": "10.0.0.%d" % (i + 1)}
            for i, n in enumerate(nodes)]  # fmt: skip
    return {"run": run, "setup": setup, "num_nodes": len(nodes), "nodes": refs, "gpus": 1}


async def test_gang_three_nodes(agents: AgentFactory, tmp_path: Path) -> None:
    nodes = [agents.start("n%d" % r, rank=r, args=["--gpus", "H100:2"]) for r in range(3)]
    setup = (
        f'echo "setup $SKYPILOT_SETUP_NODE_RANK"; touch {tmp_path}/setup-$SKYPILOT_SETUP_NODE_RANK'
    )
    run = (f'test -e {tmp_path}/setup-$SKYPILOT_NODE_RANK || exit 9\n'
           'echo "rank=$SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES cuda=$CUDA_VISIBLE_DEVICES"\n'
           'echo "$SKYPILOT_NODE_IPS" | paste -sd,')  # fmt: skip
    async with nodes[0].client() as c:
        j = await c.submit_job(gang_spec(nodes, run, setup))
        merged = await read_log(c, j)
        job = await wait_status(c, j, "SUCCEEDED")
        assert job["num_nodes"] == 3
        for r in range(3):
            label = "(head, rank=0) " if r == 0 else "(worker%d, rank=%d) " % (r, r)
            assert label + "setup %d" % r in merged
            assert label + "rank=%d of 3 cuda=0" % r in merged
            assert label + "10.0.0.1,10.0.0.2,10.0.0.3" in merged
        assert await read_log(c, j, node=2, follow=False) == (
            "setup 2\nrank=2 of 3 cuda=0\n10.0.0.1,10.0.0.2,10.0.0.3\n"
        )

        # One rank failing kills the job on every rank; the job is FAILED with its code.
        pids = tmp_path / "pids"
        run = ('if [ "$SKYPILOT_NODE_RANK" = 1 ]; then sleep 0.5; exit 5; fi\n'
               f'sleep 300 & echo $! >> {pids}; wait')  # fmt: skip
        j2 = await c.submit_job(gang_spec(nodes, run))
        job = await wait_status(c, j2, "FAILED", timeout=20)
        assert job["exit_code"] == 5 and "rank 1" in job["reason"]
        others = [int(p) for p in pids.read_text().split()]
        assert len(others) == 2 and not any(pid_alive(p) for p in others)

        # Setup failing on one worker -> FAILED_SETUP everywhere, run never starts.
        j3 = await c.submit_job(gang_spec(nodes, f"touch {tmp_path}/ran-$SKYPILOT_NODE_RANK",
                                          setup='[ "$SKYPILOT_SETUP_NODE_RANK" != 2 ]'))  # fmt: skip
        job = await wait_status(c, j3, "FAILED_SETUP", timeout=20)
        assert job["exit_code"] == 1 and not list(tmp_path.glob("ran-*"))


async def test_kill9_agent_readopts_running_job(agents: AgentFactory, tmp_path: Path) -> None:
    a = agents.start()
    go = tmp_path / "go"
    async with a.client() as c:
        j = await c.submit_job(
            {"run": f"while [ ! -e {go} ]; do sleep 0.05; done; echo done; exit 4"}
        )
        j2 = await c.submit_job({"run": "sleep 300"})
        await wait_status(c, j, "RUNNING")
        await wait_status(c, j2, "RUNNING")
    pgids = a.job_pgids()
    a.kill9()
    for pgid in pgids[1:]:  # the second job's processes die with the agent
        os.killpg(pgid, signal.SIGKILL)
    assert pid_alive(pgids[0])  # the first job survives the agent
    go.touch()
    b = agents.restart(a)
    async with b.client() as c:
        job = await wait_status(c, j, "FAILED")
        assert job["exit_code"] == 4 and await read_log(c, j) == "done\n"
        job2 = await wait_status(c, j2, "FAILED_DRIVER")
        assert job2["exit_code"] is None
        assert await c.submit_job({"run": "true"}) == 3  # ids are never reused


async def test_autostop_local_stop(agents: AgentFactory) -> None:
    a = agents.start()
    async with a.client() as c:
        await c.set_autostop(0.01, down=True)  # 0.6 s
        st = await c.status()
        assert st["autostop"]["idle_minutes"] == 0.01 and st["autostop"]["down"]
    assert wait_gone(a.info["pid"], timeout=10)
    stopped = json.loads((a.home / "stopped.json").read_text())
    assert stopped["down"] is True
    assert not (a.home / "agent.json").exists()


async def test_a_quiet_agent_sleeps_past_ticks_but_autostops_on_time(agents: AgentFactory) -> None:
    """An idle agent wakes for its heartbeat and autostop, not every tick: setting autostop
    wakes it, so autostop still fires at its deadline and not at the next heartbeat (30 s)."""
    a = agents.start(args=["--tick", "1", "--heartbeat-interval", "30"])
    async with a.client() as c:
        job = await c.submit_job({"run": "true"})
        await wait_status(c, job, "SUCCEEDED")  # quiet from here on
        await asyncio.sleep(1.5)
        await c.set_autostop(0.01, down=False)  # 0.6 s
    assert wait_gone(a.info["pid"], timeout=15)
    assert json.loads((a.home / "stopped.json").read_text())["down"] is False


async def test_autostop_command_waits_for_jobs(agents: AgentFactory, tmp_path: Path) -> None:
    flag = tmp_path / "stopped-by-command"
    a = agents.start(args=["--autostop-action", f"command:echo $SKYD_AUTOSTOP_DOWN > {flag}"])
    async with a.client() as c:
        j = await c.submit_job({"run": "sleep 1.2"})
        await c.set_autostop(0.005)  # 0.3 s, but a running job is not idle
        await asyncio.sleep(0.8)
        assert not flag.exists()
        await wait_status(c, j, "SUCCEEDED")
        for _ in range(100):
            if flag.exists():
                break
            await asyncio.sleep(0.05)
        assert flag.read_text().strip() == "0"


def test_zipapp_build_and_start(tmp_path: Path) -> None:
    pyz = tmp_path / "agent.pyz"
    digest = build_zipapp(pyz)
    assert digest == build_zipapp(tmp_path / "again.pyz")  # deterministic: hash = version
    run_dir = tmp_path / "isolated"
    run_dir.mkdir()
    shutil.copy(pyz, run_dir / "agent.pyz")
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    info = start_agent_detached_blocking(home, python=sys.executable, zipapp=run_dir / "agent.pyz",
                                         extra_args=["--gpus", "MI300X:8"], env=env,
                                         cluster_secret="zip-secret")  # fmt: skip
    try:
        # -I -S: no site-packages, so everything must come from the archive.
        cmd = [
            sys.executable,
            "-I",
            "-S",
            str(run_dir / "agent.pyz"),
            "--home",
            str(tmp_path / "h2"),
        ]
        out = subprocess.run(cmd + ["--help"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "--autostop-action" in out.stdout

        async def use() -> None:
            async with AgentClient("127.0.0.1", info["port"], "zip-secret") as c:
                j = await c.submit_job({"run": "echo from-zipapp $HIP_VISIBLE_DEVICES", "gpus": 1})
                await wait_status(c, j, "SUCCEEDED")
                assert await read_log(c, j) == "from-zipapp 0\n"
                assert (await c.status())["gpus"][0]["name"] == "MI300X"
                await c.shutdown(exit=True)

        asyncio.run(use())
        assert wait_gone(info["pid"])
    finally:
        try:
            os.kill(info["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


_COUNT_COMPILES = """import sys
zipped = []
sys.addaudithook(lambda ev, args: ev == "compile" and sys.argv[1] in str(args[1])
                 and zipped.append(args[1]))
sys.path.insert(0, sys.argv[1])
import skyd.nodeagent.server, grpclib.server, betterproto, h2.connection
print(len(zipped), skyd.nodeagent.server.__file__)
"""


def test_zipapp_carries_bytecode_so_an_agent_compiles_nothing(tmp_path: Path) -> None:
    """The archive holds this Python's bytecode beside each source: an agent on a node with
    the same Python imports without compiling. The bytecode is the same at every build (the
    sha256 is the version), and a finished archive is reused from the cache."""
    cache = tmp_path / "cache"
    first = build_zipapp(tmp_path / "a.pyz", cache_dir=cache)
    assert len(list((cache / "agent-zipapp").glob("*.pyz"))) == 1
    assert build_zipapp(tmp_path / "b.pyz", cache_dir=cache) == first  # from the cache
    assert build_zipapp(tmp_path / "c.pyz") == first  # compiled afresh: the same bytes
    names = set(zipfile.ZipFile(tmp_path / "c.pyz").namelist())
    assert {"skyd/nodeagent/server.py", "skyd/nodeagent/server.pyc",
            "grpclib/__init__.py", "grpclib/__init__.pyc"} <= names  # fmt: skip
    for pyz in ("a.pyz", "c.pyz"):
        out = subprocess.run([sys.executable, "-I", "-S", "-c", _COUNT_COMPILES,
                              str(tmp_path / pyz)], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        compiled, origin = out.stdout.split()
        assert compiled == "0" and origin.endswith("server.pyc")
    # Nor does it load importlib.metadata (betterproto's own version lookup): the archive's
    # __main__ puts the version it packed in place first.
    probe = ("import sys, zipfile; sys.path.insert(0, sys.argv[1]); "
             "main = zipfile.ZipFile(sys.argv[1]).read('__main__.py').decode(); "
             "exec(main.replace('main()', 'import skyd.nodeagent.server, betterproto')); "
             "print(betterproto.__version__, 'importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(tmp_path / "c.pyz")],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [importlib.metadata.version("betterproto"), "False"]
    # Without the bytecode (what an older build shipped), the same imports compile each module.
    bare = tmp_path / "bare.pyz"
    with zipfile.ZipFile(tmp_path / "c.pyz") as src, zipfile.ZipFile(bare, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".pyc"):
                dst.writestr(info, src.read(info))
    out = subprocess.run([sys.executable, "-I", "-S", "-c", _COUNT_COMPILES, str(bare)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[0]) > 20


def _old_pythons() -> list[str]:
    """Python 3.8-3.10 interpreters on this machine (pyenv's, or on PATH)."""
    found = []
    for v in ("3.8", "3.9", "3.10"):
        pyenv = sorted(Path.home().glob(f".pyenv/versions/{v}.*/bin/python{v}"))
        exe = shutil.which(f"python{v}")
        if pyenv:
            found.append(str(pyenv[-1]))
        elif exe and "/shims/" not in exe:  # a pyenv shim may point at nothing
            found.append(exe)
    return found


OLD_PYTHONS = _old_pythons()


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python 3.8-3.10 interpreter on this machine")
@pytest.mark.parametrize("py", OLD_PYTHONS or ["none"])
def test_zipapp_on_old_python(py: str, tmp_path: Path) -> None:
    """A node needs only Python >= 3.8: the zipapp carries an older dependency set for it."""
    from skyd import paths
    from skyd.nodeagent.compat_deps import ensure_compat_deps

    # The set the setup step fetched (python -m skyd.nodeagent.compat_deps): no test
    # reaches PyPI (the network guard would fail it).
    compat = ensure_compat_deps(paths.cache_dir())
    assert compat is not None, "run `python -m skyd.nodeagent.compat_deps` first"
    pyz = tmp_path / "agent.pyz"
    build_zipapp(pyz, compat_dir=compat)
    home = tmp_path / "home"
    info = start_agent_detached_blocking(home, python=py, zipapp=pyz, cluster_secret="old-py")
    # a worker too: the head reaches it over mutual TLS with the old Python's ssl and grpclib
    winfo = start_agent_detached_blocking(tmp_path / "worker", python=py, zipapp=pyz, rank=1,
                                          cluster_secret="old-py")  # fmt: skip
    try:

        async def use() -> None:
            async with AgentClient("127.0.0.1", info["port"], "old-py") as c:
                j = await c.submit_job({"setup": "echo s", "run": "echo r; exit 2"})
                job = await wait_status(c, j, "FAILED")
                assert job["exit_code"] == 2 and await read_log(c, j) == "s\nr\n"
                nodes = [{"rank": r, "address": "127.0.0.1:%d" % i["port"]}
                         for r, i in enumerate((info, winfo))]  # fmt: skip
                j = await c.submit_job({"run": "echo rank=$SKYPILOT_NODE_RANK", "num_nodes": 2,
                                        "nodes": nodes})  # fmt: skip
                await wait_status(c, j, "SUCCEEDED")
                merged = await read_log(c, j)
                assert "(head, rank=0) rank=0" in merged and "(worker1, rank=1) rank=1" in merged
                await c.shutdown(exit=True)

        asyncio.run(use())
    finally:
        for i in (info, winfo):
            try:
                os.kill(i["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
