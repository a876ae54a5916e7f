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
    rp = ds.add_parser("run", help="run in the foreground (systemd, debugging)")
    _sharing_flags(rp)
    rp.set_defaults(func=run_fg)
    sp = ds.add_parser("start", help="start in the background")
    _sharing_flags(sp)
    sp.set_defaults(func=run_start)
    ds.add_parser("stop", help="stop (SIGTERM) and wait").set_defaults(func=run_stop)
    st = ds.add_parser("status", help="is it running? pid, socket, uptime")
    add_output_flag(st)
    st.set_defaults(func=run_status)
    dsp = ds.add_parser("dial-stdio", help="relay stdin/stdout to the daemon's socket (what a "
                        "remote client runs over SSH)")
    dsp.add_argument("--socket-path", action="store_true",
                     help="only start the daemon and print its socket's path")
    dsp.set_defaults(func=run_dial_stdio)
    dp = ds.add_parser(
        "deploy", help="install skyd on a host over SSH (or in Kubernetes) and run its daemon "
                       "there",
        description="Install this skyd on HOST (ssh://user@host[:port] or ssh://ALIAS) and "
                    "start its daemon there (a systemd user service with lingering, else "
                    "detached); or, for k8s://CONTEXT/NAMESPACE, run it as a one-replica "
                    "StatefulSet with a volume for its state. Then point clients at it with the SKYD_HOST line it prints, "
                    "`skyd --host …`, or `skyd context add`. Idempotent.")
    dp.add_argument("host", metavar="HOST")
    dp.add_argument("--binary", help="the skyd executable to install (default: this one "
                                     "when it is the frozen single file)")
    dp.add_argument("--upgrade", action="store_true",
                    help="replace a different skyd already running there (state is kept)")
    dp.add_argument("--with-credentials", metavar="LIST",
                    help="copy these local credentials there, 0600: aws,gcp,kubernetes")
    dp.add_argument("--remote-home", metavar="PATH", help="SKYD_HOME on the host")
    dp.add_argument("--context", metavar="NAME", help="also save it as this context")
    dp.add_argument("--image", metavar="IMAGE",
                    help="k8s:// only: an image with skyd on its PATH (default: a stock "
                         "python image and the skyd executable copied onto its volume)")
    _sharing_flags(dp)
    dp.set_defaults(func=run_deploy)


def _sharing_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shared-group", metavar="GROUP",
                   help="share this daemon with the members of Unix group GROUP (a second "
                        "socket, 0660 group GROUP; each user sees and acts on their own)")
    p.add_argument("--admin-group", metavar="GROUP",
                   help="members of GROUP may act on every user's clusters, jobs and services")


def _apply_sharing(args: argparse.Namespace) -> None:
    """The sharing flags, as the environment the daemon reads (checked here first)."""
    import os

    from skyd import settings
    from skyd.daemon.owners import ADMIN_GROUP_ENV, SHARED_GROUP_ENV, group_gid
    from skyd.errors import InvalidSpecError, SkydError

    for flag, env in (("shared_group", SHARED_GROUP_ENV), ("admin_group", ADMIN_GROUP_ENV)):
        value = getattr(args, flag, None)
        if value:
            try:
                group_gid(value, "--" + flag.replace("_", "-"))
            except SkydError as e:
                raise InvalidSpecError(e.message, field=e.field, hint=e.hint) from None
            os.environ[env] = value
    if getattr(args, "admin_group", None) and not settings.SHARED_GROUP.get():
        raise InvalidSpecError("--admin-group only matters for a shared daemon",
                               field="--admin-group", hint="add --shared-group GROUP")


def run_fg(args: argparse.Namespace) -> int:
    from skyd.daemon.app import main

    _apply_sharing(args)
    return main([])


def run_start(args: argparse.Namespace) -> int:
    from skyd.cli.client import ensure_daemon, running_pid

    _apply_sharing(args)
    started = ensure_daemon()
    if getattr(args, "shared_group", None) and not started:
        sys.stderr.write("note: the daemon already runs; stop it first (skyd daemon stop) "
                         "for --shared-group to take effect\n")
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
                        requests_in_flight=h["requests_in_flight"],
                        shared_socket=h.get("shared_socket"))
        except DaemonUnavailableError as e:
            info["error"] = str(e)
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(info)
    elif info["running"]:
        sys.stdout.write(
            f"skyd daemon running: pid {info['pid']}, up {info['uptime_s']}s, "
            f"{info['requests_in_flight']} request(s) in flight\n"
            f"socket {info['socket']}\nlog    {info['log']}\n"
            + (f"shared {info['shared_socket']} (group members: SKYD_HOST=ssh://USER@HOST"
               f"?socket={info['shared_socket']})\n" if info.get("shared_socket") else ""))
    else:
        sys.stdout.write(f"skyd daemon is not running (socket {info['socket']})\n")
    return 0 if info["running"] else 3


def run_dial_stdio(args: argparse.Namespace) -> int:
    from skyd.sdk.remote import dial_stdio

    return dial_stdio(print_socket=args.socket_path)


def run_deploy(args: argparse.Namespace) -> int:
    from skyd.cli.deploy import deploy, host_line
    from skyd.errors import InvalidSpecError
    from skyd.sdk.kubehost import is_k8s
    from skyd.sdk.remote import parse_ssh

    if is_k8s(args.host):
        return _deploy_k8s(args)
    if args.image:
        raise InvalidSpecError("--image is for k8s:// hosts", field="--image",
                               hint="an SSH host runs the executable deploy copies there")
    t = parse_ssh(args.host, remote_home=args.remote_home)
    lines: list[str] = []
    try:
        t = deploy(t, binary=args.binary, upgrade=args.upgrade,
                   credentials=args.with_credentials, out=lines,
                   shared_group=args.shared_group, admin_group=args.admin_group)
    finally:
        for ln in lines:
            sys.stderr.write(ln + "\n")
    url = host_line(t)
    if args.context:
        from skyd.cli.cmd_context import add_context

        add_context(args.context, url)
        sys.stderr.write(f"saved as context {args.context!r} (skyd context use {args.context})\n")
    sys.stdout.write(f"export SKYD_HOST={url}\n")
    return 0


def _deploy_k8s(args: argparse.Namespace) -> int:
    """``skyd daemon deploy k8s://CONTEXT/NAMESPACE`` (skyd.cli.deploy_k8s)."""
    from skyd.cli.deploy_k8s import deploy
    from skyd.errors import InvalidSpecError
    from skyd.sdk.kubehost import parse_k8s

    for flag in ("with_credentials", "remote_home"):
        if getattr(args, flag, None):
            name = "--" + flag.replace("_", "-")
            raise InvalidSpecError(f"{name} is for ssh:// hosts", field=name,
                                   hint="a pod's daemon keeps SKYD_HOME on its volume and uses "
                                        "the pod's service account")
    t = parse_k8s(args.host)
    lines: list[str] = []
    try:
        t = deploy(t, binary=args.binary, image=args.image, upgrade=args.upgrade, out=lines)
    finally:
        for ln in lines:
            sys.stderr.write(ln + "\n")
    url = t.url()
    if args.context:
        from skyd.cli.cmd_context import add_context

        add_context(args.context, url)
        sys.stderr.write(f"saved as context {args.context!r} (skyd context use {args.context})\n")
    sys.stdout.write(f"export SKYD_HOST={url}\n")
    return 0
