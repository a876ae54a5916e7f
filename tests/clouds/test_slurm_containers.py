"""image_id docker:<image> on Slurm: the runtime the cluster offers is found on its login host
(pyxis/enroot's `srun --container-image` first, then apptainer, then singularity), the
allocation's scripts run the agent in the image through it, and a cluster with none is one
message naming the cluster and the fix before anything is submitted. (No pyxis, enroot,
apptainer or singularity package installs on the test machines: Debian 12 has none of them;
the scripts are checked by shape and by `bash -n`.)"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.clouds.slurm import containers, scripts
from skyd.clouds.slurm.provisioner import SlurmProvisioner
from skyd.errors import ResourcesUnavailableError
from skyd.transports.base import RunResult, Transport, command_line
from skyd.transports.container_runtime import ContainerRequest, RegistryLogin


class LoginHost(Transport):
    """A login host whose tools are stand-ins in a bin dir of its own: `srun --help` lists
    `--container-image` when pyxis is there; `apptainer`/`singularity` exist or not."""

    def __init__(self, have: Sequence[str], bindir: Path) -> None:
        bindir.mkdir(parents=True, exist_ok=True)
        opts = "--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH" if "pyxis" in have else "--overlap"
        tools = {"srun": f"#!/bin/sh\necho 'Usage: srun [OPTIONS(0)...]'\necho '      {opts}'\n"}
        tools.update({k: "#!/bin/sh\nexit 0\n" for k in have if k != "pyxis"})
        for name, text in tools.items():
            (bindir / name).write_text(text)
            (bindir / name).chmod(0o755)
        self.path = f"{bindir}:/bin"
        self.commands: list[str] = []

    async def run(self, cmd: str | Sequence[str], *, input: str | bytes | None = None, check: bool = False,
                  timeout: float | None = None, env: dict[str, str] | None = None,
                  idempotent: bool = False) -> RunResult:
        line = command_line(cmd, env)
        self.commands.append(line)
        p = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30,
                           env={"PATH": self.path})
        return RunResult(p.returncode, p.stdout, p.stderr)

    async def put(self, local: str | Path, remote: str) -> None:
        raise NotImplementedError

    async def get(self, remote: str, local: str | Path) -> None:
        raise NotImplementedError

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        raise NotImplementedError

    async def agent_endpoint(self, addr: Any) -> tuple[str, int]:
        raise NotImplementedError


def _container(host: LoginHost, req: ContainerRequest, log: list[str]) -> tuple[list[str], list[str]]:
    prov = SlurmProvisioner(config_path=Path("/nonexistent"))
    return anyio.run(prov._container, host, "hpc1", req, "/home/u/.skyd", log.append)  # type: ignore[arg-type]


@pytest.mark.parametrize(("have", "kind"), [(["pyxis", "apptainer"], "pyxis"), (["singularity", "apptainer"], "apptainer"),
                                            (["singularity"], "singularity"), ([], None)])
def test_the_runtime_is_chosen_from_what_the_login_host_offers(have: list[str], kind: str | None,
                                                             tmp_path: Path) -> None:
    host = LoginHost(have, tmp_path / "bin")
    req = ContainerRequest(image="nvcr.io/nvidia/pytorch:24.01-py3", mounts=("/data",), gpu_vendor="nvidia", gpu_count=8)
    log: list[str] = []
    if kind is None:
        with pytest.raises(ResourcesUnavailableError) as ei:
            _container(host, req, log)
        assert "slurm/hpc1" in ei.value.message and "pyxis" in ei.value.message and "apptainer" in ei.value.message
        assert "drop image_id" in (ei.value.hint or "") and ei.value.scope == "region"
        return
    wrap, flags = _container(host, req, log)
    assert any(kind in m for m in log), log
    if kind == "pyxis":
        assert wrap == []
        assert "--container-image=nvcr.io#nvidia/pytorch:24.01-py3" in flags
        assert "--container-mounts=/home/u/.skyd:/home/u/.skyd,/data:/data" in flags
        assert "--no-container-entrypoint" in flags and "--container-mount-home" in flags
    else:
        assert flags == []
        assert wrap[:2] == [kind, "exec"] and wrap[-1] == "docker://nvcr.io/nvidia/pytorch:24.01-py3"
        assert "--nv" in wrap and wrap[wrap.index("--bind") + 1] == "/home/u/.skyd:/home/u/.skyd"


def test_amd_images_get_rocm_and_private_registries_get_a_note(tmp_path: Path) -> None:
    req = ContainerRequest(image="rocm/pytorch:latest", gpu_vendor="amd", gpu_count=8,
                           login=RegistryLogin("docker.io", "u", "p"))
    log: list[str] = []
    wrap, _ = _container(LoginHost(["apptainer"], tmp_path / "bin"), req, log)
    assert "--rocm" in wrap and "--nv" not in wrap and wrap[-1] == "docker://rocm/pytorch:latest"
    assert any("~/.config/enroot/.credentials" in m for m in log) and not any("p" == w for m in log for w in m.split())


@pytest.mark.parametrize(("image", "enroot"), [
    ("ubuntu:22.04", "ubuntu:22.04"), ("rocm/pytorch:latest", "rocm/pytorch:latest"),
    ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
    ("localhost:5000/x/y:1", "localhost:5000#x/y:1"), ("ghcr.io/o/i@sha256:ab", "ghcr.io#o/i@sha256:ab")])
def test_enroot_references(image: str, enroot: str) -> None:
    assert containers.enroot_image(image) == enroot


def test_scripts_run_the_agent_in_the_image(tmp_path: Path) -> None:
    flags = containers.pyxis_flags("nvcr.io/nvidia/pytorch:24.01-py3", ["/home/u/.skyd"])
    job = scripts.job_script(tag="c-1", num_nodes=2, partition="gpu", gres="gpu:h100:8", cpus=None, options={},
                             jobdir="/home/u/.skyd/slurm/c-1", nodes_glob="/home/u/.skyd/nodes/c-1-",
                             srun_flags=flags)
    srun = next(ln for ln in job.splitlines() if ln.startswith("srun "))
    assert "--container-image=nvcr.io#nvidia/pytorch:24.01-py3" in srun and srun.endswith("/node.sh")
    wrap = containers.apptainer_prefix("apptainer", "rocm/pytorch:latest", ["/home/u/.skyd"], "amd")
    node = scripts.node_script(base="/home/u/.skyd", tag="c-1", cluster="c", pyz="/home/u/.skyd/a.pyz", sha="s",
                               wrap=wrap)
    assert "exec apptainer exec --writable-tmpfs --bind /home/u/.skyd:/home/u/.skyd --rocm" \
           " docker://rocm/pytorch:latest python3 /home/u/.skyd/a.pyz" in node
    plain = scripts.node_script(base="/home/u/.skyd", tag="c-1", cluster="c", pyz="/a.pyz", sha="s")
    assert "exec python3 /a.pyz" in plain
    for i, text in enumerate((job, node, plain)):
        f = tmp_path / f"s{i}.sh"
        f.write_text(text)
        r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_a_relaunch_on_a_slurm_container_cluster_is_checked_against_its_image() -> None:
    from skyd.clouds.base import ClusterHandle, NodeHandle
    from skyd.errors import ClusterStateError
    from skyd.models.loader import task_from_config
    from skyd.pipeline import fit

    ctr = {"image": "rocm/pytorch:latest", "mounts": [], "binds": [["/h/.skyd", "/h/.skyd"]], "gpu_vendor": "amd"}
    node = NodeHandle(rank=0, instance_id="sn1", internal_ip="127.0.0.1", extra={"container": ctr})
    handle = ClusterHandle("s1", "slurm", "loop", None, "slurm", False, {}, 1, 0.0, [node], "tok")

    def task(cfg: dict[str, Any]) -> Any:
        return task_from_config({"run": "true", **cfg})

    fit.check_fits(task({"resources": {"image_id": "docker:rocm/pytorch:latest"}}), handle)
    fit.check_fits(task({}), handle)  # no image asked: runs in the cluster's image
    with pytest.raises(ClusterStateError) as ei:
        fit.check_fits(task({"resources": {"image_id": "docker:ubuntu:22.04"}}), handle)
    assert "cluster runs docker:rocm/pytorch:latest" in ei.value.message
    with pytest.raises(ClusterStateError) as ei:  # a new absolute destination the image was started without
        fit.check_fits(task({"file_mounts": {"/data": "/tmp"}}), handle)
    assert "file_mounts./data" in ei.value.message


def test_in_an_image_without_scontrol_each_node_finds_its_address(tmp_path: Path) -> None:
    """pyxis runs node.sh in the image (often no scontrol there; `hostname` may resolve to
    127.0.1.1): the batch script, on the host, writes every node's NodeAddr for it."""
    base, tag = str(tmp_path / ".skyd"), "c-1"
    jobdir = f"{base}/slurm/{tag}"
    Path(jobdir).mkdir(parents=True)
    host_bin, image_bin = tmp_path / "host-bin", tmp_path / "image-bin"
    host_bin.mkdir()
    image_bin.mkdir()
    # scontrol's one-line form (scontrol show node -o), as on the Slurm fake
    (host_bin / "scontrol").write_text(
        "#!/bin/sh\n"
        "echo 'NodeName=sn1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 NodeAddr=127.0.0.11 NodeHostName=sn1 State=IDLE'\n"
        "echo 'NodeName=sn2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 NodeAddr=127.0.0.12 NodeHostName=sn2 State=IDLE'\n")
    (host_bin / "scontrol").chmod(0o755)
    job = scripts.job_script(tag=tag, num_nodes=2, partition=None, gres=None, cpus=None, options={},
                             jobdir=jobdir, nodes_glob=f"{base}/nodes/{tag}-",
                             srun_flags=containers.pyxis_flags("ubuntu:22.04", [base]))
    line = next(ln for ln in job.splitlines() if ln.startswith("scontrol "))
    env = {"PATH": f"{host_bin}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "sn[1-2]"}
    subprocess.run(["/bin/bash", "-c", line], check=True, env=env)
    assert Path(jobdir, "nodeaddrs").read_text().split("\n")[:2] == ["sn1 127.0.0.11", "sn2 127.0.0.12"]
    node = scripts.node_script(base=base, tag=tag, cluster="c", pyz="/a.pyz", sha="s")
    addr_lines = "\n".join(ln for ln in node.splitlines() if ln.startswith(("addr=", "[ -n \"$addr\" ]")))
    for ln in ("sh", "awk", "tr", "sed", "hostname"):  # the image's tools, but no scontrol
        src = next((p for p in (f"/usr/bin/{ln}", f"/bin/{ln}") if Path(p).exists()), None)
        if src:
            (image_bin / ln).symlink_to(src)
    r = subprocess.run(["/bin/bash", "-c", addr_lines + "\necho \"$addr\""], capture_output=True, text=True,
                       env={"PATH": str(image_bin), "SLURMD_NODENAME": "sn2"})
    assert r.stdout.strip() == "127.0.0.12", r
