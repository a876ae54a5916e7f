"""launch / exec / queue / logs / status / cost-report end to end on `local`: a real daemon
subprocess, real node agents, the real `skyd` CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline import Env, cli, module_env, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A task directory: workdir with ignored files, local file-mount sources, a YAML."""
    d = tmp_path_factory.mktemp("proj")
    wd = d / "wd"
    write(wd / "keep.txt", "kept\n")
    write(wd / "sub" / "deep.txt", "deep\n")
    write(wd / "ignored.log", "x\n")
    write(wd / "build" / "artifact.bin", "x\n")
    write(wd / ".gitignore", "*.log\nbuild/\n")
    # An own ignore file replaces .gitignore (SkyPilot's rule for .skyignore).
    own = d / "own"
    write(own / "secret.skyd", "x\n")
    write(own / "other.log", "x\n")
    write(own / ".skydignore", "secret.skyd\n")
    write(d / "data" / "a.txt", "mount-a\n")
    write(d / "single.txt", "single\n")
    write(d / "rel.txt", "relative\n")
    write(
        d / "task.yaml",
        """\
name: full
workdir: wd
envs:
  GREETING: hey
file_mounts:
  ~/x: data
  /abs/y: single.txt
  rel/z.txt: rel.txt
setup: |
  echo "setup-ran" > ~/setup_marker
run: |
  echo "$GREETING from rank $SKYPILOT_NODE_RANK"
  echo "cwd=$(pwd)"
  ls -A | sort | tr '\\n' ' '; echo
  cat ~/x/a.txt
""",
    )
    return d


def test_launch_yaml_stages_output_and_sync(env: Env, project: Path) -> None:
    r = env.ok("launch", "-c", "pl-yaml", str(project / "task.yaml"))
    # Stage lines on stderr, the job's output on stdout.
    for label in ("Optimized", "Provisioned", "Synced workdir", "Synced file mounts",
                  "Setup done", "Job finished"):
        assert label in r.stderr, r.stderr
    assert "hey from rank 0" in r.stdout
    assert "hey from rank 0" not in r.stderr
    assert "Job 1 on pl-yaml: SUCCEEDED" in r.stderr
    node = env.cluster_dir("pl-yaml") / "node-0"
    assert f"cwd={node / 'workdir'}" in r.stdout
    # .gitignore / .skydignore honoured
    listing = next(ln for ln in r.stdout.splitlines() if "keep.txt" in ln).split()
    assert "keep.txt" in listing and "sub" in listing
    assert "ignored.log" not in listing and "build" not in listing
    r2 = env.ok("exec", "pl-yaml", "--workdir", str(project / "own"), "ls -A | sort | tr '\\n' ' '")
    listing = r2.stdout.split()
    assert "other.log" in listing and "secret.skyd" not in listing
    # file mounts mapped into the sandbox: ~/x, /abs/y, relative
    assert "mount-a" in r.stdout
    assert (node / "home" / "x" / "a.txt").read_text() == "mount-a\n"
    assert (node / "root" / "abs" / "y").read_text() == "single\n"
    assert (node / "home" / "rel" / "z.txt").read_text() == "relative\n"
    assert (node / "home" / "setup_marker").read_text() == "setup-ran\n"
    q = env.queue("pl-yaml")
    assert [(j["job_id"], j["status"]) for j in q] == [(2, "SUCCEEDED"), (1, "SUCCEEDED")]


def test_exec_skips_setup_and_runs_in_workdir(env: Env, project: Path) -> None:
    env.ok("launch", "-c", "pl-exec", "--workdir", str(project / "wd"), "echo first")
    (env.cluster_dir("pl-exec") / "node-0" / "home" / "setup_marker").unlink(missing_ok=True)
    y = write(project / "exec.yaml", "workdir: wd\nsetup: echo s > ~/setup_marker\n"
                                     "run: echo cwd=$(pwd); ls\n")
    r = env.ok("exec", "pl-exec", str(y))
    assert "Job 2 on pl-exec: SUCCEEDED" in r.stderr
    assert "Setup" not in r.stderr  # setup skipped
    assert not (env.cluster_dir("pl-exec") / "node-0" / "home" / "setup_marker").exists()
    assert f"cwd={env.cluster_dir('pl-exec') / 'node-0' / 'workdir'}" in r.stdout
    r = env.ok("exec", "pl-exec", "pwd")
    assert r.stdout.strip().endswith("/node-0/workdir")
    assert [j["job_id"] for j in env.queue("pl-exec")] == [3, 2, 1]


