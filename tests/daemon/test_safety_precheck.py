"""`validate` is the launch's own precheck: what launch refuses without credentials is
refused by `skyd validate` too, and by every entry point (CLI launch/exec/jobs launch/serve
up/jobs pool apply, the SDK, the HTTP API) before anything is created.

Cases: bucket names against each store's rules, unsupported URIs and stores, a local
source without a bucket name, a store that does not match its source, a missing workdir, a
workdir that is a file, a missing file-mount source; the HTTP API's
`overrides` with unknown keys and non-string secrets; duplicate YAML keys warned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.test_safety_names import api
from tests.support.pipeline import Env, module_env, write

SVC = "service:\n  readiness_probe: /health\n  replicas: 1\n"

# (YAML body before `run:`, field the error names, text the message holds)
CASES: list[tuple[str, str, str]] = [
    ("file_mounts:\n  /d: s3://MyBucket/x\n", "file_mounts./d", "not a valid bucket name"),
    ("file_mounts:\n  /d: s3://ab\n", "file_mounts./d", "3 to 63"),
    ("file_mounts:\n  /d: s3://xn--x\n", "file_mounts./d", "reserved prefixes"),
    ("file_mounts:\n  /d: s3://sthree-data\n", "file_mounts./d", "reserved prefixes"),
    ("file_mounts:\n  /d: s3://data--ol-s3\n", "file_mounts./d", "suffixes"),
    ("file_mounts:\n  /d: s3://192.168.1.10\n", "file_mounts./d", "IP address"),
    ("file_mounts:\n  /d: s3://my..bucket\n", "file_mounts./d", "'..'"),
    ("file_mounts:\n  /d: s3://my_bucket\n", "file_mounts./d", "not a valid bucket name"),
    ("file_mounts:\n  /d: gs://goog-data\n", "file_mounts./d", "goog"),
    ("file_mounts:\n  /d: gs://my-google-data\n", "file_mounts./d", "google"),
    ("file_mounts:\n  /d: r2://my.bucket\n", "file_mounts./d", "not a valid bucket name"),
    ("file_mounts:\n  /d:\n    name: MyBucket\n", "file_mounts./d.name", "not a valid bucket"),
    ("file_mounts:\n  /d:\n    name: goog-x\n    store: gcs\n", "file_mounts./d.name", "goog"),
    ("file_mounts:\n  /d: ftp://host/x\n", "file_mounts./d", "not supported"),
    ("file_mounts:\n  /d: file:///etc/shadow\n", "file_mounts./d", "not supported"),
    ("file_mounts:\n  /d: https://example.com/x\n", "file_mounts./d", "not supported"),
    ("file_mounts:\n  /d:\n    source: ftp://host/x\n", "file_mounts./d.source", "not supported"),
    ("file_mounts:\n  /d:\n    name: ok-bucket\n    store: azure\n", "file_mounts./d.store",
     "not supported"),
    ("file_mounts:\n  /d:\n    source: DATA\n    store: s3\n", "file_mounts./d.name",
     "needs a bucket name"),
    ("file_mounts:\n  /d:\n    source: gs://ok-bucket\n    store: s3\n", "file_mounts./d.store",
     "does not match"),
    ("file_mounts:\n  /d:\n    name: ok-bucket\n    source: ./nope\n",
     "file_mounts./d.source", "does not exist"),
    ("file_mounts:\n  /d:\n    source: [DATA, DATA]\n    name: ok-bucket\n",
     "file_mounts./d.source", "list of sources"),
    ("workdir: ./nope\n", "workdir", "does not exist"),
    ("workdir: FILE\n", "workdir", "is a file"),
    ("file_mounts:\n  /d: ./nope\n", "file_mounts./d", "does not exist"),
    (SVC + "  tls:\n    keyfile: ./nokey.pem\n    certfile: FILE\n", "service.tls.keyfile",
     "no such file"),
]


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "x.txt", "x")
    write(tmp_path / "file.txt", "not a directory")
    return tmp_path


def _text(body: str, base: Path, extra: str = "") -> str:
    if extra.startswith("service:") and body.startswith("service:"):
        extra = ""  # the case has its own service section
    body = body.replace("DATA", str(base / "data")).replace("FILE", str(base / "file.txt"))
    return body + extra + "run: echo hi\n"


def _fields(err: Any) -> list[str]:
    errs = list(getattr(err, "errors", None) or [err])
    return [e.field or str(e) for e in errs]


@pytest.mark.parametrize("case", CASES, ids=[c[0].strip().replace("\n", " ") for c in CASES])
def test_precheck_in_process(base: Path, case: tuple[str, str, str]) -> None:
    """The loaded task passes the model; the precheck refuses it, naming the field."""
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag
    from skyd.models.precheck import precheck

    body, field, needle = case
    dag = load_dag("t.yaml", text=_text(body, base), base_dir=base)
    with pytest.raises(InvalidSpecError) as ei:
        precheck(dag, base)
    assert any(f.startswith(field) for f in _fields(ei.value)), (field, str(ei.value))
    assert needle in str(ei.value) and ei.value.exit_code == 2


def test_precheck_passes_what_launch_accepts(base: Path) -> None:
    from skyd.models import load_dag
    from skyd.models.precheck import precheck

    text = ("workdir: .\nfile_mounts:\n  /a: ./data\n  /b: s3://my-bucket/some/prefix\n"
            "  /c: gs://my_bucket.example\n  /d: r2://my-bucket\n"
            "  /e:\n    name: my-new-bucket\n    source: ./data\n    mode: COPY\n"
            "  /f:\n    source: s3://my-bucket\n    store: s3\n  /g:\n    name: existing-b\n"
            "run: x\n")
    precheck(load_dag("ok.yaml", text=text, base_dir=base))
    # A path that uses a variable `validate` was not given is checked at launch.
    dag = load_dag("v.yaml", text="envs:\n  WD: null\nworkdir: $WD\nrun: x\n", base_dir=base,
                   allow_missing_env=True)
    precheck(dag)


def test_every_mistake_at_once(base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from skyd.cli.main import main

    y = write(base / "t.yaml", "workdir: ./nope\nfile_mounts:\n  /a: ./gone\n  /b: s3://Bad\n"
                               "run: x\n")
    assert main(["validate", str(y)]) == 2
    err = capsys.readouterr().err
    for f, line in (("workdir", 1), ("file_mounts./a", 3), ("file_mounts./b", 4)):
        assert f"error: {f}:" in err and f"(line {line})\n" in err, err


def test_duplicate_keys_warn(base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last one wins (as SkyPilot/PyYAML); validate says so, naming the key and line."""
    from skyd.cli.main import main

    y = write(base / "d.yaml", "run: echo a\nresources:\n  cpus: 2\n  cpus: 4\nrun: echo b\n")
    assert main(["validate", str(y)]) == 0
    cap = capsys.readouterr()
    assert "duplicate key 'resources.cpus' at line 4 (first at line 3)" in cap.err, cap.err
    assert "duplicate key 'run' at line 5 (first at line 1)" in cap.err
    assert "run: echo b" in cap.out and "cpus: '4'" in cap.out


