"""Flags SkyPilot users type, shared by the verbs that take them (see docs/cli-compat.md).

- ``--config`` on the verbs that send a task (the config layers, skyd.config);
- the resource overrides and ``--env-file``/``--secret`` of ``jobs launch``, ``serve up``
  and ``serve update`` (``add_task_flags`` / ``collect_overrides``);
- SkyPilot flags skyd accepts with a documented meaning, or refuses with a message that
  names the flag and what to do instead (``install``: added to every command of the table
  that lacks them; ``check`` runs before a command's handler).
"""

from __future__ import annotations

import argparse
from typing import Any

from skyd.cli.compat_table import ACCEPTED, REFUSED, REFUSED_ON, SKYPILOT_FLAGS, VALUE_FLAGS


def add_config_flag(p: argparse.ArgumentParser) -> None:
    """SkyPilot's ``--config``: one config file, or ``KEY.SUB=VALUE`` items (repeatable)."""
    p.add_argument("--config", action="append", default=None, metavar="FILE|KEY=VALUE",
                   help="config for this command: a config file, or KEY=VALUE items "
                        "(e.g. kubernetes.namespace=ml); over ~/.sky/config.yaml and .sky.yaml")


def add_task_flags(p: argparse.ArgumentParser, *, env: bool = False, secrets: bool = True,
                   workdir: bool = True) -> None:
    """The resource overrides of ``sky launch`` (minus -n, which these verbs use for their
    own name), plus --env-file (and --env, --secret, --secret-file when asked)."""
    g = p.add_argument_group("resource overrides (replace the YAML's values)")
    add_resource_overrides(g)
    if workdir:
        g.add_argument("--workdir", help="directory synced to the nodes (the job's cwd)")
    add_git_flags(g)
    if env:
        p.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]",
                       help="set (override) a task env var; KEY alone takes it from your environment")
    p.add_argument("--env-file", action="append", default=[], metavar="FILE",
                   help="dotenv file of KEY=VAL lines")
    p.add_argument("--async", dest="async_", action="store_true",
                   help="print the request id and return at once (skyd requests logs ID follows it)")
    p.add_argument("--no-async", dest="async_", action="store_false", help=argparse.SUPPRESS)
    if secrets:
        from skyd.cli.secret_flags import add_secret_flags

        add_secret_flags(p)


def add_resource_overrides(g: Any) -> None:
    """The resource flags of ``sky launch`` (one list for every verb that takes a task)."""
    g.add_argument("--gpus", metavar="ACC[:N]", help="accelerators, e.g. A100:8 or MI300X:8")
    g.add_argument("--cpus", metavar="N[+]", help="vCPUs per node, e.g. 4 or 4+")
    g.add_argument("--memory", metavar="GB[+]", help="memory per node in GiB, e.g. 32+")
    g.add_argument("--infra", metavar="INFRA", help="e.g. local, aws/us-east-1, k8s, ssh/pool")
    g.add_argument("--cloud", help=argparse.SUPPRESS)
    g.add_argument("--region", help=argparse.SUPPRESS)
    g.add_argument("--zone", help=argparse.SUPPRESS)
    g.add_argument("--instance-type", "-t", dest="instance_type", help="instance type")
    g.add_argument("--num-nodes", type=int, dest="num_nodes", help="number of nodes")
    g.add_argument("--use-spot", dest="use_spot", action="store_true", default=None,
                   help="use spot instances")
    g.add_argument("--no-use-spot", dest="use_spot", action="store_false", help="on-demand")
    g.add_argument("--disk-size", type=int, dest="disk_size", help="disk size in GB")
    add_tier_flags(g)
    g.add_argument("--image-id", dest="image_id", help="image (docker:<img> for containers)")
    g.add_argument("--ports", action="append", help="ports to open (repeatable)")


def add_git_flags(g: Any) -> None:
    g.add_argument("--git-url", dest="git_url", metavar="URL",
                   help="the workdir is this git repository (cloned on this machine)")
    g.add_argument("--git-ref", dest="git_ref", metavar="REF",
                   help="branch, tag or commit of --git-url (or of the YAML's git workdir)")


def add_tier_flags(g: Any) -> None:
    g.add_argument("--disk-tier", dest="disk_tier", help="low|medium|high|ultra|best")
    g.add_argument("--network-tier", dest="network_tier", help="standard|best")


