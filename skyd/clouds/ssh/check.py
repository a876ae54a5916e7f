"""``skyd ssh check POOL``: reach every host of a pool and say what is there or what is wrong.

One shell probe per host (works without python3) reports OS, python3, rsync, cpus, memory,
addresses and the GPU tools' output; the GPU output is parsed by skyd.nodeagent.gpu (the same
parsers the node agent uses). Results are cached in ``$SKYD_HOME/ssh/hosts.json`` for the
solver's offerings.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from skyd.clouds.ssh.pools import Pool, PoolHost
from skyd.clouds.ssh.state import allocations, save_host_facts

MIN_PYTHON = (3, 8)


def _probe_script() -> str:
    from skyd.nodeagent import gpu

    nv = shlex.join(gpu.NVIDIA_QUERY)
    amd = shlex.join(gpu.AMD_SMI_QUERY)
    rocm = shlex.join(gpu.ROCM_SMI_QUERY)
    return f"""
echo "home=$HOME"
echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)"
echo "kernel=$(uname -sr)"
if command -v python3 >/dev/null 2>&1; then
  echo "python=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)"
fi
command -v rsync >/dev/null 2>&1 && echo "rsync=1"
echo "cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "mem_kb=$(awk '/MemTotal/ {{print $2}}' /proc/meminfo 2>/dev/null)"
echo "ips=$(hostname -I 2>/dev/null)"
if command -v nvidia-smi >/dev/null 2>&1; then echo "---nvidia"; {nv} 2>&1; echo "---end"; fi
if command -v amd-smi >/dev/null 2>&1; then echo "---amd-smi"; {amd} 2>&1; echo "---end"; fi
if command -v rocm-smi >/dev/null 2>&1; then echo "---rocm-smi"; {rocm} 2>&1; echo "---end"; fi
true
"""


def parse_probe(text: str) -> dict[str, Any]:
    """Key=value lines plus ---section blocks -> host facts (GPUs parsed and normalized)."""
    from skyd.nodeagent import gpu

    kv: dict[str, str] = {}
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("---"):
            name = line[3:].strip()
            current = None if name == "end" else name
            if current:
                sections[current] = []
        elif current is not None:
            sections[current].append(line)
        elif "=" in line:
            k, _, v = line.partition("=")
            kv[k.strip()] = v.strip()
    gpus: list[Any] = []
    for name, parser in (
        ("nvidia", gpu.parse_nvidia_smi),
        ("amd-smi", gpu.parse_amd_smi_static),
        ("rocm-smi", gpu.parse_rocm_smi_product),
    ):
        if name in sections and not gpus:
            try:
                gpus = list(parser("\n".join(sections[name])))
            except (ValueError, AttributeError, KeyError, TypeError):
                gpus = []
    mem_kb = kv.get("mem_kb", "")
    facts: dict[str, Any] = {
        "home": kv.get("home", ""),
        "os": kv.get("os", ""),
        "kernel": kv.get("kernel", ""),
        "python": kv.get("python", "") or None,
        "rsync": kv.get("rsync") == "1",
        "cpus": int(kv["cpus"]) if kv.get("cpus", "").isdigit() else 0,
        "memory_gib": round(int(mem_kb) / (1024 * 1024), 1) if mem_kb.isdigit() else 0.0,
        "ips": kv.get("ips", "").split(),
        "gpus": [g.to_dict() for g in gpus],
        "probed_at": time.time(),
    }
    if gpus:
        names = [g.name for g in gpus]
        top = max(set(names), key=names.count)
        facts["accelerator"] = top
        facts["accelerator_count"] = names.count(top)
        mems = [g.memory_mib for g in gpus if g.name == top and g.memory_mib]
        facts["accelerator_memory_gib"] = round(mems[0] / 1024, 1) if mems else None
    else:
        facts["accelerator"], facts["accelerator_count"] = None, 0
        facts["accelerator_memory_gib"] = None
    return facts


def python_ok(version: str | None) -> bool:
    if not version:
        return False
    try:
        parts = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    return parts >= MIN_PYTHON


async def probe_host(transport: Any) -> dict[str, Any]:
    """Run the probe over an open SSHTransport; raises its connect errors."""
    res = await transport.run(_probe_script(), idempotent=True, timeout=60)
    return parse_probe(res.stdout)


@dataclass
class HostReport:
    pool: str
    host: str
    status: str  # ok | in_use | unreachable | auth_failed | host_key | no_python | old_python
    message: str = ""
    hint: str | None = None
    os: str | None = None
    python: str | None = None
    cpus: int | None = None
    memory_gib: float | None = None
    gpus: str | None = None  # "H100:8"
    in_use_by: str | None = None
    facts: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "in_use")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("facts")
        d["ok"] = self.ok
        return d


async def check_host(h: PoolHost, in_use_by: str | None, timeout: float = 10.0) -> HostReport:
    from skyd.transports.ssh import SSHConnectError, SSHTransport

    rep = HostReport(h.pool, h.name, "ok", in_use_by=in_use_by)
    t = SSHTransport(h.target(), connect_timeout=timeout, connect_attempts=1)
    try:
        facts = await probe_host(t)
    except SSHConnectError as e:
        rep.status = {"auth": "auth_failed", "hostkey": "host_key"}.get(e.kind, "unreachable")
        rep.message, rep.hint = e.message, e.hint
        return rep
    except Exception as e:  # noqa: BLE001 - report, don't crash the whole check
        rep.status, rep.message = "unreachable", f"{h.name}: {type(e).__name__}: {e}"
        return rep
    finally:
        await t.close()
    await save_host_facts({h.key: facts})
    rep.facts = facts
    rep.os, rep.python = facts["os"], facts["python"]
    rep.cpus, rep.memory_gib = facts["cpus"], facts["memory_gib"]
    if facts.get("accelerator"):
        rep.gpus = f"{facts['accelerator']}:{facts['accelerator_count']}"
    if not facts["python"]:
        rep.status = "no_python"
        rep.message = f"{h.name}: no python3 on PATH (the node agent needs Python >= 3.8)"
        rep.hint = f"install python3 on {h.name} (e.g. `sudo apt-get install -y python3`)"
    elif not python_ok(facts["python"]):
        rep.status = "old_python"
        rep.message = f"{h.name}: python3 is {facts['python']}; the node agent needs >= 3.8"
        rep.hint = f"install Python >= 3.8 as python3 on {h.name}"
    elif in_use_by:
        rep.status = "in_use"
        rep.message = f"{h.name}: in use by cluster {in_use_by!r}"
        rep.hint = f"`skyd down {in_use_by}` to free it"
    else:
        rep.message = f"{h.name}: ready"
    return rep


async def check_pool(pool: Pool, *, timeout: float = 10.0) -> list[HostReport]:
    """One report per host of ``pool`` (in config order), probed concurrently."""
    owners = await allocations()
    reports: list[HostReport | None] = [None] * len(pool.hosts)

    async def one(i: int, h: PoolHost) -> None:
        reports[i] = await check_host(h, owners.get(h.key), timeout)

    async with anyio.create_task_group() as tg:
        for i, h in enumerate(pool.hosts):
            tg.start_soon(one, i, h)
    return [r for r in reports if r is not None]