# -- every entry point ----------------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    import skyd.cli.client as cli_client

    with module_env(tmp_path_factory) as e:
        cli_client._client = None  # the in-process CLI's client: this module's daemon
        try:
            yield e
        finally:
            cli_client._client = None


# The CLI and the SDK go through the same submit check as the HTTP API: every case goes
# through the HTTP API (each verb), a few through the CLI and the SDK.
VERBS: list[tuple[str, dict[str, Any], str]] = [
    ("launch", {"cluster_name": "pre"}, ""),
    ("launch", {"dryrun": True}, ""),
    ("exec", {"cluster_name": "pre"}, ""),
    ("jobs.launch", {}, ""),
    ("serve.up", {"name": "pre-svc"}, SVC),
    ("jobs.pool_apply", {"name": "pre-pool"}, "pool:\n  workers: 1\n"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0].strip().replace("\n", " ") for c in CASES])
def test_http_api_refuses_before_creating(env: Env, base: Path,
                                          case: tuple[str, str, str]) -> None:
    body, field, needle = case
    for verb, extra, more in VERBS:
        payload = {"yaml": _text(body, base, more), "base_dir": str(base), **extra}
        status, resp = api("POST", f"/v1/requests/{verb}", payload)
        assert status == 400, (verb, body, status, resp)
        assert needle in resp["error"]["message"] or any(
            needle in (e.get("message") or "") for e in resp["error"].get("errors") or []), resp
    status, resp = api("POST", "/v1/validate", {"yaml": _text(body, base), "base_dir": str(base)})
    assert status == 400 and needle in str(resp), resp


@pytest.mark.parametrize("case", [CASES[0], CASES[13], CASES[18], CASES[22], CASES[23]],
                         ids=["bucket", "ftp", "noname", "noworkdir", "fileworkdir"])
