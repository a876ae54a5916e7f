"""``skyd daemon install-service`` / ``uninstall-service``: a systemd *user* unit.

The unit runs ``skyd daemon run`` (frozen binary) or ``<venv python> -m skyd.daemon``
(an installed or editable venv) as ``Type=notify``: the daemon sends ``READY=1`` once its
socket listens (skyd.daemon.notify). SKYD_HOME / SKYD_SOCKET / SKYD_CONFIG_DIR set at
install time are written into the unit so the CLI in the same environment finds the
service's socket. Stdlib (and skyd.settings) only. Hardening choices are documented in docs/packaging.md.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skyd import settings
from skyd.errors import SkydError

UNIT_NAME = "skyd.service"
ENV_KEYS = tuple(k.name for k in (settings.HOME, settings.SOCKET, settings.CONFIG_DIR,
                                  settings.CATALOG_DIR))

UNIT_TEMPLATE = """\
# skyd daemon as a systemd user service. Written by `skyd daemon install-service`;
# remove with `skyd daemon uninstall-service`. Local changes: `systemctl --user edit skyd`.
[Unit]
Description=skyd: AI workload launcher daemon
Documentation=https://github.com/skyd-dev/skyd/blob/main/docs/packaging.md
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start}
{environment}Restart=on-failure
RestartSec=2
# The daemon cancels requests within SKYD_SHUTDOWN_GRACE (10 s) after SIGTERM.
TimeoutStopSec=30
# Node agents of the `local` infra run detached in this cgroup and must outlive a daemon
# restart (they are the "machines"): stop only the daemon process itself.
KillMode=process
UMask=0077
LimitNOFILE=65536
# Hardening that works in an unprivileged user manager without user namespaces.
# No PrivateTmp/ProtectSystem/ProtectHome: in a user unit they need PrivateUsers=, would
# hide the user's files, /tmp sockets and GPUs from local-infra jobs, and protect nothing
# an unprivileged process could change anyway.
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native

[Install]
WantedBy=default.target
"""


def unit_dir() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user`` (default ``~/.config/systemd/user``)."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(xdg) / "systemd" / "user"


def unit_path() -> Path:
    return unit_dir() / UNIT_NAME


def exec_start_argv() -> list[str]:
    """How systemd starts this very skyd: the frozen binary, or this interpreter.

    The one-file build runs from its unpack cache; the unit names the one file itself
    (its launcher sets SKYD_ONEFILE), which outlives that cache folder: a newer version
    cleans the folders no process runs from."""
    if getattr(sys, "frozen", False):
        onefile = settings.ONEFILE.get()
        if onefile and os.path.isabs(onefile) and os.path.isfile(onefile):
            return [onefile, "daemon", "run"]
        return [os.path.realpath(sys.executable), "daemon", "run"]
    return [os.path.abspath(sys.executable), "-m", "skyd.daemon"]


def _quote(arg: str) -> str:
    """systemd command-line quoting (double quotes; % and $ escaped)."""
    esc = arg.replace("%", "%%").replace("$", "$$")
    if esc and all(c.isalnum() or c in "/._-+:=,@" for c in esc):
        return esc
    return '"' + esc.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    environment = "".join(
        f"Environment={_quote(f'{k}={v}')}\n" for k, v in sorted((env or {}).items())
    )
    return UNIT_TEMPLATE.format(exec_start=" ".join(_quote(a) for a in argv), environment=environment)


def install_env() -> dict[str, str]:
    """skyd variables of the installing shell that the service must share with the CLI."""
    out = {}
    for k in ENV_KEYS:
        v = os.environ.get(k)
        if v:
            out[k] = str(Path(v).expanduser().resolve()) if k != "SKYD_CATALOG_DIR" else v
    out["PYTHONUNBUFFERED"] = "1"
    return out


@dataclass
class Outcome:
    unit: Path
    commands: list[list[str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    systemctl: bool = True


def _systemctl(args: list[str], out: Outcome) -> None:
    cmd = ["systemctl", "--user", *args]
    out.commands.append(cmd)
    if not out.systemctl:
        return
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise SkydError(
            f"`{shlex.join(cmd)}` failed: {err[-1] if err else f'exit {proc.returncode}'}",
            hint=f"the unit is written at {out.unit}. Without a systemd user manager (containers, "
                 "ssh sessions without `loginctl enable-linger $USER`) run `skyd daemon start` "
                 "instead",
        )


# Stops a daemon the CLI started in the background; answers its pid, None when none ran.
StopBackground = Callable[[], "int | None"]


def install(*, now: bool = False, stop_background: StopBackground | None = None) -> Outcome:
    """Write the unit, daemon-reload, enable it; ``now`` also (re)starts it, after
    ``stop_background()`` stopped a daemon that holds the socket."""
    path = unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_unit(exec_start_argv(), install_env())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    out = Outcome(path, systemctl=shutil.which("systemctl") is not None)
    out.messages.append(f"wrote {path}")
    if not out.systemctl:
        out.messages.append("systemctl not found: systemd is not available here, so the unit "
                            "was only written. On a systemd machine run:")
    if now:
        _stop_background_daemon(out, stop_background)
    _systemctl(["daemon-reload"], out)
    _systemctl(["enable", *(["--now"] if now else []), UNIT_NAME], out)
    if now:
        _systemctl(["restart", UNIT_NAME], out)
    if out.systemctl:
        out.messages.append("enabled skyd.service" + (" and started it" if now else
                            "; it starts at your next login (or now: systemctl --user start skyd)"))
    return out


def uninstall() -> Outcome:
    """Disable and stop the unit, remove the file, daemon-reload."""
    path = unit_path()
    out = Outcome(path, systemctl=shutil.which("systemctl") is not None)
    if not out.systemctl:
        out.messages.append("systemctl not found: removing the unit file only")
    if path.exists():
        _systemctl(["disable", "--now", UNIT_NAME], out)
        path.unlink()
        out.messages.append(f"removed {path}")
        _systemctl(["daemon-reload"], out)
    else:
        out.messages.append(f"no unit at {path}: nothing to remove")
    return out


def _stop_background_daemon(out: Outcome, stop_background: StopBackground | None) -> None:
    """A daemon started by the CLI would hold the socket the service wants: stop it (the
    caller's client does, as ``skyd daemon stop`` would: the daemon imports no client)."""
    if stop_background is None or not out.systemctl:
        return
    pid = stop_background()
    if pid is not None and pid > 0:
        out.messages.append(f"stopped the background daemon (pid {pid}) so the service owns the socket")
