"""Which config keys skyd acts on, derived from what each provider declares
(``Cloud.config_keys``) plus the keys the core honours; everything else set in a user's
config is reported once per command as "not supported by skyd"."""

from __future__ import annotations

from typing import Any

#: Keys the core honours, whatever the provider (dotted; a key covers what is below it).
CORE_KEYS: frozenset[str] = frozenset({
    "allowed_clouds",             # planner: only these infras are planned or launched
    "admin_policy",               # skyd.sky.policy: validate_and_mutate on every launch
    "docker.run_options",         # container runtime: skyd.config.docker_run_options()
    "nvidia_gpus.disable_ecc",    # setup prelude: nvidia-smi -e 0 (effective after a reboot)
    "jobs.controller.consolidation_mode",  # always on: controllers run inside the daemon
    "jobs.controller.high_availability",   # always on: the daemon resumes controllers
    "serve.controller.consolidation_mode",
    "serve.controller.high_availability",
    # Names only a SkyPilot API server has; a single-user daemon has no use for them and
    # ignoring them changes nothing a user can observe.
    "workspace", "active_workspace", "db",
})  # fmt: skip


def provider_keys() -> dict[str, frozenset[str]]:
    """infra -> the config keys its provider declares it honours."""
    from skyd.clouds.base import get_cloud, registered_clouds

    out: dict[str, frozenset[str]] = {}
    for name in registered_clouds():
        try:
            out[name] = frozenset(getattr(get_cloud(name), "config_keys", frozenset()))
        except Exception:  # noqa: BLE001 - a provider that fails to load honours nothing
            out[name] = frozenset()
    return out


def honoured_keys() -> frozenset[str]:
    keys = set(CORE_KEYS)
    for ks in provider_keys().values():
        keys |= ks
    return frozenset(keys)


def _covered(path: tuple[str, ...], keys: frozenset[str]) -> bool:
    return any(".".join(path[:i]) in keys for i in range(1, len(path) + 1))


def unsupported(cfg: Any) -> list[str]:
    """Dotted keys set (non-null) in ``cfg`` that skyd does not act on, sorted. Providers
    are loaded (to ask for their keys) only for a key the core does not cover: an empty or
    core-only config, the common case, costs no provider imports."""
    from skyd.config.layers import leaf_paths

    rest = [p for p in leaf_paths(cfg.data) if cfg.get(*p) is not None and not _covered(p, CORE_KEYS)]
    if rest:
        from skyd.config.schema import SKYD_ONLY

        rest = [p for p in rest if not _covered(p, SKYD_ONLY)]
    if rest:
        keys = honoured_keys()
        rest = [p for p in rest if not _covered(p, keys)]
    return sorted(".".join(p) for p in rest)


#: Values of honoured keys that skyd does not offer: (key path, value) -> what happens.
UNSUPPORTED_VALUES: dict[tuple[tuple[str, ...], str], str] = {
    (("kubernetes", "ports"), "ingress"): "an ingress controller is not managed by skyd: "
                                          "ports get a ClusterIP service",
}


def warning_lines(cfg: Any) -> list[str]:
    """One line per key skyd does not act on (empty when all are honoured), and one per
    value of an honoured key that skyd does not offer."""
    out = [f"warning: config key {k} ({cfg.origin.get(tuple(k.split('.')), 'config')}) "
           "is not supported by skyd and is ignored" for k in unsupported(cfg)]
    for (path, value), what in UNSUPPORTED_VALUES.items():
        if str(cfg.get(*path) or "").lower() == value:
            out.append(f"warning: config {'.'.join(path)}: {value} ({cfg.origin.get(path, 'config')}): {what}")
    return out
