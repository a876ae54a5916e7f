"""``--secret KEY[=VAL]`` and ``--secret-file FILE`` (launch, exec, jobs launch).

Secrets are env vars of the job that skyd never stores or shows in plain text: ``KEY``
alone takes the value from your environment (so it is not in your shell history either),
as SkyPilot's ``--secret`` does. A secret the YAML declares ``null`` must be given here.
"""

from __future__ import annotations

import argparse


def add_secret_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--secret", action="append", default=[], metavar="KEY[=VAL]",
                   help="set a task secret (an env var skyd never stores or shows); "
                        "KEY alone takes it from your environment")
    p.add_argument("--secret-file", action="append", default=[], metavar="FILE",
                   help="dotenv file of KEY=VAL secrets")


def collect_secrets(args: argparse.Namespace) -> dict[str, str]:
    from skyd.errors import InvalidSpecError
    from skyd.sdk.payloads import resolve_secrets

    given: dict[str, str | None] = {}
    for item in getattr(args, "secret", None) or []:
        k, eq, v = item.partition("=")
        if not k:
            raise InvalidSpecError("--secret needs a name: --secret KEY or --secret KEY=VALUE",
                                   field="--secret")
        given[k] = v if eq else None
    return resolve_secrets(given, getattr(args, "secret_file", None) or [])
