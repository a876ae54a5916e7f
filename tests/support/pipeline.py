"""Helpers for the pipeline tests: one real daemon per test module, the real CLI, real
node agents on the `local` infra (no tests in here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonProc, cli, wait_for

__all__ = ["DaemonProc", "cli", "wait_for", "module_env", "Env"]


class Env:
    """An isolated skyd instance (SKYD_HOME, socket, config) with its daemon."""

    def __init__(self, home: Path, sock: Path) -> None:
        self.home = home
        self.sock = sock
        self.daemon: DaemonProc | None = None

    # -- daemon -------------------------------------------------------------------------
    def start_daemon(self) -> DaemonProc:
        self.daemon = DaemonProc().start()
        return self.daemon

    def kill9_daemon(self) -> None:
        assert self.daemon is not None
        self.daemon.kill9()
        self.daemon.cleanup()
        self.daemon = None

    # -- CLI ----------------------------------------------------------------------------
    def ok(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        r = cli(*args, timeout=timeout)
        assert r.returncode == 0, f"skyd {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "-o", "json").stdout)

    # State reads go through the SDK (what `skyd queue/status -o json` print, without a CLI
    # process per read: the polls below would keep a core busy starting them).
    def queue(self, cluster: str) -> list[dict[str, Any]]:
        from urllib.parse import quote

        from skyd.sdk.transport import Client

        with Client(autostart=False) as c:
            return list(c.get(f"/v1/clusters/{quote(cluster, safe='')}/queue")["jobs"])

    def job(self, cluster: str, job_id: int) -> dict[str, Any]:
        return next(j for j in self.queue(cluster) if int(j["job_id"]) == job_id)

    def wait_job(self, cluster: str, job_id: int, statuses: set[str], timeout: float = 20.0) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            j = self.job(cluster, job_id)
            return j if j["status"] in statuses else None

        return dict(wait_for(done, timeout=timeout, interval=0.1))

    def status(self, cluster: str) -> dict[str, Any] | None:
        from skyd.sdk.transport import Client

        with Client(autostart=False) as c:
            rows = c.get("/v1/status")
        return next((r for r in rows if r["name"] == cluster), None)

    # -- sandboxes and agents -----------------------------------------------------------
    def cluster_dir(self, cluster: str) -> Path:
        return self.home / "local" / cluster

    def agent_pids(self, cluster: str) -> list[int]:
        """PIDs of live agent processes whose command line names this cluster."""
        return procs_matching(f"--cluster\0{cluster}\0")

    def token(self, cluster: str) -> str:
        """The cluster secret (kept in the daemon's state; it never reaches the nodes)."""
        import json
        import sqlite3

        with sqlite3.connect(str(self.home / "state.db")) as con:
            row = con.execute("SELECT handle FROM clusters WHERE name = ?", (cluster,)).fetchone()
        return str(json.loads(row[0])["token"])


def procs_matching(marker: str) -> list[int]:
    """Live (non-zombie) processes whose NUL-separated command line contains `marker`."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace")
            stat = (p / "stat").read_text()
        except OSError:
            continue
        if marker in cmd and stat.split(")")[-1].split()[0] != "Z":
            out.append(int(p.name))
    return out


def _kill_leftover_agents(home: Path) -> list[int]:
    """Teardown safety net: agents (started by this module) still alive under `home`."""
    killed = []
    for info_file in home.glob("local/*/node-*/agent.json"):
        try:
            pid = int(json.loads(info_file.read_text())["pid"])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, KeyError):
            continue
        if str(info_file.parent) in cmd:
            try:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


@contextmanager
def module_env(tmp_path_factory: pytest.TempPathFactory, **extra: str) -> Iterator[Env]:
    """Module-scoped isolated instance with a running daemon; downs every cluster after."""
    base = tmp_path_factory.mktemp("pipeline")
    home = base / "home"
    home.mkdir()
    sockdir = Path(tempfile.mkdtemp(prefix="skyd-p-", dir="/tmp"))
    mp = pytest.MonkeyPatch()
    mp.setenv("SKYD_HOME", str(home))
    mp.setenv("SKYD_SOCKET", str(sockdir / "s.sock"))
    mp.setenv("SKYD_CONFIG_DIR", str(base / "config"))
    # Each refresh of an UP cluster costs the daemon and its agent ~25 ms of CPU (a TLS
    # handshake, Health, the queue): every 3 s, not every second (bench/RESULTS.md).
    mp.setenv("SKYD_REFRESH_S", "3")
    mp.delenv("SKYD_CATALOG_DIR", raising=False)
    # SkyPilot's config layers (skyd.config): never the developer's ~/.sky/config.yaml
    (base / "sky-config.yaml").write_text("")
    mp.setenv("SKYPILOT_GLOBAL_CONFIG", str(base / "sky-config.yaml"))
    mp.delenv("SKYPILOT_CONFIG", raising=False)
    mp.delenv("SKYPILOT_PROJECT_CONFIG", raising=False)
    for k, v in extra.items():
        mp.setenv(k, v)
    env = Env(home, sockdir / "s.sock")
    try:
        env.start_daemon()
        yield env
    finally:
        try:
            if env.daemon is not None:
                cli("down", "-a", "-y", timeout=60)
                env.daemon.terminate()
        finally:
            if env.daemon is not None:
                env.daemon.cleanup()
            leftovers = _kill_leftover_agents(home)
            mp.undo()
            for p in sockdir.iterdir():
                p.unlink()
            sockdir.rmdir()
        assert not leftovers, f"agents left running after down -a: {leftovers}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def now() -> float:
    return time.monotonic()
