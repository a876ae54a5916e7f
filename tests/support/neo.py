"""Helpers for the DigitalOcean / AMD Developer Cloud / Crusoe tests (no tests in here):
the environment that points the drivers at their fakes, and a small catalog directory so
every test plans over known prices."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.crusoeapi import FakeCrusoe
from tests.fakes.doapi import FakeDO

CATALOG_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
DO_ROWS = ("gpu-mi300x8-1536gb,MI300X,8.0,160,1920,MI300X,nyc1,,15.92,\n"
           "gpu-mi300x1-192gb,MI300X,1.0,20,240,MI300X,nyc1,,1.99,\n")
AMD_ROWS = "gpu-mi300x8-1536gb-devcloud,MI300X,8.0,160,1920,MI300X,atl1,,17.50,\n"
CRUSOE_ROWS = ("mi300x-192gb.8x,MI300X,8.0,176,1920,MI300X-192GB,us-east1-a,,27.6,\n"
               "mi355x-288gb.8x,MI355X,8.0,224,3072,MI355X_288GB,us-east1-a,,36.0,\n")


def write_catalog(d: Path, *, crusoe: bool = False) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "do.csv").write_text(CATALOG_HEADER + DO_ROWS)
    (d / "amddevcloud.csv").write_text(CATALOG_HEADER + AMD_ROWS)
    if crusoe:
        (d / "crusoe.csv").write_text(CATALOG_HEADER + CRUSOE_ROWS)
    return d


def do_environ(do: FakeDO, amd: FakeDO, base: Path) -> dict[str, str]:
    assert do.ssh_port == amd.ssh_port  # one $SKYD_DO_SSH_PORT serves both
    return {
        "DIGITALOCEAN_TOKEN": do.token,
        "AMD_DEVELOPER_CLOUD_TOKEN": amd.token,
        "SKYD_DO_API_URL": do.url,
        "SKYD_AMDDEVCLOUD_API_URL": amd.url,
        "SKYD_DO_SSH_PORT": str(do.ssh_port),
        "SKYD_DO_POLL_S": "0.05",
        "XDG_CONFIG_HOME": str(base / "xdg"),  # no user doctl config is read
    }


def crusoe_environ(cr: FakeCrusoe, base: Path) -> dict[str, str]:
    return {
        "CRUSOE_ACCESS_KEY_ID": cr.access_key,
        "CRUSOE_SECRET_KEY": cr.secret_key,
        "CRUSOE_PROJECT_ID": cr.project,
        "SKYD_CRUSOE_API_URL": cr.url,
        "SKYD_CRUSOE_SSH_PORT": str(cr.ssh_port),
        "SKYD_CRUSOE_POLL_S": "0.05",
        "SKYD_CRUSOE_CONFIG": str(base / "crusoe-config"),  # no user ~/.crusoe/config is read
    }
