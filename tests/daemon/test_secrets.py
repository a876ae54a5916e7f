"""Secrets at rest: a task's secret values reach the job's environment and nothing else.

A real daemon, the real CLI, real node agents (`local`, and the preemptible fake provider
for a managed job that relaunches after a daemon `kill -9`). After each launch, exec and
managed job, every byte under SKYD_HOME (state.db with its WAL, the agents' jobs.db,
daemon.log, request logs), every table of every SQLite file, and every API answer is
searched for the values. Jobs print their secrets reversed, so the check finds leaks only.
"""

from __future__ import annotations

import json
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nodeagent.test_nodeagent_helpers import agents
from tests.support.daemon import DaemonProc, cli, wait_for

__all__ = ["agents"]

YAML_SECRET = "yaml-secret-Q7xK2pLmW"
CLI_SECRET = "cli-secret-Zr8Vn3WdP"
ENV_SECRET = "env-secret-Hb5Tj9QsA"
FILE_SECRET = "file-secret-Mc4Ye6RuB"
EXEC_SECRET = "exec-secret-Nf2Kw7XcD"
ALL = (YAML_SECRET, CLI_SECRET, ENV_SECRET, FILE_SECRET, EXEC_SECRET)
DAEMON_ENV = {"SKYD_EXTRA_PLUGINS": "tests.fakes.preemptible", "SKYD_JOBS_POLL": "0.3",
              "SKYD_JOBS_BACKOFF": "0.3", "SKYD_REFRESH_S": "1"}


@pytest.fixture
def daemon(skyd_home: Path) -> Iterator[dict[str, DaemonProc]]:
    holder = {"d": DaemonProc(**DAEMON_ENV).start()}
    try:
        yield holder
    finally:
        try:
            cli("jobs", "cancel", "-a")
            cli("down", "-a", "-y", timeout=60)
            holder["d"].terminate()
        finally:
            holder["d"].cleanup()


# -- where a value could leak ---------------------------------------------------------------
def _files(home: Path, skip_secret_files: bool) -> Iterator[Path]:
    for p in sorted(home.rglob("*")):
        if not p.is_file() or p.is_symlink():
            continue
        if skip_secret_files and (p.is_relative_to(home / "secrets") or p.name == "secrets.json"):
            continue  # the 0600 files that hold the values while their owner runs
        yield p


def _sqlite_dump(path: Path) -> str:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return "\n".join(con.iterdump())
        finally:
            con.close()
    except sqlite3.Error:
        return ""


def leaks(home: Path, *, running: bool = False) -> list[str]:
    """Every file under SKYD_HOME (raw bytes: state.db, -wal, -shm, jobs.db, logs) and every
    table of every SQLite database that holds a secret value."""
    found = []
    for p in _files(home, skip_secret_files=running):
        data = p.read_bytes()
        for v in ALL:
            if v.encode() in data:
                found.append(f"{p.relative_to(home)} holds {v}")
        if p.name.endswith(".db"):
            dump = _sqlite_dump(p)
            for v in ALL:
                if v in dump:
                    found.append(f"a table of {p.relative_to(home)} holds {v}")
    return found


def assert_clean(text: str, where: str) -> None:
    for v in ALL:
        assert v not in text, f"{where} shows the secret {v}"


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def api(path: str) -> Any:
    from skyd import sdk

    return sdk.get(path)


