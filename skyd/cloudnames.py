"""Names of infras registered at run time (stdlib only, importable from anywhere).

`skyd.clouds.base.register_cloud` adds to it; `skyd.models` accepts these names in
`infra:`/`cloud:` besides the clouds it knows (so a provider registered by a plugin, such as
the tests' fake preemptible cloud, is a valid infra)."""

from __future__ import annotations

REGISTERED: set[str] = set()
