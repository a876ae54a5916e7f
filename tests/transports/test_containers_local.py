"""image_id: docker:<image> on `local`, end to end with real podman (runc): the node agent
runs inside the task's container; setup/run there; exec reuses it; file mounts at their
paths; down / stop / start / kill -9 of the agent; bad images fail before setup and leave
nothing running. Images are built here (tests/fakes/containers.py): no internet."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import containers as fc
from tests.support.pipeline import Env, cli, module_env, write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    fc.python_image()
    fc.busybox_image()
    # no SKYD_CONTAINER_RUNTIME: the node's runtime is found (a docker CLI without a daemon
    # answering is passed over for podman)
    with module_env(tmp_path_factory) as e:
        yield e
    left = fc.bound_under(e.home)
    fc.remove_bound_under(e.home)  # safety net
    assert left == [], f"containers left after down -a: {left}"


def containers_of(cluster_prefix: str) -> list[str]:
    """'<name> <state>' of this cluster's containers (state: running, exited, ...)."""
    out = fc.podman("ps", "-a", "--format", "{{.Names}}", check=False).stdout.decode()
    names = [n for n in out.split() if n.startswith(f"skyd-{cluster_prefix}-")]
    return [f"{n} " + fc.podman("inspect", "--format", "{{.State.Status}}", n, check=False)
            .stdout.decode().strip() for n in names]


