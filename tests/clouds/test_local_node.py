"""A `local` node is a faithful node: absolute file-mount destinations, `~` and
~/sky_workdir are where the YAML names them (a mount namespace per job, bubblewrap), each
node has its own loopback address, and nothing of either outlives `down` or a kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline import Env, module_env, procs_matching, wait_for, write

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def _addresses(env: Env) -> dict[str, tuple[str, int]]:
    db = env.home / "local-addresses.db"
    if not db.exists():
        return {}
    with sqlite3.connect(db) as c:
        return {r[0]: (r[1], r[2]) for r in c.execute("SELECT address, cluster, rank FROM addresses")}


@needs_bwrap
def test_absolute_mounts_home_and_workdir(env: Env, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    data = tmp_path / "data"
    write(data / "set" / "a.txt", f"data-{tag}\n")
    write(tmp_path / "ckpt.bin", "ckpt\n")
    wd = tmp_path / "wd"
    write(wd / "train.py", "print('train')\n")
    dests = [f"/data{tag}", f"/checkpoint{tag}/model.bin", f"/tmp/skyd-ns-{tag}/deep/outputs"]
    y = write(tmp_path / "t.yaml", f"""\
workdir: {wd}
file_mounts:
  {dests[0]}: {data}
  {dests[1]}: {tmp_path / 'ckpt.bin'}
  {dests[2]}: {data}
  ~/cfg/a.txt: {data / 'set' / 'a.txt'}
run: |
  set -e
  cat {dests[0]}/set/a.txt
  cat {dests[1]}
  ls {dests[2]}/set
  cat ~/cfg/a.txt
  cd ~/sky_workdir && ls train.py && echo "wd-ok"
  echo "written-{tag}" > {dests[0]}/out.txt
  echo "tmp-visible: $(ls -d {tmp_path} 2>&1)"
""")
    r = env.ok("launch", "-c", "ln-mounts", str(y))
    assert r.stdout.count(f"data-{tag}") == 2, r.stdout
    assert "ckpt" in r.stdout and "wd-ok" in r.stdout
    assert f"tmp-visible: {tmp_path}" in r.stdout  # the rest of the host is as it is
    # What the job wrote at /dataTAG is the node's copy; nothing was made on the host.
    nd = env.cluster_dir("ln-mounts") / "node-0"
    assert (nd / "root" / f"data{tag}" / "out.txt").read_text() == f"written-{tag}\n"
    assert not os.path.lexists(f"/data{tag}") and not os.path.lexists(f"/checkpoint{tag}")
    assert not os.path.lexists(f"/tmp/skyd-ns-{tag}")
    # `skyd shell` opens the node as its jobs see it (namespace, HOME, workdir)
    r = env.ok("shell", "ln-mounts", "--", f"cat {dests[0]}/out.txt; ls ~/cfg; ls train.py")
    assert r.stdout.split() == [f"written-{tag}", "a.txt", "train.py"], r.stdout
    from tests.support.daemon import cli

    r = cli("shell", "-n", "3", "ln-mounts", "true")
    assert r.returncode == 2 and "no node 3" in r.stderr
    env.ok("down", "ln-mounts", "-y")
    assert not env.cluster_dir("ln-mounts").exists()


RENDEZVOUS = r"""
import os, socket, sys, time
ips = os.environ["SKYPILOT_NODE_IPS"].split()
rank = int(os.environ["SKYPILOT_NODE_RANK"])
port = int(sys.argv[1])
srv = socket.socket()
srv.bind((ips[rank], port))  # every rank binds the same port, on its own address
srv.listen()
peer = ips[1 - rank]
for _ in range(200):
    try:
        c = socket.create_connection((peer, port), timeout=1)
        break
    except OSError:
        time.sleep(0.05)
c.sendall(b"rank%d" % rank)
conn, _ = srv.accept()
print("rank", rank, "at", ips[rank], "heard", conn.recv(16).decode(), flush=True)
time.sleep(0.5)
"""


def test_two_nodes_bind_the_same_port(env: Env, tmp_path: Path) -> None:
    script = write(tmp_path / "wd" / "rdv.py", RENDEZVOUS)
    port = 20000 + uuid.uuid4().int % 20000
    y = write(tmp_path / "t.yaml", f"""\
num_nodes: 2
workdir: {script.parent}
run: python3 rdv.py {port}
""")
    r = env.ok("launch", "-c", "ln-rdv", str(y))
    lines = sorted(ln for ln in r.stdout.splitlines() if "heard" in ln)
    assert len(lines) == 2, r.stdout
    assert "rank 0" in lines[0] and "heard rank1" in lines[0]
    assert "rank 1" in lines[1] and "heard rank0" in lines[1]
    held = {a: v for a, v in _addresses(env).items() if v[0] == "ln-rdv"}
    assert sorted(v[1] for v in held.values()) == [0, 1]
    for a in held:
        assert a.startswith("127.") and a != "127.0.0.1"
        assert f"at {a} " in r.stdout
    # The agents listen on their node's address.
    for rank in (0, 1):
        info = json.loads((env.cluster_dir("ln-rdv") / f"node-{rank}" / "agent.json").read_text())
        assert info.get("host") in held, info
    env.ok("down", "ln-rdv", "-y")
    assert not any(v[0] == "ln-rdv" for v in _addresses(env).values())


@needs_bwrap
def test_kill9_agent_leaves_no_namespace_mount_or_address(env: Env, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    n = 3000 + uuid.uuid4().int % 1000
    write(tmp_path / "d" / "x", "x")
    y = write(tmp_path / "t.yaml", f"""\
