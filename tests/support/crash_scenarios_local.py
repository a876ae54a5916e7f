"""kill -9 scenarios on `local` and the fake preemptible cloud (a plugin of
tests/support/crash_harness.py; no tests in here):

- ``launches``: 2 followed launches (some with --down) and 2 managed jobs -> every launch
  SUCCEEDED with its job SUCCEEDED, every managed job SUCCEEDED;
- ``up``: `serve up` of 2 replicas -> READY with 2 READY replicas of version 1;
- ``update``/``update_bg``: `serve update` (rolling / blue_green) of a READY service -> 2
  READY replicas of version 2, nothing of version 1 left (no SHUTTING_DOWN row forever);
- ``down``: `serve down` -> the service and its clusters gone;
- ``replica_replace``: a READY replica's node dies (its processes kill -9-ed) and the daemon
  is killed while the controller replaces it -> 2 READY replicas again, the preempted one's cluster gone;
- ``pool``: `jobs pool apply` of 2 workers then `jobs pool down` -> the pool gone;
- ``pool_resize``: a pool of 2 re-applied with 1 or 3 workers -> exactly that many READY
  workers, each with its cluster, and no other cluster;
- ``down_all``: `down -a` of 3 clusters -> no cluster left;
- ``gang_fake``: 2-node gang launches on the fake preemptible cloud -> as ``launches``;
- ``gang_agents``: a 2-node gang job running, both nodes' agents kill -9-ed, then the daemon
  -> after the restart the job ends (FAILED, not RUNNING forever), a new job runs on a
  relaunch, nothing of the dead agents' work runs on.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tests.support.crash_harness import REPO, TERMINAL_JOBS, Trial, scenario

APP = REPO / "tests" / "fakes" / "replica_app.py"
PROBE = ("  readiness_probe:\n    path: /health\n    initial_delay_seconds: 60\n"
         "    endpoint_probe_interval_seconds: 0.2\n"
         "    consecutive_failure_threshold_timeout: 2\n")
CLUSTER_JOB_ENDED = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"}
FAKECLOUD = {"SKYD_EXTRA_PLUGINS": "tests.fakes.preemptible"}


def service_yaml(version: str, infra: str = "local") -> str:
    return (f"service:\n{PROBE}  replicas: 2\nenvs:\n  V: {version}\n"
            f"resources:\n  infra: {infra}\nrun: exec {sys.executable} {APP}\n")


def _src(**kw: Any) -> dict[str, Any]:
    from skyd.sdk.payloads import task_source

    return dict(task_source(**kw))


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


def _serve_up(t: Trial, c: Any, name: str, infra: str = "local", settle: bool = True) -> str:
    rid = c.submit("serve.up", {**_src(yaml_text=service_yaml("one", infra)), "name": name,
                                "env": {}})
    if settle:
        t.finish(c, rid, "serve up")
        t.wait(lambda: _settled(c, name, 1), f"service not READY: {_svc(c, name)}")
    return str(rid)


@scenario("launches")
def launches(t: Trial, c: Any) -> None:
    """Followed launches (some --down) and managed jobs."""
    from skyd.sdk.payloads import launch_payload

    ids: dict[str, str] = {}
    downs: dict[str, str] = {}
    managed = []
    for i in range(2):
        down = t.rng.random() < 0.4
        src = _src(command=f"echo launch-{i}; sleep {t.rng.uniform(0.1, 1.0):.2f}")
        name = f"k{t.seed % 1000}-{i}"
        rid = c.submit("launch", launch_payload(src, cluster_name=name, down=down))
        (downs if down else ids)[rid] = name
        t.res.launches += 1
    for i in range(2):
        src = _src(command=f"echo managed-{i}; sleep {t.rng.uniform(0.1, 1.0):.2f}")
        managed.append(c.submit("jobs.launch", {**src, "name": f"m{i}"}))
        t.res.managed += 1
    t.kills(c)
    t.wait(lambda: all(t.done(c, r) for r in [*ids, *downs, *managed]), "requests did not finish")
    t.launch_outcomes(c, ids)
    t.launch_outcomes(c, downs, jobs=None)  # --down: the cluster is gone afterwards
    job_ids = []
    for rid in managed:
        row = c.get(f"/v1/requests/{rid}")
        if row["status"] == "SUCCEEDED":
            job_ids.append(int(row["result"]["job_id"]))
        elif not (row.get("error") or {}).get("message"):
            t.res.fail(f"jobs.launch {rid}: {row['status']} without a message")

    def jobs_done() -> list[dict[str, Any]] | None:
        rows = [r for r in c.get("/v1/jobs") if r["id"] in job_ids]
        ok = len(rows) == len(job_ids) and all(r["status"] in TERMINAL_JOBS for r in rows)
        return rows if ok else None

    for r in t.wait(jobs_done, "managed jobs did not finish") if job_ids else []:
        if r["status"] != "SUCCEEDED":
            t.res.fail(f"managed job {r['id']} ended {r['status']}: {r.get('failure_reason')}")
    # Every managed job's cluster is gone once the jobs ended.
    t.wait(lambda: not [x for x in c.get("/v1/status") if x["name"].startswith("skyd-jobs")],
           "managed-job clusters left", 60)


@scenario("up")
def serve_up(t: Trial, c: Any) -> None:
    name = f"sv{t.seed % 1000}"
    rid = _serve_up(t, c, name, settle=False)
    t.kills(c)
    t.finish(c, rid, "serve up")
    t.wait(lambda: _settled(c, name, 1), f"service not READY: {_svc(c, name)}")


def _update(t: Trial, c: Any, mode: str) -> None:
    name = f"sv{t.seed % 1000}"
    _serve_up(t, c, name)
    rid = c.submit("serve.update", {**_src(yaml_text=service_yaml("two")), "name": name,
                                    "mode": mode, "env": {}})
    time.sleep(t.rng.uniform(0.0, 1.5))
    t.kills(c)
    t.finish(c, rid, f"serve update ({mode})")
    t.wait(lambda: _settled(c, name, 2), f"update did not settle: {_svc(c, name)}")


@scenario("update")
def serve_update(t: Trial, c: Any) -> None:
    _update(t, c, "rolling")


@scenario("update_bg")
def serve_update_bg(t: Trial, c: Any) -> None:
    _update(t, c, "blue_green")


@scenario("down")
def serve_down(t: Trial, c: Any) -> None:
    name = f"sv{t.seed % 1000}"
    _serve_up(t, c, name)
    rid = c.submit("serve.down", {"names": [name], "all": False})
    time.sleep(t.rng.uniform(0.0, 1.5))
    t.kills(c)
    if t.finish(c, rid, "serve down") != "SUCCEEDED":  # interrupted: the user runs it again
        rid = c.submit("serve.down", {"names": [name], "all": False})
        t.wait(lambda: t.done(c, rid) or _svc(c, name) is None, "serve down (again)")
    t.wait(lambda: _svc(c, name) is None, f"service still there: {_svc(c, name)}")


@scenario("replica_replace")
def replica_replace(t: Trial, c: Any) -> None:
    """A replica's node dies (its agent and program kill -9-ed, as a preempted or crashed
    VM); the daemon is killed while the controller notices and replaces it."""
    from tests.fakes import preemptible

    name = f"rr{t.seed % 1000}"
    _serve_up(t, c, name)
    before = {r["replica_id"]: r for r in _svc(c, name)["replicas"]}  # type: ignore[index]
    victim = before[t.rng.choice(sorted(before))]
    if preemptible._kill_all(t.home / "local" / victim["cluster"]) == 0:
        t.res.fail(f"no process of replica {victim['replica_id']}'s node to kill")
    t.kills(c, window=3.0)

    def replaced() -> bool:
        s = _svc(c, name)
        if s is None or s.get("status") != "READY":
            return False
        ready = [r for r in s["replicas"] if r["status"] == "READY"]
        return len(ready) == 2 and victim["replica_id"] not in {r["replica_id"] for r in ready}

    t.wait(replaced, f"the preempted replica was not replaced: {_svc(c, name)}")
    # the preempted node's cluster is gone (not left UP, not left half-terminated)
    t.wait(lambda: victim["cluster"] not in {x["name"] for x in c.get("/v1/status")},
           f"the preempted replica's cluster {victim['cluster']} is still there")
    from skyd.serve import status as st

    def busy() -> list[tuple[int, str]]:
        return [(r["replica_id"], r["status"]) for r in (_svc(c, name) or {}).get("replicas", [])
                if r["status"] != st.READY and r["status"] not in st.FINAL]

    t.wait(lambda: not busy(), f"replicas left in a transitional state: {busy()}")


@scenario("pool")
def pool(t: Trial, c: Any) -> None:
    pool_yaml = "pool:\n  workers: 2\nresources:\n  infra: local\nsetup: echo worker-setup\n"
    rid = c.submit("jobs.pool_apply", {**_src(yaml_text=pool_yaml), "name": "p1", "env": {}})
    t.kills(c)
    t.finish(c, rid, "pool apply")
    rid = c.submit("jobs.pool_down", {"names": ["p1"], "all": False})
    time.sleep(t.rng.uniform(0.0, 1.0))
    t.kill_restart()
    c.close()
    if t.finish(c, rid, "pool down") != "SUCCEEDED":
        rid = c.submit("jobs.pool_down", {"names": ["p1"], "all": False})
        t.finish(c, rid, "pool down (again)")
    t.wait(lambda: not c.get("/v1/pools"), "pool still there")


def _pool_workers(t: Trial, pool: str) -> list[tuple[str, str]]:
    """(cluster, status) of the pool's worker rows, as the daemon persisted them."""
    import sqlite3

    con = sqlite3.connect(f"file:{t.home / 'state.db'}?mode=ro", uri=True)
    try:
        return sorted(con.execute("SELECT cluster, status FROM job_pool_workers WHERE pool=?",
                                  (pool,)).fetchall())
    finally:
        con.close()


