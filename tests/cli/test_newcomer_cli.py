"""A newcomer's first hour, as a user meets it: the README's commands, dry runs that plan
over every catalog and match what launch does, launch output in order and clean off a
TTY, JSON errors, confirmations on a terminal, and human-readable figures. The tests that
take ``daemon`` share one module daemon; what each leaves is taken down after it."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.daemon import REPO, SKYD_BIN, cli, running_daemon

A100 = "resources:\n  accelerators: A100:8\nrun: nvidia-smi\n"


SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)


def _combined(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """stdout and stderr in ONE pipe, as a terminal or a CI log shows them."""
    r = subprocess.run([str(SKYD_BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stdout
    return r.stdout


def _in_order(text: str, *parts: str) -> None:
    pos = [text.find(p) for p in parts]
    assert all(p >= 0 for p in pos), (parts, text)
    assert pos == sorted(pos), f"out of order {parts}:\n{text}"


def _pty_run(argv: list[str], answer: str | None, timeout: float = 60) -> tuple[int, str]:
    """Run argv on a pseudo-terminal (stdin, stdout and stderr are the tty); type
    ``answer`` once a "Proceed?" prompt appears. Returns (exit code, all output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    break  # the child closed the tty
                if not data:
                    break
                out += data
                if answer is not None and b"Proceed?" in out:
                    os.write(master, answer.encode())
                    answer = None
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), out.decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


