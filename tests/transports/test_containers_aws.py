"""image_id: docker:<image> on AWS (moto behind the proxy, instances mapped to fake SSH
hosts on 127.0.0.x): `docker:vllm/...` is never looked up as an AMI; the instance gets the
default image and the task runs in the container on it (real podman)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import containers as fc
from tests.support.aws import Cloud, fake_aws
from tests.support.pipeline import Env, module_env, write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    fc.python_image()
    with fake_aws(tmp_path_factory.mktemp("aws-ctr"), hosts=1) as c:
        yield c


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, aws: Cloud) -> Iterator[Env]:
    with module_env(tmp_path_factory, **aws.env, SKYD_CONTAINER_RUNTIME="podman") as e:
        yield e
    assert aws.leftovers() == {}
    # The fake's SSH hosts outlive their instances (a real VM takes its containers along).
    fc.remove_bound_under(aws.hosts.root if aws.hosts else Path("/nonexistent"))


def test_docker_image_on_aws_uses_the_default_ami_and_runs_in_the_container(
        env: Env, aws: Cloud, tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml",
              "resources:\n  infra: aws/us-east-1\n  instance_type: m6i.large\n"
              f"  image_id: docker:{fc.PY_IMAGE}\n"
              "run: test -f /run/.containerenv && echo aws-in-container-$SKYPILOT_NODE_RANK\n")
    r = env.ok("launch", "-c", "aws-ctr", "-y", str(y), timeout=300)
    assert "aws-in-container-0" in r.stdout, r.stdout + r.stderr
    ec2 = aws.boto()
    insts = [i for res in ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["skyd-cluster"]}])
             ["Reservations"] for i in res["Instances"] if i["State"]["Name"] == "running"]
    assert len(insts) == 1 and insts[0]["ImageId"].startswith("ami-"), insts
    names = fc.podman("ps", "--format", "{{.Names}}").stdout.decode().split()
    assert [n for n in names if n.startswith("skyd-aws-ctr-")], names
    env.ok("down", "aws-ctr", "-y", timeout=120)
    assert aws.leftovers() == {}