@scenario("pool_resize")
def pool_resize(t: Trial, c: Any) -> None:
    """A pool of 2 workers resized (re-applied) to 1 or 3 through 1-2 kills."""
    def apply(n: int) -> str:
        text = f"pool:\n  workers: {n}\nresources:\n  infra: local\nsetup: echo worker-setup\n"
        return str(c.submit("jobs.pool_apply", {**_src(yaml_text=text), "name": "pr", "env": {}}))

    t.finish(c, apply(2), "pool apply")
    n = t.rng.choice([1, 3])
    rid = apply(n)
    t.kills(c, window=2.5)
    if t.finish(c, rid, "pool resize") != "SUCCEEDED":  # interrupted: the user applies again
        t.finish(c, apply(n), "pool resize (again)")

    def settled() -> bool:
        rows = _pool_workers(t, "pr")
        up = {x["name"] for x in c.get("/v1/status")}
        return (len(rows) == n and all(s == "READY" for _, s in rows)
                and {cl for cl, _ in rows} <= up and len(up) == n)

    t.wait(settled, f"pool not resized to {n}: {_pool_workers(t, 'pr')}, "
                    f"clusters {[x['name'] for x in c.get('/v1/status')]}")


@scenario("down_all")
def down_all(t: Trial, c: Any) -> None:
    ids = [c.submit("launch", {**_src(command="echo hi"), "cluster_name": f"da{i}"})
           for i in range(3)]
    t.wait(lambda: all(t.done(c, r) for r in ids), "launches")
    rid = c.submit("down", {"clusters": [], "all": True})
    time.sleep(t.rng.uniform(0.0, 1.0))
    t.kills(c, window=1.5)
    if t.finish(c, rid, "down -a") != "SUCCEEDED":
        rid = c.submit("down", {"clusters": [], "all": True})
        t.finish(c, rid, "down -a (again)")
    left = [x["name"] for x in c.get("/v1/status")]
    if left:
        t.res.fail(f"down -a left clusters: {left}")


