"""Launch latency on the `local` infra, through the real CLI, daemon and node agents.

    .venv/bin/python bench/launch_bench.py [-n 10]

- launch: `skyd launch -c NEW 'echo FIRST'` on a new cluster, command start -> the job's
  first output line on the CLI's stdout (median of n; target <= 1.5 s);
- exec: `skyd exec CLUSTER 'echo FIRST'` on an existing cluster, same measure (<= 300 ms).
The daemon is started once beforehand (warm), in a throwaway SKYD_HOME; clusters are torn
down between launches (not timed). Also the helpers logs_bench/queue_bench use.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# SKYD_BENCH_CLI: another CLI executable to measure (e.g. a patched one).
SKYD = os.environ.get("SKYD_BENCH_CLI") or str(Path(sys.executable).parent / "skyd")


def _answers(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


@contextmanager
def bench_daemon() -> Iterator[dict[str, str]]:
    """A daemon in a throwaway SKYD_HOME; yields the env for CLI calls; downs everything."""
    home = Path(tempfile.mkdtemp(prefix="skyd-bench-"))
    env = {**os.environ, "SKYD_HOME": str(home / "home"), "SKYD_SOCKET": str(home / "s.sock"),
           "SKYD_CONFIG_DIR": str(home / "config"), "PYTHONPATH": str(REPO)}
    env.pop("SKYD_CATALOG_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not _answers(env["SKYD_SOCKET"]):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.02)
        yield env
    finally:
        subprocess.run([SKYD, "down", "-a", "-y"], env=env, capture_output=True, timeout=120)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def skyd(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([SKYD, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"skyd {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def time_to_line(env: dict[str, str], args: list[str], marker: str) -> float:
    """Seconds from starting `skyd ARGS` to the first stdout line containing marker."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([SKYD, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    took = None
    for line in proc.stdout:
        if marker.encode() in line:
            took = time.perf_counter() - t0
            break
    proc.stdout.read()
    if proc.wait(60) != 0 or took is None:
        raise RuntimeError(f"skyd {' '.join(args)} failed (exit {proc.returncode})")
    return took


def fmt(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:.0f} ms  min {min(xs) * 1000:.0f} ms  "
            f"max {max(xs) * 1000:.0f} ms  (n={len(xs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=10)
    n = ap.parse_args().n
    with bench_daemon() as env:
        skyd(env, "launch", "-c", "warmup", "echo warm")  # first planning, imports, catalog
        skyd(env, "down", "warmup", "-y")
        launches = []
        for i in range(n):
            launches.append(time_to_line(env, ["launch", "-c", f"lb-{i}", "echo FIRST"], "FIRST"))
            skyd(env, "down", f"lb-{i}", "-y")
        skyd(env, "launch", "-c", "lb-exec", "echo up")
        execs = [time_to_line(env, ["exec", "lb-exec", "echo FIRST"], "FIRST") for _ in range(n)]
        t0 = time.perf_counter()
        for _ in range(n):
            skyd(env, "status")
        cli_rt = (time.perf_counter() - t0) / n
    print(f"launch (new local cluster) -> first output line: {fmt(launches)}  target <= 1500 ms")
    print(f"exec (existing cluster)    -> first output line: {fmt(execs)}  target <= 300 ms")
    print(f"reference: `skyd status` round trip (CLI start + one read): {cli_rt * 1000:.0f} ms")


if __name__ == "__main__":
    main()
