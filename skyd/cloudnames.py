"""The one list of providers (stdlib only, importable from anywhere).

:data:`PROVIDERS` names every in-tree provider and where its :class:`~skyd.clouds.base.Cloud`
class lives (``module:Class``, imported only when the cloud is first used). Out-of-tree
providers add themselves through the ``skyd.clouds`` entry-point group, and test providers
through ``$SKYD_CLOUD_PLUGINS`` (``name=module:Class``, comma separated). Everything else
that needs provider names (``skyd.models`` accepting an ``infra:``, the catalog's
"implemented" view, ``skyd check``, the planner) derives them from here; see
docs/providers.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

from skyd import settings

#: name -> "module:Class" of the in-tree providers. Adding a provider = one line here.
PROVIDERS: dict[str, str] = {
    "local": "skyd.clouds.local:LocalCloud",
    "ssh": "skyd.clouds.ssh.cloud:SSHCloud",
    "aws": "skyd.clouds.aws.cloud:AWSCloud",
    "gcp": "skyd.clouds.gcp.cloud:GCPCloud",
    "slurm": "skyd.clouds.slurm.cloud:SlurmCloud",
    "runpod": "skyd.clouds.runpod.cloud:RunPodCloud",
    "vultr": "skyd.clouds.vultr.cloud:VultrCloud",
    "hotaisle": "skyd.clouds.hotaisle.cloud:HotAisleCloud",
    "do": "skyd.clouds.do.cloud:DOCloud",
    "amddevcloud": "skyd.clouds.do.cloud:AMDDevCloud",
    "crusoe": "skyd.clouds.crusoe.cloud:CrusoeCloud",
    "kubernetes": "skyd.clouds.kubernetes.cloud:KubernetesCloud",
}

ENTRY_POINT_GROUP = "skyd.clouds"
PLUGIN_ENV = settings.CLOUD_PLUGINS.name


def env_specs() -> dict[str, str]:
    """``$SKYD_CLOUD_PLUGINS`` (``name=module:Class,...``): providers for tests and trials."""
    out: dict[str, str] = {}
    for part in settings.CLOUD_PLUGINS.get().split(","):
        name, _, target = part.strip().partition("=")
        if name and ":" in target:
            out[name.strip().lower()] = target.strip()
    return out


_EP_CACHE: tuple[tuple[tuple[str, int], ...], dict[str, str]] | None = None


def _path_key() -> tuple[tuple[str, int], ...]:
    """sys.path with each entry's mtime: installing or removing a package adds or drops a
    ``*.dist-info`` in one of these folders, which changes that folder's mtime."""
    out = []
    for p in sys.path:
        try:
            out.append((p, os.stat(p or ".").st_mtime_ns))
        except OSError:
            out.append((p, -1))
    return tuple(out)


def entry_point_specs() -> dict[str, str]:
    """Providers installed as packages (entry-point group ``skyd.clouds``). Reading every
    distribution's metadata takes milliseconds (the planner asks many times a plan), so the
    answer is kept until sys.path or one of its folders changes."""
    global _EP_CACHE
    key = _path_key()
    if _EP_CACHE is not None and _EP_CACHE[0] == key:
        return dict(_EP_CACHE[1])
    from importlib.metadata import entry_points

    specs = {ep.name.lower(): ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    _EP_CACHE = (key, specs)
    return dict(specs)


def provider_specs() -> dict[str, str]:
    """Every provider this process can load: in-tree, entry points, then $SKYD_CLOUD_PLUGINS
    (later ones win, so a test may stand in for a real provider)."""
    return {**PROVIDERS, **entry_point_specs(), **env_specs()}


class _Names:
    """The provider names: the spec list (read on first use, and again when
    $SKYD_CLOUD_PLUGINS changes) plus names registered at run time by :func:`skyd.clouds.base.register_cloud`. Set-like: ``in``, iteration."""

    def __init__(self) -> None:
        self._names: set[str] | None = None
        self._env: str | None = None  # the $SKYD_CLOUD_PLUGINS the names were read with
        self._added: set[str] = set()

    def _all(self) -> set[str]:
        env = settings.CLOUD_PLUGINS.get()
        if self._names is None or env != self._env:
            self._names = set(provider_specs()) | self._added
            self._env = env
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._all()))

    def __len__(self) -> int:
        return len(self._all())

    def add(self, name: str) -> None:
        self._added.add(name.lower())
        self._all().add(name.lower())


REGISTERED: _Names = _Names()
"""Names of the providers (``skyd.models`` accepts them in ``infra:``/``cloud:``)."""
