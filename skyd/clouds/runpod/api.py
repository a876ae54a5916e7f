"""RunPod's GraphQL API (``https://api.runpod.io/graphql``, Bearer key).

Key: ``$RUNPOD_API_KEY``, else ``runpod.api_key`` in skyd's config.yaml, else ``api_key``
in the RunPod CLI's ``~/.runpod/config.toml``. ``$SKYD_RUNPOD_API_URL`` replaces the
endpoint (tests, proxies). GraphQL refusals come back as HTTP 200 with ``errors``: they
are raised as `APIError` (status 401 when the words say the key was refused, else 400).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from skyd.clouds.neocloud import settings
from skyd.clouds.neocloud.classify import AUTH_WORDS
from skyd.clouds.neocloud.http import APIError, JSONClient, base_url, error_text
from skyd.errors import CredentialsError

URL = "https://api.runpod.io/graphql"
ENV = "RUNPOD_API_KEY"
KEY_HINT = ("set RUNPOD_API_KEY (runpod.io > Settings > API Keys), or runpod.api_key in "
            "skyd's config.yaml")

POD_FIELDS = ("id name desiredStatus costPerHr gpuCount imageName "
              "machine { gpuDisplayName } "
              "runtime { ports { ip isIpPublic privatePort publicPort type } }")


def cli_config_path() -> Path:
    return Path(os.environ.get("RUNPOD_CONFIG") or Path.home() / ".runpod" / "config.toml")


def find_key() -> tuple[str | None, str]:
    """(key, where) — blocking (file reads): call in a thread."""
    key, where = settings.find_key(ENV, settings.section("runpod"))
    if key:
        return key, where
    p = cli_config_path()
    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None, ""
    sec = doc.get("default") if isinstance(doc.get("default"), dict) else doc
    if isinstance(sec, dict) and sec.get("api_key"):
        return str(sec["api_key"]).strip(), str(p)
    return None, ""


class RunPodAPI:
    def __init__(self, key: str, where: str) -> None:
        self.where = where
        self._key = key
        self.http = JSONClient("RunPod", base_url("SKYD_RUNPOD_API_URL", URL),
                               lambda: {"Authorization": f"Bearer {self._key}"})

    async def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query}
        if variables:
            body["variables"] = variables
        try:
            data = await self.http.request("POST", "", json=body)
        except APIError as e:
            if e.status in (401, 403):
                raise CredentialsError(f"RunPod refused the API key from {self.where} ({e})",
                                       hint=KEY_HINT) from None
            raise
        if isinstance(data, dict) and data.get("errors"):
            code, msg = error_text(data)
            raise APIError("RunPod", 401 if AUTH_WORDS.search(msg) else 400, msg, code=code)
        out = data.get("data") if isinstance(data, dict) else None
        return dict(out or {})

    async def myself(self) -> dict[str, Any]:
        return dict((await self.gql("query { myself { id email } }")).get("myself") or {})

    async def pods(self) -> list[dict[str, Any]]:
        me = (await self.gql(f"query {{ myself {{ pods {{ {POD_FIELDS} }} }} }}")).get("myself") or {}
        return list(me.get("pods") or [])

    async def deploy(self, inp: dict[str, Any], *, spot: bool) -> dict[str, Any]:
        """A GPU pod: ``podFindAndDeployOnDemand`` or, for spot, ``podRentInterruptable``
        (both take a non-null input, as RunPod's schema declares)."""
        key, typ = (("podRentInterruptable", "PodRentInterruptableInput") if spot
                    else ("podFindAndDeployOnDemand", "PodFindAndDeployOnDemandInput"))
        q = f"mutation($input: {typ}!) {{ {key}(input: $input) {{ id name desiredStatus }} }}"
        return dict((await self.gql(q, {"input": inp})).get(key) or {})

    async def deploy_cpu(self, inp: dict[str, Any]) -> dict[str, Any]:
        """A CPU pod: ``deployCpuPod`` with a CPU flavor ``instanceId`` (``cpu3c-2-4``): RunPod's
        call for pods without GPUs (runpod-python, dstack)."""
        q = "mutation($input: deployCpuPodInput!) { deployCpuPod(input: $input) { id name desiredStatus } }"
        return dict((await self.gql(q, {"input": inp})).get("deployCpuPod") or {})

    async def terminate(self, pod_id: str) -> None:
        await self.gql("mutation($input: PodTerminateInput!) { podTerminate(input: $input) }",
                       {"input": {"podId": pod_id}})

    async def stop(self, pod_id: str) -> None:
        await self.gql("mutation($input: PodStopInput!) { podStop(input: $input) { id desiredStatus } }",
                       {"input": {"podId": pod_id}})

    async def resume(self, pod_id: str, gpu_count: int) -> None:
        await self.gql("mutation($input: PodResumeInput!) { podResume(input: $input) { id desiredStatus } }",
                       {"input": {"podId": pod_id, "gpuCount": gpu_count}})

    async def gpu_types(self) -> list[dict[str, Any]]:
        q = ("query { gpuTypes { id displayName manufacturer memoryInGb securePrice communityPrice "
             "secureSpotPrice communitySpotPrice } }")
        return list((await self.gql(q)).get("gpuTypes") or [])

    async def close(self) -> None:
        await self.http.close()
