"""A daemon on another host, reached the way Docker reaches one (``DOCKER_HOST=ssh://…``).

``SKYD_HOST=ssh://[user@]host[:port]`` (or ``skyd --host …``, or the current context of
``skyd context use``) makes every client (CLI, SDK, TUI) speak the daemon's usual HTTP over
``ssh HOST skyd daemon dial-stdio``: the user's own OpenSSH client, config and agent, one
multiplexed SSH connection (ControlMaster) shared by every request of every command, so a
request costs one SSH round trip more than locally. ``dial-stdio`` on the host starts that
user's daemon when it is not running and relays bytes between its stdin/stdout and the
daemon's Unix socket.

Stdlib only: the one-shot CLI imports this on its fast path.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shlex
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from skyd import paths, settings
from skyd.errors import InvalidSpecError, SkydError
from skyd.sdk.kubehost import KubeTarget, is_k8s, parse_k8s

# What the host runs when no binary is named: the file `skyd daemon deploy` installs, else a
# `skyd` on the login PATH.
DEFAULT_REMOTE_BIN = "~/.local/share/skyd/bin/skyd"
CONTROL_PERSIST_S = 600  # the shared SSH connection outlives the last command this long


class Target(NamedTuple):
    """Where a remote daemon is: the SSH destination and, optionally, which skyd binary and
    which SKYD_HOME to use there (one host can hold several isolated daemons)."""

    host: str
    user: str | None = None
    port: int | None = None
    remote_bin: str | None = None
    remote_home: str | None = None
    ssh_options: tuple[str, ...] = ()
    remote_socket: str | None = None  # a shared daemon's socket on the host (another user's)

    def url(self) -> str:
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"ssh://{who}{self.host}{port}"

    def destination(self) -> list[str]:
        out = []
        if self.port:
            out += ["-p", str(self.port)]
        if self.user:
            out += ["-l", self.user]
        return [*out, self.host]


# Where a daemon can be: a host over SSH, or a pod in Kubernetes (skyd.sdk.kubehost).
AnyTarget = Target | KubeTarget


def parse_host(url: str, *, remote_bin: str | None = None,
               remote_home: str | None = None, remote_socket: str | None = None) -> AnyTarget:
    """``ssh://[user@]host[:port]`` (an SSH config alias as the host works too), with
    optional ``?bin=PATH&home=PATH`` for the binary and SKYD_HOME on the host, and
    ``socket=PATH`` for a daemon shared by another user of the host (its shared socket); or
    ``k8s://CONTEXT/NAMESPACE`` (skyd.sdk.kubehost)."""
    if is_k8s(url):
        return parse_k8s(url)
    return parse_ssh(url, remote_bin=remote_bin, remote_home=remote_home, remote_socket=remote_socket)


def parse_ssh(url: str, *, remote_bin: str | None = None,
              remote_home: str | None = None, remote_socket: str | None = None) -> Target:
    text = url.strip()
    if not text.startswith("ssh://"):
        raise InvalidSpecError(f"unsupported daemon host {url!r}", field="SKYD_HOST",
                               hint="use ssh://[user@]host[:port] (or an SSH config alias: "
                                    "ssh://alias) or k8s://CONTEXT/NAMESPACE, or unset it "
                                    "for the local daemon")
    parts = urlsplit(text)
    host = parts.hostname
    if not host or (parts.path not in ("", "/")):
        raise InvalidSpecError(f"daemon host {url!r} has no host name", field="SKYD_HOST",
                               hint="use ssh://[user@]host[:port]")
    try:
        port = parts.port
    except ValueError:
        raise InvalidSpecError(f"daemon host {url!r} has a bad port", field="SKYD_HOST",
                               hint="a port is a number from 1 to 65535") from None
    q = parse_qs(parts.query)
    for k in q:
        if k not in ("bin", "home", "socket"):
            raise InvalidSpecError(f"unknown option {k!r} in daemon host {url!r}",
                                   field="SKYD_HOST", hint="known options: bin, home, socket")
    if host.startswith("-") or (parts.username or "").startswith("-"):
        raise InvalidSpecError(f"daemon host {url!r} is not a host name", field="SKYD_HOST",
                               hint="use ssh://[user@]host[:port]")
    extra = tuple(shlex.split(settings.SSH_OPTS.get()))
    return Target(host=host, user=unquote(parts.username) if parts.username else None,
                  port=port, remote_bin=remote_bin or _first(q, "bin"),
                  remote_home=remote_home or _first(q, "home"), ssh_options=extra,
                  remote_socket=remote_socket or _first(q, "socket"))