@scenario("gang_fake", env=FAKECLOUD)
def gang_fake(t: Trial, c: Any) -> None:
    ids = {}
    for i in range(2):
        yaml_text = ("num_nodes: 2\nresources:\n  infra: fakecloud\n"
                     "run: echo rank-$SKYPILOT_NODE_RANK-of-$SKYPILOT_NUM_NODES; "
                     f"sleep {t.rng.uniform(0.1, 1.0):.2f}\n")
        ids[c.submit("launch", {**_src(yaml_text=yaml_text), "cluster_name": f"g{i}"})] = f"g{i}"
    t.kills(c)
    t.wait(lambda: all(t.done(c, r) for r in ids), "gang launches")
    t.launch_outcomes(c, ids)


def _agent_pids(cluster_dir: Path) -> list[int]:
    """The node agents of a local cluster: processes whose stdout is a node's agent.log."""
    import os

    root = str(cluster_dir.resolve()) + os.sep
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            out1 = os.readlink(p / "fd" / "1")
        except OSError:
            continue
        if out1.startswith(root) and out1.endswith("agent.log"):
            out.append(int(p.name))
    return out


@scenario("gang_agents")
def gang_agents(t: Trial, c: Any) -> None:
    """A 2-node gang job runs; both agents are kill -9-ed, then the daemon."""
    import os
    import signal

    name = f"ga{t.seed % 1000}"
    marks = t.base / "marks"
    marks.mkdir()
    yaml_text = ("num_nodes: 2\nresources:\n  infra: local\n"
                 f"run: echo $$ > {marks}/rank-$SKYPILOT_NODE_RANK; sleep 600\n")
    rid = c.submit("launch", {**_src(yaml_text=yaml_text), "cluster_name": name, "detach_run": True})
    t.wait(lambda: len(list(marks.iterdir())) == 2, "the gang job never ran on both nodes")
    ranks = [int(f.read_text()) for f in marks.iterdir()]
    agents = _agent_pids(t.home / "local" / name)
    if len(agents) < 2:
        t.res.fail(f"expected an agent per node, found {agents}")
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    time.sleep(t.rng.uniform(0.0, 1.0))
    t.kills(c, window=2.0)
    t.finish(c, rid, "gang launch")

    seen: list[str] = []

    def job_ended() -> str | None:
        try:
            jobs = c.get(f"/v1/clusters/{name}/queue")["jobs"]
        except Exception as e:  # noqa: BLE001 - the cluster may be reported down: it ended too
            seen.append(f"{type(e).__name__}: {e}")
            c.close()
            return "cluster-gone" if name not in {x["name"] for x in c.get("/v1/status")} else None
        st = jobs[0]["status"] if jobs else None
        seen.append(f"job {st}")
        return st if st in CLUSTER_JOB_ENDED else None

    try:
        st = t.wait(job_ended, "the gang job never ended after its agents died", 60)
    except TimeoutError:
        t.res.fail(f"the gang job never ended after its agents died: {seen[-3:]}")
        raise
    if st == "SUCCEEDED":
        t.res.fail("a job whose agents were killed mid-run is reported SUCCEEDED")

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    t.wait(lambda: not any(alive(p) for p in ranks), f"ranks of the dead gang run on: {ranks}", 30)
    # a retry finishes: the same cluster runs a new job (agents restarted where needed)
    rid = c.submit("launch", {**_src(command="echo again"), "cluster_name": name})
    if t.finish(c, rid, "relaunch") != "SUCCEEDED":
        t.res.fail(f"relaunch after the agents died: {c.get(f'/v1/requests/{rid}').get('error')}")
