"""A daemon on another host (SKYD_HOST=ssh://…): real OpenSSH sshd on 127.0.0.x, the remote
side is this machine under another Unix user and another SKYD_HOME, reached only through
sshd; the client is the real `skyd` CLI with the user's OpenSSH client."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import site
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.sshd import RealSSHD, real_sshd, unavailable_reason
from tests.fakes.unixnames import per_worker
from tests.support import forkserver
from tests.support.daemon import SKYD_BIN

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (ssh)"),
    pytest.mark.skipif(not os.path.exists("/usr/bin/python3"),
                       reason="the remote side runs the system /usr/bin/python3"),
]

REPO = Path(__file__).resolve().parents[2]
REMOTE_USER = per_worker("skydremote")  # the host's user: its own, so no other test's cleanup touches it
# The test user must traverse these: /tmp is 0700 on some machines; /var/tmp is 1777.
SHARED_TMP = "/var/tmp" if os.path.isdir("/var/tmp") else None


@dataclass
class Remote:
    sshd: RealSSHD
    wrapper: Path  # the skyd the host runs (a script: system python + this checkout)
    home: Path  # the host daemon's SKYD_HOME (owned by the test user)
    env: dict[str, str]  # the client's environment

    @property
    def url(self) -> str:
        return (f"ssh://{self.sshd.user}@{self.sshd.host}:{self.sshd.port}"
                f"?bin={self.wrapper}&home={self.home}")

    def cli(self, *args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([str(SKYD_BIN), *args], {**self.env, **env}, timeout=timeout)

    def ok(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        r = self.cli(*args, **kw)  # type: ignore[arg-type]
        assert r.returncode == 0, (f"skyd {' '.join(args)} -> {r.returncode}\n{r.stdout}\n"
                                   f"{r.stderr}\nhost daemon: {self.host_logs()}")
        return r

    def channel(self) -> str:
        """How this client reached the host: "forward" (the shared connection's socket
        forward) or "stdio" (dial-stdio per connection, the host refusing forwards)."""
        from skyd.sdk import remote as rm

        saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SSH_OPTS")}
        os.environ.update({k: self.env[k] for k in saved})
        try:
            fw = rm.forward_path(rm.parse_host(self.url))
            if fw.with_suffix(".refused").exists():
                return "stdio"
            return "forward" if fw.exists() else "none"
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def host_logs(self) -> str:
        out = []
        for name in ("daemon.log", "daemon.stderr"):
            p = self.home / "logs" / name
            if p.exists():
                out.append(f"--- {name}\n" + p.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def as_user(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the host's skyd directly as the test user (outside the SSH channel)."""
        return subprocess.run(["runuser", "-u", self.sshd.user, "--", "env",
                               f"SKYD_HOME={self.home}", str(self.wrapper), *args],
                              capture_output=True, text=True, timeout=60)


def _wrapper(d: Path) -> Path:
    sp = site.getsitepackages()[0]
    w = d / "skyd-remote"
    w.write_text("#!/bin/sh\n"
                 f"export PYTHONPATH={sp}:{REPO}\n"
                 "exec /usr/bin/python3 -m skyd.cli.main \"$@\"\n")
    w.chmod(0o755)
    return w


def _user_dir(user: str, prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=SHARED_TMP))
    pw = pwd.getpwnam(user)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    d.chmod(0o700)
    return d