def _first(q: dict[str, list[str]], key: str) -> str | None:
    vals = q.get(key)
    return vals[0] if vals else None


# -- contexts (`skyd context …`) ----------------------------------------------------------

def contexts_file() -> Path:
    return paths.config_dir() / "contexts.json"


def load_contexts() -> dict[str, Any]:
    p = contexts_file()
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        return {"current": "local", "contexts": {}}
    except (OSError, ValueError) as e:
        raise SkydError(f"cannot read {p}: {e}", hint="fix or remove the file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("contexts"), dict):
        raise SkydError(f"{p} is not a skyd contexts file", hint="fix or remove the file")
    doc.setdefault("current", "local")
    return doc


def save_contexts(doc: dict[str, Any]) -> None:
    p = contexts_file()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".contexts-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def context_target(name: str, doc: dict[str, Any] | None = None) -> AnyTarget | None:
    doc = doc if doc is not None else load_contexts()
    if name in ("", "local", "default"):
        return None
    ctx = doc["contexts"].get(name)
    if ctx is None:
        raise SkydError(f"no skyd context {name!r}",
                        hint="list them with: skyd context ls; add one with: "
                             "skyd context add NAME ssh://user@host")
    return parse_host(ctx["host"], remote_bin=ctx.get("remote_bin"),
                      remote_home=ctx.get("remote_home"), remote_socket=ctx.get("remote_socket"))


def resolve_target() -> AnyTarget | None:
    """The daemon to talk to: ``SKYD_HOST`` (``--host`` sets it), else the current context;
    None means the local daemon."""
    env = (settings.HOST.get() or "").strip()
    if env:
        if env in ("local", "unix://") or env.startswith("unix://"):
            return None
        return parse_host(env)
    if not contexts_file().exists():
        return None
    doc = load_contexts()
    return context_target(str(doc.get("current") or "local"), doc)


# -- the SSH channel --------------------------------------------------------------------

def _control_dir() -> Path:
    """Where the shared connection's control socket lives: under SKYD_HOME, or (AF_UNIX
    paths are short) a 0700 directory skyd makes for this user under the temp dir."""
    d = paths.home() / "run" / "ssh"
    if len(str(d)) <= 70:
        return d
    return Path(tempfile.gettempdir()) / f"skyd-ssh-{os.getuid()}"


def control_path(t: Target) -> Path:
    key = hashlib.sha256(f"{t.user}@{t.host}:{t.port}".encode()).hexdigest()[:16]
    return _control_dir() / f"cm-{key}"


def _ensure_control_dir(t: Target) -> Path:
    cp = control_path(t)
    d = cp.parent
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise SkydError(f"cannot create {d}: {e}") from None
    st = d.lstat()
    if st.st_uid != os.getuid() or (st.st_mode & 0o077) or not d.is_dir() or d.is_symlink():
        raise SkydError(f"{d} is not a private directory of this user",
                        hint="remove it; skyd creates it 0700")
    return cp


def ssh_argv(t: Target, remote_cmd: str, *, multiplex: bool = True) -> list[str]:
    """The OpenSSH command line that runs ``remote_cmd`` (already shell-quoted) on the host."""
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4"]
    if multiplex:
        cp = _ensure_control_dir(t)
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={cp}",
                 "-o", f"ControlPersist={CONTROL_PERSIST_S}",
                 "-o", "StreamLocalBindUnlink=yes"]
    return [*argv, *t.ssh_options, *t.destination(), "--", remote_cmd]


