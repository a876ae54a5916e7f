"""How image_id docker:<image> is routed before anything is made: the provider gets its
default VM image plus a container request (AWS never looks `docker:...` up as an AMI), the
per-region form picks the region's entry, pod infras keep the image as the pod's, Slurm gets
a request for its own runtime (machine images stay refused there), bucket MOUNTs become binds shared into the container,
SkyPilot's registry variables and `docker.run_options` are read from the task."""

from __future__ import annotations

from typing import Any

import pytest

from skyd.clouds.base import requested_features
from skyd.clouds.offering import Offering
from skyd.errors import InvalidSpecError
from skyd.models.loader import task_from_config
from skyd.models.task import Task
from skyd.pipeline import provision
from skyd.pipeline.planner import Choice
from skyd.transports.container_runtime import ContainerSpec


def choice(cloud: str, region: str = "r1", acc: str | None = None, n: float = 0) -> Choice:
    off = Offering(cloud=cloud, instance_type="t", accelerator=acc, accelerator_count=n, vcpus=8.0,
                   memory_gib=32.0, region=region, zone=None, price=1.0, spot_price=None)
    return Choice(offering=off, use_spot=False, hourly_cost=1.0, num_nodes=1)


def task(doc: dict[str, Any]) -> Task:
    return task_from_config({"run": "echo hi", **doc})


class Ctx:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, m: str) -> None:
        self.lines.append(m)


def test_vm_clouds_get_no_image_and_a_container_request() -> None:
    t = task({"resources": {"image_id": "docker:vllm/vllm-openai:latest", "accelerators": "H100:1"},
              "envs": {"SKYPILOT_DOCKER_USERNAME": "me"}, "secrets": {"SKYPILOT_DOCKER_PASSWORD": "s3cr3t-pw-xyz"},
              "file_mounts": {"/data": "/tmp", "~/x": "/tmp"},
              "config": {"docker": {"run_options": ["--shm-size=16g", "-e FOO=1"]}}})
    for cloud in ("aws", "gcp", "do", "vultr", "crusoe", "hotaisle", "local", "ssh"):
        req = provision.build_request(t, "c", "c-abc", choice(cloud, acc="H100", n=1))
        assert req.image_id is None, cloud  # the provider's default VM image
        ctr = req.container
        assert ctr is not None and ctr.image == "vllm/vllm-openai:latest" and ctr.cluster_tag == "c-abc"
        assert ctr.mounts == ("/data",) and ctr.gpu_vendor == "nvidia" and ctr.gpu_count == 1
        assert ctr.run_options == ("--shm-size=16g", "-e", "FOO=1")
        assert ctr.login is not None and ctr.login.server == "docker.io" and ctr.login.password == "s3cr3t-pw-xyz"
        assert "s3cr3t-pw-xyz" not in repr(ctr) + repr(req)
        assert requested_features(req) == {"docker_image"}


def test_pod_infras_keep_the_image_as_the_pods() -> None:
    t = task({"resources": {"image_id": "docker:rocm/pytorch:latest"}})
    for cloud in ("kubernetes", "runpod"):
        req = provision.build_request(t, "c", "c-abc", choice(cloud))
        assert req.image_id == "docker:rocm/pytorch:latest" and req.container is None


def test_per_region_docker_image_and_amd_vendor() -> None:
    t = task({"resources": {"image_id": {"r1": "docker:rocm/vllm:a", "r2": "docker:rocm/vllm:b"},
                            "accelerators": "MI300X:8"}})
    req = provision.build_request(t, "c", "c-1", choice("aws", "r2", "MI300X", 8))
    assert req.container is not None and req.container.image == "rocm/vllm:b"
    assert req.container.gpu_vendor == "amd" and req.image_id is None


def test_slurm_gets_a_container_request_for_its_own_runtime() -> None:
    t = task({"resources": {"image_id": "docker:ubuntu:22.04"}})
    keep = provision.supported_choices(Ctx(), t, "c", [choice("slurm"), choice("local")])
    assert [c.offering.cloud for c in keep] == ["slurm", "local"]
    req = provision.build_request(t, "c", "c-1", choice("slurm"))
    assert req.container is not None and req.container.image == "ubuntu:22.04" and req.image_id is None
    # a machine image stays refused there (Slurm nodes have the cluster's own OS)
    t = task({"resources": {"image_id": "ami-123"}})
    with pytest.raises(InvalidSpecError) as ei:
        provision.supported_choices(Ctx(), t, "c", [choice("slurm")])
    assert ei.value.field == "resources.image_id"


def test_bucket_mounts_become_shared_binds_with_rslave_propagation() -> None:
    t = task({"resources": {"image_id": "docker:ubuntu:22.04"},
              "file_mounts": {"/ckpt": {"source": "s3://bucket", "mode": "MOUNT"},
                              "~/c": {"source": "s3://bucket/x", "mode": "MOUNT_CACHED"},
                              "/copy": {"source": "s3://bucket", "mode": "COPY"}}})
    req = provision.build_request(t, "c", "c-1", choice("local"))
    assert req.container is not None
    assert sorted(req.container.fuse_mounts) == ["/ckpt", "~/c"]
    spec = req.container.spec(rank=0, node_dir="/n/.skyd-node", home="/home/u")
    spec.runtime = ["/usr/bin/podman"]
    assert ("/ckpt", "/ckpt") in spec.binds and ("/home/u/c", "/home/u/c") in spec.binds
    assert sorted(spec.shared) == ["/ckpt", "/home/u/c"]  # COPY stays a plain bind
    assert spec.to_dict()["shared"] == spec.shared and ContainerSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("opts", [5, ["--ok", 3], "unbalanced 'quote"])
def test_bad_run_options_name_the_key(opts: Any) -> None:
    t = task({"resources": {"image_id": "docker:ubuntu:22.04"}, "config": {"docker": {"run_options": opts}}})
    with pytest.raises(InvalidSpecError) as ei:
        provision.build_request(t, "c", "c-1", choice("local"))
    assert ei.value.field == "config.docker.run_options"


@pytest.mark.parametrize("image_id", ["docker:", "docker: ", "docker:a b", "docker:-v/:/x", "docker:x;id"])
def test_bad_docker_references_are_bad_input(image_id: str) -> None:
    with pytest.raises(InvalidSpecError) as ei:
        task({"resources": {"image_id": image_id}})
    assert ei.value.field is not None and "image_id" in ei.value.field


def test_pull_errors_are_classified_by_what_the_registry_said() -> None:
    from skyd.transports.container_runtime import classify_pull

    img = "127.0.0.1:40163/team/py:1"  # a port with "401" in it is no auth error
    cases = {
        'Get "http://127.0.0.1:40163/v2/": dial tcp 127.0.0.1:40163: connect: connection refused':
            "cannot be reached",
        "reading manifest 1 in 127.0.0.1:40163/team/py: manifest unknown": "was not found",
        "unable to retrieve auth token: invalid username/password: unauthorized": "refused the credentials",
        "Error response from daemon: pull access denied for x, repository does not exist": "refused",
        "no matching manifest for linux/arm64 in the manifest list entries": "no build for",
    }
    for out, words in cases.items():
        e = classify_pull(img, out)
        assert words in e.message, (out, e.message)
        assert e.field == "resources.image_id" and e.scope == "stop"
