"""image_id: docker:<image> on GCP through the fake Compute API (network guard on): the
instance boots the default image, not the container image; the task runs in the container
(real podman) on it; stop/start brings the container back; down leaves nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import containers as fc
from tests.fakes.gce import FakeGCE
from tests.support.gcp import GEnv, gcp_module_env
from tests.support.pipeline import write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))


@pytest.fixture(scope="module")
def gce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGCE]:
    fc.python_image()
    g = FakeGCE(tmp_path_factory.mktemp("gce-ctr"), first_ip=140).start()
    try:
        yield g
    finally:
        left = g.live()
        g.stop()
        ctrs = fc.bound_under(g.root)
        fc.remove_bound_under(g.root)
    assert not left, f"instances left on the fake: {left}"
    assert not ctrs, f"containers left: {ctrs}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, gce: FakeGCE) -> Iterator[GEnv]:
    with gcp_module_env(tmp_path_factory, gce) as e:
        yield e


def test_docker_image_on_gcp_boots_the_default_image_and_runs_in_the_container(
        env: GEnv, gce: FakeGCE, tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml", f"resources:\n  infra: gcp/us-central1\n  cpus: 2\n"
                                   f"  image_id: docker:{fc.PY_IMAGE}\nsetup: touch /from-setup\n"
                                   "run: test -f /run/.containerenv && echo gce-in-container\n")
    r = env.ok("launch", "-y", "-c", "gctr", str(y), timeout=300)
    assert "gce-in-container" in r.stdout, r.stdout + r.stderr
    (inst,) = gce.live()
    disks = json.dumps(inst.get("disks"))
    assert "docker" not in disks and "skyd-test-py" not in disks, disks
    env.ok("stop", "gctr", "-y", timeout=120)
    env.ok("start", "gctr", "-y", timeout=300)
    r = env.ok("exec", "gctr", "test -f /run/.containerenv && echo again-in-container", timeout=120)
    assert "again-in-container" in r.stdout, r.stdout
    env.ok("down", "gctr", "-y", timeout=120)
    assert gce.live() == []
