"""skyd requests [ls | get ID | logs ID [--follow] | cancel ID]."""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import quote

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("requests", help="list, inspect, follow and cancel daemon requests",
                       description="Requests are the daemon's units of work (launch, down, ...). "
                                   "IDs may be abbreviated to a unique prefix.")
    rs = p.add_subparsers(dest="requests_cmd", metavar="SUBCOMMAND")
    ls = rs.add_parser("ls", help="list requests (default)")
    _ls_flags(ls)
    _ls_flags(p)
    p.set_defaults(func=run_ls)
    ls.set_defaults(func=run_ls)

    g = rs.add_parser("get", help="show one request")
    g.add_argument("id", metavar="ID")
    add_output_flag(g)
    g.set_defaults(func=run_get)

    lg = rs.add_parser("logs", help="print a request's events (stages, logs, result)")
    lg.add_argument("id", metavar="ID")
    lg.add_argument("-f", "--follow", action="store_true", help="keep following until it ends")
    lg.add_argument("-o", "--output", choices=("text", "json"), default="text",
                    help="json: the raw ndjson events")
    lg.set_defaults(func=run_logs)

    c = rs.add_parser("cancel", help="cancel a running request")
    c.add_argument("id", metavar="ID")
    add_output_flag(c)
    c.set_defaults(func=run_cancel)


def _ls_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-s", "--status", action="append", default=None, metavar="STATUS",
                   help="only this status (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED); repeatable")
    p.add_argument("--verb", help="only this verb")
    p.add_argument("-n", "--limit", type=int, default=50, help="at most this many (default 50)")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(p)
    add_output_flag(p)


def _dur(r: dict[str, Any]) -> str:
    import time

    from skyd.cli.output import duration

    if not r.get("started_at"):
        return "-"
    return duration((r.get("finished_at") or time.time()) - r["started_at"])


def run_ls(args: argparse.Namespace) -> int:
    from skyd.cli import users
    from skyd.cli.client import get_client

    rows = get_client().get("/v1/requests", users.params(args, {
        "status": args.status, "verb": args.verb, "limit": args.limit}))
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import ago, print_table

    print_table(rows, users.columns(args, [
        ("ID", "id"), ("VERB", "verb"), ("STATUS", "status"),
        ("CREATED", lambda r: ago(r.get("created_at"))), ("DURATION", _dur),
        ("CLUSTER", "cluster_name"),
        ("ERROR", lambda r: (r.get("error") or {}).get("message") if r.get("error") else None),
    ]), empty="No requests.")
    return 0


def run_get(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.output import print_json

    row = get_client().get(f"/v1/requests/{quote(args.id, safe='')}")
    if args.output == "json":
        print_json(row)
        return 0
    from skyd.cli.output import ago, duration, print_table

    w = sys.stdout.write
    w(f"id:       {row['id']}\nverb:     {row['verb']}\nstatus:   {row['status']}\n"
      f"created:  {ago(row.get('created_at'))}\nduration: {_dur(row)}\n")
    if row.get("cluster_name"):
        w(f"cluster:  {row['cluster_name']}\n")
    if row.get("error"):
        w(f"error:    {row['error'].get('message')}\n")
    if row.get("result") is not None:
        import json

        w(f"result:   {json.dumps(row['result'], default=str)}\n")
    if row.get("stages"):
        w("\n")
        print_table(row["stages"], [("STAGE", "name"), ("STATE", "state"),
                                    ("ELAPSED", lambda s: None if s.get("elapsed") is None
                                     else duration(s["elapsed"]))])
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    client = get_client()
    if args.output == "json":
        import json

        for ev in client.events(args.id, args.follow):
            sys.stdout.write(json.dumps(ev) + "\n")
            sys.stdout.flush()
        return 0
    from skyd.cli.progress import follow_request, render_events

    if args.follow:
        follow_request(client, args.id)
        return 0
    render_events(client.events(args.id, False), tty=False)
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    out = get_client().delete(f"/v1/requests/{quote(args.id, safe='')}")
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(out)
    elif out.get("cancelled"):
        sys.stdout.write(f"request {out['request_id']}: {out['status']}\n")
    else:
        sys.stdout.write(f"request {out['request_id']} had already ended: {out['status']}\n")
    return 0
