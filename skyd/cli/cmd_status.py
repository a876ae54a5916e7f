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


def run(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    params = {"name": args.clusters} if args.clusters else None
    client = get_client()
    if args.refresh:
        client.post("/v1/status/refresh", {"clusters": args.clusters or None})
    rows = client.get("/v1/status", params)
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import ago, print_table

    print_table(rows, [
        ("NAME", "name"), ("INFRA", _infra), ("RESOURCES", _resources), ("STATUS", "status"),
        ("AUTOSTOP", _autostop), ("LAUNCHED", lambda r: ago(r.get("launched_at"))),
    ], empty="No existing clusters.")
    return 0
