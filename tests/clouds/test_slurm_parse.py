"""Slurm provider pieces without a cluster: ~/.slurm/config, sbatch options, scontrol output."""

from __future__ import annotations

import pytest

from skyd.clouds.base import NODE_PENDING, NODE_PREEMPTED, NODE_RUNNING
from skyd.clouds.slurm import parse
from skyd.clouds.slurm.config import parse_config, sbatch_options
from skyd.errors import InvalidSpecError
from skyd.models.parsing import parse_infra

CONFIG = """
Host hpc1 hpc1-alias
  HostName login1.example.org
  User alice
  IdentityFile ~/.ssh/id_hpc
  ProxyJump bastion
Host *
  Port 22
Host small
  HostName 10.0.0.5
  Port 2200
"""


def test_config_names_clusters_with_login_user_key_and_jump() -> None:
    c = parse_config(CONFIG)
    assert sorted(c) == ["hpc1", "hpc1-alias", "small"]
    assert c["hpc1"].host == "login1.example.org" and c["hpc1"].user == "alice"
    assert c["hpc1"].proxy_jump == "bastion" and c["hpc1"].identity_file.endswith("/.ssh/id_hpc")  # type: ignore[union-attr]
    assert c["small"].port == 2200


def test_bad_port_names_the_field() -> None:
    with pytest.raises(InvalidSpecError, match="Port"):
        parse_config("Host x\n  Port abc\n")


def test_sbatch_options_merge_and_protected_keys() -> None:
    s = {"sbatch_options": {"time": "1:00:00", "account": "a"},
         "clusters": {"hpc1": {"sbatch_options": {"account": "b", "exclusive": True}}}}
    assert sbatch_options("hpc1", s) == {"time": "1:00:00", "account": "b", "exclusive": ""}
    with pytest.raises(InvalidSpecError, match="'partition' is set by skyd"):
        sbatch_options("x", {"sbatch_options": {"--partition": "gpu"}})


def test_infra_names_cluster_and_partition() -> None:
    assert parse_infra("slurm/hpc1/gpu") == ("slurm", "hpc1", "gpu")
    assert parse_infra("slurm/hpc1") == ("slurm", "hpc1", None)


def test_gres_maps_to_canonical_accelerators() -> None:
    assert parse.gres_gpus("gpu:mi300x:8(S:0-1),gpu:h100:2,shard:4") == [("mi300x", 8), ("h100", 2)]
    assert parse.gres_gpus("gpu:4") == [(None, 4)]
    assert [parse.canonical_gpu(t) for t in ("mi300x", "h100", "a100-80gb", "nvidia_h100_80gb_hbm3")] == [
        "MI300X", "H100", "A100-80GB", "H100"]


def test_partitions_count_free_gpus_from_alloc_tres() -> None:
    part = "PartitionName=gpu Nodes=n[1-2] Default=YES State=UP\n"
    nodes = ("NodeName=n1 CPUTot=64 RealMemory=512000 Gres=gpu:mi300x:8 State=MIXED Partitions=gpu "
             "AllocTRES=cpu=8,gres/gpu=3\n"
             "NodeName=n2 CPUTot=64 RealMemory=512000 Gres=gpu:mi300x:8 State=DOWN+DRAIN Partitions=gpu "
             "AllocTRES= Reason=Not responding [root@x]\n")  # fmt: skip
    (p,) = parse.partitions(part, nodes)
    assert (p.accelerator, p.gpus_per_node, p.total_gpus, p.free_gpus) == ("MI300X", 8, 16, 5)


def test_job_states_and_sbatch_refusals() -> None:
    assert parse.job_node_state("PENDING") == NODE_PENDING
    assert parse.job_node_state("RUNNING") == NODE_RUNNING
    for s in ("PREEMPTED", "TIMEOUT", "CANCELLED by 0", "NODE_FAIL", None):
        assert parse.job_node_state(s) == NODE_PREEMPTED
    reason, scope = parse.sbatch_error(
        "sbatch: error: Batch job submission failed: Requested node configuration is not available\n")
    assert (reason, scope) == ("Requested node configuration is not available", "zone")


@pytest.mark.anyio
async def test_check_reports_an_unreachable_login_host(skyd_home: object, tmp_path: object) -> None:
    from pathlib import Path

    from skyd.clouds.slurm.cloud import SlurmCloud

    conf = Path(str(tmp_path)) / "slurm_config"
    conf.write_text("Host gone\n  HostName 127.0.0.28\n  Port 2259\n  User nobody\n")  # nothing listens
    cloud = SlurmCloud(config_path=conf)
    try:
        ok, why = await cloud.check()
        assert not ok and "0/1 Slurm cluster(s) reachable" in why and "gone (nobody@127.0.0.28:2259): unreachable" in why
        assert cloud.dynamic_offerings() == []  # no facts, and no loop to probe on here
    finally:
        await cloud.close()


@pytest.mark.anyio
async def test_check_without_config_says_where_it_looked(skyd_home: object, tmp_path: object) -> None:
    from pathlib import Path

    from skyd.clouds.slurm.cloud import SlurmCloud

    ok, why = await SlurmCloud(config_path=Path(str(tmp_path)) / "none").check()
    assert not ok and "no Slurm clusters" in why and "none" in why
