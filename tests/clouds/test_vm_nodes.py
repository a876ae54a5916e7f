"""The shared SSH-VM base (skyd.clouds.vm): what every VM provider (GCP, AWS, the
neoclouds) does with skyd's known hosts when a VM's address goes back to the cloud."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.clouds.vm import nodes
from skyd.transports.ssh import known_hosts_path

pytestmark = pytest.mark.anyio


async def test_forgetting_a_vms_address_drops_every_line_naming_it(skyd_home: Path) -> None:
    p = known_hosts_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("10.0.0.5 ssh-ed25519 AAAA1\n"
                 "10.0.0.6,[10.0.0.7]:2222 ssh-ed25519 AAAA2\n"
                 "[10.0.0.5]:2222 ssh-ed25519 AAAA3\n"
                 "keep.example ssh-ed25519 AAAA4\n")
    await nodes.forget_host_keys([("10.0.0.5", 22), ("10.0.0.7", 2222)])
    assert p.read_text() == "[10.0.0.5]:2222 ssh-ed25519 AAAA3\nkeep.example ssh-ed25519 AAAA4\n"
