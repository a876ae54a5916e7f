"""skyd launch / skyd exec: submit a task and follow its stages and log."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from skyd.cli.cmd_validate import add_env_flags, collect_env
from skyd.cli.compat_flags import add_config_flag, add_git_flags, add_resource_overrides
from skyd.cli.output import add_output_flag
from skyd.cli.secret_flags import add_secret_flags, collect_secrets


def _add_resource_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("resource overrides (replace the YAML's values)")
    add_resource_overrides(g)
    add_git_flags(g)
    g.add_argument("--workdir", help="directory synced to the nodes (the job's cwd)")
    g.add_argument("--name", "-n", dest="task_name", help="task name")
    add_env_flags(p)
    add_secret_flags(p)
    add_config_flag(p)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "launch", help="launch a task on a (new or existing) cluster",
        description="Launch a task from a YAML file or an inline command. Shows one line "
                    "per stage, then streams the job's output.",
    )
    p.add_argument("entrypoint", nargs="+", metavar="TASK.yaml|COMMAND")
    p.add_argument("-c", "--cluster", help="cluster name (generated when absent)")
    p.add_argument("--dryrun", action="store_true", help="show the plan; launch nothing")
    p.add_argument("-d", "--detach-run", action="store_true", help="don't stream the job's log")
    p.add_argument("-i", "--idle-minutes-to-autostop", dest="idle_minutes", type=int,
                   help="stop the cluster after this many idle minutes")
    p.add_argument("--down", action="store_true",
                   help="tear the cluster down when its jobs are done (or after -i minutes idle)")
    p.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    p.add_argument("--no-setup", action="store_true", help="skip the setup step")
    p.add_argument("-r", "--retry-until-up", action="store_true",
                   help="keep retrying when no capacity is available")
    p.add_argument("--minimize", choices=("cost", "time"), default="cost",
                   help="optimizer objective (default: cost)")
    p.add_argument("--async", dest="async_", action="store_true",
                   help="print the request id and return at once")
    p.add_argument("--fast", action="store_true",
                   help="on a cluster that is already UP, skip setup (as sky launch --fast)")
    _add_resource_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run_launch)

    e = sub.add_parser("exec", help="run a task on an existing cluster (skips setup)",
                       description="Sync the workdir and run a task or command on an UP cluster.")
    e.add_argument("cluster", help="cluster name (or -c CLUSTER, as sky exec -c)")
    e.add_argument("entrypoint", nargs="+", metavar="TASK.yaml|COMMAND")
    e.add_argument("-c", "--cluster", dest="cluster_opt", metavar="CLUSTER",
                   help="the cluster (as sky exec -c; same as the positional CLUSTER)")
    e.add_argument("-d", "--detach-run", action="store_true", help="don't stream the job's log")
    e.add_argument("--async", dest="async_", action="store_true",
                   help="print the request id and return at once")
    _add_resource_flags(e)
    add_output_flag(e)
    e.set_defaults(func=run_exec)


def _entry(parts: list[str]) -> dict[str, Any]:
    """A YAML file path, or an inline command (like sky launch 'echo hi')."""
    from skyd.sdk.payloads import task_source

    if len(parts) == 1 and parts[0].endswith((".yaml", ".yml")):
        return task_source(parts[0])
    return task_source(command=" ".join(parts))


def _fast_skip_setup(args: argparse.Namespace) -> bool:
    if not args.fast or not args.cluster:
        return False
    from skyd.cli.compat_flags import cluster_is_up

    return cluster_is_up(args.cluster)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    infra = args.infra
    if not infra and (args.cloud or args.region or args.zone):
        infra = "/".join(x or "*" for x in (args.cloud, args.region, args.zone)).rstrip("/*")
    return {
        "gpus": args.gpus, "cpus": args.cpus, "memory": args.memory, "infra": infra,
        "instance_type": args.instance_type, "num_nodes": args.num_nodes,
        "use_spot": args.use_spot, "disk_size": args.disk_size, "image_id": args.image_id,
        "ports": args.ports, "name": args.task_name, "workdir": args.workdir,
        "disk_tier": args.disk_tier, "network_tier": args.network_tier,
        "git_url": args.git_url, "git_ref": args.git_ref,
    }


def _finish(client: Any, rid: str, args: argparse.Namespace, show_plan: bool = True) -> int:
    if args.async_:
        print(rid)
        return 0
    from skyd.cli.progress import follow_request

    quiet = args.output == "json"
    devnull = open(os.devnull, "w") if quiet else None  # noqa: SIM115 - closed below
    try:
        result = follow_request(client, rid, out=devnull, err=devnull, show_plan=show_plan)
    finally:
        if devnull:
            devnull.close()
    if quiet:
        from skyd.cli.output import print_json

        print_json(result)
        return 0 if not result or result.get("status") in (None, "SUCCEEDED") else 1
    if isinstance(result, dict) and result.get("dryrun"):
        print(result.get("table", ""))
        return 0
    if isinstance(result, dict) and result.get("job_id") is not None:
        status = result.get("status")
        name, jid = result.get("cluster"), result.get("job_id")
        if status in (None, "PENDING", "RUNNING", "SETTING_UP", "INIT"):
            print(f"Job {jid} submitted to cluster {name}. "
                  f"Follow: skyd logs {name} {jid} · Queue: skyd queue {name}", file=sys.stderr)
            return 0
        code = result.get("exit_code")
        tail = f" (exit code {code})" if code not in (None, 0) else ""
        print(f"✓ Job {jid} on {name}: {status}{tail}" if status == "SUCCEEDED"
              else f"✗ Job {jid} on {name}: {status}{tail}", file=sys.stderr)
        return 0 if status == "SUCCEEDED" else 1
    return 0


def run_launch(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.sdk.payloads import launch_payload

    payload = launch_payload(
        _entry(args.entrypoint), env=collect_env(args), secrets=collect_secrets(args),
        cluster_name=args.cluster,
        dryrun=args.dryrun, detach_run=args.detach_run, idle_minutes=args.idle_minutes,
        down=args.down, no_setup=args.no_setup or _fast_skip_setup(args),
        retry_until_up=args.retry_until_up,
        minimize=args.minimize, config=args.config, **_overrides(args),
    )
    client = get_client()
    proceed, plan = _confirmed(client, payload, args)
    if not proceed:
        print("Aborted.", file=sys.stderr)
        return 1
    if plan is not None and isinstance(plan.get("plan_id"), str):
        # the launch runs the plan just shown (the daemon plans again only if it changed)
        payload = {**payload, "plan_id": plan["plan_id"]}
    return _finish(client, client.submit("launch", payload), args, show_plan=plan is None)


def _confirmed(client: Any, payload: dict[str, Any],
               args: argparse.Namespace) -> tuple[bool, dict[str, Any] | None]:
    """Like `sky launch`: show the plan and ask before making a new cluster (interactive
    terminals only; -y, --dryrun, --async and -o json never ask). (proceed, the plan shown
    or None)."""
    if args.yes or args.dryrun or args.async_ or args.output == "json":
        return True, None
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True, None
    if args.cluster and client.get("/v1/status", {"name": [args.cluster]}):
        return True, None  # an existing cluster is reused (or restarted): nothing new is made
    from skyd.cli.progress import follow_request

    with open(os.devnull, "w") as quiet:
        plan = follow_request(client, client.submit("launch", {**payload, "dryrun": True}),
                              out=quiet, err=quiet)
    shown: dict[str, Any] = plan if isinstance(plan, dict) else {}
    if shown.get("table"):
        print(shown["table"], file=sys.stderr)
    if shown.get("launchable") is False:
        return True, shown  # nothing to confirm: the launch fails with the reason shown
    what = f"cluster '{args.cluster}'" if args.cluster else "cluster"
    try:
        answer = input(f"Launching a new {what}. Proceed? [Y/n]: ")
    except EOFError:
        return False, shown
    return answer.strip().lower() in ("", "y", "yes"), shown


def run_exec(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.sdk.payloads import exec_payload

    payload = exec_payload(_entry(args.entrypoint), env=collect_env(args),
                           secrets=collect_secrets(args), cluster_name=args.cluster, detach_run=args.detach_run,
                           config=args.config, **_overrides(args))
    client = get_client()
    return _finish(client, client.submit("exec", payload), args)
