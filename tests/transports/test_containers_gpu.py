"""GPUs in the task's container with the real runtime (podman + runc), on nodes the test
makes in a private mount namespace (character devices cloned from /dev/null; no GPU needed):

- AMD: /dev/kfd and two /dev/dri render nodes: `podman inspect` shows the devices and the
  device files' groups by number; inside, the job has those groups, host IPC and no seccomp;
- NVIDIA: /dev/nvidia0-1 and the CDI spec the container toolkit generates (in an overlay on
  /etc): podman's `--device nvidia.com/gpu=all` gives the container the nodes and nvidia-smi.

Either way the check inside sees the two GPUs ordered, and ordering more than the node has is
one clear message before setup with no container left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import containers as fc


def _problem() -> str | None:
    if fc.missing() is not None:
        return fc.missing()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare (a private mount namespace holds the fake /dev)"
    with tempfile.TemporaryDirectory() as d:
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "t", d],
                               capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot mount in a private mount namespace here: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_problem() is not None, reason=str(_problem()))

KFD_GID, RENDER_GID = "44", "4242"  # groups no test image names in its /etc/group (render)

# A /dev of our own in a private mount namespace: the machine's usual nodes, plus /dev/kfd and
# /dev/dri/renderD128-129 (clones of /dev/null, owned by the groups the amdgpu driver's udev
# rules give them), so the runtime sees an AMD node.
FAKE_DEV = textwrap.dedent(f"""\
    set -e
    T="$WORK/dev"; mkdir -p "$T"
    mount -t tmpfs -o mode=755 fakedev "$T"
    for f in null zero full random urandom tty ptmx fuse; do [ -e /dev/$f ] && cp -a /dev/$f "$T/$f"; done
    ln -s /proc/self/fd "$T/fd"
    mkdir "$T/pts" "$T/shm" "$T/dri"
    mount --bind /dev/pts "$T/pts"; mount --bind /dev/shm "$T/shm"
    if [ "$VENDOR" = amd ]; then
      mknod -m 666 "$T/kfd" c 1 3 && chgrp {KFD_GID} "$T/kfd"
      for n in 128 129; do mknod -m 666 "$T/dri/renderD$n" c 1 3 && chgrp {RENDER_GID} "$T/dri/renderD$n"; done
    else
      # NVIDIA: the device nodes, and the CDI spec `nvidia-ctk cdi generate` would write, in an
      # overlay on /etc seen only in this namespace
      for n in nvidia0 nvidia1 nvidiactl; do mknod -m 666 "$T/$n" c 1 3; done
      mkdir -p "$WORK/etc/up" "$WORK/etc/work"
      mount -t overlay overlay -o lowerdir=/etc,upperdir="$WORK/etc/up",workdir="$WORK/etc/work" /etc
      mkdir -p /etc/cdi && cp "$WORK/nvidia.yaml" /etc/cdi/nvidia.yaml
    fi
    mount --move "$T" /dev
    exec "$@"
""")

# What `nvidia-ctk cdi generate` writes, cut to its shape (CDI spec 0.5.0,
# github.com/cncf-tags/container-device-interface SPEC.md): the "all" device holds the GPUs'
# device nodes; the spec-wide edits add the control node and bind the driver's nvidia-smi.
CDI_SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}]
- name: "1"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia1}]
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}, {path: /dev/nvidia1}]
containerEdits:
  deviceNodes: [{path: /dev/nvidiactl}]
  mounts:
  - {hostPath: NVSMI, containerPath: /usr/bin/nvidia-smi, options: [ro, nosuid, nodev, bind]}
"""

# the driver's nvidia-smi as the container sees it: one line per device node it was given
NVSMI = """#!/bin/sh
[ "$1" = -L ] || exit 2
i=0; for d in /dev/nvidia[0-9]*; do [ -e "$d" ] || continue
  echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000$i)"; i=$((i+1)); done
"""