file_mounts:
  /kd{tag}: {tmp_path / 'd'}
run: ls /kd{tag} && sleep {n}
""")
    env.ok("launch", "-c", "ln-kill", "-d", str(y))
    wait_for(lambda: procs_matching(f"sleep\0{n}\0"), timeout=30, interval=0.1)
    cdir = str(env.cluster_dir("ln-kill"))

    def namespaces() -> list[int]:  # bwrap processes running this cluster's job scripts
        out = []
        for p in procs_matching(cdir):
            try:
                argv0 = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0.endswith(b"bwrap"):
                out.append(p)
        return out

    assert namespaces(), "the job runs under bubblewrap"
    for pid in env.agent_pids("ln-kill"):
        os.kill(pid, signal.SIGKILL)
    env.ok("down", "ln-kill", "-y")
    wait_for(lambda: not procs_matching(f"sleep\0{n}\0"), timeout=10, interval=0.1)
    wait_for(lambda: not namespaces(), timeout=10, interval=0.1)
    assert cdir not in Path("/proc/self/mounts").read_text()
    assert not any(v[0] == "ln-kill" for v in _addresses(env).values())


def test_without_a_namespace_the_job_is_told_what_it_will_not_find(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    write(tmp_path / "d" / "x", "x")
    y = write(tmp_path / "t.yaml", f"""\
file_mounts:
  /nf{tag}: {tmp_path / 'd'}
run: ls /nf{tag} || echo "missing as warned"
""")
    with module_env(tmp_path_factory, SKYD_BWRAP="off") as e:
        r = e.ok("launch", "-c", "ln-off", str(y))
        out = r.stdout + r.stderr
        assert "without a mount namespace" in out
        assert f"will not find /nf{tag} (at {e.cluster_dir('ln-off')}/node-0/root/nf{tag})" in out
        assert "missing as warned" in out
        e.ok("down", "ln-off", "-y")


def test_status_ip_and_endpoints_on_local(env: Env, tmp_path: Path) -> None:
    import urllib.request

    port = 20000 + uuid.uuid4().int % 20000
    y = write(tmp_path / "t.yaml", f"""\
resources:
  ports: [{port}, {port + 1}-{port + 2}]
run: |
  ip=$(echo "$SKYPILOT_NODE_IPS" | head -1)
  cd $(mktemp -d) && echo served > index.html && exec python3 -m http.server {port} --bind $ip
""")
    env.ok("launch", "-c", "ln-ports", "-d", str(y))
    ip = env.ok("status", "--ip", "ln-ports").stdout.strip()
    addrs = {a for a, v in _addresses(env).items() if v[0] == "ln-ports"}
    assert ip in addrs
    doc = env.json("status", "--ip", "ln-ports")
    assert doc["head_ip"] == ip and doc["node_ips"] == [ip]
    eps = env.ok("status", "--endpoints", "ln-ports").stdout.splitlines()
    assert eps == [f"{p}: {ip}:{p}" for p in (port, port + 1, port + 2)]
    assert env.json("status", "--endpoints", "ln-ports")["endpoints"][str(port)] == f"{ip}:{port}"
    ep = env.ok("status", "--endpoint", str(port), "ln-ports").stdout.strip()
    assert ep == f"{ip}:{port}"
    assert env.json("status", "--endpoint", str(port), "ln-ports")["endpoint"] == ep

    def get() -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://{ep}/", timeout=2) as r:
                return bytes(r.read())
        except OSError:
            return None

    assert wait_for(get, timeout=20, interval=0.2) == b"served\n"
    from tests.support.daemon import cli

    r = cli("status", "--endpoint", "1", "ln-ports")
    assert r.returncode == 2 and "port 1 is not open" in r.stderr
    r = cli("status", "--ip")
    assert r.returncode == 2 and "exactly one CLUSTER" in r.stderr
    r = cli("status", "--ip", "nosuch")
    assert r.returncode == 3
    # The plain listing has the managed-jobs and services summaries below the clusters.
    out = env.ok("status").stdout
    assert "ln-ports" in out and "No in-progress managed jobs." in out and "No live services." in out
    name = f"jsum{uuid.uuid4().hex[:6]}"
    env.ok("jobs", "launch", "-d", "-y", "-n", name, "sleep 60")
    out = env.ok("status").stdout
    jobs_part = out.split("Managed jobs", 1)[1].split("Services", 1)[0]
    assert name in jobs_part, out
    assert out.index("ln-ports") < out.index("Managed jobs") < out.index(name)
    env.ok("jobs", "cancel", "-a")
    env.ok("down", "ln-ports", "-y")


def test_kill9_daemon_then_down_leaves_nothing(env: Env, tmp_path: Path) -> None:
    n = 4000 + uuid.uuid4().int % 1000
    tag = uuid.uuid4().hex[:8]
    write(tmp_path / "d" / "x", "x")
    y = write(tmp_path / "t.yaml", f"""\
