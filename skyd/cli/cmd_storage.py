"""skyd storage ls / delete: the buckets skyd created (a bucket it did not create is never
listed or deleted)."""

from __future__ import annotations

import argparse

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("storage", help="buckets skyd created for file_mounts")
    ssub = p.add_subparsers(dest="storage_cmd", required=True)
    ls = ssub.add_parser("ls", help="list the buckets skyd created")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(ls)
    add_output_flag(ls)
    ls.set_defaults(func=run_ls)
    d = ssub.add_parser("delete", help="delete buckets skyd created (and their objects)")
    d.add_argument("names", nargs="*", metavar="NAME")
    d.add_argument("-a", "--all", action="store_true", help="every bucket skyd created")
    d.add_argument("-y", "--yes", action="store_true", help="do not ask (accepted for SkyPilot)")
    d.set_defaults(func=run_delete)


def run_ls(args: argparse.Namespace) -> int:
    from skyd.cli import users
    from skyd.cli.client import get_client

    rows = get_client().get("/v1/storage", users.params(args))
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import ago, print_table

    print_table(rows, users.columns(args, [
        ("NAME", "name"), ("STORE", "store"), ("CREATED", lambda r: ago(r["created_at"])),
        ("PERSISTENT", lambda r: "yes" if r["persistent"] else "no"),
        ("SOURCE", lambda r: r.get("source") or "-"), ("STATUS", "status")]))
    return 0


def run_delete(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request

    if not args.names and not args.all:
        from skyd.errors import InvalidSpecError

        raise InvalidSpecError("no bucket given", hint="name buckets, or -a for all skyd created")
    client = get_client()
    follow_request(client, client.submit("storage.delete", {"names": args.names, "all": args.all}))
    return 0
