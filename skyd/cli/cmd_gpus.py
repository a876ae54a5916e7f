"""skyd show-gpus / skyd gpus list / skyd catalog refresh.

Answered in the CLI process from the catalogs (no daemon needed): loading and indexing
the bundled catalogs takes ~15 ms. ``--infra k8s`` asks the daemon (GET /v1/gpus/k8s).
"""

from __future__ import annotations

import argparse
from typing import Any

from skyd.cli.output import add_output_flag


def _add_list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("accelerator", nargs="?", metavar="NAME[:COUNT]",
                   help="e.g. MI300X or H100:8 (default: every accelerator)")
    p.add_argument("--infra", "--cloud", dest="infra", help="only this cloud")
    p.add_argument("--all-regions", action="store_true",
                   help="every region (default: the cheapest per cloud)")
    p.add_argument("--region", help="only this region")
    p.add_argument("-a", "--all", dest="show_all", action="store_true",
                   help="details of every accelerator offering (as sky show-gpus -a); "
                        "without it and without NAME, a summary per accelerator")
    add_output_flag(p)
    p.set_defaults(func=run_list)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sg = sub.add_parser("show-gpus", help="accelerators, where they are offered and prices")
    _add_list_args(sg)
    g = sub.add_parser("gpus", help="accelerator catalog (gpus list)")
    gsub = g.add_subparsers(dest="gpus_cmd", required=True)
    _add_list_args(gsub.add_parser("list", help="same as show-gpus"))
    c = sub.add_parser("catalog", help="catalog maintenance")
    csub = c.add_subparsers(dest="catalog_cmd", required=True)
    r = csub.add_parser("refresh", help="fetch a cloud's current prices (where a fetcher exists)")
    r.add_argument("cloud", nargs="?", help="one cloud (default: every cloud with a fetcher)")
    r.set_defaults(func=run_refresh)


def _enabled(cat: Any) -> set[str]:
    import skyd.clouds.local  # noqa: F401 - registers local
    from skyd.clouds.base import registered_clouds

    return set(cat.enabled) | ({"local"} & set(registered_clouds()))


def run_list(args: argparse.Namespace) -> int:
    infra = str(args.infra or "")
    if infra.split("/", 1)[0] in ("k8s", "kubernetes"):  # before the catalog imports
        return _run_k8s(args, infra.partition("/")[2] or None)
    from skyd.clouds.catalog import load_catalog
    from skyd.solver import gpu_listing

    if args.infra and args.infra.split("/")[0] == "slurm":  # live, from the clusters' scontrol
        import anyio

        from skyd.clouds.slurm.gpus import gpu_rows

        _, _, only = args.infra.partition("/")
        return _print_slurm_rows(anyio.run(gpu_rows, only or None), args.output == "json")
    name, count = None, None
    if args.accelerator:
        name, _, cnt = args.accelerator.partition(":")
        count = float(cnt) if cnt else None
    cat = load_catalog()
    rows = gpu_listing(cat, name, count, cloud=args.infra,
                       all_regions=args.all_regions or bool(args.region), enabled=_enabled(cat))
    if args.region:
        rows = [r for r in rows if r.get("region") == args.region]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import duration, print_table

    if not args.accelerator and not args.show_all:
        return _summary(rows)

    def price(v: Any) -> str:
        return "-" if v in (None, "") else f"$ {float(v):.2f}"

    def per_gpu(r: dict[str, Any], key: str) -> str:
        v, n = r.get(key), float(r.get("count") or 0)
        return "-" if v in (None, "") or n <= 0 else f"$ {float(v) / n:.2f}"

    def cloud(r: dict[str, Any]) -> str:
        mark = "" if r.get("enabled") else " *"
        return f"{r['cloud']}{mark}"

    print_table(rows, [
        ("GPU", "accelerator"), ("QTY", lambda r: f"{float(r['count']):g}"), ("CLOUD", cloud),
        ("INSTANCE_TYPE", "instance_type"), ("vCPUs", lambda r: f"{float(r['vcpus']):g}" if r.get("vcpus") else "-"),
        ("HOST_MEMORY", lambda r: f"{float(r['memory_gib']):g}GB" if r.get("memory_gib") else "-"),
        ("HOURLY_PRICE", lambda r: price(r.get("price"))),
        ("HOURLY_SPOT_PRICE", lambda r: price(r.get("spot_price"))),
        ("$/GPU-h", lambda r: per_gpu(r, "price")), ("SPOT $/GPU-h", lambda r: per_gpu(r, "spot_price")),
        ("REGION", "region"),
    ], empty="No accelerators match.")
    ages = {r["cloud"]: r.get("catalog_age_s") for r in rows}
    stale = ", ".join(f"{c} {duration(a) if a is not None else 'bundled'}"
                      for c, a in sorted(ages.items()))
    print("\n* not enabled for launching (catalog only, or no credentials)."
          + (f"\nCatalog age: {stale}." if stale else ""))
    return 0


