"""Helpers for the AWS tests (no tests in here): moto's server on 127.0.0.1, the proxy in
front of it (tests/fakes/awsproxy.py), fake SSH hosts on 127.0.0.x in a thread of their own
(so sync daemon tests can use them too), and what moto holds that skyd made."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.fakes.awsproxy import AWSProxy, start_moto
from tests.fakes.sshhost import FakeSSHHost

REGION = "us-east-1"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_DEFAULT_REGION": REGION}


class HostsThread:
    """``n`` fake SSH hosts on 127.0.0.<first>... sharing one port, served by a thread."""

    def __init__(self, root: Path, n: int, first: int = 2) -> None:
        self.root = root
        self.addrs = [f"127.0.0.{first + i}" for i in range(n)]
        self.hosts: list[FakeSSHHost] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="sshhosts")

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    def start(self) -> HostsThread:
        self._thread.start()

        async def up() -> None:
            for i, addr in enumerate(self.addrs):
                h = FakeSSHHost(self.root / f"h{i}", addr, port=self.port)
                await h.start()
                self.port = h.port
                self.hosts.append(h)

        self._call(up())
        return self

    def authorize(self, public_key: str) -> None:
        fd, path = tempfile.mkstemp(suffix=".pub", dir=self.root)
        with os.fdopen(fd, "w") as f:
            f.write(" ".join(public_key.split()[:2]) + "\n")  # the fake compares without comment
        for h in self.hosts:
            h.authorize(Path(path))

    def boot(self, addr: str, image_name: str, instance_type: str) -> None:
        """The host at ``addr`` becomes an ``instance_type`` booted from an AMI named
        ``image_name``: its GPUs (AWS's instance-type data as moto ships it, ``GpuInfo``) show
        to nvidia-smi only when the AMI carries the NVIDIA driver (AWS's Deep Learning AMIs,
        the Neuron ones aside), to amd-smi only on a ROCm AMI."""
        from moto.ec2.models.instance_types import INSTANCE_TYPES

        from tests.fakes.gpuprofile import CARDS, profile

        host = next((h for h in self.hosts if h.host == addr), None)
        if host is None:
            return
        fakebin = host.root / "fakebin"
        for tool in ("nvidia-smi", "amd-smi", "rocm-smi"):
            (fakebin / tool).unlink(missing_ok=True)
        gpus = (INSTANCE_TYPES.get(instance_type, {}).get("GpuInfo") or {}).get("Gpus") or []
        if not gpus:
            return
        card, count, maker = str(gpus[0]["Name"]), int(gpus[0]["Count"]), str(gpus[0]["Manufacturer"])
        low = image_name.lower()
        cuda = "deep learning" in low and "neuron" not in low  # the DLAMIs carry the NVIDIA driver
        if card not in CARDS and maker != "NVIDIA":
            return  # a card whose tool output the profiles do not model
        printed = None if card in CARDS else f"{maker} {card}"
        tools = profile(host.root / "gpu", card, count, rocm="rocm" in low, cuda=cuda, printed_name=printed)
        if isinstance(tools, dict):
            for tool, data in tools.items():
                script = fakebin / tool
                script.write_text(f"#!/bin/sh\ncat {data}\n")
                script.chmod(0o755)

    def stop(self) -> None:
        async def down() -> None:
            for h in self.hosts:
                await h.stop()

        try:
            self._call(down())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


class Cloud:
    """moto + proxy (+ hosts): the whole fake AWS. ``env`` points a process at it."""

    def __init__(self, root: Path, hosts: int = 0) -> None:
        self._boto: dict[tuple[str, str], Any] = {}
        self._boto_lock = threading.Lock()
        self.moto, self.moto_url = start_moto()
        self.hosts = HostsThread(root / "hosts", hosts).start() if hosts else None
        self.proxy = AWSProxy(self.moto_url, hosts=self.hosts.addrs if self.hosts else [],
                              on_key=self.hosts.authorize if self.hosts else None,
                              on_boot=self._boot if self.hosts else None).start()

    def _boot(self, addr: str, image_id: str, instance_type: str) -> None:
        assert self.hosts is not None
        images = self.boto().describe_images(ImageIds=[image_id])["Images"] if image_id else []
        self.hosts.boot(addr, str(images[0].get("Name", "")) if images else "", instance_type)

    @property
    def env(self) -> dict[str, str]:
        out = {**CREDS, "AWS_ENDPOINT_URL": self.proxy.url, "SKYD_AWS_POLL_S": "0.05"}
        if self.hosts:
            out["SKYD_AWS_SSH_PORT"] = str(self.hosts.port)
        return out

    def boto(self, service: str = "ec2", region: str = REGION) -> Any:
        """A plain boto3 client straight at moto (the test's own view, not through skyd);
        one per service and region (a client is safe to share between threads)."""
        import boto3

        with self._boto_lock:
            c = self._boto.get((service, region))
            if c is None:
                c = self._boto[(service, region)] = boto3.client(
                    service, region_name=region, endpoint_url=self.moto_url,
                    aws_access_key_id="testing", aws_secret_access_key="testing")
            return c

    def leftovers(self, region: str = REGION) -> dict[str, list[str]]:
        """What skyd made that is still there: live instances, security groups and key pairs
        carrying a skyd tag, and placement groups (kept by the proxy)."""
        ec2 = self.boto(region=region)
        flt = [{"Name": "tag-key", "Values": ["skyd-cluster"]}]
        insts = [i["InstanceId"] for r in ec2.describe_instances(Filters=flt)["Reservations"]
                 for i in r["Instances"] if i["State"]["Name"] != "terminated"]
        sgs = [g["GroupName"] for g in ec2.describe_security_groups(Filters=flt)["SecurityGroups"]]
        kps = [k["KeyName"] for k in ec2.describe_key_pairs(Filters=flt)["KeyPairs"]]
        pgs = sorted(self.proxy.placement_groups)  # the proxy keeps them (moto lacks them)
        return {k: v for k, v in (("instances", insts), ("security_groups", sgs),
                                  ("key_pairs", kps), ("placement_groups", pgs)) if v}

    def stop(self) -> None:
        try:
            self.proxy.stop()
            if self.hosts:
                self.hosts.stop()
        finally:
            self.moto.stop()


@contextmanager
def fake_aws(root: Path, hosts: int = 0) -> Iterator[Cloud]:
    c = Cloud(root, hosts)
    try:
        yield c
    finally:
        c.stop()
