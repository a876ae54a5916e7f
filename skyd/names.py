"""Names users give to clusters, managed jobs and services (stdlib only: the CLI imports
this on its fast path, the SDK and the daemon check with the same code).

SkyPilot's rule (``CLUSTER_NAME_VALID_REGEX``): a letter first; then letters, digits,
``-``, ``_`` or ``.``; a letter or digit last. skyd adds a length bound, because a name
becomes part of directory names and instance names on every provider: MAX_NAME_LEN is
SkyPilot's tightest per-provider cluster-name limit (GCP, 35 characters), so a name plus
skyd's per-node suffix (``-<rank>``) and a provider's own prefix or hash stays inside every
provider's instance-name limit (GCE and Kubernetes: 63). See docs/models.md.

A name is checked where it enters (CLI flags, SDK payload builders, the daemon's API, the
YAML ``name`` of a managed job) -- only when something is *created* with it. Clusters that
already exist (rows written before the rule) stay addressable by ``down``/``stop``.
"""

from __future__ import annotations

import re

from skyd.errors import InvalidSpecError

MAX_NAME_LEN = 35
NAME_RE = re.compile(r"[A-Za-z](?:[-_.A-Za-z0-9]*[A-Za-z0-9])?")
RULE = (f"a letter first; then letters, digits, '-', '_' or '.'; a letter or digit last; "
        f"at most {MAX_NAME_LEN} characters")


def is_valid_name(name: object) -> bool:
    return (isinstance(name, str) and len(name) <= MAX_NAME_LEN
            and NAME_RE.fullmatch(name) is not None)


def check_name(name: object, *, kind: str = "cluster", field: str | None = None) -> str:
    """``name`` if it follows the rule, else InvalidSpecError (exit 2) naming the rule."""
    if is_valid_name(name):
        return str(name)
    shown = repr(name) if not isinstance(name, str) or len(name) <= 60 else repr(name[:57] + "...")
    why = ""
    if isinstance(name, str) and len(name) > MAX_NAME_LEN:
        why = f" ({len(name)} characters)"
    elif not isinstance(name, str):
        why = f" (a {type(name).__name__}, not a string)"
    raise InvalidSpecError(
        f"invalid {kind} name {shown}{why}: a {kind} name has {RULE}",
        field=field or f"{kind.replace(' ', '_')}_name",
        hint="e.g. 'my-cluster', 'train.v2' or 'job_1'",
    )


def check_optional_name(name: object, *, kind: str = "cluster", field: str | None = None
                        ) -> str | None:
    """None / "" pass (a name is then generated); anything else must follow the rule."""
    if name is None or name == "":
        return None
    return check_name(name, kind=kind, field=field)
