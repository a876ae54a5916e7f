"""Slurm nodes prove their GPUs like every provider's: the agent on each allocated node detects
them (amd-smi on the node, narrowed to the devices the gres allocation made visible) and the
GPU check fails a node whose driver shows none, naming Slurm and the partition. Runs against
the real Slurm fake (tests/fakes/slurm.py): its ``sn3`` declares gres GPUs but has no driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clouds.test_slurm_e2e import _leftovers, _rows, cfg, slurm
from tests.fakes.slurm import SlurmFixture, unavailable_reason
from tests.support.ssh_e2e import cli, daemon

__all__ = ["cfg", "slurm"]  # the Slurm fixture and its per-test config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


async def test_a_gres_node_whose_driver_shows_no_gpu_fails_the_check_naming_the_partition(
    cfg: SlurmFixture,
) -> None:
    async with daemon():
        r = await cli("launch", "-y", "-c", "nod", "--infra", "slurm/loop/nodriver", "--gpus", "MI300X:1",
                      "echo never-ran", timeout=180)  # fmt: skip
        out = r.stdout + r.stderr
        assert r.returncode != 0, r
        assert "never-ran" not in out, r
        assert "slurm/loop/nodriver" in out and "partition nodriver" in out and "sn3" in out, r
        assert "no GPUs" in out and "MI300X:1" in out, r
        r = await cli("status", "-o", "json")
        assert all(row["name"] != "nod" for row in _rows(r.json())), r  # nothing half-made
    assert cfg.squeue() == []  # the allocation was given back
    assert await _leftovers(cfg) == []


async def test_two_one_gpu_allocations_on_one_node_each_use_their_own_gpu(
    cfg: SlurmFixture, skyd_home: Path
) -> None:
    """amd-smi shows both GPUs of sn1 to both allocations; each agent keeps the one its gres
    allocation got (ROCR_VISIBLE_DEVICES), and its job runs on that one, not on GPU 0."""
    conf = skyd_home.parent / "config"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "config.yaml").write_text("slurm:\n  sbatch_options:\n    nodelist: sn1\n")
    seen: list[str] = []
    async with daemon():
        for name in ("one", "two"):
            r = await cli("launch", "-y", "-c", name, "--infra", "slurm/loop/gpu", "--gpus", "MI300X:1",
                          "echo dev rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES", timeout=180)  # fmt: skip
            assert r.returncode == 0, r
            seen += [ln[ln.index("dev rocr="):].strip() for ln in r.stdout.splitlines() if "dev rocr=" in ln]
        assert sorted(seen) == ["dev rocr=0 hip=0", "dev rocr=1 hip=0"], seen
        for name in ("one", "two"):
            r = await cli("down", "-y", name, timeout=120)
            assert r.returncode == 0, r
    assert cfg.squeue() == []


async def test_an_allocation_without_gpus_leaves_the_nodes_gpus_alone(cfg: SlurmFixture) -> None:
    """A CPU task on the GPU partition gets no gres: amd-smi still shows sn1's GPUs, but the
    agent and its jobs are given none of them (an empty device list, as CUDA/ROCm read it)."""
    async with daemon():
        r = await cli("launch", "-y", "-c", "cpuonly", "--infra", "slurm/loop/gpu",
                      "echo seen rocr=[${ROCR_VISIBLE_DEVICES-unset}] n=$SKYPILOT_NUM_GPUS_PER_NODE",
                      timeout=180)  # fmt: skip
        assert r.returncode == 0, r
        assert "seen rocr=[] n=0" in r.stdout, r.stdout
        r = await cli("down", "-y", "cpuonly", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []
