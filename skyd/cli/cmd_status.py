"""skyd status: clusters from the daemon's state (fast path: no rich for -o json)."""

from __future__ import annotations

import argparse
from typing import Any

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("status", help="show clusters",
                       description="Show clusters known to skyd (from its state; no refresh).")
    p.add_argument("clusters", nargs="*", metavar="CLUSTER", help="only these clusters")
    p.add_argument("-r", "--refresh", action="store_true",
                   help="ask the node agents and providers first (restarts dead agents)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--ip", action="store_true", help="print the head node's address of CLUSTER")
    what.add_argument("--endpoints", action="store_true",
                      help="print every port CLUSTER opens (resources.ports) as PORT: ADDRESS:PORT")
    what.add_argument("--endpoint", type=int, metavar="PORT",
                      help="print ADDRESS:PORT of this port of CLUSTER")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(p)
    add_output_flag(p)
    p.set_defaults(func=run)


def _infra(r: dict[str, Any]) -> str:
    parts = [r.get("cloud"), r.get("region"), r.get("zone")]
    return "/".join(str(x) for x in parts if x) or "-"


def _resources(r: dict[str, Any]) -> str:
    n = r.get("num_nodes") or 1
    bits = []
    acc = r.get("accelerators")
    if isinstance(acc, dict) and acc:
        bits.append(", ".join(f"{k}:{v}" for k, v in acc.items()))
    elif acc:
        bits.append(str(acc))
    if r.get("instance_type"):
        bits.append(str(r["instance_type"]))
    s = f"{n}x({', '.join(bits)})" if bits else f"{n}x"
    return s + (" [spot]" if r.get("use_spot") else "")


def _autostop(r: dict[str, Any]) -> str:
    m = r.get("autostop_minutes")
    if m is None or int(m) < 0:
        return "-"
    from skyd.human import minutes

    return minutes(m) + (" (down)" if r.get("autostop_down") else "")


def _expand(ports: list[Any]) -> list[int]:
    out: list[int] = []
    for p in ports:
        lo, _, hi = str(p).partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            continue
        out.extend(range(a, min(b, a + 1000) + 1))
    return sorted(set(out))


def _one_cluster(args: argparse.Namespace, flag: str) -> str:
    from skyd.errors import InvalidSpecError

    if len(args.clusters) != 1:
        raise InvalidSpecError(f"{flag} needs exactly one CLUSTER", field=flag,
                               hint=f"skyd status {flag} CLUSTER")
    return str(args.clusters[0])


def _addresses(args: argparse.Namespace, flag: str) -> dict[str, Any]:
    from skyd.cli.client import get_client
    from skyd.errors import ClusterStateError

    name = _one_cluster(args, flag)
    row = dict(get_client().get(f"/v1/clusters/{name}/addresses"))
    if not row.get("head_ip"):
        raise ClusterStateError(f"cluster {name!r} has no address yet (status {row.get('status')})",
                                hint=f"skyd status {name}; skyd start {name} if it is stopped")
    return row


def run_addresses(args: argparse.Namespace) -> int:
    """--ip, --endpoints, --endpoint PORT (as `sky status` has them)."""
    from skyd.cli.output import print_json
    from skyd.errors import InvalidSpecError

    flag = "--ip" if args.ip else "--endpoints" if args.endpoints else "--endpoint"
    row = _addresses(args, flag)
    name, head = row["name"], str(row["head_ip"])
    if args.ip:
        doc: dict[str, Any] = {"cluster": name, "head_ip": head, "node_ips": row.get("node_ips") or [],
                               "external_ips": row.get("external_ips") or []}
        if args.output == "json":
            print_json(doc)
        else:
            print(head)
        return 0
    ports = _expand(list((row.get("resources") or {}).get("ports") or []))
    endpoints = {str(p): f"{head}:{p}" for p in ports}
    if args.endpoint is not None:
        if args.endpoint not in ports:
            opened = ", ".join(map(str, ports)) or "none"
            raise InvalidSpecError(f"port {args.endpoint} is not open on cluster {name!r} (open: {opened})",
                                   field="--endpoint", hint="open it with resources.ports in the task")
        if args.output == "json":
            print_json({"cluster": name, "port": args.endpoint, "endpoint": endpoints[str(args.endpoint)]})
        else:
            print(endpoints[str(args.endpoint)])
        return 0
    if args.output == "json":
        print_json({"cluster": name, "endpoints": endpoints})
        return 0
    if not endpoints:
        import sys

        sys.stderr.write(f"Cluster {name!r} opens no ports (set resources.ports in the task).\n")
    for port, ep in endpoints.items():
        print(f"{port}: {ep}")
    return 0


def _summaries(client: Any, extra: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
    """Managed jobs not finished and services not gone (empty where the daemon has none)."""
    from skyd.errors import SkydError

    try:
        jobs = list(client.get("/v1/jobs", {"skip_finished": 1, **extra}))
    except SkydError:
        jobs = []
    try:
        services = list(client.get("/v1/services", extra or None))
    except SkydError:
        services = []
    return jobs, services


def run(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    if args.ip or args.endpoints or args.endpoint is not None:
        return run_addresses(args)
    from skyd.cli import users

    params = users.params(args, {"name": args.clusters} if args.clusters else None)
    client = get_client()
    if args.refresh:
        client.post("/v1/status/refresh", {"clusters": args.clusters or None}, users.params(args))
    rows = client.get("/v1/status", params)
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import ago, print_table

    print_table(rows, users.columns(args, [
        ("NAME", "name"), ("INFRA", _infra), ("RESOURCES", _resources), ("STATUS", "status"),
        ("AUTOSTOP", _autostop), ("LAUNCHED", lambda r: ago(r.get("launched_at"))),
    ]), empty="No existing clusters.")
    if args.clusters:
        return 0
    # Below the clusters, as `sky status` does: managed jobs and services in progress.
    jobs, services = _summaries(client, users.params(args) or {})
    print("\nManaged jobs")
    if jobs:
        print_table(jobs, users.columns(args, [
            ("ID", "id"), ("NAME", "name"), ("STATUS", "status"),
            ("SUBMITTED", lambda r: ago(r.get("submitted_at"))),
            ("RECOVERIES", "recoveries"),
        ]))
    else:
        print("No in-progress managed jobs.")
    print("\nServices")
    if services:
        print_table(services, users.columns(args, [
            ("NAME", "name"), ("STATUS", "status"),
            ("REPLICAS", lambda s: f"{sum(r.get('status') == 'READY' for r in s.get('replicas') or [])}/"
                                   f"{len(s.get('replicas') or [])}"),
            ("ENDPOINT", "endpoint"),
        ]))
    else:
        print("No live services.")
    return 0