def test_cli_and_sdk_refuse(env: Env, base: Path, case: tuple[str, str, str],
                            capsys: pytest.CaptureFixture[str]) -> None:
    from skyd import sdk
    from skyd.cli.main import main
    from skyd.errors import InvalidSpecError
    from skyd.sdk import serve as sdk_serve

    body, field, needle = case
    y = write(base / "t.yaml", _text(body, base))
    s = write(base / "s.yaml", _text(body, base, SVC))
    p = write(base / "p.yaml", _text(body, base, "pool:\n  workers: 1\n"))
    for argv in (["validate", str(y)], ["launch", "-y", "-c", "pre", str(y)],
                 ["launch", "--dryrun", str(y)], ["exec", "pre", str(y)],
                 ["jobs", "launch", "-y", "-d", str(y)], ["serve", "up", "-y", str(s)],
                 ["jobs", "pool", "apply", "-y", str(p), "-p", "pre-pool"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert field in err and needle in err and "Traceback" not in err, (argv, err)
    for call in (lambda: sdk.launch(str(y), cluster_name="pre"),
                 lambda: sdk.exec("pre", str(y)), lambda: sdk.jobs_launch(str(y)),
                 lambda: sdk_serve.up(str(s), name="pre-svc"), lambda: sdk.validate(path=y)):
        with pytest.raises(InvalidSpecError) as ei:
            call()
        assert needle in str(ei.value) and ei.value.exit_code == 2


def test_overrides_and_secrets_are_checked(env: Env, base: Path) -> None:
    """Unknown override keys and non-string secret values: 400 naming the key."""
    ok = {"command": "echo hi", "base_dir": str(base), "cluster_name": "pre"}
    for verb in ("launch", "exec"):
        for ov, named in (({"gpuz": "A100"}, "overrides.gpuz"), ({"cpus": 2, "x": 1}, "overrides.x"),
                          ("gpus", "overrides"), (["cpus"], "overrides")):
            status, resp = api("POST", f"/v1/requests/{verb}", {**ok, "overrides": ov})
            assert status == 400 and resp["error"]["field"] == named, (verb, ov, resp)
        for bad in (1, 1.5, True, None, ["x"], {"a": 1}):
            status, resp = api("POST", f"/v1/requests/{verb}", {**ok, "secrets": {"TOK": bad}})
            assert status == 400 and resp["error"]["field"] == "secrets.TOK", (verb, bad, resp)
    for verb, extra in (("launch", {"cluster_name": "pre"}), ("jobs.launch", {}),
                        ("serve.up", {"name": "pre-svc"}), ("jobs.pool_apply", {"name": "pp"})):
        body = {"yaml": "run: echo\n" + SVC, "base_dir": str(base), **extra}
        for env_bad, named in (({"A": 5}, "env.A"), ({"A": None}, "env.A"), (["A=1"], "env"),
                               ({"1A": "x"}, "env")):
            status, resp = api("POST", f"/v1/requests/{verb}", {**body, "env": env_bad})
            assert status == 400 and resp["error"]["field"] == named, (verb, env_bad, resp)
    for ov, named in (({"num_nodes": True}, "--num-nodes"), ({"workdir": 5}, "--workdir"),
                      ({"workdir": ""}, "--workdir"), ({"workdir": str(base / "nope")}, "workdir"),
                      ({"cpus": "1e300"}, "--cpus"), ({"ports": "1-65535"}, "--ports"),
                      ({"gpus": "A100:nan"}, "--gpus")):
        status, resp = api("POST", "/v1/requests/launch", {**ok, "overrides": ov})
        assert status == 400 and resp["error"]["field"] == named, (ov, resp)
    status, resp = api("POST", "/v1/requests/jobs.launch",
                       {"command": "echo", "base_dir": str(base), "secrets": {"T": 5}})
    assert status == 400 and resp["error"]["field"] == "secrets.T", resp


def test_duplicate_keys_warn_at_launch(env: Env, base: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The launch's own log says it too (a dry run: nothing is made)."""
    from skyd import sdk
    from skyd.cli.main import main

    y = write(base / "d.yaml", "resources:\n  infra: local\nrun: echo a\nrun: echo b\n")
    capsys.readouterr()
    assert main(["launch", "--dryrun", str(y)]) == 0
    cap = capsys.readouterr()
    assert "warning: " in cap.out + cap.err
    assert "duplicate key 'run' at line 4 (first at line 3)" in cap.out + cap.err
    out = sdk.validate(path=y)
    assert [w for w in out["warnings"] if "duplicate key 'run'" in w] == [
        f"{y}: duplicate key 'run' at line 4 (first at line 3); the last one wins -- remove"
        " one of them"]


def test_nothing_was_created(env: Env) -> None:
    rows = api("GET", "/v1/requests?limit=10000")[1]
    made = [r for r in rows if r["verb"] in ("launch", "exec", "jobs.launch", "serve.up",
                                             "jobs.pool_apply")]
    # (the one request: the dry run of test_duplicate_keys_warn_at_launch)
    assert len(made) <= 1 and all(r["verb"] == "launch" and not r.get("cluster_name")
                                  for r in made), made
    assert env.json("jobs", "queue") == []
    assert env.status("pre") is None and not env.cluster_dir("pre").exists()
    status, svcs = api("GET", "/v1/services")
    assert status != 200 or svcs == []
