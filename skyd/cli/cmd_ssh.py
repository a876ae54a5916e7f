"""`skyd ssh ls` and `skyd ssh check POOL [-o json]`. Only argparse at import time."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("ssh", help="SSH node pools")
    sub = p.add_subparsers(dest="ssh_cmd", required=True)
    ls = sub.add_parser("ls", help="list node pools, their hosts and who uses them")
    ls.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ls.set_defaults(func=cmd_ls)
    ck = sub.add_parser("check", help="reach every host of a pool and report what is there")
    ck.add_argument("pool", help="pool name from ssh_node_pools.yaml")
    ck.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ck.add_argument("--timeout", type=float, default=10.0, help="connect timeout per host (s)")
    ck.set_defaults(func=cmd_check)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def cmd_ls(args: argparse.Namespace) -> int:
    from skyd.cli.output import print_json
    from skyd.clouds.ssh.pools import load_pools, pools_file
    from skyd.clouds.ssh.state import allocations_sync, load_host_facts

    pools = load_pools()
    taken = allocations_sync()
    facts = load_host_facts()
    out: list[dict[str, Any]] = []
    for pool in pools.values():
        for h in pool.hosts:
            f = facts.get(h.key, {})
            acc = f"{f['accelerator']}:{f['accelerator_count']}" if f.get("accelerator") else None
            out.append({"pool": pool.name, "host": h.name, "user": h.user, "cluster": taken.get(h.key),
                        "gpus": acc, "cpus": f.get("cpus"), "memory_gib": f.get("memory_gib"),
                        "probed": bool(f)})  # fmt: skip
    if args.output == "json":
        print_json({"file": str(pools_file()), "hosts": out})
        return 0
    if not out:
        print(f"No SSH node pools. Define them in {pools_file()}")
        return 0
    rows = [["POOL", "HOST", "USER", "GPUS", "CPUS", "MEM(GiB)", "IN USE BY"]]
    for r in out:
        unknown = "?" if not r["probed"] else "-"
        rows.append([r["pool"], r["host"], r["user"] or "-", r["gpus"] or unknown,
                     str(r["cpus"] or unknown), str(r["memory_gib"] or unknown), r["cluster"] or "-"])  # fmt: skip
    print(_table(rows))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import anyio

    from skyd import bounds
    from skyd.cli.output import print_json
    from skyd.clouds.ssh.check import check_pool
    from skyd.clouds.ssh.pools import get_pool

    bounds.check(args.timeout, "connect_timeout", "--timeout")
    pool = get_pool(args.pool)
    reports = anyio.run(lambda: check_pool(pool, timeout=args.timeout))
    if args.output == "json":
        print_json({"pool": pool.name, "hosts": [r.to_dict() for r in reports]})
    else:
        rows = [["HOST", "STATUS", "OS", "PYTHON", "GPUS", "CPUS", "MEM(GiB)"]]
        for r in reports:
            rows.append([r.host, r.status, r.os or "-", r.python or "-", r.gpus or "-",
                         str(r.cpus or "-"), str(r.memory_gib or "-")])  # fmt: skip
        print(_table(rows))
        for r in reports:
            if r.status != "ok" or r.tcp_forwarding is False:
                print(f"\n{r.message}" + (f"\n  hint: {r.hint}" if r.hint else ""))
    return 0 if all(r.ok for r in reports) else 1
