"""skyd daemon install-service [--now] / uninstall-service (systemd user unit).

Registered under the existing ``daemon`` command group (skyd.cli.cmd_daemon owns it):
this module must come after it in COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import sys


def _daemon_subparsers(sub: argparse._SubParsersAction) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    parser = sub.choices.get("daemon")
    if parser is None:
        return None
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    ds = _daemon_subparsers(sub)
    if ds is None:  # no `daemon` group yet: offer the commands at top level
        ds = sub
    p = ds.add_parser("install-service", help="run the daemon as a systemd user service",
                      description="Write ~/.config/systemd/user/skyd.service for this skyd "
                                  "(frozen binary or this Python), daemon-reload and enable it.")
    p.add_argument("--now", action="store_true", help="also start it now")
    p.set_defaults(func=run_install)
    u = ds.add_parser("uninstall-service", help="disable, stop and remove the user service")
    u.set_defaults(func=run_uninstall)


def _report(out: object) -> None:
    import shlex

    for m in getattr(out, "messages", []):
        sys.stdout.write(m + "\n")
    if not getattr(out, "systemctl", True):
        for c in getattr(out, "commands", []):
            sys.stdout.write("  " + shlex.join(c) + "\n")


def _stop_background() -> int | None:
    """Stop a daemon the CLI started (it holds the socket the service wants): its pid."""
    from skyd.cli.client import running_pid, stop_daemon

    pid = running_pid()
    if pid is not None and pid > 0:
        stop_daemon()
    return pid


def run_install(args: argparse.Namespace) -> int:
    from skyd.daemon.service_install import install

    _report(install(now=bool(args.now), stop_background=_stop_background))
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    from skyd.daemon.service_install import uninstall

    _report(uninstall())
    return 0