def remote_skyd(t: Target, *args: str, launcher: str = "exec") -> str:
    """A shell command line for the host that runs its skyd with ``args`` (``launcher``:
    what runs it, e.g. ``exec nohup``)."""
    tail = " ".join(shlex.quote(a) for a in args)
    env = f"SKYD_HOME={shlex.quote(t.remote_home)} " if t.remote_home else ""
    if t.remote_socket:  # a shared daemon: dial-stdio connects there, never starts one
        env += f"SKYD_SOCKET={remote_path(t.remote_socket)} SKYD_SHARED_DIAL=1 "
    if t.remote_bin:
        return f"{env}{launcher} {remote_path(t.remote_bin)} {tail}"
    default = remote_path(DEFAULT_REMOTE_BIN)
    return (f"if [ -x {default} ]; then {env}{launcher} {default} {tail}; "
            f"else {env}{launcher} skyd {tail}; fi")


def remote_path(p: str) -> str:
    """Quote a path for the remote shell, keeping a leading ``~/`` expandable."""
    if p.startswith("~/"):
        return '"$HOME"/' + shlex.quote(p[2:])
    return shlex.quote(p)


def close_master(t: Target) -> None:
    """End the shared SSH connection to ``t`` (no-op when none is open)."""
    cp = control_path(t)
    if not cp.exists():
        return
    subprocess.run(["ssh", "-o", f"ControlPath={cp}", "-O", "exit", *t.destination()],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)


def forward_path(t: Target) -> Path:
    """The local end of the shared connection's forward to the host daemon's socket."""
    name = control_path(t).name.replace("cm-", "fw-")
    if t.remote_socket:  # another daemon on the same host (a shared one)
        name += "-" + hashlib.sha256(t.remote_socket.encode()).hexdigest()[:8]
    return control_path(t).with_name(name + ".sock")


_FORWARDED: dict[Target, str] = {}  # this process: targets whose forward is known to be up
_NO_FORWARD: set[Target] = set()  # hosts that refuse Unix-socket forwarding (stdio instead)