def collect_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The payload's ``overrides`` (None values left out; checked by skyd.sdk.payloads)."""
    from skyd.sdk.payloads import overrides

    infra = getattr(args, "infra", None)
    cloud, region, zone = (getattr(args, k, None) for k in ("cloud", "region", "zone"))
    if not infra and (cloud or region or zone):
        infra = "/".join(x or "*" for x in (cloud, region, zone)).rstrip("/*")
    return overrides(
        gpus=args.gpus, cpus=args.cpus, memory=args.memory, infra=infra,
        instance_type=args.instance_type, num_nodes=args.num_nodes, use_spot=args.use_spot,
        disk_size=args.disk_size, disk_tier=args.disk_tier, network_tier=args.network_tier,
        image_id=args.image_id, ports=args.ports, workdir=getattr(args, "workdir", None),
        git_url=args.git_url, git_ref=args.git_ref)


def collect_envs(args: argparse.Namespace) -> dict[str, str]:
    """--env-file files, then --env KEY[=VAL] on top."""
    from skyd.cli.cmd_validate import collect_env

    return collect_env(argparse.Namespace(env=list(getattr(args, "env", None) or []),
                                          env_file=list(getattr(args, "env_file", None) or [])))


# -- SkyPilot flags skyd accepts or refuses by name ----------------------------------------

def _walk(parser: argparse.ArgumentParser, path: list[str]) -> argparse.ArgumentParser | None:
    cur: argparse.ArgumentParser | None = parser
    for name in path:
        nxt = None
        for a in (cur._actions if cur is not None else []):
            if isinstance(a, argparse._SubParsersAction):
                nxt = a.choices.get(name)
        cur = nxt
        if cur is None:
            return None
    return cur


def _dest(flag: str) -> str:
    return "compat_" + flag.lstrip("-").replace("-", "_")


def install(parser: argparse.ArgumentParser, only: str | None = None) -> None:
    """Add each SkyPilot flag of the table a skyd command lacks, as accepted (documented
    meaning) or refused (exit 2 naming it) — see ACCEPTED / REFUSED. ``only``: just the
    commands under this top-level word (what one CLI run parses)."""
    for path, flags in SKYPILOT_FLAGS.items():
        if only is not None and path.split()[0] != only:
            continue
        sp = _walk(parser, path.split())
        if sp is None:
            continue
        have = {s for a in sp._actions for s in a.option_strings}
        for spec in flags:
            names = [n for n in spec.split("/") if n.startswith("-")]
            if any(n in have for n in names):
                continue
            free = [n for n in names if n not in have]
            key = next((n for n in names if n.startswith("--")), names[0])
            why = ACCEPTED.get(key) or REFUSED.get(key) or REFUSED_ON.get(path)
            if why is None:
                continue
            if key not in ACCEPTED and key not in REFUSED:
                sp.set_defaults(compat_refused_on=REFUSED_ON[path])
            kw: dict[str, Any] = {"dest": _dest(key), "default": None, "help": why[:80]}
            if key in VALUE_FLAGS:
                kw["metavar"] = "VALUE"
            else:
                kw["action"] = "store_const"
                kw["const"] = True
            negs = [n for n in free if n.startswith("--no-")]
            pos = [n for n in free if not n.startswith("--no-")]
            if pos:
                sp.add_argument(*pos, **kw)
            if negs:
                sp.add_argument(*negs, dest=_dest(key), action="store_const", const=False,
                                help=argparse.SUPPRESS)


def check(args: argparse.Namespace) -> None:
    """Refused SkyPilot flags that were given: InvalidSpecError naming the flag."""
    from skyd.errors import InvalidSpecError

    refused_on = getattr(args, "compat_refused_on", None)
    for name, value in vars(args).items():
        if not name.startswith("compat_") or value in (None, False) or name == "compat_refused_on":
            continue
        flag = "--" + name[len("compat_"):].replace("_", "-")
        why = REFUSED.get(flag) or (refused_on if flag not in ACCEPTED else None)
        if why:
            raise InvalidSpecError(why, field=flag,
                                   hint="see docs/cli-compat.md for what skyd offers instead")
    items = getattr(args, _dest("--config"), None)
    if items:  # a read verb's --config: validated (a wrong key is still an error)
        from skyd import config

        config.load(config.caller_sources([items] if isinstance(items, str) else list(items)))