@pytest.fixture(params=["forward"])
async def remote(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Remote]:
    """The host; param "stdio": its sshd refuses Unix-socket forwarding (each connection
    then runs `skyd daemon dial-stdio` there)."""
    shared = Path(tempfile.mkdtemp(prefix="skyd-remote-", dir=SHARED_TMP))
    shared.chmod(0o755)
    async with real_sshd(shared / "sshd", host="127.0.0.7", user=REMOTE_USER,
                         allow_stream_local_forwarding=request.param == "forward") as s:
        home = _user_dir(s.user, "skyd-rh-")
        local_home = tmp_path / "local"
        env = {**os.environ, "SKYD_HOME": str(local_home),
               "SKYD_CONFIG_DIR": str(tmp_path / "config"),
               "SKYD_SSH_OPTS": f"-i {s.key} -o StrictHostKeyChecking=no "
                                "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"}
        env.pop("SKYD_SOCKET", None)
        r = Remote(s, _wrapper(shared), home, env)
        r.env["SKYD_HOST"] = r.url
        try:
            yield r
        finally:
            r.as_user("daemon", "stop")
            from skyd.sdk.remote import close_master, parse_host

            os.environ["SKYD_SSH_OPTS"] = env["SKYD_SSH_OPTS"]
            os.environ["SKYD_HOME"] = str(local_home)
            try:
                close_master(parse_host(r.url))
            finally:
                del os.environ["SKYD_SSH_OPTS"]
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("remote", ["forward", "stdio"], indirect=True)
async def test_every_verb_goes_to_the_host_daemon(remote: Remote, tmp_path: Path,
                                                  request: pytest.FixtureRequest) -> None:
    """status, launch (log streamed), queue, logs, exec, -o json, down: all served by the
    daemon on the host, as the host's user; nothing starts on this machine."""
    rows = json.loads(remote.ok("status", "-o", "json").stdout)
    assert not (rows if isinstance(rows, list) else rows["clusters"])
    r = remote.ok("launch", "-y", "-c", "rc1", "echo hello-from-$(id -un)")
    assert f"hello-from-{remote.sshd.user}" in r.stdout + r.stderr
    assert "Job 1 on rc1: SUCCEEDED" in r.stderr
    q = json.loads(remote.ok("queue", "rc1", "-o", "json").stdout)
    assert [(j["job_id"], j["status"]) for j in q[0]["jobs"]] == [(1, "SUCCEEDED")]
    r = remote.ok("exec", "rc1", "echo second $HOME")
    assert "second" in r.stdout + r.stderr
    r = remote.ok("logs", "rc1", "1")
    assert f"hello-from-{remote.sshd.user}" in r.stdout
    rows = json.loads(remote.ok("status", "-o", "json").stdout)
    names = [c["name"] for c in (rows if isinstance(rows, list) else rows["clusters"])]
    assert names == ["rc1"]
    remote.ok("down", "-y", "rc1")
    assert remote.channel() == request.node.callspec.params["remote"]
    # The state lives on the host: its SKYD_HOME has the database; this machine has no daemon.
    assert (remote.home / "state.db").exists()
    local = Path(remote.env["SKYD_HOME"])
    assert not (local / "state.db").exists()
    assert not (local / "run" / "skyd.sock").exists()


async def test_work_goes_on_while_no_client_is_connected(remote: Remote) -> None:
    """A managed job submitted detached keeps running on the host while the client and
    its SSH connection are gone (the laptop went to sleep); a new client sees it done."""
    from skyd.sdk.remote import close_master, parse_host

    r = remote.ok("jobs", "launch", "-y", "-d", "-n", "away",
                  "sleep 4; echo finished-while-away")
    assert "away" in r.stdout + r.stderr or "Managed job" in r.stdout + r.stderr
    os.environ["SKYD_SSH_OPTS"] = remote.env["SKYD_SSH_OPTS"]
    os.environ["SKYD_HOME"] = remote.env["SKYD_HOME"]
    try:
        close_master(parse_host(remote.url))  # the SSH connection is cut
    finally:
        del os.environ["SKYD_SSH_OPTS"]
    deadline = time.monotonic() + 90
    status = ""
    while time.monotonic() < deadline:
        time.sleep(3)
        jobs = json.loads(remote.ok("jobs", "queue", "-o", "json").stdout)
        rows = jobs if isinstance(jobs, list) else jobs.get("jobs", [])
        status = next((j["status"] for j in rows if j.get("name") == "away"), "")
        if status in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED"):
            break
    assert status == "SUCCEEDED"


