"""The agent detects the GPUs its node gives it: nvidia-smi / amd-smi list every GPU of the
machine, CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES (set by a Slurm allocation's gres, or a
container runtime) narrow that, and a job gets the devices of its slots mapped back through
that list."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skyd.nodeagent import gpu
from skyd.nodeagent.gpu import Gpu
from tests.nodeagent.test_nodeagent_helpers import AgentFactory, agents, read_log, wait_status

__all__ = ["agents"]

pytestmark = pytest.mark.anyio


def _nv(n: int) -> list[Gpu]:
    return [Gpu(i, "H100", 81559, f"GPU-aaaa{i}", "nvidia") for i in range(n)]


def test_no_variable_means_every_gpu() -> None:
    assert gpu.restrict_visible(_nv(4), {}) == _nv(4)


def test_indices_into_the_machine_list_are_kept_in_order_and_renumbered() -> None:
    got = gpu.restrict_visible(_nv(4), {"CUDA_VISIBLE_DEVICES": "3,1"})
    assert [(g.index, g.uuid) for g in got] == [(0, "GPU-aaaa3"), (1, "GPU-aaaa1")]


def test_uuids_select_by_uuid() -> None:
    got = gpu.restrict_visible(_nv(4), {"CUDA_VISIBLE_DEVICES": "GPU-aaaa2"})
    assert [(g.index, g.uuid) for g in got] == [(0, "GPU-aaaa2")]


def test_a_tool_that_already_sees_only_the_allocation_keeps_it() -> None:
    # device cgroups: nvidia-smi shows the 2 allocated GPUs, the variable names their
    # machine indices 6,7
    got = gpu.restrict_visible(_nv(2), {"CUDA_VISIBLE_DEVICES": "6,7"})
    assert [g.uuid for g in got] == ["GPU-aaaa0", "GPU-aaaa1"]


@pytest.mark.parametrize("value", ["", "NoDevFiles"])
def test_an_empty_list_means_no_gpu(value: str) -> None:
    assert gpu.restrict_visible(_nv(2), {"CUDA_VISIBLE_DEVICES": value}) == []


def test_amd_reads_rocr_then_hip_and_ignores_cuda() -> None:
    amd = [Gpu(i, "MI300X", 196592, "", "amd") for i in range(8)]
    assert len(gpu.restrict_visible(amd, {"CUDA_VISIBLE_DEVICES": "0"})) == 8
    assert [g.index for g in gpu.restrict_visible(amd, {"ROCR_VISIBLE_DEVICES": "4,5",
                                                        "HIP_VISIBLE_DEVICES": "0,1"})] == [0, 1]
    assert len(gpu.restrict_visible(amd, {"HIP_VISIBLE_DEVICES": "7"})) == 1


def test_job_devices_map_through_the_agents_list() -> None:
    assert gpu.job_visible("nvidia", [1], {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"CUDA_VISIBLE_DEVICES": "3"}
    assert gpu.job_visible("nvidia", [0, 1], {}) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    # ROCR names the devices; HIP indexes those ROCR left
    assert gpu.job_visible("amd", [1], {"ROCR_VISIBLE_DEVICES": "4,6"}) == {
        "ROCR_VISIBLE_DEVICES": "6", "HIP_VISIBLE_DEVICES": "0"}
    assert gpu.job_visible("amd", [2, 3], {}) == {"ROCR_VISIBLE_DEVICES": "2,3",
                                                  "HIP_VISIBLE_DEVICES": "0,1"}


def _amd_smi(bin_dir: Path, n: int) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    data = bin_dir / "amd-smi.json"
    data.write_text(json.dumps([{"gpu": i, "asic": {"market_name": "AMD Instinct MI300X OAM",
                                                    "device_id": "0x74a1"},
                                 "vram": {"size": {"value": 196592, "unit": "MB"}}} for i in range(n)]))
    tool = bin_dir / "amd-smi"
    tool.write_text(f"#!/bin/sh\ncat {data}\n")
    tool.chmod(0o755)


async def test_agent_in_a_one_gpu_allocation_reports_and_uses_that_gpu(agents: AgentFactory,
                                                                      tmp_path: Path) -> None:
    _amd_smi(tmp_path / "bin", 2)  # the machine has 2; the scheduler gave this agent #1
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "ROCR_VISIBLE_DEVICES": "1"}
    env.pop("SKYD_FAKE_GPUS", None)
    a = agents.start(env=env)
    async with a.client() as c:
        st = await c.status()
        assert [(g["name"], g["vendor"]) for g in st["gpus"]] == [("MI300X", "amd")], st["gpus"]
        j = await c.submit_job({"run": 'echo "rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES"', "gpus": 1})
        await wait_status(c, j, "SUCCEEDED")
        assert await read_log(c, j) == "rocr=1 hip=0\n"  # the allocated GPU, not the machine's #0