HELPER = textwrap.dedent("""\
    import json, sys
    import anyio
    from skyd.errors import SkydError
    from skyd.transports import container_runtime as crt
    from skyd.transports.local import LocalTransport

    nd, image, tag, vendor = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    probe = "ls /dev/kfd /dev/dri; id -G" if vendor == "amd" else "ls /dev; nvidia-smi -L"

    def spec(rank, count):
        return crt.ContainerSpec(image=image, name=crt.container_name(tag, rank), binds=[(nd, nd)],
                                 gpu_vendor=vendor, gpu_count=count, auth_dir=nd + f"/.registry-{rank}",
                                 cluster_tag=tag, rank=rank, stage_dir=nd)

    async def main():
        t = LocalTransport(nd)
        s = await crt.ensure(t, spec(0, 2), lambda m: None, want="podman")
        out = {"inspect": json.loads((await t.run([*s.runtime, "inspect", s.name])).stdout)[0]}
        seen = await t.run(await crt.exec_argv(s, ["/bin/sh", "-c", probe + ";"
                                                   " readlink /proc/self/ns/ipc; grep '^Seccomp:' /proc/self/status"]))
        out["inside"] = seen.stdout
        out["ipc"] = (await t.run(["readlink", "/proc/self/ns/ipc"])).stdout.strip()
        await crt.remove(t, s)
        bad = spec(1, 3)
        try:
            await crt.ensure(t, bad, lambda m: None, want="podman")
            out["error"] = None
        except SkydError as e:
            out["error"] = e.message + " | " + (e.hint or "")
        out["left"] = (await t.run([*bad.runtime, "ps", "-aq", "--filter", f"label=skyd-cluster={tag}"])).stdout
        print("RESULT " + json.dumps(out))

    anyio.run(main)
""")


def _run(tmp_path: Path, vendor: str) -> dict[str, Any]:
    fc.python_image()
    nd = tmp_path / "node"
    work = tmp_path / "ns"
    nd.mkdir()
    work.mkdir()
    (work / "nvidia-smi").write_text(NVSMI)
    (work / "nvidia-smi").chmod(0o755)
    (work / "nvidia.yaml").write_text(CDI_SPEC.replace("NVSMI", str(work / "nvidia-smi")))
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    tag = f"gpu-{vendor}-{os.getpid()}"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", FAKE_DEV, "sh",
                        sys.executable, str(helper), str(nd), fc.PY_IMAGE, tag, vendor],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "WORK": str(work), "VENDOR": vendor,
                            "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, r.stdout + r.stderr
    return dict(json.loads(line.removeprefix("RESULT ")))


def test_amd_node_gives_the_container_its_devices_groups_and_settings(tmp_path: Path) -> None:
    out = _run(tmp_path, "amd")
    hc = out["inspect"]["HostConfig"]
    devs = sorted(d["PathInContainer"] for d in hc["Devices"])
    assert devs == ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/kfd"], hc["Devices"]
    assert sorted(hc["GroupAdd"]) == sorted([KFD_GID, RENDER_GID]), hc["GroupAdd"]
    inside = out["inside"]
    # host IPC and no seccomp filter, seen from inside (podman 4.3's inspect misreports both)
    assert out["ipc"] in inside.split() and "Seccomp:\t0" in inside, inside
    assert "/dev/kfd" in inside and "renderD128" in inside and "renderD129" in inside, inside
    assert KFD_GID in inside.split() and RENDER_GID in inside.split(), inside  # the job's groups
    # three GPUs ordered, two on the node: one message naming the count and the fix
    assert out["error"] and "sees 2 GPU(s), 3 were ordered" in out["error"], out["error"]
    assert "/dev/kfd" in out["error"]
    assert out["left"].strip() == ""


def test_nvidia_node_with_the_toolkits_cdi_spec_gives_podman_containers_the_gpus(tmp_path: Path) -> None:
    out = _run(tmp_path, "nvidia")
    inside = out["inside"]
    # podman resolved `--device nvidia.com/gpu=all` through the CDI spec: device nodes and
    # the driver's nvidia-smi are in the container, and the check counted two GPUs
    assert "nvidia0" in inside.split() and "nvidia1" in inside.split() and "nvidiactl" in inside.split(), inside
    assert inside.count("NVIDIA H100 80GB HBM3") == 2, inside
    assert out["error"] and "sees 2 GPU(s), 3 were ordered" in out["error"], out["error"]
    assert "nvidia-ctk cdi generate" in out["error"]
    assert out["left"].strip() == ""
