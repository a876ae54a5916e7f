"""``skyd daemon deploy ssh://user@host``: install this skyd on a host and start its daemon
there, so managed jobs and services keep going while the workstation sleeps.

Everything goes through the user's OpenSSH client (skyd.sdk.remote): the binary is streamed
over stdin (content-addressed: an identical binary is not sent again), the daemon runs as a
systemd user service with lingering where systemd answers, else detached under nohup. State
lives in the host's SQLite, so ``--upgrade`` (stop, replace, start) loses no request, job or
service: the new daemon resumes them as after any restart.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

from skyd.errors import InvalidSpecError, SkydError
from skyd.sdk.remote import DEFAULT_REMOTE_BIN, Target, remote_path, remote_skyd, ssh_argv

# Local credential files each name copies, to the same place under the host user's home.
CREDENTIALS: dict[str, tuple[str, ...]] = {
    "aws": ("~/.aws/credentials", "~/.aws/config"),
    "gcp": ("~/.config/gcloud/application_default_credentials.json",),
    "kubernetes": ("~/.kube/config",),
}
CREDENTIAL_ALIASES = {"k8s": "kubernetes", "gcloud": "gcp"}

UNIT = """[Unit]
Description=skyd daemon (remote control plane)

[Service]
Type=simple
ExecStart={bin} daemon run
{env}Restart=on-failure

