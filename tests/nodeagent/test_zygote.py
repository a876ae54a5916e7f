"""`local` agents fork from a warm one (skyd/nodeagent/zygote.py): through a real daemon each
node's agent is a child of the daemon's helper, with its own session and the command line
`ps` and the node's own lookups expect; the helper goes with the daemon (kill -9 included)
and the agents stay; what cannot be forked starts fresh; a failing agent reports as before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.nodeagent import zygote
from skyd.nodeagent.client import agent_command, start_agent_detached_blocking
from tests.support.pipeline import Env, module_env, wait_for, write


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _ppid(pid: int) -> int:
    return int(_stat(pid)[1])


def _cmdline(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def test_a_daemons_local_agents_fork_from_its_helper_and_outlive_it(env: Env,
                                                                     tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml", "num_nodes: 2\nrun: echo node-$SKYPILOT_NODE_RANK home=$HOME\n")
    r = env.ok("launch", "-c", "zy", str(y))
    assert "node-0 home=" in r.stdout and "node-1 home=" in r.stdout, r.stdout
    assert env.daemon is not None
    daemon_pid = env.daemon.pid
    agents = env.agent_pids("zy")
    assert len(agents) == 2
    helpers = {_ppid(a) for a in agents}
    assert len(helpers) == 1, "both agents come from one helper"
    helper = helpers.pop()
    assert _ppid(helper) == daemon_pid
    assert _cmdline(helper)[1:] == ["-m", "skyd.nodeagent.zygote"]
    for rank, pid in enumerate(sorted(agents, key=lambda p: _cmdline(p))):
        node_dir = env.cluster_dir("zy") / f"node-{rank}"
        argv = _cmdline(pid)
        # what `ps` shows and what finds a node's agents (/proc/PID/cmdline)
        assert argv[1:3] == ["-m", "skyd.nodeagent"] and argv[argv.index("--home") + 1] == str(node_dir)
        assert int(_stat(pid)[3]) == pid, "each agent leads its own session"
        info = json.loads((node_dir / "agent.json").read_text())
        assert info["pid"] == pid
    # Each node's job sees its own HOME (the environment the daemon asked for, not the helper's)
    homes = sorted(line.split("home=")[1] for line in r.stdout.splitlines() if "home=" in line)
    assert homes == sorted(str(env.cluster_dir("zy") / f"node-{i}" / "home") for i in range(2))

    env.kill9_daemon()
    wait_for(lambda: not _alive(helper), timeout=10, interval=0.05)  # stdin closed: it exits
    assert all(_alive(a) for a in agents), "the nodes' agents outlive the daemon and its helper"
    env.start_daemon()
    r = env.ok("exec", "zy", "echo again-$SKYPILOT_NODE_RANK")
    assert "again-0" in r.stdout
    env.ok("down", "zy", "-y")
    wait_for(lambda: not any(_alive(a) for a in agents), timeout=10, interval=0.05)


def test_a_daemon_stopping_stops_its_helper(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml", "run: echo up\n")
    env.ok("launch", "-c", "zs", "-d", str(y))
    helper = _ppid(env.agent_pids("zs")[0])
    assert _cmdline(helper)[1:] == ["-m", "skyd.nodeagent.zygote"]
    assert env.daemon is not None
    env.daemon.terminate()  # SIGTERM: a clean stop
    env.daemon = None
    assert not _alive(helper)
    env.start_daemon()
    env.ok("down", "zs", "-y")


def test_what_cannot_fork_starts_fresh_and_a_failing_agent_says_why(tmp_path: Path) -> None:
    z = zygote.AgentZygote()
    try:
        env = dict(os.environ)
        argv = agent_command(tmp_path / "a")
        # a command longer than the helper's room for it: no fork
        assert z.spawn(argv + ["--cluster", "x" * (zygote.ARGV_ROOM + 1)], env, str(tmp_path),
                       str(tmp_path / "log")) is None
        assert z.pid is not None, "the helper started"
        # another interpreter, or other start-time settings: no fork
        assert z.spawn(["/usr/bin/python3"] + argv[1:], env, str(tmp_path), str(tmp_path / "l")) is None
        other = {**env, "PYTHONHASHSEED": "123"}
        helper = z.pid
        fresh = start_agent_detached_blocking(tmp_path / "b", cluster_secret="s", env=other, zygote=z)
        try:
            assert _ppid(fresh["pid"]) != helper  # started as a fresh process
            assert "PYTHONHASHSEED=123" in Path(f"/proc/{fresh['pid']}/environ").read_bytes().decode()
        finally:
            os.kill(fresh["pid"], signal.SIGKILL)
        # a forked agent that fails says so, with its own message, as a fresh one does
        for warm in (z, None):
            with pytest.raises(RuntimeError) as e:
                start_agent_detached_blocking(tmp_path / f"c{bool(warm)}", cluster_secret="s",
                                              extra_args=["--autostop-action", "bogus"], zygote=warm)
            assert "did not start" in str(e.value)
            assert "--autostop-action must be local-stop or command:<cmd>" in str(e.value)
    finally:
        z.close()
    assert z.pid is None


def test_the_helper_waits_for_its_agents_before_leaving_idle(tmp_path: Path) -> None:
    """Idle, it exits only once none of its agents runs (while they do, it reaps them)."""
    code = "import sys; from skyd.nodeagent.zygote import serve; serve(idle_s=0.5)"
    p = subprocess.Popen([sys.executable, "-c", code, "x" * zygote.ARGV_ROOM],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert p.stdin is not None and p.stdout is not None
    try:
        hello = json.loads(p.stdout.readline())
        assert hello["room"] > zygote.ARGV_ROOM
        home = tmp_path / "n"
        from skyd.nodeagent.credentials import write_agent_credentials

        home.mkdir()
        write_agent_credentials(home, "s")
        req = {"argv": agent_command(home), "env": dict(os.environ), "cwd": str(tmp_path),
               "log": str(home / "agent.log")}
        p.stdin.write(json.dumps(req).encode() + b"\n")
        p.stdin.flush()
        pid = json.loads(p.stdout.readline())["pid"]
        wait_for(lambda: (home / "agent.json").exists(), timeout=20, interval=0.05)
        time.sleep(1.5)  # three idle periods
        assert p.poll() is None, "it stays while its agent runs"
        os.kill(pid, signal.SIGTERM)
        assert p.wait(10) == 0
        assert not _alive(pid), "the agent was reaped, not left a zombie"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
