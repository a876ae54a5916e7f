"""kill -9 scenarios on fake infrastructure (a plugin of tests/support/crash_harness.py; no tests in
here). Each brings its fake (``infra``): the daemon gets its environment, and at the end of
the trial it must hold nothing skyd made.

- ``aws``: launches on moto (behind tests/fakes/awsproxy.py, instances answered by fake SSH
  hosts) -> no instance, security group, key pair or placement group left;
- ``gcp``: launches on the fake Compute API (tests/fakes/gce.py) -> no instance left;
- ``kubernetes``: launches on the fake API server (tests/fakes/kubeapi.py) -> no pod or
  service left;
- ``runpod``: launches on the RunPod fake (a neocloud) -> no pod left;
- ``slurm``: a launch on a real slurmctld + slurmd pair (tests/fakes/slurm.py) -> nothing in
  squeue;
- ``storage``: launches with bucket file_mounts on moto's S3: a local directory uploaded to a
  non-persistent bucket (COPY onto the node), and a COPY from an existing bucket -> every
  launch ends as it would have; after `down` the uploaded bucket is deleted and the source
  bucket is untouched; no other bucket is made.

Each launch SUCCEEDED with its job SUCCEEDED once (a resumed launch never runs its job
twice), or FAILED with a message and no cluster under its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.crash_harness import InfraUnavailable, Trial, scenario


@dataclass
class FakeInfra:
    env: dict[str, str]
    _left: Callable[[], Any]
    hosts_root: Path | None = None  # fake SSH hosts standing for the machines

    def leftovers(self) -> Any:
        return self._left()

    def reap(self) -> None:
        """Every machine is terminated on the fake (leftovers() is checked apart): what ran on
        the fake hosts standing for them ends, as it would with a VM."""
        if self.hosts_root is not None and not self.leftovers():
            import time

            from tests.fakes.preemptible import _kill_all, _procs_under

            _kill_all(self.hosts_root)
            deadline = time.monotonic() + 10
            while _procs_under(self.hosts_root) and time.monotonic() < deadline:
                time.sleep(0.05)  # SIGKILL-ed: gone in a moment


def _launches(t: Trial, c: Any, infra: str, *, n: int = 2, max_nodes: int = 2,
              extra: str = "") -> None:
    """``n`` launches of 1..max_nodes nodes on ``infra``, followed through 1-2 kills."""
    from skyd.sdk.payloads import task_source

    ids = {}
    for i in range(n):
        nodes = t.rng.randint(1, max_nodes)
        text = (f"resources:\n  infra: {infra}\n{extra}num_nodes: {nodes}\n"
                f"run: echo hello-$SKYPILOT_NODE_RANK; sleep {t.rng.uniform(0.1, 1.0):.2f}\n")
        name = f"{t.rng.choice('abcdefgh')}{t.seed % 1000}-{i}"
        ids[c.submit("launch", {**task_source(yaml_text=text), "cluster_name": name})] = name
        t.res.launches += 1
    t.kills(c)
    t.wait(lambda: all(t.done(c, r) for r in ids), f"launches on {infra} did not finish")
    t.launch_outcomes(c, ids)


# -- AWS (moto) -------------------------------------------------------------------------------
@contextmanager
def aws_infra(root: Path) -> Iterator[FakeInfra]:
    from tests.support.aws import fake_aws

    with fake_aws(root, hosts=6) as cloud:
        yield FakeInfra(cloud.env, cloud.leftovers, root / "hosts")


@scenario("aws", infra=aws_infra)
def aws(t: Trial, c: Any) -> None:
    _launches(t, c, "aws/us-east-1", extra="  instance_type: m6i.large\n")


# -- GCP (fake Compute API) -------------------------------------------------------------------
@contextmanager
def gcp_infra(root: Path) -> Iterator[FakeInfra]:
    from tests.fakes.gce import FakeGCE
    from tests.support.gcp import gcp_environ

    root.mkdir(parents=True, exist_ok=True)
    gce = FakeGCE(root, first_ip=80).start()
    try:
        creds = gce.service_account_file(root / "sa.json")
        env = gcp_environ(gce, creds, root.parent / "netguard.log")
        yield FakeInfra(env, lambda: [i.get("name") for i in gce.live()])
    finally:
        gce.stop()


@scenario("gcp", infra=gcp_infra)
def gcp(t: Trial, c: Any) -> None:
    _launches(t, c, "gcp/us-central1", extra="  cpus: 2\n")


# -- Kubernetes (fake API server) --------------------------------------------------------------
@contextmanager
def kube_infra(root: Path) -> Iterator[FakeInfra]:
    from tests.fakes.kubeapi import FakeKube, gpu_node

    root.mkdir(parents=True, exist_ok=True)
    kube = FakeKube(root).start()
    try:
        kube.add_node(gpu_node("cpu-a", {}, cpu="16", memory="64Gi"))
        cfg = kube.kubeconfig(root / "kubeconfig", {"a-lab": "skyd"})
        yield FakeInfra({"KUBECONFIG": str(cfg), "SKYD_K8S_POLL_S": "0.1"}, kube.live)
    finally:
        kube.stop()


@scenario("kubernetes", infra=kube_infra)
def kubernetes(t: Trial, c: Any) -> None:
    _launches(t, c, "k8s/a-lab", extra="  cpus: 2\n")


# -- a neocloud (RunPod fake) ------------------------------------------------------------------
@contextmanager
def runpod_infra(root: Path) -> Iterator[FakeInfra]:
    from tests.fakes.runpod import FakeRunPod
    from tests.support.neocloud import runpod_env

    root.mkdir(parents=True, exist_ok=True)
    fake = FakeRunPod(root, first_ip=110).start()
    try:
        yield FakeInfra(runpod_env(fake), fake.live)
    finally:
        fake.stop()


@scenario("runpod", infra=runpod_infra)
def runpod(t: Trial, c: Any) -> None:
    _launches(t, c, "runpod", max_nodes=1, extra="  accelerators: MI300X:8\n")


# -- Slurm (real slurmctld + slurmd on loopback) -------------------------------------------------
@contextmanager
def slurm_infra(root: Path) -> Iterator[FakeInfra]:
    import shutil
    import subprocess
    import tempfile

    from tests.fakes.slurm import SlurmFixture, unavailable_reason

    why = unavailable_reason()
    if why is not None:
        raise InfraUnavailable(why)
    # sshd and slurmd read files here as the test user: not under a 0700 directory
    sroot = Path(tempfile.mkdtemp(prefix="skyd-k9-slurm-", dir="/var/tmp"))
    fx = SlurmFixture(sroot)
    try:
        try:
            fx.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            # its daemons use fixed loopback ports: another Slurm tier running on this
            # machine at the same time keeps it from starting
            raise InfraUnavailable(f"slurm: the fixture could not start: {e}") from None
        root.mkdir(parents=True, exist_ok=True)
        (root / "slurm_config").write_text(fx.slurm_config())
        yield FakeInfra({"SKYD_SLURM_CONFIG": str(root / "slurm_config")}, fx.squeue)
        fx.cancel_all()
    finally:
        fx.stop()
        shutil.rmtree(sroot, ignore_errors=True)


@scenario("slurm", infra=slurm_infra)
def slurm(t: Trial, c: Any) -> None:
    _launches(t, c, "slurm/loop/gpu", n=1)


# -- storage: bucket file_mounts on moto's S3 ----------------------------------------------------
SRC_BUCKET = "skyd-k9-source"


@contextmanager
def s3_infra(root: Path) -> Iterator[FakeInfra]:
    import boto3

    from tests.fakes.awsproxy import start_moto
    from tests.support.aws import CREDS, REGION

    server, url = start_moto()
    try:
        s3 = boto3.client("s3", region_name=REGION, endpoint_url=url,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket=SRC_BUCKET)
        want = {}
        for i in range(40):
            key = f"data/part-{i:03d}.txt"
            s3.put_object(Bucket=SRC_BUCKET, Key=key, Body=f"part {i}\n".encode() * 200)
            want[key] = s3.head_object(Bucket=SRC_BUCKET, Key=key)["ETag"]

        def left() -> dict[str, Any]:
            out: dict[str, Any] = {}
            extra = sorted({b["Name"] for b in s3.list_buckets()["Buckets"]} - {SRC_BUCKET})
            if extra:
                out["buckets"] = extra
            have = {o["Key"]: o["ETag"] for o in
                    s3.list_objects_v2(Bucket=SRC_BUCKET).get("Contents", [])}
            if have != want:
                out["source bucket changed"] = sorted(set(have) ^ set(want))
            return out

        yield FakeInfra({**CREDS, "AWS_ENDPOINT_URL": url}, left)
    finally:
        server.stop()


@scenario("storage", infra=s3_infra)
def storage(t: Trial, c: Any) -> None:
    """A local directory uploaded to a non-persistent bucket (COPY), and a COPY of a prefix
    of an existing bucket, onto 1-2 nodes, through 1-2 kills."""
    from skyd.sdk.payloads import task_source

    src = t.base / "upload-src"
    for i in range(60):
        d = src / f"d{i % 6}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * 500)
    ids = {}
    for i in range(2):
        nodes = t.rng.randint(1, 2)
        bucket = f"skyd-k9-up-{t.seed % 1000}-{i}"
        text = (f"resources:\n  infra: local\nnum_nodes: {nodes}\nfile_mounts:\n"
                f"  ~/up:\n    name: {bucket}\n    source: {src}\n    mode: COPY\n"
                f"    persistent: false\n"
                f"  ~/in: s3://{SRC_BUCKET}/data\n"
                "run: test -f ~/up/d5/f59.txt && test -f ~/in/part-039.txt && echo copied\n")
        name = f"st{t.seed % 1000}-{i}"
        ids[c.submit("launch", {**task_source(yaml_text=text), "cluster_name": name})] = name
        t.res.launches += 1
    t.kills(c, window=3.0)
    t.wait(lambda: all(t.done(c, r) for r in ids), "storage launches did not finish")
    t.launch_outcomes(c, ids)
