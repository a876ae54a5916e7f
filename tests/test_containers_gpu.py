"""AMD GPUs in the task's container with the real runtime (podman + runc): a node whose
/dev holds /dev/kfd and two /dev/dri render nodes (char devices made by the test in a
private mount namespace; no GPU is needed) gets a container whose `podman inspect` shows
the devices, the device files' groups by number, host IPC and seccomp=unconfined; the check
inside the container sees the two GPUs ordered, and ordering more than the node has is one
clear message before setup with no container left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fakes import containers as fc


def _problem() -> str | None:
    if fc.missing() is not None:
        return fc.missing()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare (a private mount namespace holds the fake /dev)"
    return None


pytestmark = pytest.mark.skipif(_problem() is not None, reason=str(_problem()))

KFD_GID, RENDER_GID = "44", "4242"  # groups no test image names in its /etc/group (render)

# A /dev of our own in a private mount namespace: the machine's usual nodes, plus /dev/kfd and
# /dev/dri/renderD128-129 (clones of /dev/null, owned by the groups the amdgpu driver's udev
# rules give them), so the runtime sees an AMD node.
FAKE_DEV = textwrap.dedent(f"""\
    set -e
    T=$(mktemp -d)
    mount -t tmpfs -o mode=755 fakedev "$T"
    for f in null zero full random urandom tty ptmx fuse; do [ -e /dev/$f ] && cp -a /dev/$f "$T/$f"; done
    ln -s /proc/self/fd "$T/fd"
    mkdir "$T/pts" "$T/shm" "$T/dri"
    mount --bind /dev/pts "$T/pts"; mount --bind /dev/shm "$T/shm"
    mknod -m 666 "$T/kfd" c 1 3 && chgrp {KFD_GID} "$T/kfd"
    for n in 128 129; do mknod -m 666 "$T/dri/renderD$n" c 1 3 && chgrp {RENDER_GID} "$T/dri/renderD$n"; done
    mount --move "$T" /dev
    exec "$@"
""")

HELPER = textwrap.dedent("""\
    import json, sys
    import anyio
    from skyd.errors import SkydError
    from skyd.transports import container_runtime as crt
    from skyd.transports.local import LocalTransport

    nd, image, tag = sys.argv[1], sys.argv[2], sys.argv[3]

    def spec(rank, count):
        return crt.ContainerSpec(image=image, name=crt.container_name(tag, rank), binds=[(nd, nd)],
                                 gpu_vendor="amd", gpu_count=count, auth_dir=nd + f"/.registry-{rank}",
                                 cluster_tag=tag, rank=rank, stage_dir=nd)

    async def main():
        t = LocalTransport(nd)
        s = await crt.ensure(t, spec(0, 2), lambda m: None, want="podman")
        out = {"inspect": json.loads((await t.run([*s.runtime, "inspect", s.name])).stdout)[0]}
        seen = await t.run(await crt.exec_argv(s, ["/bin/sh", "-c", "ls /dev/kfd /dev/dri; id -G;"
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


def test_amd_node_gives_the_container_its_devices_groups_and_settings(tmp_path: Path) -> None:
    fc.python_image()
    nd = tmp_path / "node"
    nd.mkdir()
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    tag = f"gpu-{os.getpid()}"
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", FAKE_DEV, "sh",
                        sys.executable, str(helper), str(nd), fc.PY_IMAGE, tag],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, r.stdout + r.stderr
    out = json.loads(line.removeprefix("RESULT "))
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