@pytest.mark.parametrize("remote", ["forward", "stdio"], indirect=True)
async def test_the_host_daemon_killed_mid_stream_is_reattached(remote: Remote) -> None:
    """kill -9 of the host's daemon while a launch streams: the next connection through
    dial-stdio starts it again, and the client re-attaches to the request."""
    remote.ok("status")  # the host daemon is up
    p = subprocess.Popen([str(SKYD_BIN), "launch", "-y", "-c", "rk",
                          "for i in $(seq 1 12); do echo tick-$i; sleep 0.5; done"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=remote.env, stdin=subprocess.DEVNULL)
    pidfile = remote.home / "run" / "skyd.pid"
    assert p.stdout is not None
    seen = b""  # read from the descriptor: communicate() reads it too, so nothing is left in a buffer
    while b"tick-" not in seen:  # the job's output streams: the launch is mid-stream
        chunk = os.read(p.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    pid = int(pidfile.read_text().strip())
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=180)
    out = seen.decode(errors="replace") + out
    assert p.returncode == 0, out + err
    assert "re-attached" in err
    assert "tick-12" in out + err
    remote.ok("down", "-y", "rk")


async def test_contexts_and_host_flag(remote: Remote) -> None:
    env = {k: v for k, v in remote.env.items() if k != "SKYD_HOST"}
    base = {"env": env}

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SKYD_BIN), *a], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, **base)  # type: ignore[call-overload]

    assert run("context", "add", "box", remote.url).returncode == 0
    assert run("context", "use", "box").returncode == 0
    doc = json.loads(run("context", "ls", "-o", "json").stdout)
    assert doc["current"] == "box"
    r = run("status", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert (remote.home / "state.db").exists()
    assert not (Path(env["SKYD_HOME"]) / "state.db").exists()
    assert run("context", "use", "local").returncode == 0
    r = run("--host", remote.url, "status")
    assert r.returncode == 0, r.stderr
    r = run("context", "use", "nosuch")
    assert r.returncode != 0 and "skyd context ls" in r.stderr
    r = run("context", "add", "bad", "ftp://x")
    assert r.returncode == 2 and "ssh://" in r.stderr
    assert run("context", "rm", "box").returncode == 0


async def test_deploy_installs_starts_and_is_idempotent(remote: Remote, tmp_path: Path) -> None:
    env = {k: v for k, v in remote.env.items() if k != "SKYD_HOST"}
    home2 = _user_dir(remote.sshd.user, "skyd-rh2-")
    host = f"ssh://{remote.sshd.user}@{remote.sshd.host}:{remote.sshd.port}"
    installed = Path(pwd.getpwnam(remote.sshd.user).pw_dir) / ".local/share/skyd/bin/skyd"
    installed.unlink(missing_ok=True)

    def deploy(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SKYD_BIN), "daemon", "deploy", host, "--remote-home", str(home2), *extra],
            capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)

    try:
        r = deploy("--binary", str(remote.wrapper))
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip()
        assert line.startswith("export SKYD_HOST=ssh://")
        assert "installed" in r.stderr and "daemon started" in r.stderr
        assert installed.read_bytes() == remote.wrapper.read_bytes()
        assert oct(installed.stat().st_mode & 0o777) == "0o700"
        url = line.split("=", 1)[1]
        r = subprocess.run([str(SKYD_BIN), "status"], capture_output=True, text=True,
                           timeout=60, env={**env, "SKYD_HOST": url}, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert (home2 / "state.db").exists()
        r = deploy("--binary", str(remote.wrapper))  # again: nothing to do
        assert r.returncode == 0 and "up to date" in r.stderr
        other = tmp_path / "other-skyd"
        other.write_text(remote.wrapper.read_text() + "# another build\n")
        r = deploy("--binary", str(other))
        assert r.returncode != 0 and "--upgrade" in r.stderr
        r = deploy("--binary", str(other), "--upgrade")
        assert r.returncode == 0, r.stderr
        assert "stopped the daemon" in r.stderr and installed.read_text().endswith("build\n")
        r = deploy("--with-credentials", "nosuch", "--binary", str(other))
        assert r.returncode == 2 and "aws" in r.stderr
    finally:
        subprocess.run(["runuser", "-u", remote.sshd.user, "--", "env", f"SKYD_HOME={home2}",
                        str(remote.wrapper), "daemon", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(home2, ignore_errors=True)
        installed.unlink(missing_ok=True)


def test_bad_hosts_are_one_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "SKYD_HOME": str(tmp_path / "h"), "SKYD_CONFIG_DIR": str(tmp_path / "c")}
    env.pop("SKYD_SOCKET", None)
    for bad in ("ftp://x", "ssh://", "ssh://host:99999", "ssh://-oProxyCommand=x",
                "ssh://h?evil=1"):
        r = subprocess.run([str(SKYD_BIN), "status"], capture_output=True, text=True,
                           timeout=30, env={**env, "SKYD_HOST": bad}, stdin=subprocess.DEVNULL)
        assert r.returncode == 2, (bad, r.stderr)
        assert "SKYD_HOST" in r.stderr and "Traceback" not in r.stderr
    # Nothing listens there: exit 7 with what ssh said, no local daemon started.
    r = subprocess.run([str(SKYD_BIN), "status"], capture_output=True, text=True, timeout=60,
                       env={**env, "SKYD_HOST": "ssh://nobody@127.0.0.9:1",
                            "SKYD_SSH_OPTS": "-o ConnectTimeout=5 -o StrictHostKeyChecking=no"},
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 7, r.stderr
    assert "ssh://nobody@127.0.0.9:1" in r.stderr and "refused" in r.stderr.lower()
    assert not (tmp_path / "h" / "state.db").exists()


async def test_local_files_travel_to_the_host(remote: Remote, tmp_path: Path) -> None:
    """A YAML written on the laptop works unchanged: its workdir and local file mounts are
    uploaded through the SSH channel (only what the host lacks), and the job sees them."""
    proj = tmp_path / "proj"
    (proj / "code").mkdir(parents=True)
    (proj / "code" / "train.py").write_text("print('train-v1')\n")
    (proj / "data.txt").write_text("payload-1\n")
    (proj / "task.yaml").write_text(
        "workdir: code\nfile_mounts:\n  ~/d.txt: data.txt\n"
        "run: |\n  cat train.py\n  cat ~/d.txt\n")
    r = remote.ok("launch", "-y", "-c", "ru", str(proj / "task.yaml"))
    assert "train-v1" in r.stdout and "payload-1" in r.stdout
    blobs = remote.home / "uploads" / "blobs"
    first = sorted(p.name for p in blobs.iterdir())
    assert len(first) == 2
    # Change one file: only its new blob travels; the job sees the new content.
    (proj / "code" / "train.py").write_text("print('train-v2')\n")
    r = remote.ok("launch", "-y", "-c", "ru", str(proj / "task.yaml"))
    assert "train-v2" in r.stdout
    assert len(list(blobs.iterdir())) == 3
    remote.ok("down", "-y", "ru")


async def test_async_sdk_through_the_relay(remote: Remote) -> None:
    """The async SDK (what the TUI uses) reaches the host's daemon through a private local
    socket relayed over SSH; the relay goes away with the client."""
    from skyd.sdk.aio import AsyncClient

    keys = ("SKYD_HOST", "SKYD_SSH_OPTS", "SKYD_HOME", "SKYD_CONFIG_DIR")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: remote.env[k] for k in keys})
    try:
        c = AsyncClient()
        relay_dir = Path(c.socket_path).parent
        assert oct(relay_dir.stat().st_mode & 0o777) == "0o700"
        health = await c.get("/v1/health")
        assert health["home"] == str(remote.home)
        rid = await c.submit("launch", {"command": "echo via-relay", "cluster_name": "ra",
                                        "base_dir": "/"})
        events = [e async for e in c.stream(rid)]
        assert events[-1]["type"] == "result", events[-1]
        await c.close()
        assert not relay_dir.exists()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    remote.ok("down", "-y", "ra")
