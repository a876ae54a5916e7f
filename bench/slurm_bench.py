"""Slurm benchmarks on the real Slurm fixture (tests/fakes/slurm.py: slurmctld + 2 slurmd +
munged on loopback, login host = real OpenSSH on 127.0.0.27). Needs root, slurm-wlm, munge.

    .venv/bin/python bench/slurm_bench.py [--repeat 3]

1. launch -> first output line: `skyd launch` of a fresh cluster on a warm daemon until the
   job's first line reaches the CLI, on `slurm/loop/gpu` (sbatch, allocation, srun agent
   step) and beside it on `local`; each cluster is downed after (not timed).
2. `skyd show-gpus --infra slurm` wall (SSH to the login host + scontrol).
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

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SKYD = str(Path(sys.executable).parent / "skyd")


async def until_line(args: list[str], marker: str) -> float:
    t0 = time.perf_counter()
    out = b""
    first = -1.0
    async with await anyio.open_process([SKYD, *args], stderr=-3) as p:
        assert p.stdout is not None
        async for chunk in p.stdout:
            out += chunk
            if first < 0 and marker.encode() in out:
                first = time.perf_counter() - t0
        rc = await p.wait()
    if rc != 0 or first < 0:
        raise RuntimeError(f"skyd {' '.join(args)} failed (rc {rc}):\n{out.decode()}")
    return first


def show(name: str, xs: list[float]) -> None:
    ms = [x * 1000 for x in xs]
    print(f"{name:<44} median {statistics.median(ms):7.0f} ms  min {min(ms):7.0f}  max {max(ms):7.0f}  (n={len(ms)})")


async def main(repeat: int) -> None:
    from tests.fakes.slurm import SlurmFixture, unavailable_reason

    why = unavailable_reason()
    if why:
        sys.exit(why)
    root = Path(tempfile.mkdtemp(prefix="skyd-slurm-bench-", dir="/var/tmp"))
    fx = SlurmFixture(root).start()
    home = Path(tempfile.mkdtemp(prefix="skyd-bench-"))
    (home / "slurm_config").write_text(fx.slurm_config())
    os.environ.update(SKYD_HOME=str(home / "home"), SKYD_SOCKET=str(home / "s.sock"),
                      SKYD_CONFIG_DIR=str(home / "config"), SKYD_SLURM_CONFIG=str(home / "slurm_config"))
    try:
        subprocess.run([SKYD, "daemon", "start"], check=True, capture_output=True)
        await until_line(["launch", "-y", "-c", "warm", "--infra", "slurm/loop/gpu", "echo warm"], "warm")
        subprocess.run([SKYD, "down", "-y", "warm"], check=True, capture_output=True)
        res: dict[str, list[float]] = {"slurm": [], "local": []}
        for i in range(repeat):
            for infra, where in (("slurm", "slurm/loop/gpu"), ("local", "local")):
                name = f"b{infra[0]}{i}"
                res[infra].append(await until_line(
                    ["launch", "-y", "-c", name, "--infra", where, "echo first-line"], "first-line"))
                subprocess.run([SKYD, "down", "-y", name], check=True, capture_output=True)
        show("launch -> first output line, slurm/loop/gpu", res["slurm"])
        show("launch -> first output line, local", res["local"])
        walls = []
        for _ in range(max(5, repeat)):
            t0 = time.perf_counter()
            subprocess.run([SKYD, "show-gpus", "--infra", "slurm"], check=True, capture_output=True)
            walls.append(time.perf_counter() - t0)
        show("show-gpus --infra slurm (wall)", walls)
    finally:
        subprocess.run([SKYD, "daemon", "stop"], check=False, capture_output=True)
        fx.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    anyio.run(main, ap.parse_args().repeat)