def latest_managed_job(client: Any, name: str | None = None) -> int:
    """``sky jobs logs`` without an id: the latest managed job (of ``name`` when given)."""
    from skyd.errors import NotFoundError

    rows = [r for r in client.get("/v1/jobs") if not name or r.get("name") == name]
    if not rows:
        raise NotFoundError("no managed job" + (f" named {name!r}" if name else ""),
                            hint="skyd jobs queue lists them")
    return max(int(r.get("job_id") or r.get("id") or 0) for r in rows)


def normalize_argv(argv: list[str]) -> list[str]:
    """``skyd exec -c CLUSTER ENTRY...`` (SkyPilot's spelling) -> ``skyd exec CLUSTER
    ENTRY...``: the option moves to the positional place, so both spellings parse alike
    (argparse cannot give one positional two sources)."""
    if not argv or argv[0] != "exec":
        return argv
    rest = list(argv[1:])
    for i, a in enumerate(rest):
        if a == "--":
            break
        name = None
        if a in ("-c", "--cluster") and i + 1 < len(rest):
            name, drop = rest[i + 1], 2
        elif a.startswith("--cluster="):
            name, drop = a.split("=", 1)[1], 1
        elif a.startswith("-c") and len(a) > 2 and not a.startswith("--"):
            name, drop = a[2:], 1
        if name is not None:
            del rest[i:i + drop]
            return ["exec", name, *rest]
    return argv


def cluster_is_up(name: str) -> bool:
    """``launch --fast``: is the cluster there and UP (then setup is skipped)?"""
    from skyd.cli.client import get_client

    rows = get_client().get("/v1/status", {"name": [name]}) or []
    return any(r.get("name") == name and r.get("status") == "UP" for r in rows)


def task_flags_payload(args: argparse.Namespace) -> dict[str, Any]:
    """env (--env-file, --env), secrets (--secret-file, --secret) and overrides of a verb
    that took add_task_flags."""
    from skyd.cli.secret_flags import collect_secrets

    return {"env": collect_envs(args), "secrets": collect_secrets(args),
            "overrides": collect_overrides(args)}


def add_cluster_verb_flags(p: argparse.ArgumentParser, verb: str) -> None:
    """``down -p/--purge``; ``start -i/--down`` (autostop once started), as SkyPilot's."""
    if verb == "down":
        p.add_argument("-p", "--purge", action="store_true",
                       help="remove the record even when the provider fails (check for leftovers)")
    if verb == "start":
        p.add_argument("-i", "--idle-minutes-to-autostop", dest="idle_minutes", type=int,
                       help="autostop after this many idle minutes once started")
        p.add_argument("--down", action="store_true",
                       help="with -i: tear down instead of stopping")


def cluster_verb_payload(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"purge": True} if getattr(args, "purge", False) else {}
    if getattr(args, "all_users", None):  # -a -u: every user's (an admin of a shared daemon)
        out["all_users"] = True
    return out


def after_start(args: argparse.Namespace, submit: Any) -> None:
    """``start -i N [--down]``: set autostop on the started clusters."""
    if args.verb != "start" or getattr(args, "idle_minutes", None) is None:
        return
    submit("autostop", {"clusters": args.clusters, "all": args.all,
                        "idle_minutes": args.idle_minutes, "down": bool(args.down),
                        "cancel": False}, args)


def logs_job_id(job_ids: list[int]) -> int | None:
    """SkyPilot streams one job's log; several ids need --sync-down (as in SkyPilot)."""
    from skyd.errors import InvalidSpecError

    if len(job_ids) > 1:
        raise InvalidSpecError(f"cannot stream the logs of several jobs ({', '.join(map(str, job_ids))})",
                               field="job_ids", hint="add --sync-down to download them all")
    return job_ids[0] if job_ids else None


