"""skyd check: which infras this daemon can launch on, which it can only plan, and why."""

from __future__ import annotations

import argparse

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("check", help="which infras are enabled, and why not",
                       description="Show each infra: can skyd launch there, plan for it, and why.")
    p.add_argument("infra", nargs="*", help="only these infras")
    add_output_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.sdk.payloads import catalog_dir

    d = catalog_dir()
    rows = get_client().get("/v1/check", {"catalog_dir": d} if d else None)
    if args.infra:
        rows = [r for r in rows if r["infra"] in args.infra]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import print_table

    def mark(v: bool) -> str:
        return "✔" if v else "-"

    print_table(rows, [("INFRA", "infra"), ("LAUNCH", lambda r: mark(r["launch"])),
                       ("PLAN", lambda r: mark(r["plan"])), ("WHY", "reason")])
    return 0