[Install]
WantedBy=default.target
"""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run(t: Target, script: str, *, stdin: int | None = None, timeout: float = 120,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        r = subprocess.run(ssh_argv(t, script), stdin=stdin if stdin is not None else subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SkydError("no `ssh` command on this machine (OpenSSH client)",
                        hint="install openssh-client") from None
    except subprocess.TimeoutExpired:
        raise SkydError(f"{t.url()} did not answer within {timeout:g}s",
                        hint=f"check `ssh {' '.join(t.destination())}`") from None
    if check and r.returncode != 0:
        said = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise SkydError(f"on {t.url()}: {said}",
                        hint=f"check that `ssh {' '.join(t.destination())}` logs in without a prompt")
    return r


def local_binary(arg: str | None) -> Path:
    if arg:
        p = Path(arg).expanduser()
        if not p.is_file():
            raise InvalidSpecError(f"--binary {arg!r} is not a file", field="--binary",
                                   hint="name the frozen skyd executable to install")
        return p
    if getattr(sys, "frozen", False):
        return Path(sys.executable)
    raise InvalidSpecError(
        "this skyd runs from a Python environment, which cannot be copied to a host",
        field="--binary",
        hint="build the single-file executable (packaging/build.sh onefile) and pass "
             "--binary dist/onefile/skyd, or run deploy from that executable")


def _credential_files(names: str) -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for raw in [n.strip().lower() for n in names.split(",") if n.strip()]:
        name = CREDENTIAL_ALIASES.get(raw, raw)
        if name not in CREDENTIALS:
            raise InvalidSpecError(f"unknown credentials {raw!r}", field="--with-credentials",
                                   hint=f"known: {', '.join(sorted(CREDENTIALS))}")
        found = False
        for rel in CREDENTIALS[name]:
            local = Path(rel).expanduser()
            if name == "gcp" and os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
                local = Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).expanduser()
            if name == "kubernetes" and os.environ.get("KUBECONFIG"):
                local = Path(os.environ["KUBECONFIG"].split(os.pathsep)[0]).expanduser()
            if local.is_file():
                out.append((rel, local))
                found = True
        if not found:
            raise InvalidSpecError(f"no local {name} credentials to copy "
                                   f"(looked for {', '.join(CREDENTIALS[name])})",
                                   field="--with-credentials",
                                   hint=f"set up {name} here first, or leave it out")
    return out


def _put_file(t: Target, local: Path, remote: str, mode: str = "600") -> None:
    """Stream ``local`` to ``remote`` (``~/`` allowed) on the host: private from the first
    byte (umask 077), replaced atomically."""
    dst = remote_path(remote)
    tmp = remote_path(remote + ".skyd-new")
    script = (f"umask 077 && mkdir -p \"$(dirname {dst})\" && cat > {tmp} && "
              f"chmod {mode} {tmp} && mv -f {tmp} {dst}")
    with open(local, "rb") as f:
        _run(t, script, stdin=f.fileno(), timeout=600)


def deploy(t: Target, *, binary: str | None, upgrade: bool, credentials: str | None,
           out: list[str], shared_group: str | None = None,
           admin_group: str | None = None) -> Target:
    """Install and start; returns the target clients should use (with the binary path).
    With ``shared_group``, the daemon is shared with that Unix group of the host and its
    shared socket is named in ``out`` (the SKYD_HOST line the group's users use)."""
    if admin_group and not shared_group:
        raise InvalidSpecError("--admin-group only matters for a shared daemon",
                               field="--admin-group", hint="add --shared-group GROUP")
    sharing = {k: v for k, v in (("SKYD_SHARED_GROUP", shared_group),
                                 ("SKYD_ADMIN_GROUP", admin_group)) if v}
    for v in sharing.values():
        if not all(c.isalnum() or c in "._-" for c in v):
            raise InvalidSpecError(f"group name {v!r} has characters a group name has not",
                                   field="--shared-group", hint="give the group's name")
    bin_path = local_binary(binary)
    creds = _credential_files(credentials) if credentials else []
    remote_bin = t.remote_bin or DEFAULT_REMOTE_BIN
    t = t._replace(remote_bin=remote_bin)
    rb = remote_path(remote_bin)
    sha = _sha256(bin_path)
    probe = _run(t, f"if [ -f {rb} ]; then sha256sum {rb} | cut -d' ' -f1; else echo none; fi; "
                    "if systemctl --user show-environment >/dev/null 2>&1; then echo systemd; "
                    "else echo nosystemd; fi")
    lines = probe.stdout.split()
    have, systemd = (lines + ["none", "nosystemd"])[:2]
    running = _run(t, remote_skyd(t, "daemon", "status", "-o", "json"), check=False).returncode == 0
    if have == sha:
        out.append(f"skyd on {t.url()} is up to date ({remote_bin})")
        replaced = False
    elif have != "none" and running and not upgrade:
        raise SkydError(f"another skyd build runs on {t.url()} ({remote_bin})",
                        hint="pass --upgrade to replace it (its state, jobs and services are kept)")
    else:
        if running:
            _run(t, remote_skyd(t, "daemon", "stop"), timeout=60)
            out.append(f"stopped the daemon on {t.url()} for the upgrade")
        _put_file(t, bin_path, remote_bin, mode="700")
        out.append(f"installed {bin_path.name} ({bin_path.stat().st_size // (1 << 20)} MiB) "
                   f"as {remote_bin} on {t.url()}")
        replaced = True
    for rel, local in creds:
        _put_file(t, local, rel)
        out.append(f"copied {local} to {rel} on {t.url()} (0600)")
    if systemd == "systemd":
        env = f"Environment=SKYD_HOME={t.remote_home}\n" if t.remote_home else ""
        env += "".join(f"Environment={k}={v}\n" for k, v in sharing.items())
        unit = UNIT.format(bin=remote_bin.replace("~/", "%h/"), env=env)
        script = (f"umask 077 && mkdir -p ~/.config/systemd/user && "
                  f"printf %s {shlex.quote(unit)} > ~/.config/systemd/user/skyd.service && "
                  "(loginctl enable-linger \"$(id -un)\" >/dev/null 2>&1 || true) && "
                  "systemctl --user daemon-reload && systemctl --user enable skyd.service "
                  ">/dev/null 2>&1 && systemctl --user "
                  + ("restart" if replaced else "start") + " skyd.service")
        _run(t, script)
        out.append(f"daemon runs as the systemd user service skyd.service on {t.url()} "
                   "(lingering enabled: it keeps running after logout)")
    else:
        # `daemon start` detaches (new session, stdio closed) and returns once the socket
        # answers; nohup keeps a SIGHUP at logout away from it.
        flags = [a for k, v in sharing.items()
                 for a in ("--shared-group" if k == "SKYD_SHARED_GROUP" else "--admin-group", v)]
        _run(t, remote_skyd(t, "daemon", "start", *flags, launcher="exec nohup") + " </dev/null",
             timeout=60)
        out.append(f"daemon started on {t.url()} (detached; no systemd user manager there)")
    if shared_group:
        uid = _run(t, "id -u").stdout.strip()
        sock = f"/var/tmp/skyd-shared-{uid}/skyd.sock"
        who = t._replace(user=None, remote_bin=None, remote_home=None, remote_socket=sock)
        out.append(f"shared with the members of group {shared_group}: each of them uses "
                   f"export SKYD_HOST={host_line(who).replace('ssh://', 'ssh://THEIR_USER@')}")
    return t


def host_line(t: Target) -> str:
    """The SKYD_HOST value that reaches what was deployed."""
    from urllib.parse import quote

    q = []
    if t.remote_bin and t.remote_bin != DEFAULT_REMOTE_BIN:
        q.append(f"bin={quote(t.remote_bin, safe='/~')}")
    if t.remote_home:
        q.append(f"home={quote(t.remote_home, safe='/~')}")
    if t.remote_socket:
        q.append(f"socket={quote(t.remote_socket, safe='/~')}")
    return t.url() + (("?" + "&".join(q)) if q else "")
