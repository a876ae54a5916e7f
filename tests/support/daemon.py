"""Helpers for tests that run the daemon as a real subprocess (no tests in here)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support import forkserver

REPO = Path(__file__).resolve().parents[2]


def guarded_pythonpath() -> str:
    """PYTHONPATH of the processes tests start: the network guard's sitecustomize first."""
    return os.pathsep.join([str(REPO / "tests" / "fakes" / "netguard"), str(REPO)])
SKYD_BIN = Path(sys.executable).parent / "skyd"


def sock_path() -> str:
    return os.environ["SKYD_SOCKET"]


def answers(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class DaemonProc:
    def __init__(self, **env: str) -> None:
        self.env = {**os.environ, "PYTHONPATH": guarded_pythonpath(), **env}
        self.proc: subprocess.Popen[bytes] | forkserver.Forked | None = None

    def start(self, timeout: float = 20.0) -> DaemonProc:
        from tests.support import forkserver

        # forked from a server that has imported the daemon (tests/support/forkserver.py),
        # or a fresh process where the environment needs one
        self.proc = forkserver.spawn_daemon(self.env, str(REPO), subprocess.PIPE)
        if self.proc is None:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "skyd.daemon"], env=self.env, cwd=str(REPO),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if answers(sock_path()):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.proc.stderr.read().decode()}")  # type: ignore[union-attr]
            time.sleep(0.02)
        raise RuntimeError("daemon did not start")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def terminate(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


@contextmanager
def running_daemon(**env: str) -> Iterator[DaemonProc]:
    d = DaemonProc(**env).start()
    try:
        yield d
    finally:
        try:
            d.terminate()
        finally:
            d.cleanup()


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``skyd`` console script (forked from tests/support/forkserver.py's server,
    which has imported the CLI already)."""
    from tests.support import forkserver

    return forkserver.run([str(SKYD_BIN), *args], {**os.environ, **(env or {})}, timeout=timeout,
                       input=input)


def wait_for(pred: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """``pred()``'s first true value, polled from every ``interval`` s backing off to every
    0.25 s (or ``interval`` when larger): a quick condition is seen at once, a long wait
    does not keep a core busy with polls (the suite runs several workers per core)."""
    deadline = time.monotonic() + timeout
    delay, cap = interval, max(interval, 0.25)
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, cap)
    v = pred()  # one look at the deadline itself
    if v:
        return v
    raise AssertionError("condition not met in time")


def stop_autostarted() -> None:
    """Stop a daemon a client auto-started for this SKYD_HOME (test teardown)."""
    from skyd.sdk.transport import stop_daemon

    stop_daemon(timeout=20)
