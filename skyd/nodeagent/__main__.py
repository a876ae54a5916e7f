"""`python -m skyd.nodeagent --home DIR --listen 127.0.0.1:0 ...` (also the zipapp's entry)."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="skyd-agent", description="skyd node agent")
    p.add_argument("--home", required=True, help="agent state dir (jobs.db, logs, agent.json)")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 = any) or unix:PATH")
    p.add_argument(
        "--socket",
        default=None,
        help="also listen on this Unix socket (default HOME/agent.sock; '' = none): the "
        "daemon relays to it where a node refuses TCP forwarding",
    )
    p.add_argument(
        "--tls-dir",
        help="where the agent's credentials are (agent.crt, agent.key, ca.crt, each 0600; "
        "default HOME): written by the daemon before every start",
    )
    p.add_argument("--node-rank", type=int, default=0, help="0 = head (owns the job queue)")
    p.add_argument("--cluster", default="", help="cluster name")
    p.add_argument(
        "--autostop-action",
        default="local-stop",
        help="local-stop (persist stopped, kill jobs, exit) or command:<shell cmd>",
    )
    p.add_argument("--cpus", type=float, help="CPU capacity for scheduling (default: cpu count)")
    p.add_argument(
        "--gpus",
        help="report these fake GPUs, e.g. H100:2 (default: detect; env SKYD_FAKE_GPUS works too)",
    )
    p.add_argument("--tick", type=float, default=1.0, help="event loop tick seconds")
    p.add_argument("--rank-lease", type=float, default=None,
                   help="worker: end a rank whose head has not asked about it for this many "
                   "seconds (default 30)")  # fmt: skip
    p.add_argument("--heartbeat-interval", type=float, default=5.0)
    args = p.parse_args(argv)
    if args.autostop_action != "local-stop" and not args.autostop_action.startswith("command:"):
        p.error("--autostop-action must be local-stop or command:<cmd>")
    return args


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("MULTIDICT_NO_EXTENSIONS", "1")
    args = parse_args(argv)
    # The agent's own files (agent.json, jobs.db, logs, tokens) are private from the first
    # write; jobs get back the umask the agent was started with (executor.JOB_UMASK).
    from . import executor

    started_with = os.umask(0o077)
    try:  # a local node's agent is started by the (private) daemon: it says the user's umask
        executor.JOB_UMASK = int(os.environ.get("SKYD_JOB_UMASK", ""), 8) & 0o777
    except ValueError:
        executor.JOB_UMASK = started_with
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from .server import serve

    coro = serve(Path(args.home).resolve(), args.listen,
                 Path(args.tls_dir) if args.tls_dir else None, args.node_rank,
                 args.cluster, args.autostop_action, args.cpus, args.gpus, args.tick,
                 args.heartbeat_interval, args.socket, args.rank_lease)  # fmt: skip
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from .server import CredentialsError

    try:
        loop.run_until_complete(coro)
    except CredentialsError as e:
        sys.exit(str(e))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
