"""Seeded `kill -9` of the real daemon during long operations (no tests in here).

One trial runs one *scenario* in a fresh SKYD_HOME: the scenario starts its operation, kills
the daemon 1-2 times at seeded moments (restarting it each time), waits for things to settle
and checks what a user would see. Then the harness checks the same invariants after every
scenario:

- every request ended in a terminal state (resumed ones included), every managed job too;
- everything is taken down (services, pools, clusters) and that teardown SUCCEEDED;
- no row is left in SQLite for a cluster, service, replica or pool (none stuck in a
  transitional state such as SHUTTING_DOWN);
- once the daemon stopped, no process started for this SKYD_HOME is alive, no sandbox is
  left, and the scenario's fake infrastructure (moto, the GCE / Kubernetes / neocloud
  fakes, Slurm) holds nothing skyd made.

Scenarios are plugins: modules named in PLUGINS register them with :func:`scenario`
(tests/support/crash_scenarios_local.py: launches, managed jobs, serving, pools, `down -a`, gangs;
tests/support/crash_scenarios_infra.py: each cloud fake, bucket file_mounts). A scenario may bring
fake infrastructure (``infra``: a context manager yielding an :class:`Infra`), whose ``env``
the daemon gets and whose ``leftovers()`` must be empty at the end.

Used by tests/test_crash_kill9*.py (a few seeds; ``SKYD_CRASH_TRIALS=N`` runs N seeds of
every scenario) and bench/crash_kill9_bench.py.
"""

from __future__ import annotations

import importlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tests.support import forkserver

REPO = Path(__file__).resolve().parents[2]
PLUGINS = ("tests.support.crash_scenarios_local", "tests.support.crash_scenarios_infra")
TERMINAL_REQ = {"SUCCEEDED", "FAILED", "CANCELLED"}
TERMINAL_JOBS = {"SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP", "FAILED_PRECHECKS",
                 "FAILED_NO_RESOURCE", "FAILED_CONTROLLER"}  # fmt: skip
# Rows that must be gone once everything is down (a stuck SHUTTING_DOWN replica, a cluster
# row of a half-made launch, a pool worker...).
EMPTY_AFTER_DOWN = ("clusters", "services", "replicas", "job_pools", "job_pool_workers")


def guarded_pythonpath() -> str:
    """The network guard's sitecustomize first (tests/fakes/netguard), then the repository."""
    return os.pathsep.join([str(REPO / "tests" / "fakes" / "netguard"), str(REPO)])


@dataclass
class TrialResult:
    seed: int
    scenario: str = ""
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
        self.proc: subprocess.Popen[bytes] | forkserver.Forked | None = None

    def start(self, timeout: float = 30.0) -> None:
        from skyd.sdk.transport import socket_answers
        from tests.support import forkserver

        err = open(Path(self.env["SKYD_HOME"]) / "daemon-test.stderr", "ab")  # noqa: SIM115
        # forked from the daemon server (tests/support/forkserver.py) where it can be
        self.proc = forkserver.spawn_daemon(self.env, str(REPO), err) or subprocess.Popen(
            [sys.executable, "-m", "skyd.daemon"], env=self.env, cwd=str(REPO),
            stdout=subprocess.DEVNULL, stderr=err)
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


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"


def daemon_and_helpers(pid: int) -> set[int]:
    """The daemon and its own helper processes (the warm agent `local` nodes' agents fork
    from: skyd/nodeagent/zygote.py), which live as long as it does: not leftovers while it
    runs. The agents forked from the helper are not among them."""
    out = {pid}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and "skyd.nodeagent.zygote" in _cmdline(int(name)):
            out.add(int(name))
    return out


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


class InfraUnavailable(Exception):
    """A scenario's infrastructure cannot run on this machine (the test skips, saying why)."""


class Infra(Protocol):
    """Fake infrastructure a scenario runs on: the daemon's environment for it, and what
    skyd made there that is still there (falsy when nothing)."""

    env: dict[str, str]

    def leftovers(self) -> Any: ...

    # Optional ``reap()``: the fake's machines that were terminated take their processes with
    # them (a fake SSH host standing for a VM does not: it is told here).


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Trial, Any], None]
    infra: Callable[[Path], AbstractContextManager[Infra]] | None = None
    env: dict[str, str] = field(default_factory=dict)
    doc: str = ""


_SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, *, infra: Callable[[Path], AbstractContextManager[Infra]] | None = None,
             env: dict[str, str] | None = None) -> Callable[[Callable[[Trial, Any], None]],
                                                            Callable[[Trial, Any], None]]:
    """Register ``fn(trial, client)`` as the scenario ``name``."""
    def reg(fn: Callable[[Trial, Any], None]) -> Callable[[Trial, Any], None]:
        _SCENARIOS[name] = Scenario(name, fn, infra, dict(env or {}), (fn.__doc__ or "").strip())
        return fn

    return reg


def scenarios() -> dict[str, Scenario]:
    for mod in PLUGINS:
        importlib.import_module(mod)
    return dict(_SCENARIOS)


@dataclass
class Trial:
    """One trial's state, handed to its scenario."""

    seed: int
    rng: random.Random
    res: TrialResult
    base: Path
    home: Path
    daemon: Daemon
    max_kills: int
    window: float
    timeout: float
    infra: Infra | None = None

    def kill_restart(self) -> None:
        self.daemon.kill9()
        self.res.kills += 1
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.daemon.start()

    def kills(self, c: Any, window: float | None = None, max_kills: int | None = None) -> None:
        """1..max_kills kill -9 + restart of the daemon, each after a seeded pause."""
        for _ in range(self.rng.randint(1, max_kills or self.max_kills)):
            time.sleep(self.rng.uniform(0.0, self.window if window is None else window))
            self.kill_restart()
        c.close()

    def wait(self, pred: Any, what: str, timeout: float | None = None) -> Any:
        return _wait(pred, self.timeout if timeout is None else timeout, what)

    @staticmethod
    def done(c: Any, rid: str) -> str | None:
        st = c.get(f"/v1/requests/{rid}")["status"]
        return st if st in TERMINAL_REQ else None

    def finish(self, c: Any, rid: str, what: str) -> str:
        return str(self.wait(lambda: self.done(c, rid), f"{what} did not finish"))

    def launch_outcomes(self, c: Any, ids: dict[str, str], *, jobs: int | None = 1) -> None:
        """Each launch SUCCEEDED with its job SUCCEEDED (and, ``jobs``, that many jobs on the
        cluster: a resumed launch never runs its job twice), or FAILED with a message and
        no cluster under its name."""
        for rid, name in ids.items():
            row = c.get(f"/v1/requests/{rid}")
            result, error = row.get("result") or {}, row.get("error")
            if row["status"] == "SUCCEEDED":
                if result.get("status") != "SUCCEEDED":
                    self.res.fail(f"launch {name}: job ended {result.get('status')}")
                if jobs is not None:
                    got = c.get(f"/v1/clusters/{name}/queue")["jobs"]
                    if len(got) != jobs:
                        self.res.fail(f"launch {name}: {len(got)} jobs on the cluster")
            elif not (error or {}).get("message"):
                self.res.fail(f"launch {name}: {row['status']} without a message")
            else:
                self.res.failed_launches += 1
                left = [x for x in c.get("/v1/status") if x.get("name") == name]
                if left:
                    self.res.fail(f"launch {name} FAILED ({error['message']}) left {left[0]}")


def _teardown(t: Trial, c: Any) -> None:
    """Everything down through the API; every request and managed job terminal."""
    for s in c.get("/v1/services"):
        rid = c.submit("serve.down", {"names": [s["name"]], "all": False})
        t.finish(c, rid, "final serve down")
    pools = c.get("/v1/pools")
    if pools:
        rid = c.submit("jobs.pool_down", {"names": [p["name"] for p in pools], "all": False})
        t.finish(c, rid, "final pool down")
    t.wait(lambda: all(j["status"] in TERMINAL_JOBS for j in c.get("/v1/jobs")),
           "managed jobs did not end")
    rid = c.submit("down", {"clusters": [], "all": True})
    if t.finish(c, rid, "final down -a") != "SUCCEEDED":
        t.res.fail(f"final down -a: {c.get(f'/v1/requests/{rid}').get('error')}")
    left = [x["name"] for x in c.get("/v1/status")]
    if left:
        t.res.fail(f"clusters left: {left}")
    open_reqs = [(r["id"], r["verb"], r["status"]) for r in c.get("/v1/requests", {"limit": 1000})
                 if r["status"] not in TERMINAL_REQ]
    if open_reqs:
        t.res.fail(f"requests left open: {open_reqs}")


