"""Every count a user gives is bounded where it enters, the same way at every entry point.

A table of every numeric field of the task YAML (task, resources, service, pool) and of
the request payloads (CLI flags), each tried with the values that must be refused (too
big, inf, nan, zero/negative where invalid, the wrong type) through every entry point:
`skyd validate`, `skyd launch` (CLI), the HTTP API (`POST /v1/requests/launch` and
`/v1/validate`) and the SDK. Each is refused with exit 2 / HTTP 400 /
InvalidSpecError naming the field, and nothing is created."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.test_safety_names import api
from tests.support.pipeline import Env, module_env, write

BIG = "1000000000"  # 1e9 as a YAML int
HUGE = "1.0e+300"
INF, NAN, TRUE, STR = ".inf", ".nan", "true", "'abc'"
COMMON = [BIG, HUGE, INF, NAN, TRUE, STR]

SVC = "service:\n  readiness_probe: /health\n"

# (field as reported, YAML with {v} where the value goes, bad values beyond COMMON)
FIELDS: list[tuple[str, str, list[str]]] = [
    ("num_nodes", "num_nodes: {v}\n", ["0", "-1", "1.5"]),
    ("resources.cpus", "resources:\n  cpus: {v}\n", ["0", "-1", "'1e300+'"]),
    ("resources.memory", "resources:\n  memory: {v}\n", ["0", "-1", "'1e300x'"]),
    ("resources.disk_size", "resources:\n  disk_size: {v}\n", ["0", "-5", "1.5"]),
    ("resources.accelerators", "resources:\n  accelerators: 'A100:{v}'\n",
     ["0", "-1", "100000", "inf", "nan"]),
    ("resources.ports", "resources:\n  ports: {v}\n",
     ["0", "70000", "'1-65535'", "'80-'", "'90-80'", "[{a: 1}]", "'10000-20000'"]),
    ("resources.priority", "resources:\n  priority: {v}\n", ["1001", "-1001", "1.5"]),
    ("resources.max_hourly_cost", "resources:\n  max_hourly_cost: {v}\n", ["0", "-1"]),
    ("resources.autostop.idle_minutes", "resources:\n  autostop:\n    idle_minutes: {v}\n",
     ["-1", "1.5"]),
    ("resources.autostop.hook_timeout", "resources:\n  autostop:\n    hook_timeout: {v}\n",
     ["0", "-1"]),
    ("resources.job_recovery.max_restarts_on_errors",
     "resources:\n  job_recovery:\n    max_restarts_on_errors: {v}\n", ["-1", "1.5"]),
    ("resources.job_recovery", "resources:\n  job_recovery:\n    recover_on_exit_codes: [{v}]\n",
     ["256", "-1"]),
    ("estimated_runtime", "estimated_runtime: {v}\n", ["-1"]),
    ("service.replicas", SVC + "  replicas: {v}\n", ["-1", "1001", "1.5"]),
    ("service.ports", SVC + "  ports: {v}\n", ["0", "70000"]),
    ("service.readiness_probe.initial_delay_seconds",
     "service:\n  readiness_probe:\n    path: /h\n    initial_delay_seconds: {v}\n", ["-1"]),
    ("service.readiness_probe.timeout_seconds",
     "service:\n  readiness_probe:\n    path: /h\n    timeout_seconds: {v}\n", ["0", "-1"]),
    ("service.readiness_probe.endpoint_probe_interval_seconds",
     "service:\n  readiness_probe:\n    path: /h\n    endpoint_probe_interval_seconds: {v}\n",
     ["0", "-1"]),
    ("service.readiness_probe.consecutive_failure_threshold_timeout",
     "service:\n  readiness_probe:\n    path: /h\n"
     "    consecutive_failure_threshold_timeout: {v}\n", ["-1"]),
    *[(f"service.replica_policy.{k}", SVC + f"  replica_policy:\n    {k}: {{v}}\n",
       ["-1", "1001", "1.5"])
      for k in ("min_replicas", "max_replicas", "num_overprovision",
                "base_ondemand_fallback_replicas")],
    *[(f"service.replica_policy.{k}", SVC + "  replica_policy:\n    min_replicas: 1\n"
       f"    max_replicas: 2\n    {k}: {{v}}\n", ["0", "-1"])
      for k in ("target_qps_per_replica", "target_queue_length_per_replica")],
    ("service.replica_policy.target_qps_per_replica",
     SVC + "  replica_policy:\n    min_replicas: 1\n    max_replicas: 2\n"
     "    target_qps_per_replica: {{A100: {v}}}\n", ["0", "-1"]),
    *[(f"service.replica_policy.{k}", SVC + f"  replica_policy:\n    {k}: {{v}}\n", ["-1"])
      for k in ("upscale_delay_seconds", "downscale_delay_seconds")],
    ("service.load_balancer.stream_timeout_seconds",
     SVC + "  load_balancer:\n    stream_timeout_seconds: {v}\n", ["0", "-1"]),
    ("service.load_balancer.affinity_body_prefix",
     SVC + "  load_balancer:\n    affinity_body_prefix: {v}\n", ["0", "-1"]),
    ("service.pool.workers", SVC + "  pool:\n    workers: {v}\n", ["-1", "1001"]),
    ("service.workers", SVC + "  workers: {v}\n", ["-1", "1001"]),
    *[(f"pool.{k}", f"pool:\n  {k}: {{v}}\n", ["-1", "1001"])
      for k in ("workers", "min_workers", "max_workers")],
    *[(f"pool.{k}", f"pool:\n  {k}: {{v}}\n", ["-1"])
      for k in ("queue_length_threshold", "upscale_delay_seconds", "downscale_delay_seconds")],
]
CASES = [(field, tpl.format(v=v) + "run: echo hi\n", v)
         for field, tpl, extra in FIELDS for v in COMMON + extra
         # a string is a valid form of these (a size/port/duration/cpus like '4+')
         if not (v == STR and field in ("resources.accelerators",))]


def _ids(c: tuple[str, str, str]) -> str:
    return f"{c[0]}={c[2]}"


# -- in process: the models (what every entry point runs) --------------------------------
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_model_refuses(case: tuple[str, str, str]) -> None:
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag

    field, text, _ = case
    with pytest.raises(InvalidSpecError) as ei:
        load_dag("t.yaml", text=text)
    errs = list(getattr(ei.value, "errors", None) or [ei.value])
    assert any((e.field or "").startswith(field) for e in errs), (field, [str(e) for e in errs])
    assert ei.value.exit_code == 2


def test_valid_values_still_load() -> None:
    """The bounds refuse mistakes, not the values real tasks use."""
    from skyd.models import load_dag

    text = (SVC + "  replica_policy:\n    min_replicas: 2\n    max_replicas: 1000\n"
            "    target_qps_per_replica: 2.5\n    upscale_delay_seconds: 0\n"
            "  load_balancer:\n    stream_timeout_seconds: 600\n"
            "pool:\n  workers: 3\nnum_nodes: 1000\n"
            "resources:\n  cpus: 4+\n  memory: 2x\n  disk_size: 1TB\n  ports: ['8000-8998', 22]\n"
            "  accelerators: A100:8\n  priority: -1000\n  autostop: 1d\n"
            "  job_recovery: {max_restarts_on_errors: 1000}\nrun: x\n")
    t = load_dag("ok.yaml", text=text).tasks[0]
    assert t.service is not None and t.service.replica_policy.max_replicas == 1000
    assert t.resources[0].disk_size == 1024 and t.num_nodes == 1000
    for s in ("replicas: 2.0", "replicas: 0"):
        t = load_dag("ok.yaml", text=SVC + f"  {s}\nrun: x\n").tasks[0]
        assert t.service is not None and isinstance(t.service.replica_policy.min_replicas, int)


def test_every_bound_is_documented() -> None:
    from skyd.bounds import BOUNDS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    missing = [k for k in BOUNDS if f"| `{k}` |" not in doc]
    assert not missing, f"add these rows to the bounds table in docs/models.md: {missing}"


# -- every entry point: validate, CLI launch, HTTP API, SDK -----------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    import skyd.cli.client as cli_client

    with module_env(tmp_path_factory) as e:
        cli_client._client = None  # the in-process CLI's client: this module's daemon
        try:
            yield e
        finally:
            cli_client._client = None


def _launches() -> list[dict[str, Any]]:
    rows = api("GET", "/v1/requests?limit=10000")[1]
    return [r for r in rows if r["verb"] in ("launch", "jobs.launch", "jobs.pool_apply")]


# One case per field (the first bad value) through the CLI and the SDK, every value
# through the HTTP API: the CLI and the SDK send the same payload to the same check.
FIRST = list({c[0]: c for c in reversed(CASES)}.values())


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_http_api_refuses(env: Env, tmp_path: Path, case: tuple[str, str, str]) -> None:
    field, text, _ = case
    for path, body in (("/v1/requests/launch", {"yaml": text, "base_dir": str(tmp_path),
                                                "cluster_name": "bnd"}),
                       ("/v1/requests/jobs.launch", {"yaml": text, "base_dir": str(tmp_path)}),
                       ("/v1/validate", {"yaml": text, "base_dir": str(tmp_path)})):
        status, resp = api("POST", path, body)
        assert status == 400, (path, field, status, resp)
        err = resp["error"]
        fields = [err.get("field")] + [e.get("field") for e in err.get("errors") or []]
        assert any((f or "").startswith(field) for f in fields), (path, field, err)


@pytest.mark.parametrize("case", FIRST, ids=[_ids(c) for c in FIRST])
def test_cli_and_sdk_refuse(env: Env, tmp_path: Path, case: tuple[str, str, str],
                            capsys: pytest.CaptureFixture[str]) -> None:
    from skyd import sdk
    from skyd.cli.main import main
    from skyd.errors import InvalidSpecError

    field, text, _ = case
    y = write(tmp_path / "t.yaml", text)
    for argv in (["validate", str(y)], ["launch", "-y", "-d", "-c", "bnd", str(y)],
                 ["jobs", "launch", "-y", "-d", str(y)]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert field in err and "Traceback" not in err, (argv, err)
    for call in (lambda: sdk.launch(str(y), cluster_name="bnd"),
                 lambda: sdk.jobs_launch(str(y)), lambda: sdk.validate(path=y)):
        with pytest.raises(InvalidSpecError) as ei:
            call()
        errs = list(getattr(ei.value, "errors", None) or [ei.value])
        # (an error rebuilt from the wire carries its field at the head of its message)
        assert any((e.field or str(e)).startswith(field) for e in errs), (field, str(ei.value))
        assert ei.value.exit_code == 2


# -- counts of the request payloads (CLI flags) -------------------------------------------
PAYLOAD_BAD: list[Any] = [10**9, 10**30, True, "5", 1.5]
BELOW = {"idle_minutes": -1, "num_jobs": 0, "priority": -1001, "workers": -1}
RAW_BAD = [b"1e999", b"NaN", b"Infinity", b"-Infinity"]


@pytest.mark.parametrize(("verb", "key", "base"), [
    ("launch", "idle_minutes", {"command": "echo", "cluster_name": "bnd"}),
    ("jobs.launch", "num_jobs", {"command": "echo"}),
    ("jobs.launch", "priority", {"command": "echo"}),
    ("jobs.pool_apply", "workers", {"name": "p1", "yaml": "run: echo\n"}),
])
def test_payload_counts_answer_400(env: Env, tmp_path: Path, verb: str, key: str,
                                   base: dict[str, Any]) -> None:
    base = {**base, "base_dir": str(tmp_path)}
    for v in [*PAYLOAD_BAD, BELOW[key]]:
        if key == "idle_minutes" and v == 1.5:
            continue  # minutes may be fractional
        status, resp = api("POST", f"/v1/requests/{verb}", {**base, key: v})
        assert status == 400 and resp["error"]["field"] == key, (key, v, status, resp)
    for raw in RAW_BAD:
        body = json.dumps(base)[:-1].encode() + b', "' + key.encode() + b'": ' + raw + b"}"
        status, resp = api("POST", f"/v1/requests/{verb}", raw=body)
        assert status == 400, (key, raw, status, resp)
        assert resp["error"]["field"] in (key, "body"), resp


@pytest.mark.parametrize("argv", [
    ["jobs", "launch", "-y", "-d", "--num-jobs", "1000000", "echo"],
    ["jobs", "launch", "-y", "-d", "--num-jobs", "0", "echo"],
    ["jobs", "launch", "-y", "-d", "--priority", "1000000", "echo"],
    ["jobs", "pool", "apply", "POOLYAML", "-p", "p1", "--workers", "1000000"],
    ["jobs", "pool", "apply", "POOLYAML", "-p", "p1", "--workers", "-1"],
    ["launch", "-y", "-d", "-c", "bnd", "-i", "100000000000", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--num-nodes", "1000000000", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--disk-size", "1000000000", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--cpus", "1e300", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--memory", "nan", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--gpus", "A100:inf", "echo"],
    ["launch", "-y", "-d", "-c", "bnd", "--ports", "1-65535", "echo"],
    ["ssh", "check", "nopool", "--timeout", "inf"],
    ["ssh", "check", "nopool", "--timeout", "nan"],
    ["ssh", "check", "nopool", "--timeout", "0"],
    ["logs", "nocluster", "--tail", "100000000"],
])
def test_cli_flags_exit_2(env: Env, tmp_path: Path, argv: list[str],
                          capsys: pytest.CaptureFixture[str]) -> None:
    from skyd.cli.main import main

    pool = write(tmp_path / "pool.yaml", "pool:\n  workers: 1\nsetup: echo\n")
    argv = [str(pool) if a == "POOLYAML" else a for a in argv]
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("-") and a not in ("-y", "-d", "-c", "-p"))
    named = {"-i": "idle_minutes", "--tail": "tail"}.get(flag, flag.lstrip("-").replace("-", "_"))
    assert named in err.replace("-", "_"), (argv, err)


def test_num_nodes_against_the_infra_at_every_verb(env: Env, tmp_path: Path) -> None:
    """What the infra can hold (local: a few nodes) is checked by every verb that makes
    clusters of a task: launch, jobs launch, serve up (per replica), pool apply (per
    worker)."""
    from skyd.clouds.local import local_max_nodes

    n = local_max_nodes() + 1
    text = f"num_nodes: {n}\nresources:\n  infra: local\nrun: echo\n"
    for verb, extra, more in (("launch", {"cluster_name": "bnd"}, ""), ("jobs.launch", {}, ""),
                              ("serve.up", {"name": "bnd-svc"}, SVC),
                              ("jobs.pool_apply", {"name": "bnd-pool"}, "pool:\n  workers: 1\n")):
        body = {"yaml": text + more, "base_dir": str(tmp_path), **extra}
        status, resp = api("POST", f"/v1/requests/{verb}", body)
        assert status == 400 and resp["error"]["field"] == "num_nodes", (verb, status, resp)
        assert f"at most {n - 1}" in resp["error"]["message"], resp


def test_nothing_was_created(env: Env) -> None:
    """Every refusal above left no request, no job, no pool and no cluster behind."""
    assert _launches() == []
    assert env.json("jobs", "queue") == []
    assert env.status("bnd") is None and not env.cluster_dir("bnd").exists()
    status, pools = api("GET", "/v1/pools")
    assert status != 200 or pools == []
    assert os.environ["SKYD_HOME"]
