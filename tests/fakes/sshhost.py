"""Fake SSH hosts: real SSH protocol (asyncssh server) on 127.0.0.x, real subprocesses.

Each host has its own root directory (``root/home`` is HOME and the cwd of commands) and a
PATH that puts fake ``nvidia-smi`` / ``amd-smi`` scripts first (printing recorded outputs from
tests/data/ssh/). Exec requests run through ``/bin/sh -c`` with stdin/stdout/stderr pumped
explicitly; SFTP (relative paths resolve against HOME, as with OpenSSH) and direct-tcpip
(local port forwarding) are supported; ``allow_forwarding=False`` refuses direct-tcpip like
sshd with ``AllowTcpForwarding no``.

Knobs: ``reject_auth`` (refuse every key), ``drop_connections()`` (abort every live
connection), ``drop_after_sftp_writes=N`` (abort the connection when the Nth file is opened for
writing over SFTP, once), ``missing=("python3", "rsync")`` (tools left off PATH), ``suspend()`` / ``resume()``
(unreachable host whose processes keep running).

    async with FakeSSHHost(tmp_path / "h1", "127.0.0.2", client_pub) as h:
        h.host, h.port, h.home
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import asyncssh

DATA = Path(__file__).resolve().parent.parent / "data" / "ssh"
GPU_PROFILES = {
    "none": {},
    "h100x8": {"nvidia-smi": DATA / "nvidia-smi-h100x8.txt"},
    "mi300x": {"amd-smi": DATA / "amd-smi-mi300x-rocm6.json"},
    "mi355x": {"amd-smi": DATA / "amd-smi-mi355x-rocm7.json"},
}
#: what nvidia-smi prints as the name of each GPU model (``gpu="nvidia:<MODEL>:<N>"`` hosts).
NVIDIA_SMI_NAMES = {
    "T4": ("Tesla T4", 15360), "L4": ("NVIDIA L4", 23034), "V100": ("Tesla V100-SXM2-16GB", 16384),
    "P100": ("Tesla P100-PCIE-16GB", 16384), "A100": ("NVIDIA A100-SXM4-40GB", 40960),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", 81920), "H100": ("NVIDIA H100 80GB HBM3", 81559),
    "H100-MEGA": ("NVIDIA H100 80GB HBM3", 81559), "H200": ("NVIDIA H200", 143771),
    "B200": ("NVIDIA B200", 183359), "L40S": ("NVIDIA L40S", 46068),
}


def nvidia_smi_text(model: str, count: int) -> str:
    """``nvidia-smi --query-gpu=name,memory.total,uuid --format=csv,noheader,nounits`` of a
    node with ``count`` GPUs of ``model`` (the line form of tests/data/ssh/nvidia-smi-h100x8.txt)."""
    name, mem = NVIDIA_SMI_NAMES.get(model, (f"NVIDIA {model}", 0))
    return "".join(f"{name}, {mem}, GPU-00000000-0000-4000-8000-{i:012d}\n" for i in range(count))


SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def make_keypair(directory: Path, name: str = "id_ed25519") -> tuple[Path, Path]:
    """Write an ed25519 key pair (private 0600) into ``directory``; (private, public)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519")
    priv = directory / name
    key.write_private_key(str(priv))
    os.chmod(priv, 0o600)
    pub = directory / f"{name}.pub"
    key.write_public_key(str(pub))
    return priv, pub


class _Server(asyncssh.SSHServer):
    def __init__(self, host: FakeSSHHost) -> None:
        self.host = host
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.host._conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.host._conns.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        if self.host.reject_auth:
            return False
        if self.host.users is not None and username not in self.host.users:
            return False
        return key.export_public_key() in self.host._authorized

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool:
        if not self.host.allow_forwarding:
            self.host.forwards_refused += 1
            if self.host.refusal_code == asyncssh.OPEN_CONNECT_FAILED:
                # what an asyncssh-based server (or some bastions) answers
                raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED,
                                                "Connection refused")
            # what sshd with AllowTcpForwarding no answers
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "open failed: forwarding disabled"
            )
        self.host.forwards_opened += 1
        return True  # asyncssh opens the TCP connection and forwards


