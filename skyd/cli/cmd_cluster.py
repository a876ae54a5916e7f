"""Cluster verbs: stop, start, down, autostop, cancel, queue, logs, cost-report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skyd.cli.output import add_output_flag


def _targets(p: argparse.ArgumentParser) -> None:
    p.add_argument("clusters", nargs="*", metavar="CLUSTER")
    p.add_argument("-a", "--all", action="store_true", help="all clusters")
    p.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    p.add_argument("--async", dest="async_", action="store_true",
                   help="print the request id and return at once")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for verb, helptext in (("stop", "stop clusters (keep their disks)"),
                           ("start", "restart stopped clusters"),
                           ("down", "tear clusters down")):
        p = sub.add_parser(verb, help=helptext, description=helptext.capitalize() + ".")
        _targets(p)
        p.set_defaults(func=run_simple, verb=verb)
        from skyd.cli.compat_flags import add_cluster_verb_flags

        add_cluster_verb_flags(p, verb)

    a = sub.add_parser("autostop", help="set or cancel a cluster's autostop",
                       description="Stop (or tear down) clusters after they sit idle.")
    _targets(a)
    a.add_argument("-i", "--idle-minutes", type=int, dest="idle_minutes", default=None)
    a.add_argument("--down", action="store_true", help="tear down instead of stopping")
    a.add_argument("--cancel", action="store_true", help="cancel autostop")
    a.set_defaults(func=run_autostop)

    c = sub.add_parser("cancel", help="cancel jobs on a cluster")
    c.add_argument("cluster")
    c.add_argument("job_ids", nargs="*", type=int, metavar="JOB_ID")
    c.add_argument("-a", "--all", action="store_true", help="all jobs of the cluster")
    c.add_argument("-y", "--yes", action="store_true")
    c.add_argument("--async", dest="async_", action="store_true")
    c.set_defaults(func=run_cancel)

    q = sub.add_parser("queue", help="jobs on clusters")
    q.add_argument("clusters", nargs="*", metavar="CLUSTER")
    q.add_argument("-s", "--skip-finished", action="store_true", help="only unfinished jobs")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(q)
    add_output_flag(q)
    q.set_defaults(func=run_queue)

    lg = sub.add_parser("logs", help="stream a job's log")
    lg.add_argument("cluster")
    lg.add_argument("job_ids", nargs="*", type=int, metavar="JOB_ID",
                    help="job id (default: the latest); several with --sync-down")
    lg.add_argument("-s", "--sync-down", action="store_true",
                    help="download the jobs' logs to this machine and print where")
    lg.add_argument("--provision", action="store_true",
                    help="the cluster's provisioning log (its latest launch request's)")
    lg.add_argument("--follow", dest="follow", action="store_true", default=True)
    lg.add_argument("--no-follow", dest="follow", action="store_false", help="print and exit")
    lg.add_argument("--tail", type=int, default=0, help="last N lines only")
    lg.add_argument("--status", action="store_true", help="print the job's status; exit 0 iff SUCCEEDED")
    lg.add_argument("--node", "-w", "--worker", dest="node", type=int,
                    help="one node's log (multi-node jobs; SkyPilot's -w/--worker)")
    lg.set_defaults(func=run_logs)

    cr = sub.add_parser("cost-report", help="estimated cost of clusters, live and torn down")
    add_output_flag(cr)
    add_all_users_flag(cr)
    cr.set_defaults(func=run_cost)


def _submit(verb: str, payload: dict[str, Any], args: argparse.Namespace) -> Any:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request

    client = get_client()
    rid = client.submit(verb, payload)
    if getattr(args, "async_", False):
        print(rid)
        return None
    return follow_request(client, rid)


def _names(args: argparse.Namespace) -> dict[str, Any]:
    if not args.clusters and not args.all:
        from skyd.errors import InvalidSpecError

        raise InvalidSpecError("no cluster given", hint="name clusters, or -a for all of them")
    return {"clusters": args.clusters, "all": args.all}


_ASK = {"stop": "Stopping", "down": "Terminating"}


def _confirmed(args: argparse.Namespace) -> bool:
    """Like `sky stop` / `sky down`: ask on an interactive terminal; -y and --async never ask."""
    if args.verb not in _ASK or args.yes or args.async_:
        return True
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True
    names = list(args.clusters)
    if args.all:
        from skyd.cli.client import get_client

        names = [r["name"] for r in get_client().get("/v1/status")]
        if not names:
            return True  # nothing to act on; the verb says so
    what = f"{len(names)} cluster{'s' if len(names) != 1 else ''}: {', '.join(names)}"
    try:
        sys.stderr.write(f"{_ASK[args.verb]} {what}. Proceed? [Y/n]: ")
        sys.stderr.flush()
        answer = sys.stdin.readline()
    except (EOFError, OSError):
        return False
    return bool(answer) and answer.strip().lower() in ("", "y", "yes")


def run_simple(args: argparse.Namespace) -> int:
    from skyd.cli.compat_flags import after_start, cluster_verb_payload

    payload = {**_names(args), **cluster_verb_payload(args)}
    if not _confirmed(args):
        print("Aborted.", file=sys.stderr)
        return 1
    _submit(args.verb, payload, args)
    after_start(args, _submit)
    return 0


def run_autostop(args: argparse.Namespace) -> int:
    payload = {**_names(args), "idle_minutes": args.idle_minutes, "down": args.down,
               "cancel": args.cancel}
    _submit("autostop", payload, args)
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    if not args.job_ids and not args.all:
        from skyd.errors import InvalidSpecError

        raise InvalidSpecError("no job given", hint=f"skyd cancel {args.cluster} JOB_ID, or -a")
    _submit("cancel", {"cluster_name": args.cluster, "job_ids": args.job_ids, "all": args.all}, args)
    return 0


def _dur(j: dict[str, Any]) -> str:
    from skyd.cli.output import duration

    s, e = j.get("started_at"), j.get("ended_at")
    if not s:
        return "-"
    import time

    return duration((e or time.time()) - s)


def run_queue(args: argparse.Namespace) -> int:
    from skyd.cli import users
    from skyd.cli.client import get_client
    from skyd.errors import SkydError

    client = get_client()
    names = args.clusters or [r["name"] for r in client.get("/v1/status", users.params(args))]
    params = {"skip_finished": "1"} if args.skip_finished else None
    from urllib.parse import quote

    out = []
    for n in names:
        try:
            out.append(client.get(f"/v1/clusters/{quote(n, safe='')}/queue", params))
        except SkydError as e:  # -u lists every user's clusters; their queues are theirs
            if args.clusters or not users.not_yours(e):
                raise
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(out)
        return 0
    from skyd.cli.output import ago, print_table

    for q in out:
        note = " (agent unreachable: last known)" if q.get("stale") else ""
        print(f"Job queue of cluster {q['cluster']}{note}")
        print_table(q["jobs"], [
            ("ID", "job_id"), ("NAME", "name"), ("SUBMITTED", lambda j: ago(j.get("submitted_at"))),
            ("DURATION", _dur), ("STATUS", "status"),
            ("EXIT", lambda j: "" if j.get("exit_code") is None else str(j["exit_code"])),
        ], empty="No jobs.")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.compat_flags import logs_job_id, sync_down_logs

    client = get_client()
    if args.provision:
        from skyd.cli.compat_flags import provision_log

        return provision_log(client, args.cluster)
    if args.sync_down:
        return sync_down_logs(client, args.cluster, args.job_ids, node=args.node)
    args.job_id = logs_job_id(args.job_ids)
    from urllib.parse import quote

    path = f"/v1/clusters/{quote(args.cluster, safe='')}/" + (
        f"jobs/{quote(str(args.job_id), safe='')}/logs" if args.job_id else "logs")
    if args.status:
        r = client.get(path, {"status_only": "1"})
        print(f"Job {r['job_id']}: {r['status']}")
        return 0 if r["status"] == "SUCCEEDED" else 1
    params: dict[str, Any] = {"follow": "1" if args.follow else "0", "tail": args.tail}
    if args.node is not None:
        params["node"] = args.node
    out = sys.stdout.buffer
    try:
        for chunk in client.stream_bytes(path, params):
            out.write(chunk)
            out.flush()
    except KeyboardInterrupt:
        return 130
    return 0


def run_cost(args: argparse.Namespace) -> int:
    from skyd.cli import users
    from skyd.cli.client import get_client

    r = get_client().get("/v1/cost-report", users.params(args))
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(r)
        return 0
    from skyd.cli.output import duration, print_table

    print_table(r["clusters"], users.columns(args, [
        ("NAME", "name"), ("STATUS", "status"), ("CLOUD", "cloud"), ("NODES", "num_nodes"),
        ("$/H", lambda x: f"{x['hourly_cost']:.2f}"), ("DURATION", lambda x: duration(x["duration_s"])),
        ("COST", lambda x: f"${x['cost']:.2f}"),
    ]), empty="No clusters yet.")
    print(f"Total: ${r['total_cost']:.2f}")
    return 0
