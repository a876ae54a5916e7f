"""image_id: docker:<image> on a VM cloud through its fake (DigitalOcean's API shape): the
droplet gets the provider's default VM image (not the container image), the agent runs in
the task's container on it (real podman), and `down` leaves neither droplet nor container.
The daemon runs under the network guard (loopback only)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import containers as fc
from tests.fakes.doapi import DO_SIZES, FakeDO
from tests.fakes.vmapi import free_port
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.launches import nothing_left_on
from tests.support.neo import CATALOG_HEADER, do_environ
from tests.support.pipeline import write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))
CPU = ("s-2vcpu-8gb", "", 0, 2, 8192, 0.07)


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeDO, FakeDO]]:
    fc.python_image()
    port = free_port()
    do = FakeDO(tmp_path_factory.mktemp("do"), first_ip=190, ssh_port=port, regions=("nyc1",),
                sizes=[*DO_SIZES, CPU]).start()
    amd = FakeDO(tmp_path_factory.mktemp("amd"), first_ip=200, ssh_port=port, token="amd-fake",
                 regions=("atl1",), sizes=[]).start()
    with nothing_left_on(do, amd):
        yield do, amd  # type: ignore[misc]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, fakes: tuple[FakeDO, FakeDO]) -> Iterator[GEnv]:
    do, amd = fakes
    base = tmp_path_factory.mktemp("doenv")
    cat = base / "catalog"
    cat.mkdir()
    (cat / "do.csv").write_text(CATALOG_HEADER + "s-2vcpu-8gb,,0,2,8,,nyc1,,0.07,\n")
    env_vars = do_environ(do, amd, base) | {"SKYD_CATALOG_DIR": str(cat), "SKYD_PROVISION_TIMEOUT_S": "120",
                                            "SKYD_CONTAINER_RUNTIME": "podman"}
    with guarded_module_env(tmp_path_factory, base / "netguard.log", env_vars) as e:
        yield e
    assert fc.bound_under(do.root) == []


def test_docker_image_on_a_vm_cloud_uses_the_default_vm_image_and_the_container(
        env: GEnv, fakes: tuple[FakeDO, FakeDO], tmp_path: object) -> None:
    do, _ = fakes
    y = write(tmp_path / "t.yaml",  # type: ignore[operator]
              f"resources:\n  infra: do\n  cpus: 2\n  image_id: docker:{fc.PY_IMAGE}\n"
              "setup: echo setup-done > /setup-marker\n"
              "run: test -f /run/.containerenv && echo in-container-$SKYPILOT_NODE_RANK\n")
    r = env.ok("launch", "-y", "-c", "vmc", str(y), timeout=300)
    assert "in-container-0" in r.stdout, r.stdout + r.stderr
    (d,) = do.live()
    assert d["size_slug"] == "s-2vcpu-8gb"
    assert d["image"]["slug"] != f"docker:{fc.PY_IMAGE}" and "docker" not in str(d["image"]["slug"])
    names = fc.podman("ps", "--format", "{{.Names}}").stdout.decode().split()
    assert [n for n in names if n.startswith("skyd-vmc-")], names
    assert "setup-done" in env.ok("exec", "vmc", "cat /setup-marker", timeout=120).stdout
    env.ok("down", "vmc", "-y", timeout=120)
    assert do.live() == []
    names = fc.podman("ps", "-a", "--format", "{{.Names}}").stdout.decode().split()
    assert not [n for n in names if n.startswith("skyd-vmc-")], names
