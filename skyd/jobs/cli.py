"""`skyd jobs launch | queue | cancel | logs` (a CLI command module: see skyd.cli.commands).

Only argparse/sys at import; the client and helpers are imported in the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("jobs", help="managed jobs: recover from preemption, run pipelines",
                       description="Managed jobs run on their own clusters, are relaunched after "
                                   "preemption, and clean up after themselves.")  # fmt: skip
    js = p.add_subparsers(dest="jobs_cmd", metavar="SUBCOMMAND")
    p.set_defaults(func=run_queue, output="table", skip_finished=False, status=None)

    la = js.add_parser("launch", help="launch a managed job (a multi-document YAML is a pipeline)")
    la.add_argument("entrypoint", nargs="+", metavar="TASK.yaml|COMMAND")
    la.add_argument("-n", "--name", help="job name (default: the task's name)")
    la.add_argument("--job-recovery", metavar="STRATEGY",
                    help="recovery strategy: EAGER_NEXT_REGION (default), FAILOVER, or none")  # fmt: skip
    la.add_argument("--retry-until-up", action="store_true",
                    help="keep retrying when nothing is launchable (else FAILED_NO_RESOURCE)")  # fmt: skip
    la.add_argument("--priority", type=int, default=0, help="higher launches first (default 0)")
    la.add_argument("-d", "--detach-run", action="store_true", help="do not follow the logs")
    la.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    la.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]", help="task env var")
    from skyd.cli.secret_flags import add_secret_flags

    add_secret_flags(la)
    from skyd.cli.compat_flags import add_config_flag, add_task_flags

    add_config_flag(la)
    add_task_flags(la, secrets=False)  # --gpus, --infra, ... and --env-file, as sky jobs launch
    la.add_argument("-c", "--cluster", dest="name", help=argparse.SUPPRESS)  # SkyPilot: alias of -n
    la.add_argument("-o", "--output", choices=("table", "json"), default="table")
    la.set_defaults(func=run_launch)

    q = js.add_parser("queue", help="list managed jobs")
    q.add_argument("-o", "--output", choices=("table", "json"), default="table")
    q.add_argument("--skip-finished", action="store_true", help="hide jobs that have ended")
    q.add_argument("-s", "--status", action="append", metavar="STATUS", help="only this status")
    from skyd.cli.users import add_all_users_flag

    add_all_users_flag(q)
    q.add_argument("-l", "--limit", type=int, metavar="N", help="the N newest jobs only")
    q.add_argument("-a", "--all", dest="limit", action="store_const", const=None,
                   help="every job (the default)")
    from skyd.cli.compat_flags import add_time_filters

    add_time_filters(q)
    q.set_defaults(func=run_queue)

    c = js.add_parser("cancel", help="cancel managed jobs")
    c.add_argument("ids", nargs="*", type=int, metavar="ID")
    c.add_argument("-n", "--name", help="cancel the jobs with this name")
    c.add_argument("-a", "--all", action="store_true", help="cancel every active job")
    c.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    c.set_defaults(func=run_cancel)

    lg = js.add_parser("logs", help="print a managed job's output")
    lg.add_argument("id", type=int, nargs="?", metavar="ID",
                    help="the job (default: the latest one, of --name when given)")
    lg.add_argument("-n", "--name", help="the latest job of this name")
    lg.add_argument("-s", "--sync-down", action="store_true",
                    help="write the job's log to a file on this machine and print where")
    lg.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    lg.add_argument("--controller", action="store_true", help="the controller's log instead")
    lg.set_defaults(func=run_logs)

    la.add_argument("-p", "--pool", help="run on a free worker of this pool (skyd jobs pool)")
    la.add_argument("--num-jobs", type=int, default=None, metavar="N",
                    help="submit N jobs (SKYPILOT_JOB_RANK=0..N-1, SKYPILOT_NUM_JOBS=N)")

    pl = js.add_parser("pool", help="worker pools: clusters that managed jobs run on (-p)")
    ps = pl.add_subparsers(dest="pool_cmd", metavar="SUBCOMMAND")
    pl.set_defaults(func=run_pool_status, pool_cmd=None, name=None, output="table")
    ap = ps.add_parser("apply", help="create or resize a pool from POOL.yaml")
    ap.add_argument("yaml", metavar="POOL.yaml")
    ap.add_argument("-p", "--pool", required=True, help="pool name")
    ap.add_argument("--workers", type=int, help="number of workers (default: pool.workers)")
    ap.add_argument("--mode", help="update mode (ignored: workers are resized in place)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]", help="task env var")
    ap.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    ap.set_defaults(func=run_pool_apply)
    st = ps.add_parser("status", help="pools, their workers and the job each runs")
    st.add_argument("name", nargs="?", metavar="NAME")
    st.add_argument("-o", "--output", choices=("table", "json"), default="table")
    st.set_defaults(func=run_pool_status)
    dn = ps.add_parser("down", help="cancel a pool's jobs and tear its workers down")
    dn.add_argument("names", nargs="*", metavar="NAME")
    dn.add_argument("-a", "--all", action="store_true", help="every pool")
    dn.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    dn.set_defaults(func=run_pool_down)
    lg2 = ps.add_parser("logs", help="the workers' setup logs")
    lg2.add_argument("name", metavar="NAME")
    lg2.add_argument("worker_ids", nargs="*", type=int, metavar="WORKER_ID")
    lg2.set_defaults(func=run_pool_logs)


def run_pool_apply(args: argparse.Namespace) -> int:
    from pathlib import Path

    from skyd import bounds
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request
    from skyd.sdk.payloads import read_task_file

    bounds.check(args.workers, "workers", "--workers")
    path = Path(args.yaml)
    payload = {"name": args.pool, "workers": args.workers, "env": _envs(args.env),
               "yaml": read_task_file(path, args.yaml), "yaml_path": str(path),
               "base_dir": str(path.resolve().parent)}  # fmt: skip
    client = get_client()
    res = follow_request(client, client.submit("jobs.pool_apply", payload))
    sys.stdout.write(f"Pool {args.pool}: {len(res.get('workers') or [])} worker(s)\n"
                     f"  status: skyd jobs pool status {args.pool}\n")
    return 0


def run_pool_status(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.output import print_json, print_table

    rows = get_client().get("/v1/pools", {"name": args.name} if args.name else None)
    if args.output == "json":
        print_json(rows)
        return 0
    print_table(rows, [("POOL", "name"), ("STATUS", "status"), ("WORKERS", "workers")],
                empty="No worker pools.")
    ws = [{**w, "pool": p["name"]} for p in rows for w in p["worker_rows"]]
    if ws:
        sys.stdout.write("\n")
        print_table(ws, [("POOL", "pool"), ("ID", "id"), ("CLUSTER", "cluster"),
                         ("STATUS", "status"), ("CLUSTER STATUS", "cluster_status"),
                         ("JOB", "job_id"), ("REASON", "reason")], empty="")  # fmt: skip
    return 0


def run_pool_down(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request
    from skyd.errors import InvalidSpecError

    if not args.names and not args.all:
        raise InvalidSpecError("say which pool to take down", field="pool",
                               hint="skyd jobs pool down NAME | -a")  # fmt: skip
    client = get_client()
    res = follow_request(client, client.submit("jobs.pool_down",
                                               {"names": args.names, "all": args.all}))  # fmt: skip
    down = res.get("down") or []
    sys.stdout.write(f"Pool(s) down: {', '.join(down)}\n" if down else "No worker pools.\n")
    return 0


def run_pool_logs(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    params = {"worker": [str(i) for i in args.worker_ids]} if args.worker_ids else None
    for item in get_client().stream_ndjson(f"/v1/pools/{args.name}/logs", params):
        sys.stdout.write(item.get("text", ""))
    sys.stdout.flush()
    return 0


def _envs(items: list[str]) -> dict[str, str]:
    import os

    from skyd.errors import InvalidSpecError

    out: dict[str, str] = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not k:
            raise InvalidSpecError(f"--env {item!r}: empty name", field="--env")
        if not eq:
            if k not in os.environ:
                raise InvalidSpecError(f"--env {k}: not set in your environment", field="--env",
                                       hint=f"use --env {k}=VALUE")  # fmt: skip
            v = os.environ[k]
        out[k] = v
    return out


def launch_payload(args: argparse.Namespace) -> dict[str, Any]:
    from pathlib import Path

    from skyd import bounds
    from skyd.cli.compat_flags import collect_envs, collect_overrides
    from skyd.cli.secret_flags import collect_secrets
    from skyd.sdk.payloads import catalog_dir, config_sources, job_name, read_task_file

    bounds.check(args.priority, "priority", "--priority")
    bounds.check(getattr(args, "num_jobs", None), "num_jobs", "--num-jobs")

    payload: dict[str, Any] = {
        "env": collect_envs(args), "secrets": collect_secrets(args), "name": job_name(args.name),
        "overrides": collect_overrides(args),
        "job_recovery": args.job_recovery,
        "retry_until_up": args.retry_until_up, "priority": args.priority,
        "catalog_dir": catalog_dir(), "config": config_sources(getattr(args, "config", None)),
    }  # fmt: skip
    if getattr(args, "pool", None):
        payload["pool"] = args.pool
    if getattr(args, "num_jobs", None) is not None:
        payload["num_jobs"] = args.num_jobs
    first = args.entrypoint[0]
    if len(args.entrypoint) == 1 and first.endswith((".yaml", ".yml")):
        path = Path(first)
        payload["yaml"] = read_task_file(path, first)
        payload["yaml_path"] = str(path)
        payload["base_dir"] = str(path.resolve().parent)
    else:
        payload["command"] = " ".join(args.entrypoint)
        payload["base_dir"] = str(Path.cwd())
    return payload


def run_launch(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request, wait_result

    client = get_client()
    rid = client.submit("jobs.launch", launch_payload(args))
    from skyd.cli.compat_flags import print_async

    if print_async(args, rid):
        return 0
    result = follow_request(client, rid) if args.output == "table" else wait_result(client, rid)
    job_id = int(result["job_id"])
    ids = [int(i) for i in result.get("job_ids") or [job_id]]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json({"job_id": job_id, "job_ids": ids, "request_id": rid})
        return 0
    if len(ids) > 1:
        sys.stdout.write(f"  jobs: {', '.join(map(str, ids))}\n  queue:  skyd jobs queue\n")
        return 0
    if args.detach_run:
        sys.stdout.write(f"  follow: skyd jobs logs {job_id}\n  queue:  skyd jobs queue\n")
        return 0
    return _print_logs(client, job_id, follow=True, controller=False)


COLUMNS: list[tuple[str, Any]] = [
    ("ID", "id"), ("NAME", "name"), ("STATUS", "status"),
    ("TASK", lambda r: r.get("current_task")),
    ("RECOVERIES", "recoveries"), ("RESTARTS", "restarts"),
    ("REGION", "last_region"), ("SUBMITTED", "submitted_at"),
    ("REASON", "failure_reason"),
]  # fmt: skip


def run_queue(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    params: dict[str, Any] = {"skip_finished": 1 if args.skip_finished else 0}
    if args.status:
        params["status"] = args.status
    from skyd.cli import users

    rows = get_client().get("/v1/jobs", users.params(args, params))
    from skyd.cli.compat_flags import filter_by_time

    rows = filter_by_time(rows, args)
    if getattr(args, "limit", None) is not None:  # newest first: the first N
        rows = rows[: max(0, args.limit)]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import ago, print_table

    cols = [(h, (lambda r: ago(r.get("submitted_at"))) if h == "SUBMITTED" else k) for h, k in COLUMNS]
    print_table(rows, users.columns(args, cols), empty="No managed jobs.")
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import wait_result
    from skyd.errors import InvalidSpecError, SkydError

    if not args.ids and not args.name and not args.all:
        raise InvalidSpecError("say which jobs to cancel", hint="skyd jobs cancel ID | -n NAME | -a")
    client = get_client()
    body = {"ids": args.ids, "name": args.name, "all": args.all}
    if getattr(args, "all_users", None):  # -a -u: every user's (an admin of a shared daemon)
        body["all_users"] = True
    rid = client.submit("jobs.cancel", body)
    moved = wait_result(client, rid).get("cancelled") or []
    if moved:
        sys.stdout.write(f"Cancelling managed job(s): {', '.join(map(str, moved))}\n")
    for jid in args.ids or []:
        if int(jid) in moved:
            continue
        try:
            status = str(client.get(f"/v1/jobs/{int(jid)}").get("status"))
        except SkydError:  # an unknown id: the generic line below says it
            continue
        if status not in ("SUCCEEDED", "CANCELLED") and not status.startswith("FAILED"):
            continue
        sys.stdout.write(f"Managed job {jid} had already finished ({status}); nothing to cancel.\n")
        moved.append(int(jid))
    if not moved:
        sys.stdout.write("No active managed job matched.\n")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.compat_flags import latest_managed_job

    client = get_client()
    job_id = args.id if args.id is not None else latest_managed_job(client, args.name)
    if args.sync_down:
        from skyd.cli.compat_flags import sync_down_managed

        return sync_down_managed(client, job_id, controller=args.controller)
    return _print_logs(client, job_id, follow=not args.no_follow, controller=args.controller)


def _print_logs(client: Any, job_id: int, *, follow: bool, controller: bool) -> int:
    params = {"follow": 1 if follow else 0, "controller": 1 if controller else 0}
    for item in client.stream_ndjson(f"/v1/jobs/{job_id}/logs", params):
        sys.stdout.write(item.get("text", ""))
        sys.stdout.flush()
    if not follow or controller:
        return 0
    # Followed to the end: exit like the job did (0 only when it SUCCEEDED).
    status = client.get(f"/v1/jobs/{job_id}").get("status")
    return 0 if status == "SUCCEEDED" else 1
