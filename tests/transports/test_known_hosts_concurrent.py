"""skyd's known_hosts under concurrent terminations: `down -a` of several clusters forgets
each cluster's host keys in worker threads at once (found by the seeded kill -9 harness,
scenario ``aws``: one termination failed with FileNotFoundError on the shared temporary
file, and a concurrent rewrite could lose the other's edit)."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from skyd.clouds.vm.nodes import forget_host_keys as gcp_forget
from skyd.transports.ssh_hosts import forget_host_keys, known_hosts_path

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _fill(n: int) -> list[str]:
    names = [f"[127.0.0.{10 + i}]:2222" for i in range(n)]
    p = known_hosts_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(f"{h} {KEY}\n" for h in [*names, "keep.example"]))
    return names


def test_concurrent_forgets_all_land_and_none_fails(skyd_home: Path) -> None:
    for _ in range(15):
        names = _fill(12)
        errors: list[BaseException] = []
        gate = threading.Barrier(len(names))

        def forget(name: str, gate: threading.Barrier = gate,
                   errors: list[BaseException] = errors) -> None:
            gate.wait()
            try:
                forget_host_keys({name})
            except BaseException as e:  # noqa: BLE001 - collected and asserted below
                errors.append(e)

        threads = [threading.Thread(target=forget, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert known_hosts_path().read_text() == f"keep.example {KEY}\n"
        assert [p.name for p in known_hosts_path().parent.iterdir()] == ["known_hosts"]


@pytest.mark.anyio
async def test_gcp_forgets_by_address_and_port(skyd_home: Path) -> None:
    _fill(3)
    await gcp_forget([("127.0.0.10", 2222), ("127.0.0.12", 2222), ("127.0.0.11", 22)])
    left = [ln.split(" ", 1)[0] for ln in known_hosts_path().read_text().splitlines()]
    assert left == ["[127.0.0.11]:2222", "keep.example"]


def _pub_of(priv: Path) -> str:
    import asyncssh

    return asyncssh.read_private_key(str(priv)).export_public_key().decode().strip()


def test_concurrent_first_launches_make_one_client_key(skyd_home: Path) -> None:
    """Launches starting at once on a fresh install each make skyd's SSH key: one key pair
    results, its public half matching the private key on disk, the same for every caller."""
    from skyd.pipeline.sshconfig import client_key, ensure_client_key

    got: list[tuple[Path, str]] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(8)

    def make() -> None:
        gate.wait()
        try:
            got.append(ensure_client_key())
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    priv, pub = client_key()
    assert {g for g in got} == {(priv, _pub_of(priv))}
    assert pub.read_text().strip() == _pub_of(priv)
    assert priv.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in priv.parent.iterdir()) == sorted([priv.name, pub.name])


@pytest.mark.anyio
async def test_concurrent_gcp_launches_make_one_vm_key(skyd_home: Path) -> None:
    from skyd.clouds.vm.nodes import ssh_key

    got: list[tuple[Path, str]] = []

    async def one() -> None:
        got.append(await ssh_key())

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one)
    priv = got[0][0]
    assert set(got) == {(priv, _pub_of(priv))}
    assert Path(str(priv) + ".pub").read_text().strip() == _pub_of(priv)
