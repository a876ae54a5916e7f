"""`skyd serve up | status | down | logs` (a CLI command module: see skyd.cli.commands).

Only argparse/sys at import; the client and helpers are imported in the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="services: replicas behind a load balancer",
                       description="Serve a task's program on replicas behind a load balancer "
                                   "that runs inside the daemon.")  # fmt: skip
    ss = p.add_subparsers(dest="serve_cmd", metavar="SUBCOMMAND")
    p.set_defaults(func=run_status, name=None, output="table", endpoint=False, verbose=False)

    up = ss.add_parser("up", help="bring a service up from a task YAML with a service: section")
    up.add_argument("yaml", metavar="TASK.yaml")
    up.add_argument("-n", "--service-name", dest="name", help="service name (default: the task's)")
    up.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]", help="task env var")
    up.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    up.add_argument("-o", "--output", choices=("table", "json"), default="table")
    from skyd.cli.compat_flags import add_config_flag, add_task_flags

    add_config_flag(up)
    add_task_flags(up)  # --gpus, --infra, ..., --env-file, --secret (as sky serve up)
    up.set_defaults(func=run_up)

    u = ss.add_parser("update", help="roll a service to a new version of its task YAML")
    u.add_argument("name", metavar="NAME")
    u.add_argument("yaml", metavar="TASK.yaml")
    u.add_argument("--mode", choices=("rolling", "blue_green"), default="rolling",
                   help="rolling: old replicas go as new ones are READY; blue_green: all at "
                        "once when the new set is READY")  # fmt: skip
    u.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]", help="task env var")
    u.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    add_config_flag(u)
    add_task_flags(u)
    u.set_defaults(func=run_update)

    s = ss.add_parser("status", help="services and their replicas")
    s.add_argument("name", nargs="?", metavar="NAME")
    s.add_argument("-o", "--output", choices=("table", "json"), default="table")
    s.add_argument("--endpoint", action="store_true", help="print only the endpoint of NAME")
    s.add_argument("-v", "--verbose", action="store_true", help="with the autoscaler's last decision")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(s)
    s.set_defaults(func=run_status)

    d = ss.add_parser("down", help="take services down (their replicas' clusters go)")
    d.add_argument("names", nargs="*", metavar="NAME")
    d.add_argument("-a", "--all", action="store_true", help="every service")
    d.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    d.set_defaults(func=run_down)

    lg = ss.add_parser("logs", help="a replica's output, or the controller's log")
    lg.add_argument("name", metavar="NAME")
    lg.add_argument("replica", nargs="?", type=int, metavar="REPLICA_ID")
    lg.add_argument("--controller", dest="controller", action="store_true",
                    help="the controller's log (the default without REPLICA_ID)")
    lg.add_argument("--load-balancer", dest="load_balancer", action="store_true",
                    help="the load balancer's access log (a line per request)")
    lg.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    lg.set_defaults(func=run_logs)


def run_up(args: argparse.Namespace) -> int:
    from pathlib import Path

    from skyd.cli.client import get_client
    from skyd.cli.compat_flags import task_flags_payload
    from skyd.sdk.payloads import config_sources, read_task_file

    path = Path(args.yaml)
    payload: dict[str, Any] = {
        "yaml": read_task_file(path, args.yaml), "yaml_path": str(path),
        "base_dir": str(path.resolve().parent), "name": args.name,
        "config": config_sources(args.config), **task_flags_payload(args),
    }  # fmt: skip
    client = get_client()
    rid = client.submit("serve.up", payload)
    from skyd.cli.compat_flags import print_async
    from skyd.cli.progress import wait_result

    if print_async(args, rid):
        return 0

    out = wait_result(client, rid)
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(out)
        return 0
    sys.stdout.write(f"Service {out['name']} is starting; endpoint: {out['endpoint']}\n"
                     f"  status: skyd serve status {out['name']}\n"
                     f"  logs:   skyd serve logs {out['name']}\n")  # fmt: skip
    return 0


def run_update(args: argparse.Namespace) -> int:
    from pathlib import Path

    from skyd.cli.client import get_client
    from skyd.cli.compat_flags import print_async, task_flags_payload
    from skyd.cli.progress import wait_result
    from skyd.sdk.payloads import config_sources, read_task_file

    path = Path(args.yaml)
    payload: dict[str, Any] = {
        "yaml": read_task_file(path, args.yaml), "yaml_path": str(path),
        "base_dir": str(path.resolve().parent), "name": args.name,
        "mode": args.mode, "config": config_sources(args.config), **task_flags_payload(args),
    }  # fmt: skip
    client = get_client()
    rid = client.submit("serve.update", payload)
    if print_async(args, rid):
        return 0
    out = wait_result(client, rid)
    sys.stdout.write(f"Service {out['name']}: updating to version {out['version']} "
                     f"({args.mode}); watch with `skyd serve status {out['name']}`\n")
    return 0


def _replica_rows(svc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**r, "service": svc["name"]} for r in svc.get("replicas") or []]


def run_status(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    client = get_client()
    from skyd.cli import users

    rows = ([client.get(f"/v1/services/{args.name}")] if args.name
            else client.get("/v1/services", users.params(args)))
    if args.endpoint:
        if not args.name:
            from skyd.errors import InvalidSpecError

            raise InvalidSpecError("--endpoint needs a service NAME", field="--endpoint")
        sys.stdout.write(f"{rows[0]['endpoint']}\n")
        return 0
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows[0] if args.name else rows)
        return 0
    from skyd.cli.output import ago, print_table

    sys.stdout.write("Services\n")
    print_table(rows, users.columns(args, [
        ("NAME", "name"), ("VERSION", "version"), ("STATUS", "status"),
        ("REPLICAS", lambda s: f"{sum(r['status'] == 'READY' for r in s['replicas'])}/"
                               f"{len(s['replicas'])}"),
        ("ENDPOINT", "endpoint"), ("POLICY", "policy"),
        ("QPS", lambda s: (s.get("load_balancer") or {}).get("qps", "-")),
        ("UPTIME", lambda s: ago(s.get("created_at"))), ("REASON", "status_reason"),
    ]), empty="No services.")  # fmt: skip
    reps = [r for s in rows for r in _replica_rows(s)]
    if reps:
        sys.stdout.write("\nReplicas\n")
        print_table(reps, [
            ("SERVICE", "service"), ("ID", "replica_id"), ("VERSION", "version"),
            ("STATUS", "status"), ("URL", "url"), ("INFRA", lambda r: "/".join(
                p for p in (r.get("cloud"), r.get("region"), r.get("zone")) if p) or "-"),
            ("LAUNCHED", lambda r: ago(r.get("created_at"))), ("REASON", "status_reason"),
        ])  # fmt: skip
    if args.verbose:
        for s in rows:
            a = s.get("autoscaler")
            if a:
                sys.stdout.write(f"\n{s['name']}: autoscaler {a['name']} target {a['target']}: "
                                 f"{a['reason']} {a['inputs']}\n")
    return 0


def run_down(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import wait_result
    from skyd.errors import InvalidSpecError

    if not args.names and not args.all:
        raise InvalidSpecError("say which services to take down", hint="skyd serve down NAME | -a")
    client = get_client()
    rid = client.submit("serve.down", {"names": args.names, "all": args.all})
    sys.stdout.write("Taking down (removing the replicas' clusters)...\n")
    sys.stdout.flush()
    names = wait_result(client, rid).get("down") or []
    sys.stdout.write(f"Service(s) down: {', '.join(names)}\n" if names else "No service.\n")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    params: dict[str, Any] = {"follow": 0 if args.no_follow else 1}
    if args.load_balancer:
        params["load_balancer"] = 1
    elif args.replica is not None and not args.controller:
        params["replica"] = args.replica
    for item in get_client().stream_ndjson(f"/v1/services/{args.name}/logs", params):
        sys.stdout.write(item.get("text", ""))
        sys.stdout.flush()
    return 0
