"""Seeded `kill -9` of the real daemon during serving and pool operations on `local` (no tests
in here; tests/test_crash_kill9_serve.py runs it).

One trial runs one scenario in a fresh SKYD_HOME, kills the daemon 1-2 times at seeded
moments while the operation runs (restarting it each time), then checks what a user would
see once it settles:

- ``up``: `serve up` of 2 replicas -> the service READY with 2 READY replicas of version 1;
- ``update``/``update_bg``: `serve update` (rolling / blue_green) of a READY service -> 2
  READY replicas of version 2, nothing of version 1 left (no SHUTTING_DOWN row forever);
- ``down``: `serve down` -> the service gone, its clusters gone;
- ``pool``: `jobs pool apply` of 2 workers then `jobs pool down` -> the pool gone;
- ``down_all``: `down -a` of 3 clusters -> no cluster left;
- ``gang_fake``: launches of 2-node gang jobs on the fake preemptible cloud (a provider with
  its own provisioner, tests/fakes/preemptible.py) -> each SUCCEEDED with its job SUCCEEDED
  on both ranks, or FAILED with a message and nothing left under its name.

Every scenario ends with everything taken down; then no process started for the home may
be alive and no sandbox may be left, and no request may be left non-terminal.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.crash_harness import TERMINAL_REQ, Daemon, TrialResult, _wait, leftover_pids

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "tests" / "fakes" / "replica_app.py"
SCENARIOS = ("up", "update", "update_bg", "down", "pool", "down_all", "gang_fake")
PROBE = ("  readiness_probe:\n    path: /health\n    initial_delay_seconds: 60\n"
         "    endpoint_probe_interval_seconds: 0.2\n"
         "    consecutive_failure_threshold_timeout: 2\n")


def service_yaml(version: str) -> str:
    return (f"service:\n{PROBE}  replicas: 2\nenvs:\n  V: {version}\n"
            f"resources:\n  infra: local\nrun: exec {sys.executable} {APP}\n")


def _svc(c: Any, name: str) -> dict[str, Any] | None:
    try:
        return dict(c.get(f"/v1/services/{name}"))
    except Exception:  # noqa: BLE001 - gone (404) or the daemon between lives
        return None


def _settled(c: Any, name: str, version: int) -> bool:
    s = _svc(c, name)
    if s is None or s.get("status") != "READY":
        return False
    reps = sorted((r["status"], int(r["version"])) for r in s["replicas"])
    return reps == [("READY", version), ("READY", version)]


def _req_done(c: Any, rid: str) -> str | None:
    st = c.get(f"/v1/requests/{rid}")["status"]
    return st if st in TERMINAL_REQ else None


def _kills(rng: random.Random, d: Daemon, res: TrialResult, window: float,
           max_kills: int) -> None:
    for _ in range(rng.randint(1, max_kills)):
        time.sleep(rng.uniform(0.0, window))
        d.kill9()
        res.kills += 1
        time.sleep(rng.uniform(0.0, 0.5))
        d.start()


def run_trial(seed: int, scenario: str, *, max_kills: int = 2, window: float = 4.0,
              timeout: float = 150.0) -> TrialResult:
    from skyd.sdk.payloads import task_source
    from skyd.sdk.transport import Client

    rng = random.Random(seed)
    res = TrialResult(seed)
    base = Path(tempfile.mkdtemp(prefix="skyd-k9s-", dir="/tmp"))
    home = base / "home"
    env = {**os.environ, "SKYD_HOME": str(home), "SKYD_SOCKET": str(base / "s.sock"),
           "SKYD_CONFIG_DIR": str(base / "config"), "PYTHONPATH": str(REPO),
           "SKYD_JOBS_POLL": "0.3", "SKYD_JOBS_BACKOFF": "0.2", "SKYD_NO_AUTOSTART": "1",
           "SKYD_SERVE_PROBE_INTERVAL": "0.2", "SKYD_EXTRA_PLUGINS": "tests.fakes.preemptible"}
    env.pop("SKYD_CATALOG_DIR", None)
    home.mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")}
    os.environ.update({k: env[k] for k in saved})
    d = Daemon(env)
    name = f"sv{seed % 1000}"
    try:
        d.start()
        with Client(autostart=False, timeout=30) as c:
            def up() -> str:
                return c.submit("serve.up", {**task_source(yaml_text=service_yaml("one")),
                                             "name": name, "env": {}})

            if scenario == "up":
                rid = up()
                _kills(rng, d, res, window, max_kills)
                c.close()
                _wait(lambda: _req_done(c, rid), timeout, "serve up did not finish")
                _wait(lambda: _settled(c, name, 1), timeout, f"service not READY: {_svc(c, name)}")
            elif scenario in ("update", "update_bg", "down"):
                rid = up()
                _wait(lambda: _req_done(c, rid), timeout, "serve up did not finish")
                _wait(lambda: _settled(c, name, 1), timeout, f"service not READY: {_svc(c, name)}")
                if scenario == "down":
                    rid = c.submit("serve.down", {"names": [name], "all": False})
                else:
                    mode = "blue_green" if scenario == "update_bg" else "rolling"
                    rid = c.submit("serve.update", {**task_source(yaml_text=service_yaml("two")),
                                                    "name": name, "mode": mode, "env": {}})
                time.sleep(rng.uniform(0.0, 1.5))
                _kills(rng, d, res, window, max_kills)
                c.close()
                _wait(lambda: _req_done(c, rid), timeout, f"{scenario} did not finish")
                if scenario == "down":
                    st = _req_done(c, rid)
                    if st != "SUCCEEDED":  # interrupted: the user runs it again
                        rid = c.submit("serve.down", {"names": [name], "all": False})
                        _wait(lambda: _req_done(c, rid) or _svc(c, name) is None, timeout,
                              "serve down (again) did not finish")
                    _wait(lambda: _svc(c, name) is None, timeout,
                          f"service still there: {_svc(c, name)}")
                else:
                    _wait(lambda: _settled(c, name, 2), timeout,
                          f"update did not settle: {_svc(c, name)}")
            elif scenario == "pool":
                pool_yaml = ("pool:\n  workers: 2\nresources:\n  infra: local\n"
                             "setup: echo worker-setup\n")
                rid = c.submit("jobs.pool_apply", {**task_source(yaml_text=pool_yaml),
                                                   "name": "p1", "env": {}})
                _kills(rng, d, res, window, max_kills)
                c.close()
                _wait(lambda: _req_done(c, rid), timeout, "pool apply did not finish")
                rid = c.submit("jobs.pool_down", {"names": ["p1"], "all": False})
                time.sleep(rng.uniform(0.0, 1.0))
                d.kill9()
                res.kills += 1
                d.start()
                c.close()
                _wait(lambda: _req_done(c, rid), timeout, "pool down did not finish")
                if _req_done(c, rid) != "SUCCEEDED":
                    rid = c.submit("jobs.pool_down", {"names": ["p1"], "all": False})
                    _wait(lambda: _req_done(c, rid), timeout, "pool down (again)")
                _wait(lambda: not c.get("/v1/pools"), timeout, "pool still there")
            elif scenario == "down_all":
                ids = [c.submit("launch", {**task_source(command="echo hi"),
                                           "cluster_name": f"da{i}"}) for i in range(3)]
                _wait(lambda: all(_req_done(c, r) for r in ids), timeout, "launches")
                rid = c.submit("down", {"clusters": [], "all": True})
                time.sleep(rng.uniform(0.0, 1.0))
                _kills(rng, d, res, 1.5, max_kills)
                c.close()
                _wait(lambda: _req_done(c, rid), timeout, "down -a did not finish")
                if _req_done(c, rid) != "SUCCEEDED":
                    rid = c.submit("down", {"clusters": [], "all": True})
                    _wait(lambda: _req_done(c, rid), timeout, "down -a (again)")
            elif scenario == "gang_fake":
                ids = {}
                for i in range(2):
                    yaml_text = ("num_nodes: 2\nresources:\n  infra: fakecloud\n"
                                 "run: echo rank-$SKYPILOT_NODE_RANK-of-$SKYPILOT_NUM_NODES; "
                                 f"sleep {rng.uniform(0.1, 1.0):.2f}\n")
                    ids[c.submit("launch", {**task_source(yaml_text=yaml_text),
                                            "cluster_name": f"g{i}"})] = f"g{i}"
                _kills(rng, d, res, window, max_kills)
                c.close()
                _wait(lambda: all(_req_done(c, r) for r in ids), timeout, "gang launches")
                for rid, cname in ids.items():
                    row = c.get(f"/v1/requests/{rid}")
                    result, error = row.get("result") or {}, row.get("error")
                    if row["status"] == "SUCCEEDED":
                        if result.get("status") != "SUCCEEDED":
                            res.fail(f"gang launch {cname}: job ended {result.get('status')}")
                        jobs = c.get(f"/v1/clusters/{cname}/queue")["jobs"]
                        if len(jobs) != 1:  # a resumed launch must not run its job again
                            res.fail(f"gang launch {cname}: {len(jobs)} jobs on the cluster")
                    elif not (error or {}).get("message"):
                        res.fail(f"gang launch {cname}: {row['status']} without a message")
                    elif [x for x in c.get("/v1/status") if x["name"] == cname
                          and x.get("status") != "UP"]:
                        res.fail(f"gang launch {cname} FAILED and left a half-made cluster")
            else:
                raise ValueError(scenario)
            # Everything down; nothing left non-terminal.
            if _svc(c, name) is not None:
                rid = c.submit("serve.down", {"names": [name], "all": False})
                _wait(lambda: _req_done(c, rid), timeout, "final serve down")
            rid = c.submit("down", {"clusters": [], "all": True})
            _wait(lambda: _req_done(c, rid), timeout, "final down -a")
            if _req_done(c, rid) != "SUCCEEDED":
                res.fail(f"final down -a: {c.get(f'/v1/requests/{rid}').get('error')}")
            left = [x["name"] for x in c.get("/v1/status")]
            if left:
                res.fail(f"clusters left: {left}")
            open_reqs = [r["id"] for r in c.get("/v1/requests", {"limit": 1000})
                         if r["status"] not in TERMINAL_REQ]
            if open_reqs:
                res.fail(f"requests left open: {open_reqs}")
    except (TimeoutError, RuntimeError) as e:
        res.fail(f"{type(e).__name__}: {e}")
    finally:
        d.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        left_pids = leftover_pids(base)
        if left_pids:
            res.fail(f"processes left: {left_pids}")
            for pid in left_pids:
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
