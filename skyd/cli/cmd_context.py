"""skyd context add|use|ls|rm: named daemons, as ``docker context`` names Docker hosts.

A context is a remote daemon (``ssh://user@host``); ``local`` is this machine's daemon.
``SKYD_HOST`` and ``skyd --host`` override the current context for one command.
"""

from __future__ import annotations

import argparse
import re
import sys

from skyd import settings
from skyd.cli.output import add_output_flag
from skyd.errors import InvalidSpecError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("context", help="name remote daemons and pick the current one",
                       description="Contexts name daemons on other hosts (ssh://user@host). "
                                   "The current one serves every command; 'local' is the "
                                   "daemon on this machine.")
    cs = p.add_subparsers(dest="context_cmd", metavar="SUBCOMMAND")
    p.set_defaults(_parser=p)
    a = cs.add_parser("add", help="add a context")
    a.add_argument("name")
    a.add_argument("host", metavar="HOST", help="ssh://[user@]host[:port]")
    a.set_defaults(func=run_add)
    u = cs.add_parser("use", help="make a context current ('local' for this machine)")
    u.add_argument("name")
    u.set_defaults(func=run_use)
    ls = cs.add_parser("ls", help="list contexts")
    add_output_flag(ls)
    ls.set_defaults(func=run_ls)
    rm = cs.add_parser("rm", help="remove a context")
    rm.add_argument("name")
    rm.set_defaults(func=run_rm)


def _check_name(name: str) -> None:
    if name in ("local", "default") or not NAME_RE.match(name):
        raise InvalidSpecError(f"bad context name {name!r}", field="name",
                               hint="letters, digits, '.', '_', '-' (not 'local')")


def add_context(name: str, host: str) -> None:
    from skyd.sdk.remote import load_contexts, parse_host, save_contexts

    _check_name(name)
    parse_host(host)  # refuse a bad URL now, not at the next command
    doc = load_contexts()
    doc["contexts"][name] = {"host": host}
    save_contexts(doc)


def run_add(args: argparse.Namespace) -> int:
    add_context(args.name, args.host)
    sys.stdout.write(f"context {args.name!r} -> {args.host}\n")
    return 0


def run_use(args: argparse.Namespace) -> int:
    from skyd.sdk.remote import context_target, load_contexts, save_contexts

    doc = load_contexts()
    context_target(args.name, doc)  # unknown -> error naming `skyd context ls`
    doc["current"] = "local" if args.name in ("local", "default") else args.name
    save_contexts(doc)
    sys.stdout.write(f"current context: {doc['current']}\n")
    return 0


def run_ls(args: argparse.Namespace) -> int:

    from skyd.sdk.remote import load_contexts

    doc = load_contexts()
    cur = doc.get("current") or "local"
    rows = [{"name": "local", "host": "(this machine)", "current": cur == "local"}]
    rows += [{"name": n, "host": c.get("host"), "current": cur == n}
             for n, c in sorted(doc["contexts"].items())]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json({"current": cur, "override": settings.HOST.get(),
                    "contexts": rows})
        return 0
    from skyd.cli.output import print_table

    print_table(rows, [("", lambda r: "*" if r["current"] else ""), ("NAME", "name"),
                       ("HOST", "host")])
    if settings.HOST.is_set():
        sys.stdout.write(f"(SKYD_HOST={settings.HOST.get()} overrides the current context)\n")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from skyd.sdk.remote import load_contexts, save_contexts

    doc = load_contexts()
    if args.name not in doc["contexts"]:
        raise InvalidSpecError(f"no context {args.name!r}", field="name",
                               hint="list them with: skyd context ls")
    del doc["contexts"][args.name]
    if doc.get("current") == args.name:
        doc["current"] = "local"
    save_contexts(doc)
    sys.stdout.write(f"removed context {args.name!r}\n")
    return 0