def launch(env: Env, d: Path, name: str, yaml: str, *extra: str, rc: int = 0) -> str:
    f = write(d / f"{name}.yaml", yaml)
    r = cli("launch", "-y", "-c", name, str(f), *extra, timeout=300)
    assert r.returncode == rc, f"rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_setup_and_run_inside_container_exec_reuses_it(env: Env, tmp_path: Path) -> None:
    write(tmp_path / "wd" / "code.txt", "code\n")
    write(tmp_path / "data" / "d.txt", "data\n")
    yaml = f"""\
workdir: {tmp_path / 'wd'}
resources:
  image_id: docker:{fc.PY_IMAGE}
file_mounts:
  /dataset: {tmp_path / 'data'}
  ~/cfg: {tmp_path / 'data'}
envs:
  GREETING: hello
secrets:
  TOKEN_S: hush-{os.getpid()}
setup: |
  echo installed > /opt-marker
run: |
  test -f /run/.containerenv && echo in-container
  echo "$GREETING rank=$SKYPILOT_NODE_RANK nodes=$SKYPILOT_NUM_NODES"
  cat code.txt /dataset/d.txt ~/cfg/d.txt
  echo "secret-len=${{#TOKEN_S}}"
"""
    out = launch(env, tmp_path, "ctr-a", yaml)
    assert "in-container" in out, out
    assert "hello rank=0 nodes=1" in out
    assert "code\ndata\ndata" in out
    assert f"secret-len={len(f'hush-{os.getpid()}')}" in out
    assert any(" running" in c for c in containers_of("ctr-a")), containers_of("ctr-a")
    # the secret is in neither the container's configuration nor any command line
    insp = fc.podman("inspect", containers_of("ctr-a")[0].split()[0]).stdout.decode()
    assert f"hush-{os.getpid()}" not in insp
    # exec reuses the container: it sees what setup installed, and nothing is made again
    f = write(tmp_path / "ex.yaml", "run: cat /opt-marker; test -f /run/.containerenv && echo in-ctr\n")
    r = cli("exec", "ctr-a", str(f), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "installed" in r.stdout and "in-ctr" in r.stdout
    assert len(containers_of("ctr-a")) == 1
    # another image on this cluster: refused with the fix, nothing changed
    g = write(tmp_path / "other.yaml", f"resources:\n  image_id: docker:{fc.BB_IMAGE}\nrun: echo should-not-run\n")
    r = cli("launch", "-y", "-c", "ctr-a", str(g), timeout=120)
    assert r.returncode != 0 and "should-not-run" not in r.stdout, r.stdout + r.stderr
    assert f"cluster runs docker:{fc.PY_IMAGE}" in r.stderr and "-c NEWNAME" in r.stderr, r.stderr
    # a new absolute file-mount destination cannot be bound into the running container
    g = write(tmp_path / "newmnt.yaml", f"file_mounts:\n  /newdst: {tmp_path / 'data'}\nrun: echo nope\n")
    r = cli("launch", "-y", "-c", "ctr-a", str(g), timeout=120)
    assert r.returncode != 0 and "file_mounts./newdst" in r.stderr and "-c NEWNAME" in r.stderr, r.stderr
    # no image_id asked: a relaunch runs in the cluster's container
    g = write(tmp_path / "same.yaml", "run: test -f /opt-marker && echo relaunch-in-container\n")
    assert "relaunch-in-container" in env.ok("launch", "-y", "-c", "ctr-a", str(g), timeout=120).stdout
    env.ok("down", "-y", "ctr-a", timeout=120)
    assert containers_of("ctr-a") == []


def test_stop_start_and_agent_kill9_find_the_container_again(env: Env, tmp_path: Path) -> None:
    yaml = f"resources:\n  image_id: docker:{fc.PY_IMAGE}\nsetup: touch /persist\nrun: echo first\n"
    launch(env, tmp_path, "ctr-b", yaml)
    env.ok("stop", "-y", "ctr-b", timeout=120)
    assert any("exited" in c or "stopped" in c for c in containers_of("ctr-b")), containers_of("ctr-b")
    env.ok("start", "-y", "ctr-b", timeout=180)
    f = write(tmp_path / "ex.yaml", "run: test -f /persist && echo still-there\n")
    r = cli("exec", "ctr-b", str(f), timeout=120)
    assert "still-there" in r.stdout, r.stdout + r.stderr
    # kill -9 the agent (it runs in the container, in the node's PID namespace)
    pids = env.agent_pids("ctr-b")
    assert pids
    for p in pids:
        os.kill(p, signal.SIGKILL)
    time.sleep(0.5)
    env.ok("status", "-r", timeout=120)
    r = cli("exec", "ctr-b", str(f), timeout=120)
    assert r.returncode == 0 and "still-there" in r.stdout, r.stdout + r.stderr
    assert len(containers_of("ctr-b")) == 1
    # kill -9 of the daemon: a new one finds the cluster, its container and agent again
    env.kill9_daemon()
    env.start_daemon()
    r = cli("exec", "ctr-b", str(f), timeout=120)
    assert r.returncode == 0 and "still-there" in r.stdout, r.stdout + r.stderr
    assert len(containers_of("ctr-b")) == 1
    env.ok("down", "-y", "ctr-b", timeout=120)
    assert containers_of("ctr-b") == []


def test_autostop_stops_then_down_removes_the_container(env: Env, tmp_path: Path) -> None:
    import skyd.sdk as sdk
    from tests.support.pipeline import wait_for

    launch(env, tmp_path, "ctr-auto", f"resources:\n  image_id: docker:{fc.PY_IMAGE}\nrun: echo a\n")
    rid = sdk.submit("autostop", {"clusters": ["ctr-auto"], "idle_minutes": 0.05})
    sdk.get_result(rid)
    # the agent, inside the container, stops itself after 3 s idle; the daemon sees it
    wait_for(lambda: (env.status("ctr-auto") or {}).get("status") == "STOPPED", timeout=30, interval=0.3)
    assert env.agent_pids("ctr-auto") == []
    env.ok("start", "ctr-auto", "-y", timeout=180)
    rid = sdk.submit("autostop", {"clusters": ["ctr-auto"], "idle_minutes": 0.05, "down": True})
    sdk.get_result(rid)
    wait_for(lambda: env.status("ctr-auto") is None, timeout=30, interval=0.3)
    assert containers_of("ctr-auto") == []
    assert env.agent_pids("ctr-auto") == []


def test_managed_job_runs_in_a_container_that_goes_with_its_cluster(env: Env, tmp_path: Path) -> None:
    import json

    from skyd import sdk
    from tests.support.pipeline import wait_for

    f = write(tmp_path / "mj.yaml", f"name: ctr-mj\nresources:\n  image_id: docker:{fc.PY_IMAGE}\n"
                                    "run: test -f /run/.containerenv && echo managed-in-container\n")
    r = cli("jobs", "launch", "-d", "-o", "json", str(f), timeout=120)
    assert r.returncode == 0, r.stderr
    jid = int(json.loads(r.stdout)["job_id"])
    wait_for(lambda: sdk.get(f"/v1/jobs/{jid}")["status"] in ("SUCCEEDED", "FAILED", "FAILED_SETUP",
                                                             "FAILED_PRECHECKS", "CANCELLED"),
             timeout=180, interval=0.5)
    assert sdk.get(f"/v1/jobs/{jid}")["status"] == "SUCCEEDED"
    logs = cli("jobs", "logs", str(jid), "--no-follow", timeout=60)
    assert "managed-in-container" in logs.stdout, logs.stdout + logs.stderr
    wait_for(lambda: fc.bound_under(env.home) == [], timeout=60, interval=0.5)  # gone with the cluster


def test_two_nodes_each_run_in_their_own_container(env: Env, tmp_path: Path) -> None:
    yaml = (f"num_nodes: 2\nresources:\n  image_id: docker:{fc.PY_IMAGE}\n"
            "run: test -f /run/.containerenv && echo rank-$SKYPILOT_NODE_RANK-of-$SKYPILOT_NUM_NODES-in\n")
    out = launch(env, tmp_path, "ctr-m", yaml)
    assert "rank-0-of-2-in" in out and "rank-1-of-2-in" in out, out
    assert sorted(c.split()[1] for c in containers_of("ctr-m")) == ["running", "running"]
    env.ok("down", "-y", "ctr-m", timeout=120)
    assert containers_of("ctr-m") == []


@pytest.mark.anyio
async def test_leak_pass_removes_a_half_made_clusters_containers(tmp_path: Path) -> None:
    """A daemon killed after the container started but before the handle was saved: the
    partial handle's `forget` finds the container by its cluster-tag label."""
    from skyd.clouds.base import PartialHandle
    from skyd.clouds.local import LocalProvisioner
    from skyd.transports import container_runtime as crt
    from skyd.transports.local import LocalTransport

    root = tmp_path / "local"
    prov = LocalProvisioner(root)
    nd = prov.node_dir("ctr-leak", 0)
    nd.mkdir(parents=True)
    tag = f"ctr-leak-{os.getpid()}"
    spec = crt.ContainerRequest(image=fc.PY_IMAGE, cluster_tag=tag).spec(rank=0, node_dir=str(nd), home=str(nd))
    await crt.ensure(LocalTransport(nd), spec, lambda _m: None)
    assert containers_of(f"ctr-leak-{os.getpid()}") != []
    await prov.forget(PartialHandle("ctr-leak", "local", "local", None, tag))
    assert containers_of(f"ctr-leak-{os.getpid()}") == []
    assert not nd.exists()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(("image", "words"), [
    (fc.BB_IMAGE, "has no python3"),
    ("localhost/skyd-no-such-image:9", "cannot be reached"),  # nothing listens on :80
])
def test_bad_image_fails_before_setup_and_leaves_nothing(env: Env, tmp_path: Path, image: str,
                                                         words: str) -> None:
    yaml = f"resources:\n  image_id: docker:{image}\nsetup: echo SETUP-RAN\nrun: echo RUN-RAN\n"
    out = launch(env, tmp_path, "ctr-bad", yaml, rc=4)
    assert words in out and image in out, out
    assert "SETUP-RAN" not in out and "Traceback" not in out
    assert containers_of("ctr-bad") == []
    assert env.status("ctr-bad") is None


def test_empty_docker_image_is_bad_input(env: Env, tmp_path: Path) -> None:
    f = write(tmp_path / "t.yaml", "run: echo hi\n")
    r = cli("launch", "-y", "-c", "ctr-e", str(f), "--image-id", "docker:", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "image_id" in r.stderr and "needs an image name" in r.stderr


@pytest.mark.anyio
async def test_a_stopped_container_is_started_again_by_the_next_command(tmp_path: Path) -> None:
    """A node rebooted (or someone ran `podman stop`): the container transport starts it
    again and runs the command, instead of failing every agent operation."""
    from skyd.transports import container_runtime as crt
    from skyd.transports.container import ContainerTransport
    from skyd.transports.local import LocalTransport

    nd = tmp_path / "node"
    nd.mkdir()
    tag = f"ctr-restart-{os.getpid()}"
    spec = crt.ContainerRequest(image=fc.PY_IMAGE, cluster_tag=tag).spec(rank=0, node_dir=str(nd), home=str(nd))
    t = LocalTransport(nd)
    await crt.ensure(t, spec, lambda _m: None)
    try:
        fc.podman("stop", "-t", "1", spec.name)
        assert containers_of(tag) == [f"{spec.name} exited"]
        r = await ContainerTransport(t, spec).run("echo back; test -f /run/.containerenv && echo inside")
        assert r.ok and r.stdout.split() == ["back", "inside"], r
        assert containers_of(tag) == [f"{spec.name} running"]
    finally:
        await crt.remove(t, spec)
    assert containers_of(tag) == []
