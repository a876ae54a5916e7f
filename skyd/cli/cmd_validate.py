"""skyd validate: load a task YAML locally and print its normalized form."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skyd.cli.output import add_output_flag
from skyd.errors import InvalidSpecError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("validate", help="check a task YAML and print its normalized form",
                       description="Load a task YAML (SkyPilot schema) and print its normalized "
                                   "form; a multi-document YAML is a chain DAG.")
    p.add_argument("yaml", metavar="TASK.yaml", help="task YAML file ('-' for stdin)")
    add_env_flags(p)
    add_output_flag(p)
    p.set_defaults(func=run)


def add_env_flags(p: argparse.ArgumentParser) -> None:
    """``--env K=V`` (or ``--env K``: from the local environment) and ``--env-file F``."""
    p.add_argument("--env", action="append", default=[], metavar="KEY[=VAL]",
                   help="set (override) a task env var; KEY alone takes it from your environment")
    p.add_argument("--env-file", action="append", default=[], metavar="FILE",
                   help="dotenv file of KEY=VAL lines")


def parse_env_file(path: str) -> dict[str, str]:
    from skyd.models import parse_env_file as parse

    return parse(path)


def collect_env(args: argparse.Namespace) -> dict[str, str]:
    env: dict[str, str] = {}
    for f in args.env_file:
        env.update(parse_env_file(f))
    for item in args.env:
        if "=" in item:
            k, v = item.split("=", 1)
        else:
            k = item
            if k not in os.environ:
                raise InvalidSpecError(f"--env {k}: not set in your environment",
                                       field="--env", hint=f"use --env {k}=VALUE")
            v = os.environ[k]
        if not k:
            raise InvalidSpecError(f"--env {item!r}: empty name", field="--env")
        env[k] = v
    return env


def run(args: argparse.Namespace) -> int:
    import sys
    import warnings

    env = collect_env(args)
    from skyd.sdk.payloads import read_task_file

    if args.yaml == "-":
        text, path, base = read_task_file(Path("/dev/stdin"), "<stdin>"), "<stdin>", os.getcwd()
    else:
        p = Path(args.yaml)
        text = read_task_file(p, args.yaml)
        path, base = str(p), str(p.resolve().parent)
    try:
        from skyd.models import load_dag
    except ImportError as e:
        from skyd.errors import SkydError

        raise SkydError(f"the task model is not available: {e}") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            dag = load_dag(path, text=text, env_overrides=env, base_dir=Path(base),
                           allow_missing_env=True)
            from skyd.models.precheck import precheck

            precheck(dag, base)  # what launch refuses before anything exists
        except InvalidSpecError as e:
            for w in caught:  # e.g. duplicate keys: worth seeing next to the errors
                sys.stderr.write(f"warning: {w.message}\n")
            return _report_errors(e, args.output == "json")
        normalized = dag.to_normalized()
        msgs = [str(w.message) for w in caught]
        for t in getattr(dag, "tasks", []):
            msgs.extend(t.validate())
            msgs.extend(f"secret {k} has no value: give it at launch with --secret {k}"
                        if k in t.secrets else
                        f"env {k} has no value: give it at launch with --env {k}=VALUE"
                        for k in t.required_envs())
    for m in dict.fromkeys(msgs):  # a load warning is both caught and the task's
        sys.stderr.write(f"warning: {m}\n")
    if args.output == "json":
        from skyd.cli.output import print_json

        print_json(normalized)
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(normalized, sort_keys=False, default_flow_style=False,
                                         allow_unicode=True))
    return 0


def _report_errors(err: InvalidSpecError, as_json: bool) -> int:
    """Every error of the file: each with its field, line and fix; ``-o json`` gives one
    document listing them all. Exit 2."""
    import sys

    from skyd.errors import spec_error_entry

    errors = list(getattr(err, "errors", None) or [err])
    if as_json:
        from skyd.cli.output import print_json

        doc = err.to_dict()
        doc["errors"] = [spec_error_entry(e) for e in errors]
        print_json(doc)
        return err.exit_code
    for e in errors:
        sys.stderr.write(f"error: {e}\n")
        if e.hint:
            sys.stderr.write(f"hint: {e.hint}\n")
    if len(errors) > 1:
        sys.stderr.write(f"{err.message}\n")
    return err.exit_code
