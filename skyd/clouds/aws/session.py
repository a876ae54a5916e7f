"""aiobotocore clients: credentials from botocore's standard chain, one client per
(service, region) per event loop, every call counted (benchmarks).

Credentials and endpoints are botocore's: environment (``AWS_ACCESS_KEY_ID``...,
``AWS_PROFILE``), ``~/.aws/config`` / ``~/.aws/credentials`` profiles, SSO, container and
instance roles; ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` and the profile's
``endpoint_url`` point the clients elsewhere (a moto server in tests).

Instance metadata (169.254.169.254, the last link of the chain) is asked only on a machine
that shows a sign of being an EC2 instance (`on_ec2`: the DMI vendor, board asset tag or
hypervisor uuid EC2 writes, or ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` set); elsewhere
``AWS_EC2_METADATA_DISABLED`` is set for the daemon's botocore, so a machine without AWS keys
spends no second of ``skyd check`` or a dry run on a metadata timeout. An explicit
``AWS_EC2_METADATA_DISABLED`` is kept either way.

botocore's data (service models, endpoints: megabytes of JSON) is loaded once per process,
not once per session (`with_shared_loader`): every session of the daemon shares one botocore
loader, so an S3 store or mount opened per request costs its client, not a fresh parse of
the S3 model (~0.2-0.4 CPU-s each before). Models added under ``~/.aws/models`` are seen from
the next daemon start, as botocore's own session caches them.

``SKYD_AWS_LOOPBACK_ONLY=1`` (set by the test suite): every endpoint must be a 127.0.0.0/8
address and instance metadata is never asked for credentials, so nothing outside this
machine can be reached.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import threading
from collections import Counter
from typing import Any
from urllib.parse import urlparse

import anyio

from skyd import settings as knobs
from skyd.errors import CredentialsError

LOOPBACK_ENV = knobs.AWS_LOOPBACK_ONLY.name

#: API calls made, by "service.Operation" (read by bench/aws_bench.py).
CALLS: Counter[str] = Counter()


def loopback_only() -> bool:
    return knobs.AWS_LOOPBACK_ONLY.get()


def is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_for(service: str) -> str | None:
    """The endpoint override botocore would use from the environment, if any."""
    return (os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}")
            or os.environ.get("AWS_ENDPOINT_URL") or None)


def guard_endpoint(service: str) -> None:
    """Under SKYD_AWS_LOOPBACK_ONLY, refuse any endpoint that is not a loopback address."""
    if not loopback_only():
        return
    url = endpoint_for(service)
    if not url or not is_loopback(urlparse(url).hostname):
        raise CredentialsError(
            f"{LOOPBACK_ENV} is set and the {service} endpoint ({url or 'AWS itself'}) is not on 127.0.0.0/8",
            hint="set AWS_ENDPOINT_URL to a local endpoint (tests), or unset " + LOOPBACK_ENV,
        )


_DMI = ("/sys/devices/virtual/dmi/id/sys_vendor", "/sys/devices/virtual/dmi/id/board_asset_tag",
        "/sys/devices/virtual/dmi/id/bios_vendor", "/sys/hypervisor/uuid")


def on_ec2(files: tuple[str, ...] = _DMI) -> bool:
    """Whether this machine looks like an EC2 instance (local files only, no network)."""
    if os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT"):
        return True
    for path in files:
        try:
            with open(path) as f:
                text = f.read(256).strip().lower()
        except OSError:
            continue
        if "amazon" in text or text.startswith(("ec2", "i-")):
            return True
    return False


_LOADERS: dict[str, Any] = {}  # botocore data path -> its loader, one per process
_LOADERS_LOCK = threading.Lock()


def with_shared_loader(session: Any) -> Any:
    """`session` (botocore or aiobotocore) with this process's botocore data loader for its
    data path: the JSON a session reads (service models, endpoints) is parsed once per
    process. The loader only reads and caches, as within one session."""
    path = session.get_config_variable("data_path") or ""
    with _LOADERS_LOCK:
        loader = _LOADERS.get(path)
        if loader is None:
            from botocore.loaders import create_loader

            loader = _LOADERS[path] = create_loader(path or None)
    session.register_component("data_loader", loader)
    return session


class Clients:
    """One aiobotocore session; clients opened on first use and kept until ``close``."""

    def __init__(self) -> None:
        self._session: Any = None
        self._clients: dict[tuple[str, str], Any] = {}
        self._stacks: list[Any] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = anyio.Lock()

    def session(self) -> Any:
        if self._session is None:
            from aiobotocore.session import get_session

            if loopback_only() or not on_ec2():
                os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
            self._session = with_shared_loader(get_session())
        return self._session

    async def credentials(self) -> Any:
        """botocore's resolved credentials, or None when the chain finds none."""
        return await self.session().get_credentials()

    async def client(self, service: str, region: str) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a client belongs to the loop it was made on
            self._clients.clear()
            self._stacks.clear()
            self._loop = loop
            self._lock = anyio.Lock()
        key = (service, region)
        c = self._clients.get(key)
        if c is not None:
            return c
        async with self._lock:  # concurrent first calls share one client
            return await self._open(key)

    async def _open(self, key: tuple[str, str]) -> Any:
        service, region = key
        c = self._clients.get(key)
        if c is None:
            guard_endpoint(service)
            from aiobotocore.config import AioConfig

            cfg = AioConfig(retries={"max_attempts": 5, "mode": "standard"},
                            connect_timeout=10, read_timeout=60, max_pool_connections=64)
            ctx = self.session().create_client(service, region_name=region, config=cfg)
            c = await ctx.__aenter__()
            c.meta.events.register("before-call", _count)
            self._stacks.append(ctx)
            self._clients[key] = c
        return c

    async def close(self) -> None:
        stacks, self._stacks = self._stacks, []
        self._clients.clear()
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            return  # the loop they belonged to is gone
        for ctx in stacks:
            try:
                await ctx.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001, S110 - closing: best effort
                pass


def _count(model: Any = None, **_: Any) -> None:
    if model is not None:
        CALLS[f"{model.service_model.service_name}.{model.name}"] += 1
