"""A daemon on another host (SKYD_HOST=ssh://…) against the same daemon used locally.

    .venv/bin/python bench/remote_bench.py [-n 15]

Needs root and Debian's openssh-server (as tests/fakes/sshd.py). The "host" is this machine:
real sshd on 127.0.0.7, the daemon runs as the test user under its own SKYD_HOME. Both
clients are the same skyd (the system python with this checkout), run in turn (pairs):
- local:  runuser -u USER -- env SKYD_HOME=H skyd VERB   (the user on the host itself)
- remote: SKYD_HOST=ssh://USER@127.0.0.7:PORT?… skyd VERB (over the shared SSH connection)
`runuser true` is timed too: the local figures include its cost. Figures: medians (ms).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(argv: list[str], env: dict[str, str] | None = None, want: str | None = None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                       stdin=subprocess.DEVNULL)
    dt = (time.perf_counter() - t0) * 1000
    if r.returncode != 0 or (want and want not in r.stdout + r.stderr):
        raise SystemExit(f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return dt


def first_line_ms(argv: list[str], env: dict[str, str] | None, marker: str) -> float:
    """From start to the first output line holding ``marker`` (launch -> first log line)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, stdin=subprocess.DEVNULL)
    assert p.stdout is not None
    seen = None
    for line in p.stdout:
        if seen is None and marker in line:
            seen = (time.perf_counter() - t0) * 1000
    p.wait(timeout=120)
    if p.returncode != 0 or seen is None:
        raise SystemExit(f"{argv}: rc {p.returncode}, marker seen: {seen is not None}")
    return seen


async def main(n: int) -> None:
    import pwd

    from tests.fakes.sshd import real_sshd
    from tests.sdk.test_remote_daemon import REMOTE_USER, _user_dir, _wrapper

    shared = Path(tempfile.mkdtemp(prefix="skyd-remote-bench-", dir="/var/tmp"))
    shared.chmod(0o755)
    async with real_sshd(shared / "sshd", host="127.0.0.7", user=REMOTE_USER) as s:
        home = _user_dir(s.user, "skyd-rb-")
        w = str(_wrapper(shared))
        pw = pwd.getpwnam(s.user)
        local = ["runuser", "-u", s.user, "--", "env", f"SKYD_HOME={home}", f"HOME={pw.pw_dir}", w]
        url = f"ssh://{s.user}@{s.host}:{s.port}?bin={w}&home={home}"
        renv = {**os.environ, "SKYD_HOST": url, "SKYD_HOME": str(shared / "client"),
                "SKYD_SSH_OPTS": f"-i {s.key} -o StrictHostKeyChecking=no "
                                 "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"}
        remote = [w]
        timed([*local, "launch", "-y", "-c", "rb", "echo warm"])  # daemon up, cluster UP
        timed([*remote, "status"], renv)  # the shared SSH connection is open
        rows: dict[str, list[float]] = {}
        for _ in range(n):
            rows.setdefault("runuser true", []).append(timed(["runuser", "-u", s.user, "--", "true"]))
            for verb, args in (("status", ["status"]),
                               ("exec", ["exec", "rb", "echo hi"])):
                rows.setdefault(f"{verb} local", []).append(timed([*local, *args]))
                rows.setdefault(f"{verb} remote", []).append(timed([*remote, *args], renv))
            cmd = ["launch", "-y", "-c", "rb", "echo first-line-marker"]
            rows.setdefault("launch->first line local", []).append(
                first_line_ms([*local, *cmd], None, "first-line-marker"))
            rows.setdefault("launch->first line remote", []).append(
                first_line_ms([*remote, *cmd], renv, "first-line-marker"))
        rtt = []
        from skyd.sdk.remote import control_path, parse_host

        os.environ.update({k: renv[k] for k in ("SKYD_SSH_OPTS", "SKYD_HOME")})
        t = parse_host(url)
        for _ in range(n):  # one SSH round trip on the shared connection
            rtt.append(timed(["ssh", "-o", f"ControlPath={control_path(t)}", *t.destination(),
                              "true"]))
        print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
        print(f"ssh round trip (exec 'true' on the shared connection): {statistics.median(rtt):.1f} ms")
        for k, v in rows.items():
            print(f"{k:30s} median {statistics.median(v):7.1f} ms  (min {min(v):.1f}, max {max(v):.1f})")
        for verb in ("status", "exec", "launch->first line"):
            a = statistics.median(rows[f"{verb} remote"])
            b = statistics.median(rows[f"{verb} local"])
            print(f"{verb}: remote - local = {a - b:+.1f} ms (ratio {a / b:.2f})")
        timed([*local, "down", "-y", "rb"])
        subprocess.run([*local, "daemon", "stop"], capture_output=True)
        from skyd.sdk.remote import close_master

        close_master(t)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=15)
    anyio.run(main, ap.parse_args().n)
