"""skyd config show: the merged config (SkyPilot's layers + skyd's own) and where each key
came from; keys skyd does not act on are marked. Reads files only (no daemon)."""

from __future__ import annotations

import argparse
import sys

from skyd.cli.compat_flags import add_config_flag
from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("config", help="show the merged config and where each key comes from",
                       description="Config layers, lowest first: ~/.sky/config.yaml (or "
                                   "$SKYPILOT_GLOBAL_CONFIG; $SKYPILOT_CONFIG replaces both "
                                   "files), ./.sky.yaml, --config, a task's config:, then "
                                   "skyd's own config.yaml.")
    cs = p.add_subparsers(dest="config_cmd", metavar="SUBCOMMAND")
    p.set_defaults(func=None, _parser=p)
    s = cs.add_parser("show", help="print the merged config with each key's source")
    s.add_argument("task", nargs="?", metavar="TASK.yaml", help="also merge this task's config:")
    add_config_flag(s)
    add_output_flag(s)
    s.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    from skyd import config
    from skyd.clouds.config_support import unsupported

    cfg = config.load(config.caller_sources(args.config))
    if args.task:
        from pathlib import Path

        from skyd.config.layers import safe_load_all
        from skyd.sdk.payloads import read_task_file

        docs = [d for d in safe_load_all(read_task_file(Path(args.task), args.task), args.task)
                if isinstance(d, dict)]
        block = next((d["config"] for d in docs if isinstance(d.get("config"), dict)), None)
        cfg = cfg.with_task(block, f"{args.task} (config:)")
    ignored = set(unsupported(cfg))
    from skyd.config.layers import leaf_paths

    rows = []
    for p in leaf_paths(cfg.data):
        key = ".".join(p)
        rows.append({"key": key, "value": cfg.get(*p), "source": cfg.origin.get(p, ""),
                     "supported": key not in ignored})
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json({"config": cfg.data, "keys": rows,
                    "layers": [{"source": la.source, "kind": la.kind} for la in cfg.layers]})
        return 0
    if not cfg.layers:
        sys.stdout.write("No config: ~/.sky/config.yaml, ./.sky.yaml and skyd's config.yaml "
                         "are absent.\n")
        return 0
    sys.stdout.write("Layers (lowest first): " + ", ".join(
        f"{la.source} [{la.kind}]" for la in cfg.layers) + "\n")
    import json

    width = max(len(r["key"]) for r in rows) if rows else 0
    for r in rows:
        mark = "" if r["supported"] else "   (not supported by skyd: ignored)"
        sys.stdout.write(f"{r['key']:<{width}}  {json.dumps(r['value'], default=str)}"
                         f"   # {r['source']}{mark}\n")
    return 0
