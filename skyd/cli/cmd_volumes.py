"""skyd volumes apply / ls / delete: Kubernetes PersistentVolumeClaims, as ``sky volumes``."""

from __future__ import annotations

import argparse
from typing import Any

from skyd.cli.output import add_output_flag


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("volumes", help="volumes: Kubernetes PVCs (apply, ls, delete)",
                       description="Persistent volumes on Kubernetes (PersistentVolumeClaims), "
                                   "from SkyPilot's volume YAML.")
    vs = p.add_subparsers(dest="volumes_cmd", metavar="SUBCOMMAND")
    p.set_defaults(func=run_ls, output="table")
    a = vs.add_parser("apply", help="create a volume from VOLUME.yaml (or flags)")
    a.add_argument("yaml", nargs="?", metavar="VOLUME.yaml")
    a.add_argument("-n", "--name", help="volume name (overrides the YAML's)")
    a.add_argument("--infra", help="k8s or k8s/<context>")
    a.add_argument("--type", dest="vtype", help="k8s-pvc")
    a.add_argument("--size", help="e.g. 10Gi")
    a.add_argument("--use-existing", action="store_true", default=None,
                   help="register an existing PVC of that name")
    a.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    add_output_flag(a)
    a.set_defaults(func=run_apply)
    ls = vs.add_parser("ls", help="list volumes")
    add_output_flag(ls)
    ls.set_defaults(func=run_ls)
    d = vs.add_parser("delete", help="delete volumes skyd created")
    d.add_argument("names", nargs="*", metavar="NAME")
    d.add_argument("-a", "--all", action="store_true", help="every volume skyd manages")
    d.add_argument("-y", "--yes", action="store_true", help="no confirmation prompt")
    d.set_defaults(func=run_delete)


def _doc(args: argparse.Namespace) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if args.yaml:
        from pathlib import Path

        import yaml

        from skyd.errors import InvalidSpecError
        from skyd.sdk.payloads import read_task_file

        try:
            from skyd.config.layers import safe_load_all

            docs = safe_load_all(read_task_file(Path(args.yaml), args.yaml), args.yaml)
            doc = (docs[0] if docs else None) or {}
        except yaml.YAMLError as e:
            raise InvalidSpecError(f"{args.yaml} is not valid YAML: {e}") from None
    for key, v in (("name", args.name), ("infra", args.infra), ("type", args.vtype),
                   ("size", args.size), ("use_existing", args.use_existing)):
        if v is not None and isinstance(doc, dict):
            doc[key] = v
    return doc


def run_apply(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request

    client = get_client()
    rid = client.submit("volumes.apply", {"volume": _doc(args)})
    import os

    if args.output == "json":
        from skyd.cli.output import print_json

        with open(os.devnull, "w") as quiet:
            print_json(follow_request(client, rid, out=quiet, err=quiet))
        return 0
    follow_request(client, rid)
    return 0


def run_ls(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client

    rows = get_client().get("/v1/volumes")
    if getattr(args, "output", "table") == "json":
        from skyd.cli.output import print_json

        print_json(rows)
        return 0
    from skyd.cli.output import print_table

    print_table([r for r in rows if r.get("name")], [
        ("NAME", "name"), ("TYPE", "type"), ("INFRA", "infra"), ("NAMESPACE", "namespace"),
        ("SIZE", "size"), ("ACCESS", "access_mode"), ("STATUS", "status")], empty="No volumes.")
    for r in rows:
        if r.get("error"):
            print(f"{r['infra']}: unavailable ({r['error']})")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.cli.progress import follow_request

    client = get_client()
    follow_request(client, client.submit("volumes.delete", {"names": args.names, "all": args.all}))
    return 0
