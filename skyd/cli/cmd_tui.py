"""skyd tui: the interactive terminal UI (Textual)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "tui", help="interactive terminal UI: clusters, jobs, requests, logs, launch",
        description="A live view of the daemon (updates pushed by the daemon, no polling).\n"
                    "Keys: 1-5 switch tabs, L launch, enter/l logs, s/t/d stop/start/down,\n"
                    "a autostop, c cancel, u every user's / your own, q quit.\n"
                    "NO_COLOR=1 for monochrome.")
    p.add_argument("--exit-after-paint", action="store_true", help=argparse.SUPPRESS)
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from skyd.tui.app import run as run_app

    return run_app(exit_after_paint=bool(args.exit_after_paint), all_users=bool(args.all_users))