def test_inline_launch_logs_and_queue(env: Env) -> None:
    r = env.ok("launch", "-c", "pl-inline", "for i in 1 2 3 4 5; do echo line$i; done")
    assert "line1" in r.stdout and "line5" in r.stdout
    assert "Job 1 on pl-inline: SUCCEEDED" in r.stderr
    q = env.json("queue", "pl-inline")
    assert q[0]["cluster"] == "pl-inline"
    job = q[0]["jobs"][0]
    assert job["job_id"] == 1 and job["status"] == "SUCCEEDED" and job["exit_code"] == 0
    r = env.ok("logs", "pl-inline", "1", "--no-follow")
    assert r.stdout.splitlines() == [f"line{i}" for i in range(1, 6)]
    r = env.ok("logs", "pl-inline", "1", "--tail", "2")
    assert r.stdout.splitlines() == ["line4", "line5"]
    r = env.ok("logs", "pl-inline", "--status")
    assert "SUCCEEDED" in r.stdout


def test_status_json_and_no_token_leak(env: Env) -> None:
    r = env.ok("launch", "-c", "pl-stat", "echo hi")
    token = env.token("pl-stat")
    assert len(token) > 16
    row = env.status("pl-stat")
    assert row is not None
    assert row["status"] == "UP" and row["cloud"] == "local" and row["num_nodes"] == 1
    assert row["hourly_cost"] == 0.0 and isinstance(row["launched_at"], float)
    texts = [r.stdout, r.stderr]
    for args in (("status", "-o", "json"), ("status",), ("queue", "-o", "json"), ("queue",),
                 ("requests", "ls", "-o", "json")):
        texts.append(env.ok(*args).stdout)
    for req in env.json("requests", "ls"):
        texts.append(env.ok("requests", "logs", req["id"], "-o", "json").stdout)
        texts.append(env.ok("requests", "get", req["id"], "-o", "json").stdout)
    for t in texts:
        assert token not in t
    for f in env.home.rglob("*.log"):
        if "local" not in f.parts:  # the daemon's own logs (sandboxes hold the agent's)
            assert token not in f.read_text(errors="replace"), f


def test_reuse_up_cluster_and_not_fitting(env: Env, project: Path) -> None:
    env.ok("launch", "-c", "pl-reuse", "echo one")
    r = env.ok("launch", "-c", "pl-reuse", "echo two")
    assert "reusing" in r.stderr.lower() or "skipped" in r.stderr
    assert "Job 2 on pl-reuse: SUCCEEDED" in r.stderr
    assert [j["job_id"] for j in env.queue("pl-reuse")] == [2, 1]
    r = cli("launch", "-c", "pl-reuse", "--num-nodes", "2", "echo no")
    assert r.returncode != 0
    assert "2 nodes" in r.stderr and "pl-reuse" in r.stderr
    r = cli("launch", "-c", "pl-reuse", "--gpus", "H100:8", "echo no")
    assert r.returncode != 0
    assert "H100" in r.stderr
    assert [j["job_id"] for j in env.queue("pl-reuse")] == [2, 1]


def test_setup_failure_and_exit_code(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "bad_setup.yaml", "setup: |\n  exit 7\nrun: |\n  echo RUN-STARTED\n")
    r = cli("launch", "-c", "pl-fail", str(y))
    assert r.returncode != 0
    assert "RUN-STARTED" not in r.stdout
    assert "FAILED_SETUP" in r.stderr
    assert env.job("pl-fail", 1)["status"] == "FAILED_SETUP"
    r = cli("exec", "pl-fail", "echo before; exit 3")
    assert r.returncode != 0
    assert "before" in r.stdout and "exit code 3" in r.stderr
    j = env.job("pl-fail", 2)
    assert j["status"] == "FAILED" and j["exit_code"] == 3
    r = cli("logs", "pl-fail", "2", "--status")
    assert r.returncode == 1 and "FAILED" in r.stdout


