"""skyd daemon run|start|stop|status."""

from __future__ import annotations

import argparse
import sys

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("daemon", help="run or manage the skyd daemon",
                       description="The daemon runs every request and keeps skyd's state. "
                                   "Client commands start it on demand.")
    ds = p.add_subparsers(dest="daemon_cmd", metavar="SUBCOMMAND")
    p.set_defaults(_parser=p)
    ds.add_parser("run", help="run in the foreground (systemd, debugging)").set_defaults(func=run_fg)
    ds.add_parser("start", help="start in the background").set_defaults(func=run_start)
    ds.add_parser("stop", help="stop (SIGTERM) and wait").set_defaults(func=run_stop)
    st = ds.add_parser("status", help="is it running? pid, socket, uptime")
    add_output_flag(st)
    st.set_defaults(func=run_status)


def run_fg(args: argparse.Namespace) -> int:
    from skyd.daemon.app import main

    return main([])


def run_start(args: argparse.Namespace) -> int:
    from skyd.cli.client import ensure_daemon, running_pid

    started = ensure_daemon()
    pid = running_pid()
    sys.stdout.write(f"skyd daemon {'started' if started else 'already running'} (pid {pid})\n")
    return 0


def run_stop(args: argparse.Namespace) -> int:
    from skyd.cli.client import stop_daemon

    pid = stop_daemon()
    sys.stdout.write("skyd daemon is not running\n" if pid is None else f"skyd daemon stopped (pid {pid})\n")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from skyd import paths
    from skyd.cli.client import Client, running_pid
    from skyd.errors import DaemonUnavailableError

    pid = running_pid()
    info: dict[str, object] = {"running": False, "pid": pid, "socket": str(paths.socket_path()),
                               "home": str(paths.home()), "log": str(paths.daemon_log())}
    if pid is not None:
        try:
            with Client(autostart=False, timeout=5) as c:
                h = c.get("/v1/health")
            info.update(running=True, pid=h["pid"], version=h["version"], uptime_s=h["uptime_s"],
                        requests_in_flight=h["requests_in_flight"])
        except DaemonUnavailableError as e:
            info["error"] = str(e)
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(info)
    elif info["running"]:
        sys.stdout.write(
            f"skyd daemon running: pid {info['pid']}, up {info['uptime_s']}s, "
            f"{info['requests_in_flight']} request(s) in flight\n"
            f"socket {info['socket']}\nlog    {info['log']}\n")
    else:
        sys.stdout.write(f"skyd daemon is not running (socket {info['socket']})\n")
    return 0 if info["running"] else 3