class _SFTP(asyncssh.SFTPServer):
    def __init__(self, chan: asyncssh.SSHServerChannel, host: FakeSSHHost) -> None:
        super().__init__(chan)
        self.host = host

    def map_path(self, path: bytes) -> bytes:
        if not path.startswith(b"/"):
            path = os.path.join(os.fsencode(self.host.home), path)
        return path

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if pflags & asyncssh.FXF_WRITE:
            self.host.sftp_writes += 1
            n = self.host.drop_after_sftp_writes
            if n is not None and self.host.sftp_writes >= n:
                self.host.drop_after_sftp_writes = None
                self.host.drops += 1
                self.connection.abort()
        return super().open(path, pflags, attrs)


class FakeSSHHost:
    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.2",
        authorized_keys: Path | Iterable[Path] = (),
        *,
        gpu: str | dict[str, Path] = "none",
        missing: Iterable[str] = (),
        host_key: asyncssh.SSHKey | None = None,
        port: int = 0,
        allow_forwarding: bool = True,
        refusal_code: int = asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
    ) -> None:
        self.root = Path(root)
        self.host = host
        self.port = port
        self.home = self.root / "home"
        self.gpu = gpu
        self.missing = set(missing)
        self.host_key = host_key or asyncssh.generate_private_key("ssh-ed25519")
        keys = [authorized_keys] if isinstance(authorized_keys, Path) else list(authorized_keys)
        self._authorized: set[bytes] = set()
        for k in keys:
            self.authorize(k)
        self.reject_auth = False
        self.users: set[str] | None = None  # None: any user name; else only these log in
        self.drop_after_sftp_writes: int | None = None
        self.sftp_writes = 0
        self.drops = 0
        self.commands: list[str] = []
        self.forwards_opened = 0
        self.forwards_refused = 0
        self.allow_forwarding = allow_forwarding
        self.refusal_code = refusal_code
        self._conns: set[asyncssh.SSHServerConnection] = set()
        self._procs: set[asyncio.subprocess.Process] = set()
        self._server: Any = None

    # -- setup ----------------------------------------------------------------------------

    def authorize(self, pub: Path) -> None:
        key = asyncssh.read_public_key(str(pub))
        self._authorized.add(key.export_public_key())

    @property
    def host_public_key(self) -> str:
        return str(self.host_key.export_public_key("openssh").decode().strip())

    def _prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        fakebin = self.root / "fakebin"
        fakebin.mkdir(exist_ok=True)
        # a profile name, {tool: file it prints} (fakes that model what an image shows), or
        # nvidia:<MODEL>:<N>
        profile: dict[str, Path] = {}
        if isinstance(self.gpu, dict):
            profile = dict(self.gpu)
        elif self.gpu.startswith("nvidia:"):
            _, model, n = self.gpu.split(":")
            data = self.root / "nvidia-smi.txt"
            data.write_text(nvidia_smi_text(model, int(n)))
            profile["nvidia-smi"] = data
        else:
            profile = dict(GPU_PROFILES[self.gpu])
        for tool, data in profile.items():
            script = fakebin / tool
            script.write_text(f"#!/bin/sh\ncat {data}\n")
            script.chmod(0o755)
        dirs = [str(fakebin)]
        if self.missing:
            # A farm of symlinks to every system tool except the missing ones.
            sysbin = self.root / "sysbin"
            sysbin.mkdir(exist_ok=True)
            for d in SYSTEM_DIRS:
                if not os.path.isdir(d):
                    continue
                for name in os.listdir(d):
                    if any(name == m or name.startswith(m + ".") for m in self.missing):
                        continue
                    if name.startswith("python3") and "python3" in self.missing:
                        continue
                    link = sysbin / name
                    if not link.exists() and not link.is_symlink():
                        link.symlink_to(os.path.join(d, name))
            dirs.append(str(sysbin))
        else:
            dirs += list(SYSTEM_DIRS)
        self.path = ":".join(dirs)

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "PATH": self.path,
            "USER": "skyd",
            "LOGNAME": "skyd",
            "SHELL": "/bin/sh",
            "LANG": "C.UTF-8",
        }

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> FakeSSHHost:
        self._prepare()
        self._server = await asyncssh.create_server(
            lambda: _Server(self),
            self.host,
            self.port,
            server_host_keys=[self.host_key],
            process_factory=self._handle,
            sftp_factory=lambda chan: _SFTP(chan, self),
            encoding=None,
            line_editor=False,
            allow_scp=False,
            keepalive_interval=0,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.drop_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for p in list(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        self._kill_agents()

    def _kill_agents(self) -> None:
        """Safety net: detached processes (agents) left under this host's root, and the
        containers of image_id docker: tasks run there (a deleted VM takes them along)."""
        import json

        from tests.fakes.containers import remove_bound_under

        if next(self.root.glob("home/.skyd/nodes/*/.registry"), None) is not None:
            remove_bound_under(self.root)  # (a node of a docker: task was here)

        for info in self.root.rglob("agent.json"):
            try:
                pid = int(json.loads(info.read_text())["pid"])
                os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                continue

    async def __aenter__(self) -> FakeSSHHost:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def suspend(self) -> None:
        """Make the host unreachable (stop listening, cut every connection) while its
        processes (agents, jobs) keep running: a network partition, not a crash."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.drop_connections()

    async def resume(self) -> None:
        """Listen again on the same address and port (after ``suspend``)."""
        if self._server is None:
            await self.start()

    def drop_connections(self) -> None:
        for conn in list(self._conns):
            conn.abort()
        self.drops += 1

    # -- exec -----------------------------------------------------------------------------

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        cmd = process.command
        if cmd is None:
            process.stderr.write(b"fake host: interactive shells are not supported\n")
            process.exit(1)
            return
        self.commands.append(cmd)
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.home,
            env=self.env(),
            start_new_session=True,
        )
        self._procs.add(proc)
        assert proc.stdin and proc.stdout and proc.stderr

        async def pump_in() -> None:
            assert proc.stdin
            try:
                while True:
                    data = await process.stdin.read(65536)
                    if not data:
                        break
                    proc.stdin.write(data)
                    await proc.stdin.drain()
            except (OSError, asyncssh.Error, asyncssh.BreakReceived, asyncssh.SignalReceived):
                pass
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()

        async def pump_out(src: asyncio.StreamReader, dst: Any) -> None:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                dst.write(data)
                with contextlib.suppress(OSError, asyncssh.Error):
                    await dst.drain()

        stdin_task = asyncio.ensure_future(pump_in())
        try:
            await asyncio.gather(
                pump_out(proc.stdout, process.stdout), pump_out(proc.stderr, process.stderr)
            )
            rc = await proc.wait()
        except (OSError, asyncssh.Error, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            rc = 255
        finally:
            stdin_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await stdin_task
            self._procs.discard(proc)
        with contextlib.suppress(OSError, asyncssh.Error):
            process.exit(rc if rc >= 0 else 128 - rc)


@contextlib.asynccontextmanager
async def fake_hosts(
    tmp: Path, n: int, pub: Path, *, first: int = 2, **kw: Any
) -> Any:
    """``n`` fake hosts on 127.0.0.<first>, 127.0.0.<first+1>, ... (roots under ``tmp``)."""
    hosts = [FakeSSHHost(tmp / f"host{i}", f"127.0.0.{i + first}", pub, **kw) for i in range(n)]
    try:
        for h in hosts:
            await h.start()
        yield hosts
    finally:
        for h in hosts:
            await h.stop()



def write_pools(config_dir: Path, pools: dict[str, list[FakeSSHHost]], key: Path) -> Path:
    """Write ssh_node_pools.yaml for fake hosts (dict hosts: ip + port each)."""
    import yaml

    doc = {
        name: {
            "user": "skyd",
            "identity_file": str(key),
            "hosts": [{"ip": h.host, "port": h.port} for h in hosts],
        }
        for name, hosts in pools.items()
    }
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "ssh_node_pools.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