# -- README ----------------------------------------------------------------------------
def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_readme_commands_run_as_written_after_the_first_command(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    blocks = _bash_blocks(readme)
    first, test_cmd = blocks[0].strip(), blocks[1].strip()
    assert "\n" not in first and "\n" not in test_cmd  # exactly two one-line setup commands
    assert test_cmd in (REPO / ".ci" / "run").read_text()  # CI runs the README's test command
    # The first command, minus creating the venv and installing into it (the test runs in
    # that venv already), in a shell that has never heard of skyd.
    steps = [s.strip() for s in first.split("&&")]
    assert steps[0].startswith("python3 -m venv .venv") and ".venv/bin/pip install" in steps[1]
    prelude = [s for s in steps[2:] if not s.startswith("skyd ")]
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    using = next(b for b in blocks[2:] if "skyd launch" in b)
    verbs = []
    for line in using.splitlines():
        for cmd in line.split("#")[0].split(";"):
            words = shlex.split(cmd)
            if words:
                assert words[0] == "skyd", line
                verb = words[1]
                if verb in ("jobs", "requests", "daemon", "ssh") and len(words) > 2:
                    verb += " " + words[2]
                verbs.append(verb)
    script = " && ".join([*prelude, "command -v skyd"] +
                         [f"skyd {v} --help >/dev/null" for v in dict.fromkeys(verbs)])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"{script}\n{r.stderr}"
    assert r.stdout.strip().endswith("/skyd")


# -- dry runs ---------------------------------------------------------------------------
def test_dryrun_plans_over_every_catalog_and_says_how_to_enable(daemon: Any, tmp_path: Path) -> None:
    f = tmp_path / "a100.yaml"
    f.write_text(A100)
    r = cli("launch", "--dryrun", str(f))
    assert r.returncode == 0, r.stderr
    assert "A100:8" in r.stdout and "p4d.24xlarge" in r.stdout  # AWS's 8x A100, priced
    assert "not enabled" in r.stdout and "Nothing can launch this now" in r.stdout
    assert re.search(r"^  aws: \S", r.stdout, re.M)  # how to enable, per infra
    assert re.search(r"^  lambda: catalog only", r.stdout, re.M)  # no provider module yet
    doc = json.loads(cli("launch", "--dryrun", "-o", "json", str(f)).stdout)
    assert doc["launchable"] is False and doc["infras"]["aws"]["launch"] is False
    assert doc["infras"]["aws"]["how"] and doc["infras"]["local"]["launch"] is True
    assert {c["cloud"] for c in doc["tasks"][0]["considered"]} >= {"aws", "gcp"}


def _catalog(d: Path, rows: list[str]) -> Path:
    d.mkdir()
    (d / "runpod.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,"
        "AvailabilityZone,Price,SpotPrice\n" + "".join(r + "\n" for r in rows))
    return d


def test_dryrun_choice_is_what_launch_runs(skyd_home: Path, tmp_path: Path) -> None:
    cat = _catalog(tmp_path / "cat", ["cpu-tiny,,,2,8,,CA,CA-MTL-1,0.01,"])
    f = tmp_path / "t.yaml"
    f.write_text("resources:\n  cpus: 1+\nrun: echo ran\n")
    with running_daemon(SKYD_CATALOG_DIR=str(cat)):
        try:
            plan = json.loads(cli("launch", "--dryrun", "-o", "json", str(f)).stdout)
            chosen = plan["tasks"][0]["chosen"]
            r = cli("launch", "-y", "-c", "same", str(f))
            assert r.returncode == 0, r.stderr
            row = json.loads(cli("status", "-o", "json").stdout)[0]
            assert (chosen["cloud"], chosen["instance_type"]) == (row["cloud"], row["instance_type"])
            # The cheaper catalog-only row is shown beside it, not chosen.
            runpod = [c for c in plan["tasks"][0]["considered"] if c["cloud"] == "runpod"]
            assert runpod and not runpod[0]["chosen"] and not runpod[0]["launch"]
        finally:
            cli("down", "-a", "-y")


def test_a_running_daemon_reads_the_callers_catalog_dir(daemon: Any, tmp_path: Path) -> None:
    cat = _catalog(tmp_path / "mine", ["my-8xa100,A100,8,64,512,,CA,CA-MTL-1,1.5,"])
    f = tmp_path / "a100.yaml"
    f.write_text(A100)
    r = cli("launch", "--dryrun", "-o", "json", str(f), env={"SKYD_CATALOG_DIR": str(cat)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["tasks"][0]["chosen"]["instance_type"] == "my-8xa100"
    # Without it, the same daemon plans over the bundled catalogs again.
    r = cli("launch", "--dryrun", "-o", "json", str(f))
    assert json.loads(r.stdout)["tasks"][0]["chosen"]["instance_type"] != "my-8xa100"
    # A directory that is not there: a clear error naming the variable.
    r = cli("launch", "--dryrun", str(f), env={"SKYD_CATALOG_DIR": str(tmp_path / "nope")})
    assert r.returncode == 2 and "SKYD_CATALOG_DIR" in r.stderr and "Traceback" not in r.stderr


# -- launch output ------------------------------------------------------------------------
def test_launch_output_comes_in_order_and_clean_without_a_tty(daemon: Any, tmp_path: Path) -> None:
    f = tmp_path / "ordered.yaml"
    f.write_text("setup: echo SETUP-LINE\nrun: |\n  echo RUN-LINE-1\n  echo RUN-LINE-2\n")
    out = _combined("launch", "-y", "-c", "ordered", str(f))
    _in_order(out, "✓ Optimized", "Considered resources", "✓ Provisioned", "SETUP-LINE",
              "✓ Setup done", "RUN-LINE-1", "RUN-LINE-2", "✓ Job finished")
    assert "Optimizing…" not in out and "\r" not in out and "\x1b" not in out
    rid = next(r["id"] for r in json.loads(cli("requests", "ls", "-o", "json").stdout)
               if r["verb"] == "launch" and r["cluster_name"] == "ordered")
    logs = _combined("requests", "logs", rid)
    _in_order(logs, "SETUP-LINE", "✓ Setup done", "RUN-LINE-1", "✓ Job finished")
    # exec -d: one line says where the job runs and how to follow it.
    out = _combined("exec", "-d", "ordered", "sleep 0.1")
    assert len([ln for ln in out.splitlines() if "submitted" in ln]) == 1, out
    assert "skyd logs ordered 2" in out


# -- errors as JSON -------------------------------------------------------------------------
def test_json_output_applies_to_errors(daemon: Any, tmp_path: Path) -> None:
    r = cli("queue", "nosuch", "-o", "json")
    assert r.returncode == 3 and r.stderr == ""
    err = json.loads(r.stdout)["error"]
    assert err["exit_code"] == 3 and "nosuch" in err["message"] and err["hint"]
    f = tmp_path / "bad.yaml"
    f.write_text("resources:\n  accelerators: A1000:8\nrun: x\n")
    r = cli("launch", "--dryrun", "-o", "json", str(f))
    assert r.returncode != 0
    err = json.loads(r.stdout)["error"]
    assert set(err) >= {"field", "message", "hint", "exit_code"}
    assert err["exit_code"] == r.returncode and "A1000" in err["message"]


# -- terminal confirmations, cancel, requests ls ----------------------------------------------
def test_down_and_stop_ask_on_a_terminal(daemon: Any) -> None:
    assert cli("launch", "-y", "-c", "asked", "echo up").returncode == 0
    for verb, word in (("stop", "Stopping"), ("down", "Terminating")):
        rc, out = _pty_run([str(SKYD_BIN), verb, "asked"], "n\n")
        assert f"{word} 1 cluster: asked. Proceed? [Y/n]" in out and "Aborted." in out, out
        assert rc == 1
        assert json.loads(cli("status", "-o", "json").stdout)[0]["status"] == "UP"
    rc, out = _pty_run([str(SKYD_BIN), "stop", "-y", "asked"], None)
    assert rc == 0 and "Proceed?" not in out, out
    rc, out = _pty_run([str(SKYD_BIN), "down", "asked"], "y\n")
    assert rc == 0 and "Proceed?" in out, out
    assert json.loads(cli("status", "-o", "json").stdout) == []


def test_cancel_of_a_finished_job_says_so_and_requests_ls_names_clusters(daemon: Any) -> None:
    before = {r["id"] for r in json.loads(cli("requests", "ls", "-o", "json").stdout)}
    assert cli("launch", "-y", "-c", "cx", "echo done").returncode == 0
    r = cli("cancel", "cx", "1")
    assert r.returncode == 0
    assert "Job 1 on cx had already finished (SUCCEEDED); nothing to cancel." in r.stdout + r.stderr
    assert cli("autostop", "cx", "-i", "30").returncode == 0
    assert cli("stop", "-y", "cx").returncode == 0
    assert cli("start", "cx").returncode == 0
    assert cli("down", "-y", "cx").returncode == 0
    rows = [r for r in json.loads(cli("requests", "ls", "-o", "json").stdout)
            if r["id"] not in before]  # this test's requests
    by_verb = {r["verb"]: r for r in rows}
    for verb in ("cancel", "autostop", "stop", "start", "down", "launch"):
        assert by_verb[verb]["cluster_name"] == "cx", by_verb[verb]
    table = cli("requests", "ls").stdout
    assert all(re.search(rf"{v}\s.*\scx\b", table) for v in ("stop", "down")), table


# -- JSON consistency and human figures --------------------------------------------------------
def test_json_numbers_indent_and_human_figures(daemon: Any) -> None:
    assert cli("launch", "-y", "-c", "hf", "-i", "30", "echo hi").returncode == 0
    raw = cli("status", "-o", "json").stdout
    row = json.loads(raw)[0]
    assert isinstance(row["last_use"], float) and isinstance(row["launched_at"], float)
    assert raw.startswith("[\n  {\n    ")  # the same 2-space indent as every -o json
    for args in (("jobs", "queue", "-o", "json"), ("requests", "ls", "-o", "json"),
                 ("queue", "hf", "-o", "json")):
        out = cli(*args).stdout
        assert out in ("[]\n",) or out.startswith(("[\n  ", "{\n  ")), (args, out[:80])
    status = cli("status").stdout
    assert "30 min" in status and "30.0" not in status
    r = cli("autostop", "hf", "-i", "43200")
    assert "after 30 days idle" in r.stdout + r.stderr
    from skyd.human import duration, minutes

    assert (duration(277.17), duration(4.21), duration(42.9)) == ("4m 37s", "4.2s", "42s")
    assert (duration(30 * 86400), minutes(30), minutes(30.0), minutes(90)) == (
        "30 days", "30 min", "30 min", "1h 30m")


def test_launch_on_a_terminal_asks_with_the_plan_and_shows_it_once(daemon: Any, tmp_path: Path) -> None:
    f = tmp_path / "tty.yaml"
    f.write_text("setup: echo SETUP-LINE\nrun: echo RUN-LINE\n")
    rc, out = _pty_run([str(SKYD_BIN), "launch", "-c", "tty", str(f)], "y\n", timeout=120)
    assert rc == 0, out
    assert out.count("Considered resources") == 1, out  # before the prompt, not again
    _in_order(out, "Considered resources", "Proceed? [Y/n]", "SETUP-LINE", "✓ Setup done",
              "RUN-LINE", "✓ Job finished")


def test_check_follows_the_callers_catalog_dir(daemon: Any, tmp_path: Path) -> None:
    cat = _catalog(tmp_path / "only-runpod", ["cpu-tiny,,,2,8,,CA,CA-MTL-1,0.01,"])
    (cat / "oci.csv").write_text((cat / "runpod.csv").read_text())  # a catalog-only cloud
    rows = {r["infra"]: r for r in json.loads(
        cli("check", "-o", "json", env={"SKYD_CATALOG_DIR": str(cat)}).stdout)}
    from skyd.cloudnames import PROVIDERS

    assert set(rows) - set(PROVIDERS) == {"oci"}  # providers are listed always
    assert rows["oci"]["plan"] and not rows["oci"]["launch"]
    assert not rows["runpod"]["launch"]  # a provider without its key
    rows = {r["infra"] for r in json.loads(cli("check", "-o", "json").stdout)}
    assert {"aws", "gcp", "runpod"} <= rows


def test_a_succeeded_managed_job_has_exit_code_0_and_cancel_says_it_finished(daemon: Any) -> None:
    r = cli("jobs", "launch", "-y", "-n", "mj", "echo managed-ok", timeout=180)
    assert r.returncode == 0 and "managed-ok" in r.stdout, r.stdout + r.stderr
    raw = cli("jobs", "queue", "-o", "json").stdout
    job = json.loads(raw)[0]
    assert job["status"] == "SUCCEEDED" and job["exit_code"] == 0
    assert raw.startswith("[\n  {\n    ")
    r = cli("jobs", "cancel", str(job["id"]))
    assert f"Managed job {job['id']} had already finished (SUCCEEDED)" in r.stdout, r.stdout
