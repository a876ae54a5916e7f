"""Stdlib HTTP/1.1 client over the daemon's Unix socket, plus daemon auto-start.

Imports only the standard library and skyd.paths/skyd.errors: the one-shot CLI's fast
path runs on it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from skyd import paths, settings
from skyd.errors import DaemonUnavailableError, SkydError, error_from_dict
from skyd.sdk.kubehost import KubeTarget

REQUEST_ID_HEADER = "X-Skyd-Request-Id"
# The daemon closes a kept-alive connection idle for 30 s: one idle longer than this is
# replaced before use, never raced.
KEEPALIVE_REUSE_S = 5.0
REATTACH_TIMEOUT = 60.0  # how long a follower waits for a daemon that died to come back
# What a stream shows when the daemon died under it (the chunked body cut short, the
# socket reset or refused while reconnecting).
STREAM_BROKEN = (http.client.IncompleteRead, http.client.RemoteDisconnected, ConnectionError,
                 DaemonUnavailableError)


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client.HTTPConnection`` speaking to an AF_UNIX socket path."""

    def __init__(self, path: str, timeout: float | None = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = _connect_unix(self.unix_path, self.timeout)


def _connect_unix(path: str, timeout: float | None) -> socket.socket:
    """Connect to a Unix socket. A full listen backlog (the daemon accepting a burst of
    connections) answers a connect with a timeout EAGAIN at once: retried until ``timeout``."""
    deadline = time.monotonic() + (timeout if timeout is not None else 30.0)
    delay = 0.005
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if timeout is not None:
            s.settimeout(timeout)
        try:
            s.connect(path)
            return s
        except BlockingIOError:
            s.close()
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        except BaseException:
            s.close()
            raise


def request_url(path: str, params: dict[str, Any] | None) -> str:
    if not path.startswith("/"):
        path = "/" + path
    if not path.startswith("/v1/"):
        path = "/v1" + path
    if params:
        clean = {k: ",".join(map(str, v)) if isinstance(v, list | tuple) else v
                 for k, v in params.items() if v is not None}
        if clean:
            path += "?" + urlencode(clean)
    return path


class RequestIdTaken(Exception):
    """The daemon has another request under the id this client chose (409)."""


class DaemonBusy(DaemonUnavailableError):
    """Every connection the daemon admits is serving a request (503): retry shortly."""


def raise_for(status: int, data: bytes) -> None:
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        doc = {}
    err = doc.get("error") if isinstance(doc, dict) else None
    if status == 409 and isinstance(err, dict) and err.get("type") == "RequestIdTakenError":
        raise RequestIdTaken(str(err.get("message")))
    if status == 503 and isinstance(err, dict) and "busy" in str(err.get("message")):
        raise DaemonBusy(str(err.get("message")), hint=err.get("hint"))
    if isinstance(err, dict):
        raise error_from_dict(err)
    raise SkydError(f"daemon answered HTTP {status}: {data[:200].decode(errors='replace')}")


class Client:
    """Blocking client of the daemon API. Keeps one keep-alive connection; streams use
    their own. ``autostart``: start the daemon when the socket does not answer."""

    def __init__(
        self, socket_path: str | Path | None = None, *, autostart: bool | None = None,
        timeout: float | None = 300.0,
    ) -> None:
        from skyd.sdk.remote import resolve_target

        self.socket_path = str(socket_path or paths.socket_path())
        # SKYD_HOST / the current context: a daemon on another host, over SSH (it starts
        # itself there, so this client never starts one).
        self.target = None if socket_path is not None else resolve_target()
        if autostart is None:
            autostart = not settings.NO_AUTOSTART.get()
        self.autostart = autostart and self.target is None
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._last_ssh_error = ""
        self._last_used = time.monotonic()
        self._relay: Any = None  # k8s://: the private relay socket (skyd.sdk.kubehost)

    def _new_conn(self, timeout: float | None) -> http.client.HTTPConnection:
        if isinstance(self.target, KubeTarget):
            # k8s://: each connection is an exec session in the daemon's pod, through a
            # private local relay socket that lives as long as this client.
            from skyd.sdk.remote import LocalRelay

            if self._relay is None:
                self._relay = LocalRelay(self.target)
            return UnixHTTPConnection(self._relay.path, timeout)
        if self.target is not None:
            from skyd.sdk.remote import ForwardedConnection, SSHStdioConnection, ensure_forward

            try:
                fw = ensure_forward(self.target)
            except (OSError, subprocess.SubprocessError) as e:
                self._last_ssh_error = str(e)
                raise self._unavailable(e) from None
            if fw is not None:
                return ForwardedConnection(self.target, fw, timeout)
            return SSHStdioConnection(self.target, timeout)
        return UnixHTTPConnection(self.socket_path, timeout)

    def _refresh_remote(self) -> bool:
        """The forward to the host daemon broke (the daemon or the SSH connection went away):
        set it up again, which starts the daemon there. True when it could."""
        from skyd.sdk.remote import ensure_forward

        try:
            ensure_forward(self.target, force=True)  # type: ignore[arg-type]
            return True
        except (OSError, subprocess.SubprocessError) as e:
            self._last_ssh_error = str(e)
            return False

    def _remote_retry(self, conn: http.client.HTTPConnection, fresh: bool) -> bool:
        """Through a forward whose far end is gone (the host daemon died, the SSH connection
        dropped) the channel closes before a byte reaches a daemon: set the forward up again
        (which starts the daemon there). True when the request should be sent again."""
        if (self.target is None or isinstance(self.target, KubeTarget)
                or getattr(conn, "unix_path", None) is None):
            return False
        self._drop(conn, fresh)
        return self._refresh_remote()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------
    def _open(self, method: str, url: str, body: Any, *, fresh: bool,
              timeout: float | None, headers: dict[str, str] | None = None,
              idempotent: bool = False,
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send one request; its connection and response. ``idempotent``: the request may be
        sent again whatever happened to the first try (a submit under a client-chosen id):
        while the daemon is gone it is restarted (when allowed) and the request resent,
        for up to REATTACH_TIMEOUT seconds."""
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        hdrs = {"Content-Type": "application/json"} if payload is not None else {}
        hdrs.update(headers or {})
        started = stale_retried = remote_retried = False
        deadline = time.monotonic() + REATTACH_TIMEOUT
        while True:
            conn = self._new_conn(timeout) if fresh else self._keepalive()
            try:
                conn.request(method, url, body=payload, headers=hdrs)
                resp = conn.getresponse()
                self._last_used = time.monotonic()
                return conn, resp
            except (FileNotFoundError, ConnectionRefusedError) as e:
                if not remote_retried and self._remote_retry(conn, fresh):
                    remote_retried = True
                    continue
                self._drop(conn, fresh, keep_error=True)
                if idempotent and self.autostart and time.monotonic() < deadline:
                    self._wait_for_daemon(max(1.0, deadline - time.monotonic()), e)
                    continue
                if not self.autostart or started:
                    raise self._unavailable(e, conn) from None
                ensure_daemon(self.socket_path)
                started = True
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                if not remote_retried and self._remote_retry(conn, fresh):
                    remote_retried = True
                    continue
                # A keep-alive connection the daemon closed meanwhile: retry once on a new one
                # (a POST only when it cannot have been received, or when it is idempotent:
                # the daemon died under it, and it comes back to answer the same request).
                self._drop(conn, fresh, keep_error=True)
                if idempotent and time.monotonic() < deadline:
                    if stale_retried or fresh:
                        self._wait_for_daemon(max(1.0, deadline - time.monotonic()), e)
                    stale_retried = True
                    continue
                resend_ok = method != "POST" or isinstance(e, BrokenPipeError)
                if fresh or stale_retried or not resend_ok:
                    raise self._unavailable(e, conn) from None
                stale_retried = True
            except OSError as e:
                self._drop(conn, fresh, keep_error=True)
                raise self._unavailable(e, conn) from None

    def _drop(self, conn: http.client.HTTPConnection, fresh: bool, *,
              keep_error: bool = False) -> None:
        said = getattr(conn, "ssh_error", None)
        if keep_error and said is not None:
            self._last_ssh_error = said() or self._last_ssh_error
        conn.close()
        if not fresh:
            self._conn = None

    def _unavailable(self, e: BaseException | None,
                     conn: http.client.HTTPConnection | None = None) -> DaemonUnavailableError:
        if isinstance(self.target, KubeTarget):
            said = self._relay.error if self._relay is not None else ""
            return DaemonUnavailableError(
                f"cannot reach the skyd daemon on {self.target.url()}"
                + (f": {said.splitlines()[-1]}" if said else (f": {e}" if e else "")),
                hint=f"check `{' '.join(self.target.destination())} get pod "
                     f"{self.target.pod}` and deploy it with: skyd daemon deploy "
                     f"{self.target.url()}",
            )
        if self.target is not None:
            said = self._last_ssh_error
            return DaemonUnavailableError(
                f"cannot reach the skyd daemon on {self.target.url()}"
                + (f": {said.splitlines()[-1]}" if said else (f": {e}" if e else "")),
                hint=f"check that `ssh {' '.join(self.target.destination())}` logs in without a "
                     "prompt and that skyd is installed there (skyd daemon deploy "
                     f"{self.target.url()})",
            )
        return DaemonUnavailableError(
            f"cannot reach the skyd daemon at {self.socket_path}" + (f": {e}" if e else ""),
            hint="start it with: skyd daemon start (log: " + str(paths.daemon_log()) + ")",
        )

    def _keepalive(self) -> http.client.HTTPConnection:
        if self._conn is not None and time.monotonic() - self._last_used > KEEPALIVE_REUSE_S:
            self.close()  # the daemon closes idle connections: never race it with a POST
        if self._conn is None:
            self._conn = self._new_conn(self.timeout)
        return self._conn

    # -- JSON calls ------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
                idempotent: bool = False) -> Any:
        _, resp = self._open(method, request_url(path, params), body, fresh=False, timeout=self.timeout,
                             headers=headers, idempotent=idempotent)
        data = resp.read()
        if resp.status >= 400:
            raise_for(resp.status, data)
        return json.loads(data) if data else None

    def put_file(self, path: str, body: Any) -> Any:
        """PUT a file's bytes (its own connection, streamed with a Content-Length)."""
        size = os.fstat(body.fileno()).st_size
        conn = self._new_conn(None)
        try:
            conn.request("PUT", request_url(path, None), body=body,
                         headers={"Content-Type": "application/x-tar",
                                  "Content-Length": str(size)})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self._drop(conn, True, keep_error=True)
            raise self._unavailable(e, conn) from None
        conn.close()
        if resp.status >= 400:
            raise_for(resp.status, data)
        return json.loads(data) if data else None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self.request("POST", path, body if body is not None else {}, params)

    def delete(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("DELETE", path, params=params)

    # -- streams ---------------------------------------------------------------------
    def stream_bytes(self, path: str, params: dict[str, Any] | None = None,
                     method: str = "GET", body: Any = None) -> Iterator[bytes]:
        """Raw chunks of a streamed response (own connection, no read timeout)."""
        conn, resp = self._open(method, request_url(path, params), body, fresh=True, timeout=None)
        try:
            if resp.status >= 400:
                raise_for(resp.status, resp.read())
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    return
                yield chunk
        finally:
            conn.close()

    def stream_ndjson(self, path: str, params: dict[str, Any] | None = None,
                      method: str = "GET", body: Any = None) -> Iterator[dict[str, Any]]:
        """One decoded JSON document per line of a streamed ndjson response."""
        buf = b""
        for chunk in self.stream_bytes(path, params, method, body):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
        if buf.strip():
            yield json.loads(buf)

    # -- requests --------------------------------------------------------------------
    def submit(self, verb: str, payload: dict[str, Any] | None = None,
               request_id: str | None = None) -> str:
        """Submit under a request id chosen here, so the request can be sent again after the
        daemon died before answering (restarted when allowed) and still runs once: the
        daemon answers a repeat with the request it already has."""
        import secrets

        if self.target is not None and payload and ("yaml" in payload or "overrides" in payload):
            # A daemon on another host: the task's local files travel first (skyd.sdk.uploads).
            from skyd.sdk.uploads import upload

            payload = upload(self, payload)
        url = f"/v1/requests/{quote(verb, safe='.')}"
        busy_until = time.monotonic() + REATTACH_TIMEOUT
        rid = request_id or secrets.token_hex(4)
        taken = 0
        while taken < 5:
            try:
                doc = self.request("POST", url, payload or {}, headers={REQUEST_ID_HEADER: rid},
                                   idempotent=True)
            except DaemonBusy:
                if time.monotonic() > busy_until:
                    raise
                time.sleep(0.2)  # the same id: a retry can never run the work twice
                continue
            except RequestIdTaken:
                if request_id is not None:
                    raise SkydError(f"request id {rid} is already used by another request",
                                    hint="submit it with another id") from None
                rid = secrets.token_hex(4)  # another request has this id: pick a new one
                taken += 1
                continue
            return str(doc["request_id"])
        raise SkydError("could not pick a free request id", hint="retry")

    def events(self, request_id: str, follow: bool = True,
               reattach_timeout: float = REATTACH_TIMEOUT) -> Iterator[dict[str, Any]]:
        """The request's events. Following, a stream the daemon broke by dying is picked up
        again once the daemon is back (auto-started when allowed): one ``reattach`` event
        says so, and events already seen (by ``seq``) are not repeated. A request that
        resumes after a restart goes on; one that cannot ends with its error event."""
        path = f"/v1/requests/{quote(request_id, safe='')}/events"
        params = {"follow": 1 if follow else 0}
        if not follow:
            yield from self.stream_ndjson(path, params)
            return
        last = 0
        while True:
            try:
                for ev in self.stream_ndjson(path, params):
                    seq = ev.get("seq")
                    if isinstance(seq, int):
                        if seq <= last:
                            continue
                        last = seq
                    yield ev
                return
            except STREAM_BROKEN as e:
                if last == 0 and isinstance(e, DaemonUnavailableError):
                    raise  # never reached the daemon at all: nothing to re-attach to
                self.close()
                self._wait_for_daemon(reattach_timeout, e)
                yield {"type": "reattach", "request_id": request_id,
                       "text": f"the skyd daemon restarted; re-attached to request {request_id}"}

    def _wait_for_daemon(self, timeout: float, cause: BaseException) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.target is not None:  # dial-stdio on the host restarts its daemon
                if self._refresh_remote():
                    return
                time.sleep(0.2)
                continue
            if socket_answers(self.socket_path, 0.5):
                return
            if self.autostart:
                try:
                    ensure_daemon(self.socket_path, timeout=max(1.0, deadline - time.monotonic()))
                    return
                except DaemonUnavailableError:
                    pass
            time.sleep(0.1)
        raise self._unavailable(cause)


# -- daemon control (stdlib only) -----------------------------------------------------
def socket_answers(path: str | Path, timeout: float = 1.0) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def daemon_command() -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "daemon", "run"]
    return [sys.executable, "-m", "skyd.daemon"]


def running_pid() -> int | None:
    """The pid of the daemon holding this SKYD_HOME's pid-file lock, else None."""
    import fcntl

    pf = paths.pid_file()
    try:
        fd = os.open(pf, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = pf.read_text().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def ensure_daemon(socket_path: str | Path | None = None, timeout: float = 30.0) -> bool:
    """Start the daemon in the background unless its socket answers; True if started.

    A file lock under SKYD_HOME/run makes concurrent callers start one daemon.
    """
    import fcntl

    sp = str(socket_path or paths.socket_path())
    if socket_answers(sp):
        return False
    from skyd.privatefs import private_mkdir

    rundir = paths.home() / "run"
    private_mkdir(rundir)  # SKYD_HOME and run/ 0700 from the start
    fd = os.open(rundir / "start.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise DaemonUnavailableError("timed out waiting for another client starting the daemon") from None
                time.sleep(0.02)
        if socket_answers(sp):
            return False
        return _spawn_and_wait(sp, deadline)
    finally:
        os.close(fd)


def _spawn_and_wait(sp: str, deadline: float) -> bool:
    import subprocess

    from skyd.privatefs import open_private, private_mkdir

    logs = paths.logs_dir()
    private_mkdir(logs)
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env[settings.SOCKET.name] = sp
    if getattr(sys, "frozen", False):
        # A frozen daemon must be its own instance: it outlives this CLI process, whose
        # unpacked bundle (onefile) is removed when it exits.
        env["PYINSTALLER_RESET_ENVIRONMENT"] = "1"
    errpath = logs / "daemon.stderr"
    with os.fdopen(open_private(errpath), "ab") as err:
        proc = subprocess.Popen(
            daemon_command(), stdin=subprocess.DEVNULL, stdout=err, stderr=err,
            start_new_session=True, close_fds=True, env=env, cwd="/",
        )
    while time.monotonic() < deadline:
        if socket_answers(sp, 0.5):
            return True
        rc = proc.poll()
        if rc is not None:
            if socket_answers(sp):  # lost a race with a daemon started otherwise
                return False
            tail, hint = _start_error(errpath)
            raise DaemonUnavailableError(
                f"the daemon exited at start (code {rc}){': ' + tail if tail else ''}",
                hint=(hint + "; " if hint else "") + f"see {errpath} and {paths.daemon_log()}",
            )
        time.sleep(0.02)
    raise DaemonUnavailableError(
        f"the daemon did not open {sp} in time", hint=f"see {paths.daemon_log()}"
    )


def _start_error(errpath: Path) -> tuple[str, str]:
    """The daemon's own "error: ..." / "hint: ..." lines at the end of its stderr (else the
    last line)."""
    try:
        lines = errpath.read_text(errors="replace").strip().splitlines()[-20:]
    except OSError:
        return "", ""
    errs = [ln[len("error: "):] for ln in lines if ln.startswith("error: ")]
    hints = [ln[len("hint: "):] for ln in lines if ln.startswith("hint: ")]
    if errs:
        return errs[-1], hints[-1] if hints else ""
    return (lines[-1] if lines else ""), ""


def stop_daemon(timeout: float = 20.0) -> int | None:
    """SIGTERM the running daemon and wait for it to exit; its pid, or None if none ran."""
    import signal

    pid = running_pid()
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running_pid() is None:
            return pid
        time.sleep(0.02)
    raise DaemonUnavailableError(
        f"the daemon (pid {pid}) did not stop within {timeout:g}s",
        hint=f"see {paths.daemon_log()}; kill it with: kill -9 {pid}",
    )
