"""The tests' fork servers (tests/support/forkserver.py) against fresh processes, side by
side (alternating, so load on a shared machine hits both alike):

    .venv/bin/python bench/forkserver_bench.py [-n 20]

- a `skyd --version` and a `skyd status -o json` call (a daemon up): the CPU of the
  call's process (fresh: the console script; forked: the child of the CLI server);
- a daemon's life (start, one `local` launch, `down`, SIGTERM): the daemon process's CPU
  (its threads included) at its exit, read from /proc just before it is reaped.

Servers are started once before the rounds (as the suite pays once per worker).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.support import forkserver  # noqa: E402
from tests.support.daemon import REPO, SKYD_BIN, answers, guarded_pythonpath  # noqa: E402

TASK = "resources:\n  infra: local\nrun: echo hi\n"


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def cli_call(args: list[str], env: dict[str, str], forked: bool) -> float:
    """CPU of one CLI call's process."""
    if forked:  # the CLI server's reaped children's CPU, before and after
        before = forkserver.reaped_cpu("cli")
        r = forkserver.run([str(SKYD_BIN), *args], env, timeout=60)
        assert r.returncode == 0, r.stderr
        return forkserver.reaped_cpu("cli") - before
    before = _children_cpu()
    r = subprocess.run([str(SKYD_BIN), *args], env=env, capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 0, r.stderr
    return _children_cpu() - before


def daemon_life(base: dict[str, str], forked: bool) -> float:
    """CPU of a daemon that starts, launches one `local` task, takes it down and stops."""
    with tempfile.TemporaryDirectory(prefix="skyd-fsb-") as d:
        env = {**base, "SKYD_HOME": f"{d}/home", "SKYD_SOCKET": f"{d}/s.sock",
               "SKYD_CONFIG_DIR": f"{d}/cfg"}
        proc: object
        if forked:
            proc = forkserver.spawn_daemon(env, str(REPO), subprocess.DEVNULL)
            assert proc is not None
        else:
            proc = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env,
                                    cwd=str(REPO), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        pid = proc.pid  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while not answers(env["SKYD_SOCKET"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        Path(f"{d}/t.yaml").write_text(TASK)
        for args in (["launch", "-y", "-c", "b", f"{d}/t.yaml"], ["down", "-y", "b"]):
            r = forkserver.run([str(SKYD_BIN), *args], env, timeout=120)
            assert r.returncode == 0, r.stderr
        cpu = _cpu(pid)
        os.kill(pid, 15)
        proc.wait(30)  # type: ignore[attr-defined]
        return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20, help="rounds (each measures both ways)")
    a = ap.parse_args()
    empty = tempfile.NamedTemporaryFile("w", suffix=".yaml")  # noqa: SIM115 - the run's life
    base = {**os.environ, "PYTHONPATH": guarded_pythonpath(), "SKYD_SSH_CONFIG": "off",
            "SKYPILOT_GLOBAL_CONFIG": empty.name}
    base.pop("SKYD_TEST_PROC_LOG", None)
    os.environ.clear()
    os.environ.update(base)
    with tempfile.TemporaryDirectory(prefix="skyd-fsb-up-") as d:
        up = {**base, "SKYD_HOME": f"{d}/home", "SKYD_SOCKET": f"{d}/s.sock",
              "SKYD_CONFIG_DIR": f"{d}/cfg"}
        daemon = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=up, cwd=str(REPO),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not answers(up["SKYD_SOCKET"]):
                time.sleep(0.01)
            cli_call(["--version"], base, True)  # start the servers
            assert daemon_life(base, True) > 0
            rows: dict[str, tuple[list[float], list[float]]] = {
                "skyd --version": ([], []), "skyd status -o json": ([], []),
                "daemon: start, local launch, down, stop": ([], [])}
            for i in range(a.n):
                for forked in ((False, True) if i % 2 == 0 else (True, False)):
                    k = 1 if forked else 0
                    rows["skyd --version"][k].append(cli_call(["--version"], base, forked))
                    rows["skyd status -o json"][k].append(
                        cli_call(["status", "-o", "json"], up, forked))
                    if i < max(3, a.n // 3):
                        rows["daemon: start, local launch, down, stop"][k].append(
                            daemon_life(base, forked))
        finally:
            daemon.terminate()
            daemon.wait(30)
    print("| process | fresh (median CPU-s) | forked (median CPU-s) | ratio | n |")
    print("|---|---|---|---|---|")
    for name, (fresh, forked_) in rows.items():
        f, g = statistics.median(fresh), statistics.median(forked_)
        print(f"| {name} | {f:.3f} | {g:.3f} | {f / g:.1f} | {len(fresh)} |")


if __name__ == "__main__":
    main()