def sync_down_logs(client: Any, cluster: str, job_ids: list[int], node: int | None = None) -> int:
    """``logs --sync-down``: each job's log (the latest when none given) written under
    ``$SKYD_HOME/logs/sync/<cluster>/job-<id>.log``; the paths are printed."""
    import sys
    from urllib.parse import quote

    from skyd import paths

    base = f"/v1/clusters/{quote(cluster, safe='')}"
    if not job_ids:
        jobs = client.get(f"{base}/queue")["jobs"]
        if not jobs:
            from skyd.errors import NotFoundError

            raise NotFoundError(f"cluster {cluster!r} has no jobs")
        job_ids = [max(int(j["job_id"]) for j in jobs)]
    out_dir = paths.logs_dir() / "sync" / cluster
    out_dir.mkdir(parents=True, exist_ok=True)
    for jid in job_ids:
        params: dict[str, Any] = {"follow": "0", "tail": 0}
        if node is not None:
            params["node"] = node
        target = out_dir / (f"job-{jid}.log" if node is None else f"job-{jid}-node{node}.log")
        with open(target, "wb") as f:
            for chunk in client.stream_bytes(f"{base}/jobs/{jid}/logs", params):
                f.write(chunk)
        sys.stdout.write(f"Job {jid} logs: {target}\n")
    return 0


def add_time_filters(p: argparse.ArgumentParser) -> None:
    """``jobs queue --since 48h | --after T | --before T`` (SkyPilot's)."""
    p.add_argument("--since", metavar="AGE", help="submitted within AGE (30m, 48h, 7d, 2w; a bare number is seconds)")
    p.add_argument("--after", metavar="TIME", help="submitted after TIME (ISO date/time, or epoch seconds)")
    p.add_argument("--before", metavar="TIME", help="submitted before TIME (ISO date/time, or epoch seconds)")


def _age_s(text: str) -> float:
    import re

    from skyd.errors import InvalidSpecError

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if not m:
        raise InvalidSpecError(f"--since {text!r}: not an age", field="--since",
                               hint="e.g. 30m, 48h, 7d, 2w (a bare number is seconds)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def _when(text: str, flag: str) -> float:
    from datetime import datetime

    from skyd.errors import InvalidSpecError

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise InvalidSpecError(f"{flag} {text!r}: not a time", field=flag,
                               hint="an ISO date or date-time (2026-01-31, 2026-01-31T12:00) or epoch seconds") from None


def filter_by_time(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    import time

    from skyd.errors import InvalidSpecError

    since, after, before = (getattr(args, k, None) for k in ("since", "after", "before"))
    if since and after:
        raise InvalidSpecError("--since and --after cannot be used together", field="--since")
    lo = time.time() - _age_s(since) if since else (_when(after, "--after") if after else None)
    hi = _when(before, "--before") if before else None

    def keep(r: dict[str, Any]) -> bool:
        t = float(r.get("submitted_at") or 0)
        return (lo is None or t >= lo) and (hi is None or t <= hi)

    return [r for r in rows if keep(r)] if lo is not None or hi is not None else rows


def print_async(args: argparse.Namespace, rid: str) -> bool:
    """``--async``: print the request id (and return True: the caller is done)."""
    if not getattr(args, "async_", False):
        return False
    print(rid)
    return True


def provision_log(client: Any, cluster: str) -> int:
    """``logs --provision``: the events of the cluster's latest launch request (stages,
    provider messages, failover), as ``skyd requests logs`` shows them."""
    from skyd.cli.progress import render_events
    from skyd.errors import NotFoundError

    rows = [r for r in client.get("/v1/requests", {"verb": "launch", "limit": 1000})
            if r.get("cluster_name") == cluster]
    if not rows:
        raise NotFoundError(f"no launch of cluster {cluster!r} is on record",
                            hint="skyd requests ls lists the requests the daemon keeps")
    latest = max(rows, key=lambda r: float(r.get("created_at") or 0))
    render_events(client.events(str(latest["id"]), False), tty=False)
    return 0


def sync_down_managed(client: Any, job_id: int, *, controller: bool = False) -> int:
    """``jobs logs --sync-down``: the managed job's log (as it is now) written under
    ``$SKYD_HOME/logs/sync/jobs/``; the path is printed."""
    import sys

    from skyd import paths

    out_dir = paths.logs_dir() / "sync" / "jobs"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / (f"job-{job_id}-controller.log" if controller else f"job-{job_id}.log")
    params = {"follow": 0, "controller": 1 if controller else 0}
    with open(target, "w") as f:
        for item in client.stream_ndjson(f"/v1/jobs/{int(job_id)}/logs", params):
            f.write(str(item.get("text", "")))
    sys.stdout.write(f"Managed job {job_id} logs: {target}\n")
    return 0