def ok(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> str:
    r = cli(*args, env=env, timeout=timeout)
    assert r.returncode == 0, f"skyd {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert_clean(r.stdout + r.stderr, f"skyd {' '.join(args)}")
    return r.stdout


def wait_request(rid: str, timeout: float = 60.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        row = json.loads(ok("requests", "get", rid, "-o", "json"))
        return row if row["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    return dict(wait_for(done, timeout=timeout, interval=0.1))


def shown_everywhere(rid: str, cluster: str | None) -> None:
    """Every read a user has: CLI output and the raw API answers."""
    ok("requests", "get", rid, "-o", "json")
    ok("requests", "ls", "-o", "json")
    r = cli("requests", "logs", rid)  # exits non-zero for a failed request
    assert_clean(r.stdout + r.stderr, f"skyd requests logs {rid}")
    ok("status", "-o", "json")
    ok("jobs", "queue", "-o", "json")
    assert_clean(json.dumps(api(f"/v1/requests/{rid}")), f"GET /v1/requests/{rid}")
    assert_clean(json.dumps(api("/v1/requests")), "GET /v1/requests")
    assert_clean(json.dumps(api("/v1/status")), "GET /v1/status")
    if cluster:
        ok("queue", cluster, "-o", "json")
        assert_clean(json.dumps(api(f"/v1/clusters/{cluster}/queue")), "GET queue")


# -- launch and exec -----------------------------------------------------------------------
def test_launch_and_exec_keep_secret_values_out_of_state_logs_and_answers(
        daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    task = tmp_path / "task.yaml"
    task.write_text(f"""\
secrets:
  TOKEN: {YAML_SECRET}
  HF_TOKEN: null
envs:
  PLAIN: visible-env
run: |
  for v in TOKEN HF_TOKEN CLI_ONLY FROM_FILE PLAIN; do echo "$v=$(printenv $v | rev)"; done
  while [ ! -f {gate} ]; do sleep 0.1; done
""")
    sfile = tmp_path / "s.env"
    sfile.write_text(f"FROM_FILE={FILE_SECRET}\n")
    rid = ok("launch", "-y", "--async", "-c", "sec", str(task), "--secret", "HF_TOKEN",
             "--secret", f"CLI_ONLY={CLI_SECRET}", "--secret-file", str(sfile),
             env={"HF_TOKEN": ENV_SECRET}).strip()

    agent_jobs = skyd_home / "local" / "sec" / "node-0" / "jobs"
    wait_for(lambda: (agent_jobs / "1" / "secrets.json").exists(), timeout=60, interval=0.1)
    # While the job runs: the values sit in 0600 files only, the daemon's and the agent's.
    req_file = skyd_home / "secrets" / "requests" / f"{rid}.json"
    assert req_file.exists() and mode(req_file) == 0o600
    assert mode(skyd_home / "secrets") == 0o700 and mode(req_file.parent) == 0o700
    assert mode(agent_jobs / "1" / "secrets.json") == 0o600
    assert leaks(skyd_home, running=True) == []
    shown_everywhere(rid, "sec")
    row = json.loads(ok("requests", "get", rid, "-o", "json"))
    assert row["payload"]["secrets"] == {"HF_TOKEN": "<redacted>", "CLI_ONLY": "<redacted>",
                                         "FROM_FILE": "<redacted>"}
    assert "TOKEN: '<redacted>'" in row["payload"]["yaml"]

    gate.touch()
    assert wait_request(rid)["status"] == "SUCCEEDED"
    out = ok("logs", "sec", "1", "--no-follow")
    for line in (f"TOKEN={YAML_SECRET[::-1]}", f"HF_TOKEN={ENV_SECRET[::-1]}",
                 f"CLI_ONLY={CLI_SECRET[::-1]}", f"FROM_FILE={FILE_SECRET[::-1]}",
                 f"PLAIN={'visible-env'[::-1]}"):
        assert line in out, out  # the job saw every value
    # Ended: both files are gone and nothing else ever held a value.
    wait_for(lambda: not (agent_jobs / "1" / "secrets.json").exists(), timeout=10)
    assert not req_file.exists()
    assert leaks(skyd_home) == []
    shown_everywhere(rid, "sec")

    # exec: --secret-file only; the secret reaches the job, nothing else.
    efile = tmp_path / "e.env"
    efile.write_text(f"export EXEC_TOKEN='{EXEC_SECRET}'\n")
    out = ok("exec", "sec", "--secret-file", str(efile), 'echo "got=$(printenv EXEC_TOKEN | rev)"')
    assert f"got={EXEC_SECRET[::-1]}" in out
    erid = json.loads(ok("requests", "ls", "-o", "json"))[0]["id"]
    shown_everywhere(erid, "sec")
    wait_for(lambda: not list(agent_jobs.glob("*/secrets.json")), timeout=10)
    assert leaks(skyd_home) == []
    ok("down", "-y", "sec")
    assert list((skyd_home / "secrets").rglob("*.json")) == []
    assert leaks(skyd_home) == []


def test_dryrun_and_failed_launch_show_no_value(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    task = tmp_path / "t.yaml"
    task.write_text(f"secrets:\n  TOKEN: {YAML_SECRET}\nrun: echo hi\n")
    plan = ok("launch", "--dryrun", "-o", "json", str(task), "--secret", f"X={CLI_SECRET}")
    assert "dryrun" in plan
    bad = tmp_path / "bad.yaml"  # fails in the daemon, after its secrets were stored
    bad.write_text(f"secrets:\n  TOKEN: {YAML_SECRET}\nresources:\n  cpus: lots\nrun: echo\n")
    r = cli("launch", "-y", str(bad), "--secret", f"X={CLI_SECRET}")
    assert r.returncode == 2, r.stderr
    assert_clean(r.stdout + r.stderr, "a failed launch")
    # An error that would quote a value (a secret substituted into a field) is masked.
    quoting = tmp_path / "quoting.yaml"
    quoting.write_text(f"secrets:\n  TOKEN: {YAML_SECRET}\nresources:\n  cpus: ${{TOKEN}}\n"
                       "run: echo\n")
    r = cli("launch", "-y", str(quoting))
    assert r.returncode == 2 and "<redacted>" in r.stderr, r.stderr
    assert_clean(r.stdout + r.stderr, "an error quoting a secret")
    r = cli("validate", "-o", "json", str(task))
    assert r.returncode == 0 and json.loads(r.stdout)["secrets"] == {"TOKEN": "<redacted>"}
    assert_clean(r.stdout + r.stderr, "validate -o json")
    for row in json.loads(ok("requests", "ls", "-o", "json")):
        shown_everywhere(row["id"], None)
    assert list((skyd_home / "secrets").rglob("*.json")) == []
    assert leaks(skyd_home) == []


# -- managed job: survives a daemon kill -9 and a relaunch --------------------------------
def test_managed_job_secrets_survive_restart_and_relaunch(
        daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    gate, mark = tmp_path / "gate", tmp_path / "ran-once"
    task = tmp_path / "mj.yaml"
    task.write_text(f"""\
name: mj
resources:
  infra: fakecloud
  use_spot: true
  job_recovery:
    max_restarts_on_errors: 1
secrets:
  MJ_TOKEN: {YAML_SECRET}
  MJ_CLI: null
run: |
  echo "attempt tok=$(printenv MJ_TOKEN | rev) cli=$(printenv MJ_CLI | rev)"
  if [ -f {mark} ]; then exit 0; fi
  while [ ! -f {gate} ]; do sleep 0.1; done
  touch {mark}; exit 3
""")
    jid = json.loads(ok("jobs", "launch", "-d", "-o", "json", str(task),
                        "--secret", f"MJ_CLI={CLI_SECRET}"))["job_id"]
    wait_for(lambda: api(f"/v1/jobs/{jid}")["status"] == "RUNNING", timeout=60, interval=0.1)
    files = list((skyd_home / "secrets" / "jobs").glob("*.json"))
    assert len(files) == 1 and mode(files[0]) == 0o600
    assert leaks(skyd_home, running=True) == []
    assert_clean(json.dumps(api(f"/v1/jobs/{jid}")), "GET /v1/jobs/ID")
    assert_clean(json.dumps(api("/v1/jobs")), "GET /v1/jobs")

    daemon["d"].kill9()  # the values must come back from the file, not from memory
    daemon["d"].cleanup()
    daemon["d"] = DaemonProc(**DAEMON_ENV).start()
    gate.touch()  # attempt 1 fails; the restart is a new launch that needs the values again

    def ended() -> str | None:
        s = str(api(f"/v1/jobs/{jid}")["status"])
        return s if s in ("SUCCEEDED", "FAILED", "FAILED_PRECHECKS", "FAILED_CONTROLLER",
                          "CANCELLED", "FAILED_NO_RESOURCE") else None

    assert wait_for(ended, timeout=90, interval=0.2) == "SUCCEEDED"
    assert api(f"/v1/jobs/{jid}")["restarts"] == 1
    out = ok("jobs", "logs", str(jid), "--no-follow")
    want = f"attempt tok={YAML_SECRET[::-1]} cli={CLI_SECRET[::-1]}"
    saved = "".join(p.read_text() for p in (skyd_home / "logs" / "managed").glob("*.log"))
    assert (out + saved).count(want) >= 2, out + saved  # both attempts saw both values
    wait_for(lambda: not list((skyd_home / "secrets" / "jobs").glob("*.json")), timeout=10)
    assert leaks(skyd_home) == []


# -- --secret / --secret-file / null secrets -------------------------------------------------
def test_null_secret_without_value_exits_2_naming_secret_flag(
        daemon: Any, skyd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    task = tmp_path / "t.yaml"
    task.write_text("secrets:\n  HF_TOKEN: null\nrun: echo hi\n")
    for verb in (("launch", "-y", "-c", "nv"), ("jobs", "launch", "-d")):
        r = cli(*verb, str(task))
        assert r.returncode == 2, (verb, r.stdout, r.stderr)
        assert "--secret HF_TOKEN" in r.stderr and "--env" not in r.stderr, r.stderr
    # --secret KEY takes the value from the caller's environment; unset there: exit 2.
    r = cli("launch", "-y", "-c", "nv", str(task), "--secret", "HF_TOKEN")
    assert r.returncode == 2 and "--secret HF_TOKEN" in r.stderr, r.stderr
    r = cli("validate", str(task))
    assert r.returncode == 0 and "--secret HF_TOKEN" in r.stderr and "--env" not in r.stderr
    # A bad line of a secret file is named by number, never echoed.
    bad = tmp_path / "bad.env"
    bad.write_text(f"not a line {CLI_SECRET}\n")
    r = cli("launch", "-y", "-c", "nv", str(task), "--secret-file", str(bad))
    assert r.returncode == 2 and "--secret-file" in r.stderr, r.stderr
    assert_clean(r.stdout + r.stderr, "a bad secret file's error")
    r = cli("launch", "-y", "-c", "nv", str(task), "--secret", "1BAD=x")
    assert r.returncode == 2 and "--secret" in r.stderr
    assert cli("status").returncode == 0 and "nv" not in cli("status").stdout


def test_secret_flags_order_and_sdk(daemon: Any, skyd_home: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd import sdk
    from skyd.sdk import payloads

    f = tmp_path / "s.env"
    f.write_text("A=from-file\nB=from-file\n")
    monkeypatch.setenv("B", "from-env")
    # --secret-file first, --secret on top; KEY alone (None in the SDK) reads the environment.
    assert payloads.resolve_secrets({"B": None, "C": "flag"}, [f]) == {
        "A": "from-file", "B": "from-env", "C": "flag"}
    monkeypatch.setenv("SDK_SECRET", CLI_SECRET)
    rid = sdk.launch(command='echo "sdk=$(printenv SDK_SECRET | rev)"', cluster_name="sdk",
                     secrets={"SDK_SECRET": None})
    assert sdk.get_result(rid)["status"] == "SUCCEEDED"
    assert f"sdk={CLI_SECRET[::-1]}" in ok("logs", "sdk", "1", "--no-follow")
    shown_everywhere(rid, "sdk")
    ok("down", "-y", "sdk")
    assert leaks(skyd_home) == []


def test_aio_sdk_passes_secrets(daemon: Any, skyd_home: Path) -> None:
    import anyio

    from skyd.sdk import aio

    async def go() -> str:
        rid = await aio.launch(command='echo "aio=$(printenv AIO_SECRET | rev)"',
                               cluster_name="aio", secrets={"AIO_SECRET": EXEC_SECRET})
        return str(await aio.wait(rid) and rid)

    rid = anyio.run(go)
    assert f"aio={EXEC_SECRET[::-1]}" in ok("logs", "aio", "1", "--no-follow")
    shown_everywhere(rid, "aio")
    ok("down", "-y", "aio")
    assert leaks(skyd_home) == []


def test_secret_values_are_masked_in_request_events(daemon: Any, skyd_home: Path,
                                                    tmp_path: Path) -> None:
    """A job that prints its secret: the request's event log (requests logs) masks it."""
    out = ok("launch", "-y", "-c", "echo", "--secret", f"S={CLI_SECRET}", 'echo "val=$S"')
    assert "val=<redacted>" in out
    rid = json.loads(ok("requests", "ls", "-o", "json"))[0]["id"]
    assert "val=<redacted>" in ok("requests", "logs", rid)
    ok("down", "-y", "echo")


# -- the YAML text without its values loads to the same tasks ---------------------------
def test_split_yaml_secrets_round_trips_and_keeps_lines() -> None:
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag
    from skyd.models.secret_split import split_yaml_secrets

    text = f"""\
name: chain
---
envs:
  LR: 1.5e-4
secrets:
  A: &anchored {YAML_SECRET}
  B: |
    {CLI_SECRET}
    second line
  N: 12
  T: true
  LATER: null
run: echo $A
---
secrets: {{A: '{FILE_SECRET}', Z: "{ENV_SECRET}"}}
bad_field: 1
"""
    out, per_task = split_yaml_secrets(text)
    assert_clean(out, "the redacted YAML")
    assert out.count("\n") == text.count("\n")
    assert per_task == [{"A": YAML_SECRET, "B": f"{CLI_SECRET}\nsecond line\n", "N": "12",
                         "T": "true"}, {"A": FILE_SECRET, "Z": ENV_SECRET}]
    with pytest.raises(InvalidSpecError) as e:  # the error points at the same line
        load_dag("t", text=out, task_secrets=per_task, allow_missing_env=True)
    assert e.value.line == text.splitlines().index("bad_field: 1") + 1
    good = text.replace("bad_field: 1\n", "run: echo\n")
    out, per_task = split_yaml_secrets(good)
    a = load_dag("t", text=good, allow_missing_env=True)
    b = load_dag("t", text=out, task_secrets=per_task, allow_missing_env=True)
    assert [t.to_normalized(redact_secrets=False) for t in a.tasks] == \
        [t.to_normalized(redact_secrets=False) for t in b.tasks]
    assert b.tasks[0].envs["LR"] == "1.5e-4"
    # A value that is also used elsewhere through an anchor cannot be separated: exit 2.
    for bad in (f"secrets:\n  A: &x {YAML_SECRET}\nenvs:\n  B: *x\nrun: x\n",
                f"envs:\n  B: &x {YAML_SECRET}\nsecrets:\n  A: *x\nrun: x\n",
                "secrets:\n  A: [1, 2]\nrun: x\n"):
        with pytest.raises(InvalidSpecError) as e:
            split_yaml_secrets(bad)
        assert e.value.field == "secrets.A" and e.value.exit_code == 2


# -- on the node: the agent keeps the values in a 0600 file next to the job ---------------
@pytest.mark.anyio
async def test_agent_keeps_secrets_out_of_jobs_db(agents: Any, tmp_path: Path) -> None:
    from tests.nodeagent.test_nodeagent_helpers import wait_status

    nodes = [agents.start(f"n{r}", rank=r) for r in range(2)]
    refs = [{"rank": i, "address": n.address} for i, n in enumerate(nodes)]
    gate = tmp_path / "gate"
    run = ('echo "rank=$SKYPILOT_NODE_RANK tok=$(printenv TOK | rev) env=$PLAIN"\n'
           f'while [ ! -f {gate} ]; do sleep 0.05; done')  # fmt: skip
    head = nodes[0].home
    async with nodes[0].client() as c:
        j = await c.submit_job({"run": run, "setup": 'test -n "$TOK"', "num_nodes": 2,
                                "nodes": refs, "envs": {"PLAIN": "p"},
                                "secrets": {"TOK": YAML_SECRET}})  # fmt: skip
        sfile = head / "jobs" / str(j) / "secrets.json"
        assert sfile.exists() and mode(sfile) == 0o600
        await wait_status(c, j, "RUNNING")
        gate.touch()
        await wait_status(c, j, "SUCCEEDED")
        log = b"".join([chunk async for chunk in c.tail_logs(j, follow=False)]).decode()
        for r in (0, 1):  # the worker got the value over the RPC, in memory only
            assert f"rank={r} tok={YAML_SECRET[::-1]} env=p" in log, log
        wait_for(lambda: not sfile.exists(), timeout=10)
        gate.unlink()
        j2 = await c.submit_job({"run": run, "secrets": {"TOK": CLI_SECRET}})
        f2 = head / "jobs" / str(j2) / "secrets.json"
        await wait_status(c, j2, "RUNNING")
        await c.cancel_jobs([j2])
        assert not f2.exists()  # cancelled: gone with the job
    # A finished job's file left by an agent killed before it could delete it goes at start.
    stale = head / "jobs" / str(j) / "secrets.json"
    stale.write_text('{"TOK": "x"}')
    nodes[0].kill9()
    agents.restart(nodes[0])
    wait_for(lambda: not stale.exists(), timeout=20)
    for n in nodes:
        for p in n.home.rglob("*"):
            if p.is_file():
                data = p.read_bytes()
                assert YAML_SECRET.encode() not in data and CLI_SECRET.encode() not in data, p
