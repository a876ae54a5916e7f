"""image_id: docker:<image> on an SSH node pool of real OpenSSH (tests/fakes/sshd.py): the
pool host's user pulls a private image from a registry with basic auth (credentials as
task secrets), the agent runs inside the container (rootless podman), setup/run/exec there,
file mounts at their paths, and `down` removes the container."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.fakes import containers as fc
from tests.fakes.sshd import USER, real_sshd, unavailable_reason
from tests.support.ssh_e2e import cli, daemon

_why = unavailable_reason() or fc.missing() or (None if fc.REGISTRY and fc.HTPASSWD else
                                                 "docker-registry / htpasswd are not installed")
pytestmark = [pytest.mark.anyio, pytest.mark.skipif(_why is not None, reason=str(_why))]


def user_containers() -> list[str]:
    out = subprocess.run(["runuser", "-u", USER, "--", "sh", "-c", "cd ~ && podman ps -a --format '{{.Names}}'"],
                         capture_output=True, text=True, timeout=120).stdout
    return [n for n in out.split() if n.startswith("skyd-")]


def remove_user_containers() -> None:
    """What this or an earlier, interrupted run left in the test user's podman store
    (containers, and the image pulled from this run's registry)."""
    subprocess.run(["runuser", "-u", USER, "--", "sh", "-c",
                    "cd ~ && podman system migrate; podman ps -aq --filter name=skyd-sshctr- | xargs -r podman rm -f;"
                    " podman images --format '{{.Repository}}:{{.Tag}}' | grep '/team/ssh-py:1$' |"
                    " xargs -r podman rmi -f"],
                   capture_output=True, timeout=120)


def user_container_states() -> list[str]:
    out = subprocess.run(["runuser", "-u", USER, "--", "sh", "-c",
                          "cd ~ && podman ps -a --filter name=skyd- --format '{{.Names}}' | "
                          "xargs -r podman inspect --format '{{.State.Status}}'"],
                         capture_output=True, text=True, timeout=120).stdout
    return out.split()


async def test_private_image_on_ssh_pool_runs_agent_inside_and_down_removes_it(
        skyd_home: Path, tmp_path: Path) -> None:
    fc.python_image()
    remove_user_containers()
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    reg = fc.Registry(tmp_path / "registry").start()
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.txt").write_text("dataset-file")
    try:
        image = reg.push(fc.PY_IMAGE, "team/ssh-py:1")
        async with real_sshd(work) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"pool:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n")
            task = tmp_path / "t.yaml"
            task.write_text(
                f"resources:\n  infra: ssh/pool\n  image_id: docker:{image}\n"
                f"file_mounts:\n  ~/cfg: {data}\n"
                "setup: echo from-setup > /installed\n"
                "run: |\n  test -f /run/.containerenv && echo in-container\n"
                "  cat ~/cfg/d.txt; echo; echo rank=$SKYPILOT_NODE_RANK\n")
            async with daemon(SKYD_CONTAINER_RUNTIME="podman"):
                r = await cli("launch", "-y", "-c", "sshctr", str(task),
                              "--secret", f"SKYPILOT_DOCKER_USERNAME={reg.user}",
                              "--secret", f"SKYPILOT_DOCKER_PASSWORD={reg.password}", timeout=300)
                out = r.stdout + r.stderr
                assert r.returncode == 0, out
                assert "in-container" in out and "dataset-file" in out and "rank=0" in out, out
                assert f"Logged in to {reg.addr}" in out and reg.password not in out
                assert len(user_containers()) == 1, user_containers()
                r = await cli("exec", "sshctr", "cat /installed")
                assert r.returncode == 0 and "from-setup" in r.stdout, r
                # stop stops the container too; start finds it by name and starts it again
                r = await cli("stop", "-y", "sshctr", timeout=180)
                assert r.returncode == 0, r
                assert user_container_states() == ["exited"], user_container_states()
                r = await cli("start", "-y", "sshctr", timeout=300)
                assert r.returncode == 0, r
                r = await cli("exec", "sshctr", "cat /installed")
                assert r.returncode == 0 and "from-setup" in r.stdout, r
                r = await cli("down", "-y", "sshctr")
                assert r.returncode == 0, r
                assert user_containers() == []
    finally:
        reg.stop()
        remove_user_containers()
        shutil.rmtree(work, ignore_errors=True)
