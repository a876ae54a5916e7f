"""Seeded `kill -9` of the real daemon on the `local` infra (no tests in here).

One trial: start a daemon in a fresh SKYD_HOME, submit a few launches (followed, some with
--down) and managed jobs, kill -9 the daemon 1-2 times at seeded moments (restarting it
each time), then let everything finish and check what a user would see:

- every launch request SUCCEEDED with its job SUCCEEDED, or FAILED with a message and no
  cluster left under its name;
- every managed job that was created ended SUCCEEDED (a `jobs.launch` request either
  SUCCEEDED with a job id or FAILED with a message);
- after `down -a` and a daemon stop, no process started for this SKYD_HOME is alive and no
  sandbox is left.

Used by tests/test_crash_kill9.py (a few seeds) and bench/crash_kill9_bench.py (many).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def guarded_pythonpath() -> str:
    """The network guard's sitecustomize first (tests/fakes/netguard), then the repository."""
    return os.pathsep.join([str(REPO / "tests" / "fakes" / "netguard"), str(REPO)])
TERMINAL_REQ = {"SUCCEEDED", "FAILED", "CANCELLED"}
TERMINAL_JOBS = {"SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP", "FAILED_PRECHECKS",
                 "FAILED_NO_RESOURCE", "FAILED_CONTROLLER"}  # fmt: skip


@dataclass
class TrialResult:
    seed: int
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    launches: int = 0
    managed: int = 0
    kills: int = 0
    failed_launches: int = 0  # FAILED with a message and nothing left: allowed, counted

    def fail(self, msg: str) -> None:
        self.ok = False
        self.problems.append(msg)


class Daemon:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        from skyd.sdk.transport import socket_answers

        err = open(Path(self.env["SKYD_HOME"]) / "daemon-test.stderr", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=self.env,
                                     cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        err.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if socket_answers(self.env["SKYD_SOCKET"], 0.5):
                return
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited at start")
            time.sleep(0.02)
        raise RuntimeError("daemon did not start")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _mentions(pid: int, home: str) -> bool:
    """Was this process started for `home` (its command line, cwd or environment)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if home.encode() in f.read():
                return True
        if os.readlink(f"/proc/{pid}/cwd").startswith(home):
            return True
        with open(f"/proc/{pid}/environ", "rb") as f:
            return home.encode() in f.read()
    except OSError:
        return False


def leftover_pids(home: Path) -> list[int]:
    h = str(home)
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me and _mentions(int(name), h):
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                        continue
            except OSError:
                continue
            out.append(int(name))
    return out


def _wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except Exception:  # noqa: BLE001 - the daemon may be between lives
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise TimeoutError(what)


def run_trial(seed: int, *, launches: int = 2, managed: int = 2, max_kills: int = 2,
              window: float = 4.0, timeout: float = 180.0) -> TrialResult:  # fmt: skip
    """One seeded trial in a throwaway SKYD_HOME (removed afterwards)."""
    from skyd.sdk.payloads import launch_payload, task_source
    from skyd.sdk.transport import Client

    rng = random.Random(seed)
    res = TrialResult(seed)
    base = Path(tempfile.mkdtemp(prefix="skyd-k9-", dir="/tmp"))
    home = base / "home"
    env = {**os.environ, "SKYD_HOME": str(home), "SKYD_SOCKET": str(base / "s.sock"),
           "SKYD_CONFIG_DIR": str(base / "config"), "PYTHONPATH": guarded_pythonpath(),
           "SKYD_JOBS_POLL": "0.3", "SKYD_JOBS_BACKOFF": "0.2", "SKYD_NO_AUTOSTART": "1"}  # fmt: skip
    env.pop("SKYD_CATALOG_DIR", None)
    home.mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")}
    os.environ.update({k: env[k] for k in saved})
    d = Daemon(env)
    try:
        d.start()
        reqs: dict[str, str] = {}  # request id -> kind
        with Client(autostart=False) as c:
            for i in range(launches):
                down = rng.random() < 0.4
                src = task_source(command=f"echo launch-{i}; sleep {rng.uniform(0.1, 1.0):.2f}")
                body = launch_payload(src, cluster_name=f"k{seed % 1000}-{i}", down=down)
                reqs[c.submit("launch", body)] = "launch"
                res.launches += 1
            for i in range(managed):
                src = task_source(command=f"echo managed-{i}; sleep {rng.uniform(0.1, 1.0):.2f}")
                reqs[c.submit("jobs.launch", {**src, "name": f"m{i}"})] = "jobs.launch"
                res.managed += 1
        for _ in range(rng.randint(1, max_kills)):
            time.sleep(rng.uniform(0.0, window))
            d.kill9()
            res.kills += 1
            time.sleep(rng.uniform(0.0, 0.5))
            d.start()
        with Client(autostart=False, timeout=30) as c:
            def all_requests_done() -> bool:
                return all(c.get(f"/v1/requests/{r}")["status"] in TERMINAL_REQ for r in reqs)

            _wait(all_requests_done, timeout, "requests did not finish")
            job_ids = []
            for rid, kind in reqs.items():
                row = c.get(f"/v1/requests/{rid}")
                status, result, error = row["status"], row.get("result") or {}, row.get("error")
                if kind == "launch":
                    name = result.get("cluster_name") or result.get("cluster")
                    if status == "SUCCEEDED":
                        if result.get("status") != "SUCCEEDED":
                            res.fail(f"launch {rid}: job ended {result.get('status')}")
                    elif not (error or {}).get("message"):
                        res.fail(f"launch {rid}: {status} without a message")
                    else:
                        res.failed_launches += 1
                        left = [x for x in c.get("/v1/status") if x.get("name") == name]
                        if left:
                            res.fail(f"launch {rid} FAILED ({error['message']}) left {left[0]}")
                elif status == "SUCCEEDED":
                    job_ids.append(int(result["job_id"]))
                elif not (error or {}).get("message"):
                    res.fail(f"jobs.launch {rid}: {status} without a message")

            def jobs_done() -> list[dict[str, Any]] | None:
                rows = [r for r in c.get("/v1/jobs") if r["id"] in job_ids]
                ok = len(rows) == len(job_ids) and all(r["status"] in TERMINAL_JOBS for r in rows)
                return rows if ok else None

            rows = _wait(jobs_done, timeout, "managed jobs did not finish") if job_ids else []
            for r in rows:
                if r["status"] != "SUCCEEDED":
                    res.fail(f"managed job {r['id']} ended {r['status']}: {r.get('failure_reason')}")
            # Every managed job's cluster is gone once the jobs ended.
            _wait(lambda: not [x for x in c.get("/v1/status") if x["name"].startswith("skyd-jobs")],
                  60, "managed-job clusters left")  # fmt: skip
            down = c.submit("down", {"clusters": [], "all": True})
            _wait(lambda: c.get(f"/v1/requests/{down}")["status"] in TERMINAL_REQ, 120, "down -a")
            if c.get(f"/v1/requests/{down}")["status"] != "SUCCEEDED":
                res.fail(f"down -a: {c.get(f'/v1/requests/{down}').get('error')}")
    except (TimeoutError, RuntimeError) as e:
        res.fail(f"{type(e).__name__}: {e}")
    finally:
        d.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        left = leftover_pids(base)
        if left:
            res.fail(f"processes left: {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        sandboxes = home / "local"
        if sandboxes.exists() and any(sandboxes.iterdir()):
            res.fail(f"sandboxes left: {sorted(p.name for p in sandboxes.iterdir())}")
        if res.ok:
            shutil.rmtree(base, ignore_errors=True)
        else:
            res.problems.append(f"(state kept in {base})")
    return res
