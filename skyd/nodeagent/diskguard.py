"""A full disk stops job logs from growing; it kills nothing. Python 3.8 compatible.

Jobs write their output straight into ``jobs/<id>/rank-<r>.log`` (O_APPEND, so the job
survives an agent restart). When the filesystem holding the agent's home has less than
``SKYD_LOG_LOW_WATER`` bytes free (1 MiB), every running job's log is cut back to at most its
first ``SKYD_LOG_KEEP`` bytes of run output (256 KiB) and a marker line says so; for the
rest of that job's run each tick cuts the log back to that marker again (the job keeps
running; its newer output is dropped), so the job that filled the disk cannot fill it
again. Logs of jobs started later are not capped until the disk is low again.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, %-format)

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("skyd.nodeagent.diskguard")


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, str(default)))
    except ValueError:
        return default


def free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(str(path))
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize


class DiskGuard:
    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.low = _env_int("SKYD_LOG_LOW_WATER", 1 << 20)
        self.keep = _env_int("SKYD_LOG_KEEP", 256 << 10)
        self.cut: dict[str, int] = {}  # log path -> size kept (marker included)

    def tick(self) -> None:
        free = free_bytes(self.agent.home)
        if free >= self.low and not self.cut:
            return
        running = {}
        for r in self.agent.queue.running_ranks():
            path = self.agent.ex.log_path(int(r["job_id"]), int(r["rank"]))
            running[str(path)] = r
        for key in [k for k in self.cut if k not in running]:
            del self.cut[key]  # its job ended: nothing writes there any more
        for key, r in running.items():
            path = Path(key)
            try:
                size = os.path.getsize(key)
            except OSError:
                continue
            if key in self.cut:  # a log that filled the disk stays capped while its job runs
                if size > self.cut[key]:
                    self._truncate(path, self.cut[key])
                continue
            if free >= self.low:
                continue
            start = self.agent.ex.run_offset(int(r["job_id"]), int(r["rank"])) or 0
            keep = min(size, start + self.keep)
            marker = ("\n[skyd: disk full at %s: output after this point dropped]\n"
                      % path).encode()
            self._truncate(path, keep)
            self._append(path, marker)
            try:
                self.cut[key] = os.path.getsize(key)
            except OSError:
                self.cut[key] = keep
            log.warning("disk full (%d bytes free): %s cut to %d bytes; its job keeps running",
                        free, path, keep)

    @staticmethod
    def _truncate(path: Path, size: int) -> None:
        try:
            os.truncate(str(path), size)
        except OSError:
            pass

    @staticmethod
    def _append(path: Path, data: bytes) -> None:
        try:
            fd = os.open(str(path), os.O_WRONLY | os.O_APPEND)
        except OSError:
            return
        try:
            os.write(fd, data)
        except OSError:
            pass
        finally:
            os.close(fd)
