"""Container image references, registry credentials and what a registry's answers mean
(for ``image_id: docker:<image>``; docs/containers.md). No I/O here."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from skyd.errors import InvalidSpecError, ResourcesUnavailableError

_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
_USERNAME, _PASSWORD, _SERVER = "SKYPILOT_DOCKER_USERNAME", "SKYPILOT_DOCKER_PASSWORD", "SKYPILOT_DOCKER_SERVER"
DOCKER_ENVS = (_USERNAME, _PASSWORD, _SERVER)


def image_of(image_id: str | None) -> str | None:
    """``docker:<image>`` -> ``<image>`` (checked); None for anything else (a VM image)."""
    if not image_id or not image_id.startswith("docker:"):
        return None
    return check_image(image_id[len("docker:"):])


def check_image(image: str) -> str:
    """A container image reference, or InvalidSpecError naming the field and the fix."""
    img = image.strip()
    if not img:
        raise InvalidSpecError("'docker:' needs an image name", field="resources.image_id",
                               hint="e.g. image_id: docker:ubuntu:22.04")
    if not _REF.match(img) or "//" in img or img.endswith((":", "/", "@")):
        raise InvalidSpecError(f"{img!r} is not a container image reference",
                               field="resources.image_id",
                               hint="use [registry/]name[:tag][@sha256:digest], e.g. docker:rocm/pytorch:latest")
    return img


@dataclass(frozen=True)
class RegistryLogin:
    """Credentials for a private registry. In memory only: never stored, logged or shown."""

    server: str
    username: str
    password: str = field(repr=False)

    @classmethod
    def from_envs(cls, envs: dict[str, Any], image: str) -> RegistryLogin | None:
        """SkyPilot's ``SKYPILOT_DOCKER_*`` variables (task envs or secrets); the server
        defaults to the image's registry. InvalidSpecError when only some are set."""
        got = {k: str(envs[k]) for k in DOCKER_ENVS if envs.get(k)}
        if not got:
            return None
        if _USERNAME not in got or _PASSWORD not in got:
            missing = [k for k in (_USERNAME, _PASSWORD) if k not in got]
            raise InvalidSpecError(f"registry login needs {' and '.join(missing)} as well",
                                   field=f"envs.{missing[0]}",
                                   hint="set SKYPILOT_DOCKER_USERNAME and SKYPILOT_DOCKER_PASSWORD"
                                        " (as a secret), and SKYPILOT_DOCKER_SERVER")
        server = got.get(_SERVER) or registry_of(image)
        return cls(server=server, username=got[_USERNAME], password=got[_PASSWORD])


def registry_of(image: str) -> str:
    """The registry host of an image reference (docker.io when it names none)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def loopback_host(server: str) -> bool:
    host = server.split("/")[0].rsplit(":", 1)[0] if not server.startswith("[") else server[1:].split("]")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def image_error(message: str, hint: str, provider: str = "") -> ResourcesUnavailableError:
    return ResourcesUnavailableError(message, field="resources.image_id", hint=hint,
                                     provider_message=provider[-600:] or None, no_failover=True)


def classify_pull(image: str, out: str, server: str | None = None) -> ResourcesUnavailableError:
    """One clear message for a failed pull (or login), from the runtime's own words."""
    low = out.lower()
    reg = server or registry_of(image)
    if "manifest unknown" in low or "name unknown" in low:  # the registry answered: no such image
        return image_error(f"container image {image} was not found in {reg}",
                    "check the name and the tag (resources.image_id: docker:<name>:<tag>)", out)
    if any(s in low for s in ("connection refused", "no such host", "i/o timeout", "network is unreachable",
                              "no route to host", "connection reset", "server misbehaving", "tls:")):
        return image_error(f"registry {reg} cannot be reached from the node to pull {image}",
                    "check the registry's address and that it is up", out)
    if any(s in low for s in ("unauthorized", "authentication required", "denied", "status 401",
                              "incorrect username or password", "invalid username/password")):
        return image_error(f"registry {reg} refused the credentials for {image}",
                    "check SKYPILOT_DOCKER_USERNAME / SKYPILOT_DOCKER_PASSWORD (a secret) and"
                    " SKYPILOT_DOCKER_SERVER", out)
    if any(s in low for s in ("manifest unknown", "not found", "name unknown", "does not exist",
                              "no such image", "repository does not exist")):
        return image_error(f"container image {image} was not found in {reg}",
                    "check the name and the tag (resources.image_id: docker:<name>:<tag>)", out)
    if "no image found in manifest list" in low or "no matching manifest" in low:
        return image_error(f"container image {image} has no build for this node's architecture",
                    "use a multi-arch image or one built for the node's architecture", out)
    return image_error(f"pulling container image {image} failed", "check the image name, the registry"
                " and the credentials", out)


__all__ = ["DOCKER_ENVS", "RegistryLogin", "check_image", "classify_pull", "image_of", "registry_of"]