def test_cost_report_includes_torn_down(env: Env) -> None:
    env.ok("launch", "-c", "pl-cost", "echo c")
    env.ok("down", "pl-cost", "-y")
    rep = env.json("cost-report")
    gone = [c for c in rep["clusters"] if c["name"] == "pl-cost"]
    assert gone and gone[0]["status"] == "TERMINATED" and gone[0]["cost"] == 0.0
    assert rep["total_cost"] == pytest.approx(sum(c["cost"] for c in rep["clusters"]))
    assert not env.cluster_dir("pl-cost").exists()
    assert env.agent_pids("pl-cost") == []


def test_bad_input(env: Env, tmp_path: Path) -> None:
    for args in (("exec", "nope-cluster", "echo x"), ("logs", "nope-cluster", "1"),
                 ("cancel", "nope-cluster", "1"), ("queue", "nope-cluster")):
        r = cli(*args)
        assert r.returncode == 3, (args, r.stderr)
        assert "nope-cluster" in r.stderr and "does not exist" in r.stderr
    env.ok("launch", "-c", "pl-bad", "echo x")
    for args2 in (["logs", "pl-bad", "42", "--no-follow"], ["cancel", "pl-bad", "42"]):
        r = cli(*args2)
        assert r.returncode == 3, (args2, r.stderr)
        assert "42" in r.stderr and "not found" in r.stderr
    # A bucket mount without reachable S3 is refused before anything is provisioned
    # (tests/storage/test_storage.py covers COPY itself).
    y = write(tmp_path / "bucket.yaml", "file_mounts:\n  /data: s3://some-bucket/path\nrun: echo x\n")
    r = cli("launch", "-c", "pl-bucket", str(y))
    assert r.returncode == 5, r.stderr
    assert "s3" in r.stderr.lower()
    assert env.status("pl-bucket") is None
    assert not env.cluster_dir("pl-bucket").exists()
    # A multi-document YAML (a pipeline) points to `skyd jobs launch`.
    y = write(tmp_path / "pipe.yaml", "name: p\n---\nname: a\nrun: echo a\n---\nname: b\nrun: echo b\n")
    r = cli("launch", "-c", "pl-pipe", str(y))
    assert r.returncode == 2, r.stderr
    assert "skyd jobs launch" in r.stderr
    assert env.status("pl-pipe") is None
    r = cli("status", "-o", "json")
    assert all(c["name"] not in ("pl-pipe", "pl-bucket") for c in json.loads(r.stdout))


def test_any_of_runs_under_the_entry_the_plan_chose(env: Env, tmp_path: Path) -> None:
    """any_of lists a GPU entry first and `local` second: the plan lands on local (no GPU
    infra is enabled here), and the job runs under the local entry: no GPU demanded of a
    node that has none, and that entry's envs of the cluster (SKYPILOT_NUM_GPUS_PER_NODE=0)."""
    y = write(tmp_path / "anyof.yaml", """\
resources:
  any_of:
    - accelerators: A100:1
    - infra: local
run: |
  echo "gpus=$SKYPILOT_NUM_GPUS_PER_NODE"
""")
    r = env.ok("launch", "-c", "pl-anyof", str(y))
    assert "Job 1 on pl-anyof: SUCCEEDED" in r.stderr, r.stderr
    assert "gpus=0" in r.stdout + r.stderr
    r = env.ok("exec", "pl-anyof", str(y))
    assert "SUCCEEDED" in r.stderr, r.stderr


def test_build_request_takes_the_chosen_entrys_disk_and_labels() -> None:
    """Two unpinned entries: the provision request carries the disk, labels and image of the
    entry the solver chose (its index), not the first unpinned one."""
    import yaml

    from skyd.clouds.offering import Offering
    from skyd.models.loader import task_from_config
    from skyd.pipeline import planner
    from skyd.pipeline.provision import build_request

    task = task_from_config(yaml.safe_load("""\
resources:
  any_of:
    - {accelerators: A100:1, disk_size: 500, labels: {tier: gpu}}
    - {cpus: 2, disk_size: 100, labels: {tier: cpu}}
run: echo
"""))
    off = Offering(cloud="aws", instance_type="m6i.large", accelerator=None,
                   accelerator_count=0.0, vcpus=2.0, memory_gib=8.0, region="us-east-1",
                   zone="us-east-1a", price=0.1, spot_price=None)
    req = build_request(task, "c", "t", planner.Choice(off, False, 0.1, 1, 1))
    assert req.disk_size == 100
    assert dict(req.labels) == {"tier": "cpu"}