num_nodes: 2
file_mounts:
  /kd9{tag}: {tmp_path / 'd'}
run: sleep {n}
""")
    env.ok("launch", "-c", "ln-k9", "-d", str(y))
    wait_for(lambda: len(procs_matching(f"sleep\0{n}\0")) == 2, timeout=20, interval=0.1)
    env.kill9_daemon()
    env.start_daemon()
    env.ok("down", "ln-k9", "-y")
    wait_for(lambda: not procs_matching(f"sleep\0{n}\0"), timeout=10, interval=0.1)
    assert not any(v[0] == "ln-k9" for v in _addresses(env).values())
    assert str(env.cluster_dir("ln-k9")) not in Path("/proc/self/mounts").read_text()
    assert not env.cluster_dir("ln-k9").exists()


@pytest.mark.anyio
async def test_a_forgotten_attempt_frees_its_addresses(skyd_home: Path) -> None:
    from skyd.clouds import local_net
    from skyd.clouds.base import PartialHandle
    from skyd.clouds.local import LocalProvisioner

    got = await local_net.allocate("half", 3)
    import ipaddress

    net = local_net.network()  # 127.0.0.0/24 unless SKYD_LOCAL_NET says otherwise
    assert len(set(got)) == 3 and all(ipaddress.ip_address(a) in net and a != "127.0.0.1" for a in got)
    assert await local_net.allocate("half", 3) == got  # idempotent: a retried attempt keeps them
    other = await local_net.allocate("other", 1)
    assert other[0] not in got
    await LocalProvisioner().forget(PartialHandle("half", "local", "local", None, "half"))
    assert set(local_net.allocations_sync()) == set(other)


@needs_bwrap
def test_namespace_layout_binds_where_named_and_writes_nothing_on_the_host(tmp_path: Path) -> None:
    import subprocess

    from skyd.transports import sandbox_ns

    tag = uuid.uuid4().hex[:8]
    nd = tmp_path / "node"
    for d in ("root/a", "root/b", "root/t"):
        (nd / d).mkdir(parents=True)
    (nd / "root/a/f").write_text("A\n")
    (nd / "root/b/g").write_text("B\n")
    (tmp_path / "exists").mkdir()
    binds = {f"/ns-{tag}/x": str(nd / "root/a"),  # under a directory the host lacks
             f"/ns-{tag}/x/inner": str(nd / "root/b"),  # nested: the outer source holds it
             str(tmp_path / "exists" / "new" / "deep"): str(nd / "root/b"),  # mirrors `exists`
             f"/tmp/./sub/../m-{tag}": str(nd / "root/a"),  # normalized
             str(tmp_path.parent): str(nd / "root/t")}  # holds the node itself: left as is
    wrapper = sandbox_ns.write(nd, binds)
    script = (f"cat /ns-{tag}/x/f; cat {tmp_path}/exists/new/deep/g; cat /tmp/m-{tag}/f; "
              f"ls {nd}/root >/dev/null && echo node-visible")
    r = subprocess.run([str(wrapper), "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["A", "B", "A", "node-visible"], r.stdout
    assert "holds this node's own directory" in r.stderr
    assert not os.path.lexists(f"/ns-{tag}") and not os.path.lexists(f"/tmp/m-{tag}")
    assert os.listdir(tmp_path / "exists") == []


@pytest.mark.anyio
async def test_a_node_whose_agent_is_still_exiting_is_stopping_not_stopped(tmp_path: Path) -> None:
    """An autostopped agent writes its stopped mark, removes its agent.json, then the
    interpreter exits: while its process lives the node is stopping (pending), so `status`
    never shows STOPPED with the agent still running."""
    import subprocess
    import sys

    from skyd.clouds.base import NODE_PENDING, NODE_STOPPED, ClusterHandle, NodeHandle
    from skyd.clouds.local import STOPPED_MARK, LocalProvisioner

    nd = tmp_path / "local" / "c" / "node-0"
    nd.mkdir(parents=True)
    (nd / STOPPED_MARK).write_text('{"stopped_at": 1, "down": false}')  # and no agent.json
    handle = ClusterHandle("c", "local", None, None, None, False, {}, 1, 0.0,
                           [NodeHandle(0, "n0", "127.0.0.1", node_dir=str(nd))], "t")
    prov = LocalProvisioner(tmp_path / "local")
    # a process with the agent's command line for this node, still finishing its exit
    exiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "--home", str(nd)])  # fmt: skip
    try:
        assert await prov.query(handle) == [NODE_PENDING]
    finally:
        exiting.kill()
        exiting.wait()
    assert await prov.query(handle) == [NODE_STOPPED]
