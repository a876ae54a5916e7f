"""check_pool reports: ready (NVIDIA / AMD GPUs), unreachable, wrong key, no python3, in use."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from skyd.clouds.ssh.check import check_pool
from skyd.clouds.ssh.pools import Pool, PoolHost, load_pools
from skyd.clouds.ssh.state import allocate_sync, load_host_facts
from tests.fakes.sshhost import FakeSSHHost, fake_hosts, make_keypair, write_pools

pytestmark = pytest.mark.anyio


async def test_check_pool_reports_each_problem(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    _, other_pub = make_keypair(tmp_path / "k2", "other")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    async with (
        FakeSSHHost(tmp_path / "nv", "127.0.0.2", pub, gpu="h100x8") as nv,
        FakeSSHHost(tmp_path / "amd", "127.0.0.3", pub, gpu="mi355x") as amd,
        FakeSSHHost(tmp_path / "nopy", "127.0.0.4", pub, missing=["python3"]) as nopy,
        FakeSSHHost(tmp_path / "wrongkey", "127.0.0.5", other_pub) as wrong,
    ):
        write_pools(Path(str(skyd_home.parent / "config")), {"lab": [nv, amd, nopy, wrong]}, priv)
        base = load_pools()["lab"]
        pool = Pool("lab", (*base.hosts, PoolHost("lab", "127.0.0.1", "skyd", dead, str(priv), None)))
        allocate_sync("lab", "train", [base.hosts[1].key], 1)
        reports = await check_pool(pool, timeout=3)
    by = {r.host: r for r in reports}
    r_nv, r_amd, r_nopy, r_wrong, r_dead = (by[h.name] for h in pool.hosts)
    assert r_nv.status == "ok" and r_nv.gpus == "H100:8" and r_nv.python and r_nv.cpus
    assert r_amd.status == "in_use" and r_amd.gpus == "MI355X:8" and "train" in r_amd.message
    assert r_amd.ok and "skyd down train" in str(r_amd.hint)
    assert r_nopy.status == "no_python" and not r_nopy.ok and "install python3" in str(r_nopy.hint)
    assert r_wrong.status == "auth_failed" and "authorized_keys" in str(r_wrong.hint)
    assert r_dead.status == "unreachable" and str(dead) in r_dead.message
    facts = load_host_facts()
    assert facts[base.hosts[0].key]["accelerator"] == "H100"
    assert facts[base.hosts[0].key]["accelerator_memory_gib"] == pytest.approx(79.6, abs=0.1)
    assert base.hosts[3].key not in facts  # never reached


async def test_amd_rocm6_host(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub, gpu="mi300x") as hosts:
        write_pools(skyd_home.parent / "config", {"mi": hosts}, priv)
        (rep,) = await check_pool(load_pools()["mi"])
    assert rep.status == "ok" and rep.gpus == "MI300X:8"
    assert rep.to_dict()["ok"] is True


async def test_host_without_tcp_forwarding_is_ready_and_says_so(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with (
        fake_hosts(tmp_path / "a", 1, pub) as (fwd,),
        fake_hosts(tmp_path / "b", 1, pub, allow_forwarding=False, first=3) as (nofwd,),
    ):
        write_pools(skyd_home.parent / "config", {"lab": [fwd, nofwd]}, priv)
        r_fwd, r_no = await check_pool(load_pools()["lab"])
    assert r_fwd.status == "ok" and r_fwd.tcp_forwarding is True and "relay" not in r_fwd.message
    assert r_no.status == "ok" and r_no.ok and r_no.tcp_forwarding is False
    assert "exec relay" in r_no.message and r_no.to_dict()["tcp_forwarding"] is False
