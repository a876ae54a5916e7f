"""SkyPilot's flags typed at skyd (issue: a SkyPilot user switches without rewriting the
flags they type). Cases are command lines from SkyPilot's docs and `sky --help`; the
end-to-end ones run on the `local` infra with a real daemon (one for the module; what each
test leaves is taken down after it)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.cli.main import build_parser
from tests.support.daemon import cli, running_daemon, wait_for
from tests.support.pipeline import Env

SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)


def test_the_compat_table_is_current_and_covers_nine_in_ten_rows() -> None:
    from tests.support.compat_cli_table import MISSING, render, rows

    doc = Path(__file__).resolve().parents[2] / "docs" / "cli-compat.md"
    rs = rows()
    # every row the doc promises still holds (a row that became ✔ since is fine: regenerate
    # with python -m tests.support.compat_cli_table > docs/cli-compat.md)
    now = {(r.command, r.flag.replace("|", "/") or "(command)"): r.mark for r in rs}
    promised = {}
    for line in doc.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[2] in ("✔", "≈", "≠", "→", "✗"):
            promised[(cells[0], cells[1])] = cells[2]
    assert promised and set(promised) == set(now), "regenerate docs/cli-compat.md"
    for key, mark in promised.items():
        assert mark == MISSING or now[key] != MISSING, key
        assert mark != "✔" or now[key] == "✔", key
    assert render().splitlines()[:5] == doc.read_text().splitlines()[:5]
    assert sum(r.mark != MISSING for r in rs) >= 0.9 * len(rs)
    # the daily ones are real, not just accepted
    real = {(r.command, r.flag) for r in rs if r.mark == "✔"}
    for row in [("jobs launch", "--gpus"), ("jobs launch", "--env-file"), ("serve up", "--secret"),
                ("serve update", "--infra"), ("exec", "--cluster/-c"), ("logs", "--sync-down/-s"),
                ("down", "--purge/-p"), ("launch", "--fast"), ("launch", "--git-url"),
                ("launch", "--disk-tier"), ("show-gpus", "--all/-a"), ("launch", "--config")]:
        assert row in real, row


@pytest.mark.parametrize("argv,usage", [
    (["launch", "--bogus", "t.yaml"], "usage: skyd launch"),
    (["jobs", "launch", "--nope", "t.yaml"], "usage: skyd jobs launch"),
    (["serve", "up", "--what", "t.yaml"], "usage: skyd serve up"),
])
def test_an_unknown_flag_prints_the_subcommands_usage(argv: list[str], usage: str) -> None:
    r = cli(*argv)
    assert r.returncode == 2 and usage in r.stderr and "unrecognized arguments" in r.stderr


@pytest.mark.parametrize("argv,flag", [
    (["launch", "--workspace", "team", "t.yaml"], "--workspace"),
    (["launch", "--docker", "t.yaml"], "--docker"),
    (["jobs", "queue", "--infra", "aws"], "--infra"),
    (["jobs", "pool", "apply", "p.yaml", "-p", "p", "--gpus", "A100"], "--gpus"),
])
def test_a_refused_skypilot_flag_names_itself_and_exits_2(skyd_home: Path, argv: list[str], flag: str) -> None:
    r = cli(*argv)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {flag}:") and "Traceback" not in r.stderr


def test_skypilot_command_lines_parse_to_the_same_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.jobs.cli import launch_payload

    (tmp_path / ".env").write_text("A=1\nB=2\n")
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKYPILOT_GLOBAL_CONFIG", str(tmp_path / ".env"))  # any existing file
    (tmp_path / "sky.yaml").write_text("")
    monkeypatch.setenv("SKYPILOT_GLOBAL_CONFIG", str(tmp_path / "sky.yaml"))
    # sky jobs launch -n myjob --gpus A100:8 --infra aws --use-spot --env-file .env --env B=3 t.yaml
    args = build_parser().parse_args(["jobs", "launch", "-n", "myjob", "--gpus", "A100:8", "--infra",
                                      "aws", "--use-spot", "--env-file", ".env", "--env", "B=3",
                                      "--disk-tier", "high", "t.yaml"])
    p = launch_payload(args)
    assert p["name"] == "myjob" and p["env"] == {"A": "1", "B": "3"}
    assert p["overrides"] == {"gpus": "A100:8", "infra": "aws", "use_spot": True, "disk_tier": "high"}
    # sky exec -c mycluster task.yaml  /  sky exec mycluster task.yaml
    from skyd.cli.compat_flags import normalize_argv

    for argv in (["exec", "-c", "mycluster", "t.yaml"], ["exec", "--cluster=mycluster", "t.yaml"],
                 ["exec", "mycluster", "t.yaml"], ["exec", "-d", "-cmycluster", "t.yaml"]):
        a = build_parser().parse_args(normalize_argv(argv))
        assert (a.cluster, a.entrypoint) == ("mycluster", ["t.yaml"]), argv
    # options between the cluster and the command (SkyPilot's docs do it)
    a = build_parser().parse_args(normalize_argv(["exec", "c1", "--env", "A=1", "echo", "hi"]))
    assert (a.cluster, a.entrypoint, a.env) == ("c1", ["echo", "hi"], ["A=1"])
    # sky show-gpus -a: every offering; sky logs -s CLUSTER 1 2
    assert build_parser().parse_args(["show-gpus", "-a"]).show_all is True
    a = build_parser().parse_args(["logs", "-s", "c", "1", "2"])
    assert a.sync_down and a.job_ids == [1, 2]
    # sky jobs queue --since 48h / --after 2026-01-01
    from skyd.cli.compat_flags import filter_by_time

    a = build_parser().parse_args(["jobs", "queue", "--since", "48h"])
    import time

    rows = [{"id": 1, "submitted_at": time.time() - 3 * 86400}, {"id": 2, "submitted_at": time.time()}]
    assert [r["id"] for r in filter_by_time(rows, a)] == [2]
    a = build_parser().parse_args(["jobs", "queue", "--before", "1"])
    assert filter_by_time(rows, a) == []


def test_exec_c_logs_sync_down_and_fast(daemon: Any, tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("setup: echo SETUP-RAN\nrun: echo first-job\n")
    r = cli("launch", "-y", "-c", "cx", str(f), timeout=180)
    assert r.returncode == 0 and "SETUP-RAN" in r.stdout + r.stderr, r.stderr
    r = cli("exec", "-c", "cx", "echo second-job", timeout=120)
    assert r.returncode == 0, r.stderr
    # several ids stream only with --sync-down (as SkyPilot)
    r = cli("logs", "cx", "1", "2", "--no-follow")
    assert r.returncode == 2 and "--sync-down" in r.stderr
    r = cli("logs", "cx", "1", "2", "--sync-down")
    assert r.returncode == 0, r.stderr
    paths = [line.split(": ", 1)[1] for line in r.stdout.splitlines() if line.startswith("Job ")]
    assert len(paths) == 2
    assert "first-job" in Path(paths[0]).read_text() and "second-job" in Path(paths[1]).read_text()
    r = cli("logs", "cx", "--provision")
    assert r.returncode == 0 and "Provisioned" in r.stdout + r.stderr, r.stdout
    # launch --fast on an UP cluster skips setup
    r = cli("launch", "-y", "--fast", "-c", "cx", str(f), timeout=120)
    assert r.returncode == 0 and "SETUP-RAN" not in r.stdout + r.stderr, r.stdout


def test_tiers_are_checked_and_said_to_be_ignored(daemon: Any, tmp_path: Path) -> None:
    r = cli("launch", "--dryrun", "--disk-tier", "mega", "echo x")
    assert r.returncode == 2 and "--disk-tier" in r.stderr
    r = cli("launch", "-y", "-c", "tier", "--disk-tier", "high", "echo tiered", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "disk_tier: high is not acted on" in r.stdout + r.stderr


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(cwd), "PATH": "/usr/bin:/bin"})


@pytest.mark.skipif(subprocess.run(["which", "git"], capture_output=True).returncode != 0,
                    reason="git is not installed")
def test_git_workdir_is_cloned_and_run_at_its_ref(daemon: Any, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    (repo / "marker.txt").write_text("version-one\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "one", cwd=repo)
    _git("tag", "v1", cwd=repo)
    (repo / "marker.txt").write_text("version-two-longer\n")  # sync compares size+mtime(s)
    _git("commit", "-qam", "two", cwd=repo)
    r = cli("launch", "--dryrun", "--git-url", str(repo), "--git-ref", "v1", "cat marker.txt")
    assert r.returncode == 0, r.stderr
    r = cli("launch", "-y", "-c", "gitwd", "--git-url", str(repo), "--git-ref", "v1",
            "cat marker.txt", timeout=180)
    assert r.returncode == 0, r.stderr
    assert "version-one" in r.stdout + r.stderr and "version-two" not in r.stdout + r.stderr
    f = tmp_path / "g.yaml"
    f.write_text(f"workdir:\n  url: {repo}\n  ref: main\nrun: cat marker.txt\n")
    r = cli("exec", "gitwd", str(f), timeout=120)
    assert r.returncode == 0 and "version-two" in r.stdout + r.stderr, r.stderr
    r = cli("launch", "--dryrun", "--git-ref", "v1", "echo x")
    assert r.returncode == 2 and "--git-url" in r.stderr


REPLICA = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = ('token=' + os.environ.get('HF_TOKEN', 'missing')).encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    # the node's own address (each `local` node has one), as an app on a VM binds its own
    "host = (os.environ.get('SKYPILOT_NODE_IPS') or '127.0.0.1').split()[0]\n"
    "http.server.HTTPServer((host, int(os.environ['SKYPILOT_SERVE_PORT'])), H).serve_forever()\n"
)


def test_serve_up_takes_secret_overrides_and_env_file(daemon: Any, tmp_path: Path,
                                                      shared: Env) -> None:
    skyd_home = shared.home
    app = tmp_path / "app.py"
    app.write_text(REPLICA)
    f = tmp_path / "svc.yaml"
    f.write_text("name: sec\nsecrets:\n  HF_TOKEN: null\nservice:\n  readiness_probe:\n"
                 "    path: /health\n    initial_delay_seconds: 60\n  replicas: 1\n"
                 f"run: exec {sys.executable} {app}\n")
    (tmp_path / "e.env").write_text("MODE=x\n")
    r = cli("serve", "up", "-o", "json", str(f))
    assert r.returncode == 2 and "HF_TOKEN" in r.stdout + r.stderr  # the YAML asks for it
    r = cli("serve", "up", "-o", "json", "--secret", "HF_TOKEN=hf-s3cr3t-value", "--env-file",
            str(tmp_path / "e.env"), "--cpus", "1+", "--infra", "local", str(f))
    assert r.returncode == 0, r.stderr
    endpoint = json.loads(r.stdout)["endpoint"]

    def ready() -> bool:
        s = json.loads(cli("serve", "status", "sec", "-o", "json").stdout)
        return s["status"] == "READY"

    wait_for(ready, timeout=120, interval=0.5)
    with urllib.request.urlopen(endpoint + "/", timeout=10) as resp:
        assert resp.read().decode() == "token=hf-s3cr3t-value"
    db = sqlite3.connect(skyd_home / "state.db")
    dump = "\n".join(db.iterdump())
    assert "hf-s3cr3t-value" not in dump
    r = cli("serve", "down", "sec")
    assert r.returncode == 0
    assert not list((skyd_home / "secrets" / "jobs").glob("svc-sec-*"))


def test_jobs_logs_without_an_id_and_jobs_launch_overrides(daemon: Any, tmp_path: Path) -> None:
    r = cli("jobs", "launch", "-y", "-n", "lastjob", "--cpus", "1+", "--infra", "local",
            "echo managed-output", timeout=180)
    assert r.returncode == 0, r.stderr
    r = cli("jobs", "logs", "--no-follow")
    assert r.returncode == 0 and "managed-output" in r.stdout
    r = cli("jobs", "logs", "-n", "lastjob", "--sync-down")
    assert r.returncode == 0 and "managed-output" in Path(r.stdout.split(": ", 1)[1].strip()).read_text()
    r = cli("jobs", "logs", "-n", "nosuchjob", "--no-follow")
    assert r.returncode != 0 and "nosuchjob" in r.stderr
    # sky jobs launch --async: the request id, at once
    r = cli("jobs", "launch", "-y", "--async", "-n", "later", "echo later", timeout=60)
    rid = r.stdout.strip()
    assert r.returncode == 0 and rid and " " not in rid, r.stdout
    r = cli("requests", "get", rid)
    assert r.returncode == 0 and "jobs.launch" in r.stdout


def test_show_gpus_default_is_a_summary_and_a_is_every_offering(skyd_home: Path) -> None:
    short = cli("show-gpus").stdout
    full = cli("show-gpus", "-a").stdout
    assert "AVAILABLE_QUANTITIES" in short and "INSTANCE_TYPE" not in short
    assert "INSTANCE_TYPE" in full and len(full.splitlines()) > len(short.splitlines())
    rows = json.loads(cli("show-gpus", "A100:8", "--region", "us-east-1", "-o", "json").stdout)
    assert rows and {r["region"] for r in rows} == {"us-east-1"}


@pytest.fixture
def kube(skyd_home: Path, tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    from tests.fakes.kubeapi import FakeKube, gpu_node

    k = FakeKube(tmp_path / "kube").start()
    k.add_node(gpu_node("cpu-a", {}, cpu="16", memory="64Gi"))
    cfg = k.kubeconfig(tmp_path / "kubeconfig", {"lab": "ml"})
    env = {"KUBECONFIG": str(cfg)}
    try:
        with running_daemon(**env):
            yield k, env
    finally:
        k.stop()


def test_volumes_apply_ls_delete_are_pvcs(kube: tuple[Any, dict[str, str]], tmp_path: Path) -> None:
    k, env = kube
    # SkyPilot's documented volume YAML
    f = tmp_path / "vol.yaml"
    f.write_text("name: new-pvc\ntype: k8s-pvc\ninfra: k8s\nsize: 10Gi\nlabels:\n  team: ml\n"
                 "config:\n  access_mode: ReadWriteMany\n  storage_class_name: fast\n")
    r = cli("volumes", "apply", "-y", str(f), env=env)
    assert r.returncode == 0, r.stderr
    pvc = k.pvcs[("ml", "new-pvc")]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert pvc["spec"]["storageClassName"] == "fast" and pvc["metadata"]["labels"]["team"] == "ml"
    # idempotent by name
    assert cli("volumes", "apply", "-y", str(f), env=env).returncode == 0
    rows = json.loads(cli("volumes", "ls", "-o", "json", env=env).stdout)
    assert [(r["name"], r["infra"], r["size"]) for r in rows] == [("new-pvc", "k8s/lab", "10Gi")]
    # flags instead of a file; bad input names the field
    r = cli("volumes", "apply", "--name", "Bad_Name", "--size", "1Gi", env=env)
    assert r.returncode == 2 and "name" in r.stderr
    r = cli("volumes", "apply", "--name", "small", "--size", "lots", env=env)
    assert r.returncode == 2 and "size" in r.stderr
    # an existing PVC skyd did not make: registered, and delete only unregisters it
    k.pvcs[("ml", "theirs")] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "metadata": {"name": "theirs", "namespace": "ml", "labels": {}},
                                "spec": {"accessModes": ["ReadWriteOnce"],
                                         "resources": {"requests": {"storage": "1Gi"}}},
                                "status": {"phase": "Bound"}}
    r = cli("volumes", "apply", "--name", "theirs", "--use-existing", env=env)
    assert r.returncode == 0, r.stderr
    r = cli("volumes", "delete", "-y", "new-pvc", "theirs", env=env)
    assert r.returncode == 0, r.stderr
    assert ("ml", "new-pvc") not in k.pvcs and ("ml", "theirs") in k.pvcs
    assert "skyd-volume" not in k.pvcs[("ml", "theirs")]["metadata"]["labels"]
    r = cli("volumes", "delete", "nope", env=env)
    assert r.returncode != 0 and "nope" in r.stderr
