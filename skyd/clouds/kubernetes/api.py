"""One API client per kubeconfig context (kubernetes-asyncio), answering plain dicts.

Responses are read raw (``_preload_content=False``) and parsed as JSON: the objects stay in
the API's own camelCase form, and listing hundreds of nodes costs no model building. The
same context's address, headers and TLS context make the ``KubeConn`` the exec transport
uses.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp

from skyd.clouds.kubernetes.config import kubeconfig_path
from skyd.errors import CredentialsError, SkydError
from skyd.transports.kube import KubeConn


class KubeAPIError(SkydError):
    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body or {}
        super().__init__(f"HTTP {status}: {self.body.get('message') or reason}")

    @property
    def api_message(self) -> str:
        return str(self.body.get("message") or self.reason)


class KubeUnreachable(SkydError):
    pass


def _ssl(cfg: Any) -> ssl.SSLContext | bool:
    if not cfg.host.startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


class ContextAPI:
    """The REST calls skyd makes against one context."""

    def __init__(self, context: str, namespace: str) -> None:
        self.context = context
        self.namespace = namespace
        self._client: Any = None
        self._core: Any = None
        self.conn: KubeConn | None = None
        self.calls = 0

    async def _ensure(self) -> Any:
        if self._core is None:
            from kubernetes_asyncio import client, config
            from kubernetes_asyncio.config.config_exception import ConfigException

            try:
                api_client = await config.new_client_from_config(
                    config_file=str(kubeconfig_path()), context=self.context, persist_config=False)
            except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
                raise CredentialsError(f"kubernetes context {self.context!r}: {e}",
                                       hint="fix the context in your kubeconfig") from None
            cfg = api_client.configuration

            async def headers() -> dict[str, str]:
                auth = (await cfg.get_api_key_with_prefix("authorization")
                        or await cfg.get_api_key_with_prefix("BearerToken"))
                return {"Authorization": auth} if auth else {}

            self.conn = KubeConn(str(cfg.host).rstrip("/"), await headers(), _ssl(cfg), auth=headers)
            self._client, self._core = api_client, client.CoreV1Api(api_client)
        return self._core

    async def call(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from kubernetes_asyncio.client.exceptions import ApiException

        core = await self._ensure()
        self.calls += 1
        try:
            resp = await getattr(core, method)(*args, _preload_content=False, **kwargs)
            async with resp:
                text = await resp.text()
                status, reason = resp.status, str(resp.reason or "")
        except ApiException as e:
            try:
                body = json.loads(e.body) if e.body else {}
            except (ValueError, TypeError):
                body = {}
            raise KubeAPIError(int(e.status or 0), str(e.reason), body) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise KubeUnreachable(
                f"kubernetes context {self.context!r}: API server unreachable: {type(e).__name__}: {e}") from None
        if not 200 <= status <= 299:  # raw responses are not checked by the client
            try:
                body = json.loads(text) if text else {}
            except ValueError:
                body = {}
            raise KubeAPIError(status, reason, body if isinstance(body, dict) else {})
        return json.loads(text) if text else {}

    async def exec_conn(self) -> KubeConn:
        await self._ensure()
        assert self.conn is not None
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
        if self._client is not None:
            await self._client.close()
        self._client = self._core = self.conn = None