def _rows_left(home: Path) -> dict[str, list[Any]]:
    db = home / "state.db"
    if not db.exists():
        return {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for table in EMPTY_AFTER_DOWN:
            try:
                rows = con.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - constant
            except sqlite3.OperationalError:
                continue  # not created in this install
            if rows:
                out[table] = [tuple(r)[:4] for r in rows]
        return out
    finally:
        con.close()


@contextmanager
def _no_infra(_: Path) -> Iterator[None]:
    yield None


def run_trial(seed: int, name: str = "launches", *, max_kills: int = 2, window: float = 4.0,
              timeout: float = 150.0) -> TrialResult:
    """One seeded trial of scenario ``name`` in a throwaway SKYD_HOME (removed afterwards
    unless it failed: then its path is the last problem)."""
    from skyd.sdk.transport import Client

    sc = scenarios()[name]
    rng = random.Random(seed)
    res = TrialResult(seed, name)
    base = Path(tempfile.mkdtemp(prefix="skyd-k9-", dir="/tmp"))
    home = base / "home"
    home.mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")}
    try:
        with (sc.infra or _no_infra)(base / "infra") as infra:
            env = {**os.environ, "SKYD_HOME": str(home), "SKYD_SOCKET": str(base / "s.sock"),
                   "SKYD_CONFIG_DIR": str(base / "config"), "PYTHONPATH": guarded_pythonpath(),
                   "SKYD_JOBS_POLL": "0.3", "SKYD_JOBS_BACKOFF": "0.2", "SKYD_NO_AUTOSTART": "1",
                   "SKYD_SERVE_PROBE_INTERVAL": "0.2", "SKYD_PROVISION_TIMEOUT_S": "60",
                   "SKYD_NETGUARD_LOG": str(base / "netguard.log"),
                   **sc.env, **(infra.env if infra is not None else {})}
            env.pop("SKYD_CATALOG_DIR", None)
            os.environ.update({k: env[k] for k in saved})
            d = Daemon(env)
            t = Trial(seed, rng, res, base, home, d, max_kills, window, timeout, infra)
            try:
                d.start()
                with Client(autostart=False, timeout=30) as c:
                    sc.run(t, c)
                    c.close()
                    _teardown(t, c)
            except Exception as e:  # noqa: BLE001 - a trial reports what broke, then cleans up
                res.fail(f"{type(e).__name__}: {e}")
            finally:
                d.stop()
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                _after(res, base, home, infra)
    except InfraUnavailable:
        shutil.rmtree(base, ignore_errors=True)
        raise
    if res.ok:
        shutil.rmtree(base, ignore_errors=True)
    else:
        res.problems.append(f"(state kept in {base})")
    return res


def _after(res: TrialResult, base: Path, home: Path, infra: Infra | None) -> None:
    """The daemon is stopped: what is left of this trial anywhere."""
    reap = getattr(infra, "reap", None)
    if reap is not None:  # machines terminated on the fake: their processes end with them
        reap()
    rows = _rows_left(home)
    if rows:
        res.fail(f"rows left in SQLite: {rows}")
    left_pids = leftover_pids(base)
    if left_pids:
        res.fail(f"processes left: {[(pid, _cmdline(pid)) for pid in left_pids]}")
        for pid in left_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    sandboxes = home / "local"
    if sandboxes.exists() and any(sandboxes.iterdir()):
        res.fail(f"sandboxes left: {sorted(p.name for p in sandboxes.iterdir())}")
    if infra is not None:
        try:
            left = infra.leftovers()
        except Exception as e:  # noqa: BLE001 - a fake that cannot answer is a failure too
            left = f"{type(e).__name__}: {e}"
        if left:
            res.fail(f"left on the fake infrastructure: {left}")
    guard = base / "netguard.log"
    if guard.exists() and guard.read_text().strip():
        res.fail(f"connections outside loopback: {guard.read_text()[:400]}")
