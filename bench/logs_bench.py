"""Log streaming throughput agent -> daemon -> CLI on the `local` infra.

    .venv/bin/python bench/logs_bench.py [--mb 200]

A job writes MB megabytes (100-byte lines) to stdout. Measured, bytes received by the CLI
over wall time (target >= 50 MB/s):
- follow: `skyd logs C J` started right after `skyd exec -d`, until the stream ends;
- no-follow: `skyd logs C J --no-follow > /dev/null` once the job has finished;
- exec: `skyd exec C CMD > /dev/null`, the job log relayed as request events (the path
  `skyd launch`/`exec` use).
"""

from __future__ import annotations

import argparse
import subprocess
import time

from launch_bench import SKYD, bench_daemon, skyd


def _count(env: dict[str, str], args: list[str]) -> tuple[int, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([SKYD, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    n = 0
    while chunk := proc.stdout.read(1 << 20):
        n += len(chunk)
    proc.wait(120)
    return n, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    size = ap.parse_args().mb * 1_000_000
    job = f"yes {'x' * 99} | head -c {size}"
    with bench_daemon() as env:
        skyd(env, "launch", "-c", "logs", "echo up")
        skyd(env, "exec", "logs", "-d", job)  # job 2
        n_follow, t_follow = _count(env, ["logs", "logs", "2"])
        assert n_follow == size, (n_follow, size)
        n_nf, t_nf = _count(env, ["logs", "logs", "2", "--no-follow"])
        assert n_nf == size, (n_nf, size)
        n_ex, t_ex = _count(env, ["exec", "logs", job])
        assert n_ex >= size, (n_ex, size)
    mb = size / 1e6
    print(f"follow while running : {mb:.0f} MB in {t_follow:.2f} s = {n_follow / 1e6 / t_follow:.0f} MB/s")
    print(f"--no-follow after end: {mb:.0f} MB in {t_nf:.2f} s = {n_nf / 1e6 / t_nf:.0f} MB/s  target >= 50 MB/s")
    print(f"exec (request events): {mb:.0f} MB in {t_ex:.2f} s = {n_ex / 1e6 / t_ex:.0f} MB/s")


if __name__ == "__main__":
    main()