def ensure_forward(t: Target, *, force: bool = False) -> str | None:
    """Make sure the host's daemon runs and the shared SSH connection forwards a local
    socket to it; its path, or None when the host refuses such forwards (then each
    connection runs ``dial-stdio``). Without ``force``, an existing forward is trusted."""
    fw = forward_path(t)
    marker = fw.with_suffix(".refused")
    if t in _NO_FORWARD or _fresh(marker):
        return None
    if not force and (t in _FORWARDED or fw.exists()):
        return str(fw)
    if t.remote_socket:
        # A daemon shared by another user of the host: its socket is known; this user need
        # not have skyd there (the forward goes straight to it). It is never started here.
        sock = remote_path(t.remote_socket)
        script = f"if [ -S {sock} ]; then echo {sock}; else echo 'no shared skyd daemon " \
                 f"listens on '{sock}' (its owner starts it)' >&2; exit 1; fi"
    else:
        script = remote_skyd(t, "daemon", "dial-stdio", "--socket-path")
    r = subprocess.run(ssh_argv(t, script),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                       check=False)
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not lines[-1].startswith("/"):
        said = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise ConnectionRefusedError(said)
    remote_sock = lines[-1]
    cp = control_path(t)
    f = subprocess.run(["ssh", "-o", f"ControlPath={cp}", "-O", "forward",
                        "-L", f"{fw}:{remote_sock}", *t.destination()],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                       check=False)
    if (f.returncode != 0 and not fw.exists()) or not _answers(str(fw)):
        # The host refuses Unix-socket forwards (sshd AllowStreamLocalForwarding no): the
        # master binds the local end anyway and each channel is then refused. Remember it.
        subprocess.run(["ssh", "-o", f"ControlPath={cp}", "-O", "cancel",
                        "-L", f"{fw}:{remote_sock}", *t.destination()],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
        fw.unlink(missing_ok=True)
        _NO_FORWARD.add(t)
        marker.touch()
        return None
    _FORWARDED[t] = str(fw)
    return str(fw)


NO_FORWARD_TTL_S = 24 * 3600  # how long a host's refusal of socket forwards is remembered


def _fresh(marker: Path) -> bool:
    import time

    try:
        return time.time() - marker.stat().st_mtime < NO_FORWARD_TTL_S
    except OSError:
        return False


def _answers(path: str) -> bool:
    """One HTTP health request through the forward gets an answer."""
    c = http.client.HTTPConnection("localhost", timeout=30)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(30)
        s.connect(path)
        c.sock = s
        c.request("GET", "/v1/health")
        return c.getresponse().status < 500
    except (OSError, http.client.HTTPException):
        return False
    finally:
        c.close()


class ForwardedConnection(http.client.HTTPConnection):
    """HTTP over the shared SSH connection's Unix-socket forward to the host daemon: no
    process is started on either side per request (one SSH round trip each)."""

    def __init__(self, target: Target, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.target = target
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def ssh_error(self) -> str:
        return ""


class SSHStdioConnection(http.client.HTTPConnection):
    """``http.client.HTTPConnection`` whose socket is one end of a socketpair; the other
    end is the stdin/stdout of ``ssh HOST skyd daemon dial-stdio``."""

    def __init__(self, target: Target, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.target = target
        self.proc: subprocess.Popen[bytes] | None = None
        self._err: Any = None
        self._said = ""

    def connect(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._err = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - an argument list
                ssh_argv(self.target, remote_skyd(self.target, "daemon", "dial-stdio")),
                stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=self._err, close_fds=True,
                start_new_session=True,
            )
        except FileNotFoundError:
            ours.close()
            raise SkydError("no `ssh` command on this machine (OpenSSH client)",
                            hint="install openssh-client to reach a remote daemon") from None
        finally:
            theirs.close()
        if self.timeout is not None:
            ours.settimeout(self.timeout)
        self.sock = ours

    def ssh_error(self) -> str:
        """What ssh (or the host's skyd) said on stderr, for an error message."""
        if self._err is not None:
            self._said = self._read_err()
        return self._said

    def _read_err(self) -> str:
        try:
            self._err.seek(0)
            return str(self._err.read()[-2000:].decode(errors="replace").strip())
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        super().close()
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._err is not None:
            self._said = self._read_err()  # kept: http.client closes before we can ask
            self._err.close()
            self._err = None


class LocalRelay:
    """A private Unix socket on this machine whose every connection is carried to the remote
    daemon by its own ``dial-stdio``: for clients that speak to a socket path (the async SDK,
    the TUI; for a k8s:// daemon the CLI too). One thread accepts and hands each connection
    to the target's carrier: over SSH, ssh (on the shared SSH connection) gets the accepted
    socket as its stdin/stdout, so no byte is copied here; for Kubernetes, an exec session in
    the daemon's pod (skyd.sdk.kubehost; kubeconfig users of exec plugins get a relay with
    the Kubernetes client library instead, KubeRelayServer, which serves the path itself)."""

    def __init__(self, target: AnyTarget) -> None:
        self.target = target
        self.dir = Path(tempfile.mkdtemp(prefix="skyd-relay-"))  # 0700
        self.path = str(self.dir / "s.sock")
        self._procs: list[subprocess.Popen[bytes]] = []
        self._closed = False
        self.kube: Any = None  # the library-based relay (k8s:// with exec-plugin auth)
        self.errors: list[str] = []  # why connections failed (k8s://), for messages
        try:
            self._carry = self._carrier(target)
        except BaseException:
            self.dir.rmdir()
            raise
        if isinstance(target, KubeTarget):
            import atexit

            atexit.register(self.close)  # a one-shot CLI may not close its client
        if self.kube is not None:
            return
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(self.path)
        self._srv.listen(64)
        threading.Thread(target=self._serve, name="skyd-relay", daemon=True).start()

    @property
    def error(self) -> str:
        said = self.errors[-1] if self.errors else ""
        return said or (self.kube.error if self.kube is not None else "")

    def _carrier(self, target: AnyTarget) -> Any:
        """What carries one accepted connection (and closes it)."""
        if isinstance(target, KubeTarget):
            from skyd.sdk import kubehost

            t = kubehost.resolve(target)
            ep = kubehost.endpoint(t)
            if ep is None:
                self.kube = kubehost.KubeRelayServer(t, self.path)
                return None
            return kubehost.stdlib_carrier(t, ep, self.errors.append)
        argv = ssh_argv(target, remote_skyd(target, "daemon", "dial-stdio"))

        def ssh(conn: socket.socket) -> None:
            try:
                self._procs = [p for p in self._procs if p.poll() is None]
                self._procs.append(subprocess.Popen(  # noqa: S603 - an argument list
                    argv, stdin=conn.fileno(), stdout=conn.fileno(),
                    stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True))
            except OSError:
                pass
            finally:
                conn.close()

        return ssh

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            self._carry(conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if isinstance(self.target, KubeTarget):
            import atexit

            atexit.unregister(self.close)
        try:
            if self.kube is not None:
                self.kube.close()
            else:
                self._srv.close()
        finally:
            for p in self._procs:
                if p.poll() is None:
                    p.terminate()
            for p in self._procs:
                try:
                    p.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    p.kill()
            Path(self.path).unlink(missing_ok=True)
            try:
                self.dir.rmdir()
            except OSError:
                pass


# -- the host side: `skyd daemon dial-stdio` ---------------------------------------------

def dial_stdio(print_socket: bool = False) -> int:
    """Relay stdin/stdout to the local daemon's socket (starting the daemon when needed)
    until either side closes; with ``print_socket``, only start it and print the socket's
    path (what a client forwards to)."""
    from skyd.sdk.transport import ensure_daemon

    sp = str(paths.socket_path())
    if settings.SHARED_DIAL.get():  # another user's shared daemon: never start one
        if not _answers(sp):
            os.write(2, f"no shared skyd daemon answers on {sp} (its owner starts it: "
                        f"skyd daemon start --shared-group GROUP)\n".encode())
            return 1
    elif settings.NO_AUTOSTART.get():
        # A daemon someone else runs (a pod's main process, skyd.cli.deploy_k8s): wait for
        # its socket rather than starting a second one beside it.
        import time

        from skyd.sdk.transport import socket_answers

        deadline = time.monotonic() + 120
        while not socket_answers(sp):
            if time.monotonic() > deadline:
                os.write(2, f"skyd: no daemon answers at {sp}\n".encode())
                return 1
            time.sleep(0.2)
    else:
        ensure_daemon(sp)
    if print_socket:
        os.write(1, (os.path.abspath(sp) + "\n").encode())
        return 0
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sp)
    fin, fout = 0, 1

    def upstream() -> None:
        try:
            while True:
                chunk = os.read(fin, 65536)
                if not chunk:
                    break
                s.sendall(chunk)
        except OSError:
            pass
        finally:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                n = os.write(fout, view)
                view = view[n:]
    except OSError:
        return 1
    finally:
        s.close()
    return 0


def describe(t: AnyTarget | None) -> str:
    return "local" if t is None else t.url()


def target_dict(t: Target) -> dict[str, Any]:
    d = t._asdict()
    d.pop("ssh_options", None)
    return d
