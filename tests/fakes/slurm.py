"""A real Slurm on loopback: munged, slurmctld and two slurmd, reached through real OpenSSH.

Needs root and Debian's ``slurm-wlm`` + ``munge`` + ``openssh-server``. Everything lives in
one temp dir: munged with its own key and socket (``AuthInfo=socket=``), slurmctld on
127.0.0.1:CTLD_PORT, two node daemons ``sn1``/``sn2`` (``slurmd -D -N name``, each its own
``Port=``, ``%n`` in spool/pid/log paths), fake GPU gres (``gpu:mi300x:2`` per node, ``File=``
on ``mknod c 1 3`` character devices). Partitions: ``gpu`` (both nodes, default) and ``cpu``
(``sn2``), and ``nodriver`` (``sn3``: the same gres declared, but no GPU driver installed).

A node shows its GPUs the way a real one does: its tasks get, through slurm.conf's
``TaskProlog``, a PATH with a fake ``amd-smi`` that prints every GPU its gres declares (2
MI300X, ROCm 6 ``static --json`` form), whatever ROCR_VISIBLE_DEVICES says, as the real tool
does; ``sn3`` has no such tool, so its tasks see no GPU at all. The login host is an sshd on LOGIN_HOST:SSH_PORT for the user ``skydslurm``
(its own user, so nothing here touches other tests' users). The user and the ports are one
set per xdist worker (tests/fakes/unixnames.py), so two workers run two Slurms, with ``SetEnv SLURM_CONF=...``.
Jobs run as that user; its home is the "shared file system" of both nodes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.unixnames import fresh_home, per_worker, port_base

USER = per_worker("skydslurm")  # one user and one set of ports per xdist worker
LOGIN_HOST = "127.0.0.27"
SSH_PORT = port_base(2251)
CTLD_PORT = SSH_PORT + 1
NODE_PORTS = {"sn1": SSH_PORT + 2, "sn2": SSH_PORT + 3, "sn3": SSH_PORT + 4}
#: the nodes whose GPU driver (and amd-smi) is installed; sn3's gres has none behind it
DRIVER_NODES = ("sn1", "sn2")
BINARIES = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch",
            "/usr/sbin/sshd")  # fmt: skip


def unavailable_reason() -> str | None:
    missing = [b for b in BINARIES if not os.path.exists(b)]
    if missing:
        return ("slurm tier: missing " + ", ".join(missing)
                + " (apt-get install -y slurm-wlm munge openssh-server)")  # fmt: skip
    if os.geteuid() != 0:
        return "slurm tier: needs root (slurmd switches to the job's user; a test user is made)"
    return None


def ensure_user() -> Path:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", USER], check=True)
    subprocess.run(["usermod", "-p", "*", USER], check=True)
    pw = pwd.getpwnam(USER)
    home = Path(pw.pw_dir)
    if not home.is_dir():
        home.mkdir(parents=True)
        os.chown(home, pw.pw_uid, pw.pw_gid)
    return home


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], what: str, log: Path,
               timeout: float = 20.0) -> None:  # fmt: skip
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"{what} did not start (exit {proc.poll()}): {tail}")


@dataclass
class SlurmFixture:
    root: Path
    home: Path = Path()
    key: Path = Path()
    conf: Path = Path()
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def cmd(self, *argv: str) -> str:
        """Run a Slurm client command here (as root) and return stdout."""
        return subprocess.run(list(argv), env=self.env, check=True, capture_output=True,
                              text=True, timeout=30).stdout  # fmt: skip

    def squeue(self) -> list[str]:
        return [ln for ln in self.cmd("squeue", "-h", "-o", "%i %j %T %r").splitlines() if ln.strip()]

    def slurm_config(self) -> str:
        """The ~/.slurm/config (SSH-config form) naming this fixture as cluster ``loop``."""
        return (f"Host loop\n  HostName {LOGIN_HOST}\n  Port {SSH_PORT}\n  User {USER}\n"
                f"  IdentityFile {self.key}\n")  # fmt: skip

    def start(self) -> SlurmFixture:
        """Start munged, slurmctld, the slurmds and the login node's sshd; on any failure,
        stop what did start (no daemon outlives a failed start) and raise."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> SlurmFixture:
        r = self.root
        r.mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o755)
        self.home = ensure_user()
        fresh_home(self.home)  # what a previous run's jobs wrote there is not this run's
        # munge: own key, socket dir 0755
        md = r / "munge"
        md.mkdir(mode=0o700, exist_ok=True)
        (r / "msock").mkdir(mode=0o755, exist_ok=True)
        os.chmod(r / "msock", 0o755)
        mkey = md / "munge.key"
        mkey.write_bytes(os.urandom(1024))
        os.chmod(mkey, 0o400)
        sock = r / "msock" / "munge.socket.2"
        mlog = md / "munged.log"
        self.procs["munged"] = subprocess.Popen(
            ["/usr/sbin/munged", "-F", "-f", f"--socket={sock}", f"--key-file={mkey}",
             f"--pid-file={md}/munged.pid", f"--log-file={mlog}", f"--seed-file={md}/seed"],
            stdout=subprocess.DEVNULL, stderr=open(md / "stderr", "wb"),
        )  # fmt: skip
        end = time.time() + 10
        while not sock.exists():
            if self.procs["munged"].poll() is not None or time.time() > end:
                raise RuntimeError("munged did not start: " + (md / "stderr").read_text(errors="replace"))
            time.sleep(0.05)
        # fake GPUs: character devices (plain files are rejected by the gres plugin)
        dev = r / "dev"
        dev.mkdir(exist_ok=True)
        for i in range(2):
            p = dev / f"gpu{i}"
            if not p.exists():
                os.mknod(p, 0o666 | 0o020000, os.makedev(1, 3))
        for d in ("state", "spool", "log"):
            (r / d).mkdir(exist_ok=True)
        from tests.fakes.gpuprofile import profile

        for n in DRIVER_NODES:  # each node's GPU tools, on its tasks' PATH (TaskProlog)
            tools = profile(r / "nodes" / n / "gpu", "MI300X", 2, rocm=True, cuda=False)
            assert isinstance(tools, dict)
            for tool, data in tools.items():
                script = r / "nodes" / n / "bin" / tool
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(f"#!/bin/sh\ncat {data}\n")
                script.chmod(0o755)
        for d in [r / "nodes", *(r / "nodes").iterdir()]:
            os.chmod(d, 0o755)
            for sub in d.iterdir():
                os.chmod(sub, 0o755)
        prolog = r / "taskprolog.sh"
        prolog.write_text(f'#!/bin/sh\nd={r}/nodes/"$SLURMD_NODENAME"/bin\n'
                          '[ -d "$d" ] && echo "export PATH=$d:$PATH"\nexit 0\n')
        prolog.chmod(0o755)
        host = socket.gethostname()
        nodes = "".join(
            f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname={host} Port={p} CPUs=2 "
            f"RealMemory=1000 Gres=gpu:mi300x:2 State=UNKNOWN\n"
            for n, p in NODE_PORTS.items()
        )
        self.conf = r / "slurm.conf"
        self.conf.write_text(
            f"ClusterName=skydloop\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={CTLD_PORT}\n"
            f"SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n"
            f"AuthInfo=socket={sock}\n"
            f"StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/spool/%n\n"
            f"SlurmctldPidFile={r}/slurmctld.pid\nSlurmdPidFile={r}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={r}/log/slurmctld.log\nSlurmdLogFile={r}/log/slurmd-%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nGresTypes=gpu\n"
            "SchedulerType=sched/backfill\nReturnToService=2\nMinJobAge=300\n"
            "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
            "JobAcctGatherType=jobacct_gather/none\nSlurmctldTimeout=30\nSlurmdTimeout=30\n"
            "InactiveLimit=0\nKillWait=2\nMessageTimeout=10\nSwitchType=switch/none\n"
            f"TaskProlog={prolog}\n"
            + nodes
            + "PartitionName=gpu Nodes=sn1,sn2 Default=YES MaxTime=INFINITE State=UP\n"
            + "PartitionName=cpu Nodes=sn2 MaxTime=INFINITE State=UP\n"
            + "PartitionName=nodriver Nodes=sn3 MaxTime=INFINITE State=UP\n"
        )
        (r / "gres.conf").write_text(
            f"NodeName=sn1,sn2,sn3 Name=gpu Type=mi300x File={dev}/gpu[0-1] Flags=amd_gpu_env\n"
        )
        for n in NODE_PORTS:
            (r / "spool" / n).mkdir(exist_ok=True)
        env = self.env
        clog = r / "log" / "slurmctld.log"
        self.procs["slurmctld"] = subprocess.Popen(
            ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(self.conf)], env=env,
            stdout=subprocess.DEVNULL, stderr=open(r / "log" / "slurmctld.err", "wb"),
        )  # fmt: skip
        _wait_port("127.0.0.1", CTLD_PORT, self.procs["slurmctld"], "slurmctld", clog)
        for n, p in NODE_PORTS.items():
            self.procs[n] = subprocess.Popen(
                ["/usr/sbin/slurmd", "-D", "-N", n, "-f", str(self.conf)], env=env,
                stdout=subprocess.DEVNULL, stderr=open(r / "log" / f"slurmd-{n}.err", "wb"),
            )  # fmt: skip
            _wait_port("127.0.0.1", p, self.procs[n], f"slurmd {n}", r / "log" / f"slurmd-{n}.err")
        end = time.time() + 30
        while True:
            out = self.cmd("sinfo", "-h", "-N", "-o", "%N %t")
            states = dict(ln.split() for ln in out.splitlines() if ln.strip())
            if all(states.get(n, "").startswith("idle") for n in NODE_PORTS):
                break
            if time.time() > end:
                raise RuntimeError(f"slurm nodes not idle: {out}")
            time.sleep(0.2)
        self._start_sshd()
        return self

    def _start_sshd(self) -> None:
        from tests.fakes.sshhost import make_keypair

        r = self.root / "sshd"
        r.mkdir(exist_ok=True)
        os.chmod(r, 0o755)
        priv, pub = make_keypair(r / "client")
        self.key = priv
        hostkey, _ = make_keypair(r / "hostkey", "ssh_host_ed25519_key")
        auth = r / "authorized_keys"
        shutil.copy(pub, auth)
        os.chmod(auth, 0o644)
        conf = r / "sshd_config"
        conf.write_text(
            f"ListenAddress {LOGIN_HOST}:{SSH_PORT}\nHostKey {hostkey}\nUsePAM no\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            f"AuthorizedKeysFile {auth}\nAllowUsers {USER}\nPidFile {r}/sshd.pid\n"
            f"Subsystem sftp internal-sftp\nLogLevel ERROR\nSetEnv SLURM_CONF={self.conf}\n"
            "MaxSessions 30\nAllowTcpForwarding yes\n"
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.procs["sshd"] = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(conf)],
            stdout=subprocess.DEVNULL, stderr=open(r / "stderr", "wb"),
        )  # fmt: skip
        _wait_port(LOGIN_HOST, SSH_PORT, self.procs["sshd"], "sshd", r / "stderr")

    def cancel_all(self) -> None:
        subprocess.run(["scancel", "-u", USER], env=self.env, check=False, timeout=30)

    def user_pids(self) -> list[int]:
        """Processes of the test user still alive (the fixture's user only)."""
        uid = pwd.getpwnam(USER).pw_uid
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.stat(f"/proc/{d}").st_uid == uid:
                        out.append(int(d))
                except OSError:
                    pass
        return out

    def stop(self) -> None:
        try:
            self.cancel_all()
        except Exception:  # noqa: BLE001 - tear down regardless
            pass
        for name in ("sshd", *NODE_PORTS, "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for pid in self.user_pids():  # the fixture user's leftovers (only that user)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