def _summary(rows: list[dict[str, Any]]) -> int:
    """SkyPilot's default show-gpus view: each accelerator and the counts offered."""
    from skyd.cli.output import print_table

    by: dict[str, set[float]] = {}
    for r in rows:
        by.setdefault(str(r["accelerator"]), set()).add(float(r["count"]))
    print_table([{"gpu": k, "qty": ", ".join(f"{c:g}" for c in sorted(v))}
                 for k, v in sorted(by.items())],
                [("GPU", "gpu"), ("AVAILABLE_QUANTITIES", "qty")], empty="No accelerators.")
    print("\nDetails of every offering: skyd show-gpus -a; of one: skyd show-gpus NAME[:COUNT]")
    return 0


def run_refresh(args: argparse.Namespace) -> int:
    import anyio

    from skyd.clouds.catalog_refresh import catalog_fetchers, refresh_catalog
    from skyd.errors import NotFoundError

    clouds = [args.cloud] if args.cloud else sorted(catalog_fetchers())
    if not clouds:
        raise NotFoundError("no catalog fetchers are registered in this build",
                            hint="the bundled catalogs are used; provider modules add fetchers")
    for c in clouds:
        path = anyio.run(refresh_catalog, c)
        print(f"{c}: wrote {path}")
    return 0


def _run_k8s(args: argparse.Namespace, context: str | None) -> int:
    """show-gpus --infra k8s[/<context>]: free and total GPUs per context, asked of the
    daemon (started if needed), whose kubernetes client is already loaded and connected."""
    from skyd.cli.client import get_client

    rows: list[dict[str, Any]] = list(get_client().get("/v1/gpus/k8s",
                                                       {"context": context} if context else None))
    if args.accelerator:
        want = args.accelerator.partition(":")[0].upper()
        rows = [r for r in rows if r.get("accelerator") and r["accelerator"].upper() == want]
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import print_table

    print_table([r for r in rows if r.get("accelerator")], [
        ("CONTEXT", "context"), ("GPU", "accelerator"),
        ("REQUESTABLE_QTY_PER_NODE", lambda r: str(r["max_per_node"])),
        ("UTILIZATION", lambda r: f"{r['free']} of {r['total']} free"),
    ], empty="No GPUs on the reachable contexts.")
    for r in rows:
        if not r.get("accelerator") and r.get("error"):
            print(f"{r['context']}: unavailable ({r['error']})")
    return 0


def _print_slurm_rows(rows: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import print_table

    ok = [r for r in rows if not r.get("error")]
    print_table(ok, [
        ("GPU", lambda r: r["accelerator"] or r["gres"]), ("CLUSTER", "cluster"), ("PARTITION", "partition"),
        ("PER_NODE", "per_node"), ("FREE", "free"), ("TOTAL", "total"), ("GRES", "gres"),
    ], empty="No GPUs on the Slurm clusters.")  # fmt: skip
    for r in rows:
        if r.get("error"):
            print(f"warning: {r['error']}")
    return 0 if ok or not rows else 1
