"""Run one phase (setup or run) of one rank of a job as a process group; adopt after a crash.

Each phase runs `bash <script>` under a small bash wrapper that writes the exit code to
DIR/jobs/<id>/rank-<r>.<phase>.exit, so the code survives an agent crash. The process group
(start_new_session=True) is recorded with the pid's start time (guards against pid reuse).
Python 3.8 compatible.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from . import gpu
from .jobqueue import JobQueue

# The wrapper records its own process group first (see reaper.py), then runs the phase.
WRAPPER = 'echo "$$" > "$2.pgid"; ${4:+"$4"} bash "$1"; rc=$?; echo "$rc" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$rc"'
# A rank of a multi-node job lives only as long as the agent that started it: a watcher in
# its process group blocks on the read end ($3) of a pipe whose write end only the agent
# holds, and kills the group when the agent is gone (kill -9 included). A gang job cannot
# survive the loss of one node's agent (the head cannot reach a restarted worker, a new head
# finds its rank dead), so every rank ends instead of running on unseen.
GANG_WRAPPER = '{ read -r -u "$3" _; kill -KILL 0; } & ' + WRAPPER
# Each phase may run under a wrapper program ($4: e.g. a `local` node's mount namespace,
# skyd.transports.sandbox_ns), named by the agent's SKYD_JOB_WRAPPER.
JOB_WRAPPER_ENV = "SKYD_JOB_WRAPPER"
KILL_GRACE_S = 5.0
# The umask a job runs under: the one the agent was started with (its own is 077, set in
# __main__), so files a job writes have the modes they would have on any machine.
JOB_UMASK = 0o022


def proc_start_time(pid: int) -> str | None:
    """Start time (clock ticks since boot) of pid from /proc, or None if gone / a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def pid_alive(pid: int, start: str | None) -> bool:
    if os.path.isdir("/proc"):
        now = proc_start_time(pid)
        return now is not None and (start is None or now == start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in the process group."""
    if os.path.isdir("/proc"):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_env(spec: dict[str, Any], job_id: int, rank: int, phase: str, gpu_slots: list[int],
            vendor: str, cluster: str) -> dict[str, str]:  # fmt: skip
    """The environment of one rank: SKYPILOT_* (compat) and SKYD_* variables, GPUs, envs."""
    env = dict(os.environ)
    for k in ("MULTIDICT_NO_EXTENSIONS", "SKYD_AGENT_TOKEN", JOB_WRAPPER_ENV):
        env.pop(k, None)
    nodes = sorted(spec.get("nodes") or [], key=lambda n: int(n.get("rank", 0)))
    ips = [n.get("internal_ip") or n.get("address", "").rsplit(":", 1)[0] for n in nodes]
    ips = ips or ["127.0.0.1"]
    num_nodes = max(1, int(spec.get("num_nodes") or 1))
    gpus = str(int(spec.get("gpus") or 0))
    info = spec.get("cluster_info") or json.dumps({"cluster_name": cluster, "cloud": None,
                                                   "region": None, "zone": None})  # fmt: skip
    common = {
        "NUM_NODES": str(num_nodes),
        "TASK_ID": spec.get("task_id") or "sky-%s_%d" % (cluster, job_id),
        "CLUSTER_INFO": info,
        "INTERNAL_JOB_ID": str(job_id),
        "USER": spec.get("username") or "",
    }
    if phase == "setup":
        common.update(SETUP_NODE_RANK=str(rank), SETUP_NODE_IPS="\n".join(ips),
                      SETUP_NUM_GPUS_PER_NODE=gpus)  # fmt: skip
    else:
        common.update(NODE_RANK=str(rank), NODE_IPS="\n".join(ips), NUM_GPUS_PER_NODE=gpus)
    for k, v in common.items():
        env["SKYPILOT_" + k] = v
        env["SKYD_" + k] = v
    env["SKYD_JOB_ID"] = str(job_id)
    if gpu_slots:  # through the device list the agent itself was given (a Slurm allocation)
        env.update(gpu.job_visible(vendor, gpu_slots, os.environ))
    for k, v in (spec.get("envs") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    for k, v in (spec.get("secrets") or {}).items():
        env[str(k)] = "" if v is None else str(v)
    return env


class Executor:
    def __init__(self, home: Path, queue: JobQueue, vendor: str, cluster: str,
                 life_fd: int | None = None) -> None:  # fmt: skip
        # life_fd: the read end of the agent's life pipe (see GANG_WRAPPER)
        self.life_fd = life_fd
        self.home = home
        self.queue = queue
        self.vendor = vendor
        self.cluster = cluster
        self._procs: dict[tuple[int, int, str], subprocess.Popen] = {}  # type: ignore[type-arg]

    def job_dir(self, job_id: int) -> Path:
        return self.home / "jobs" / str(job_id)

    def log_path(self, job_id: int, rank: int) -> Path:
        return self.job_dir(job_id) / ("rank-%d.log" % rank)

    # ---- secrets: DIR/jobs/<id>/secrets.json (0600) while the job is not terminal ------
    def secrets_path(self, job_id: int) -> Path:
        return self.job_dir(job_id) / "secrets.json"

    def save_secrets(self, job_id: int, values: dict[str, str]) -> None:
        """Write the job's secret values (0600, atomically); nothing when there are none."""
        path = self.secrets_path(job_id)
        if not values:
            self.drop_secrets(job_id)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".secrets.json.%d.tmp" % os.getpid())
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(values, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(str(tmp), str(path))

    def load_secrets(self, job_id: int) -> dict[str, str]:
        try:
            with open(str(self.secrets_path(job_id))) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def drop_secrets(self, job_id: int) -> None:
        try:
            os.unlink(str(self.secrets_path(job_id)))
        except OSError:
            pass

    def _exit_path(self, job_id: int, rank: int, phase: str) -> Path:
        return self.job_dir(job_id) / ("rank-%d.%s.exit" % (rank, phase))

    def run_offset_path(self, job_id: int, rank: int) -> Path:
        """Where the run phase's output starts in the rank's log (bytes before: setup's)."""
        return self.job_dir(job_id) / ("rank-%d.run.offset" % rank)

    def run_offset(self, job_id: int, rank: int) -> int | None:
        """None while the run phase has not started."""
        try:
            return int(self.run_offset_path(job_id, rank).read_text().strip())
        except (OSError, ValueError):
            return None

    def _mark_run_offset(self, job_id: int, rank: int) -> None:
        log = self.log_path(job_id, rank)
        size = log.stat().st_size if log.exists() else 0
        p = self.run_offset_path(job_id, rank)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(str(size))
        os.replace(str(tmp), str(p))

    def start(self, job_id: int, rank: int, phase: str, spec: dict[str, Any],
              gpu_slots: list[int]) -> None:  # fmt: skip
        """Start the phase; a no-op when this (job, rank, phase) was started before (adopt)."""
        if self.queue.rank(job_id, rank, phase) is not None:
            return
        d = self.job_dir(job_id)
        d.mkdir(parents=True, exist_ok=True)
        script = d / ("rank-%d.%s.sh" % (rank, phase))
        script.write_text((spec.get(phase) or "") + "\n")
        self.queue.put_rank(job_id, rank, phase, state="starting", gpu_slots=gpu_slots)
        workdir = os.path.expanduser(spec.get("workdir") or "")
        if workdir and not os.path.isabs(workdir):
            workdir = str(self.home / workdir)  # relative: inside this node's agent home
        cwd = workdir if workdir and os.path.isdir(workdir) else os.path.expanduser("~")
        env = job_env(spec, job_id, rank, phase, gpu_slots, self.vendor, self.cluster)
        if phase == "run":
            self._mark_run_offset(job_id, rank)
        umask = "umask %03o; " % JOB_UMASK
        argv = ["bash", "-c", umask + WRAPPER, "skyd-job-%d" % job_id, str(script),
                str(self._exit_path(job_id, rank, phase))]  # fmt: skip
        gang = int(spec.get("num_nodes") or 1) > 1 and self.life_fd is not None
        wrapper = os.environ.get(JOB_WRAPPER_ENV) or ""
        if wrapper and not os.access(wrapper, os.X_OK):
            wrapper = ""
        argv += [str(self.life_fd) if gang else "", wrapper]
        pass_fds: tuple[int, ...] = ()
        if gang and self.life_fd is not None:
            argv[2] = umask + GANG_WRAPPER
            pass_fds = (self.life_fd,)
        with open(str(self.log_path(job_id, rank)), "ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                env=env, start_new_session=True, close_fds=True, pass_fds=pass_fds,
            )  # fmt: skip
        self._procs[(job_id, rank, phase)] = proc
        self.queue.put_rank(job_id, rank, phase, state="running", pid=proc.pid,
                            proc_start=proc_start_time(proc.pid))  # fmt: skip

    def _read_exit(self, job_id: int, rank: int, phase: str) -> int | None:
        try:
            return int(self._exit_path(job_id, rank, phase).read_text().strip())
        except (OSError, ValueError):
            return None

    def poll(self, job_id: int, rank: int, phase: str) -> tuple[str, int | None]:
        """(state, exit_code): state is absent | running | done | killed | lost."""
        row = self.queue.rank(job_id, rank, phase)
        if row is None:
            return "absent", None
        if row["state"] in ("done", "killed", "lost"):
            return row["state"], row["exit_code"]
        proc = self._procs.get((job_id, rank, phase))
        if proc is not None:
            running = proc.poll() is None
        else:
            running = row["pid"] is not None and pid_alive(row["pid"], row["proc_start"])
        if running:
            return "running", None
        code = self._read_exit(job_id, rank, phase)
        if code is None and proc is not None:
            code = proc.returncode  # wrapper killed before writing: -signal
            state = "lost"
        else:
            state = "done" if code is not None else "lost"
        self._procs.pop((job_id, rank, phase), None)
        self.queue.put_rank(job_id, rank, phase, state=state, exit_code=code, ended_at=time.time())
        return state, code

    async def wait(self, job_id: int, rank: int, phase: str,
                   timeout: float | None = None) -> tuple[str, int | None]:  # fmt: skip
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while True:
            state, code = self.poll(job_id, rank, phase)
            if state not in ("running", "starting") or (
                deadline is not None and time.monotonic() >= deadline
            ):
                return state, code
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.2)

    async def kill(self, job_id: int, rank: int, grace: float = KILL_GRACE_S) -> None:
        """SIGTERM the process groups of every phase, SIGKILL after `grace`; mark live ones
        killed. Also used after a normal end to reap processes a job left behind."""
        groups = []
        for row in self.queue.ranks_of(job_id, rank):
            if row["pid"] and group_alive(row["pid"]):
                groups.append(row["pid"])  # also reaps leftovers of finished phases
            if row["state"] in ("running", "starting"):
                self.queue.put_rank(job_id, rank, row["phase"], state="killed",
                                    ended_at=time.time())  # fmt: skip
        await kill_groups(groups, grace)
        for key in [k for k in self._procs if k[0] == job_id and k[1] == rank]:
            self._procs.pop(key).poll()

    def running_slots(self, exclude_job: int) -> list[int]:
        used: list[int] = []
        for row in self.queue.running_ranks():
            if row["job_id"] != exclude_job:
                used.extend(row["gpu_slots"])
        return used


async def kill_groups(pgids: list[int], grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in pgids:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline:
            pgids = [p for p in pgids if group_alive(p)]
            if not pgids:
                return
            await asyncio.sleep(0.05)
