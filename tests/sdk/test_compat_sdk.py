"""SkyPilot's SDK surface (`import skyd.sky as sky`): scripts written for SkyPilot run with
one changed import. Cases follow SkyPilot's SDK docs and examples (Task/Resources
construction, launch + stream_and_get, status/queue/tail_logs, jobs, async variants)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import skyd.sky as sky

SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)


def test_task_and_resources_build_skypilots_yaml(tmp_path: Path) -> None:
    # From SkyPilot's docs: "Python SDK" quickstart
    task = sky.Task(name="hello", setup="echo setup", run="echo hi", envs={"A": "1"}, workdir=".")
    task.set_resources(sky.Resources(cloud="aws", region="us-east-1", accelerators="A100:8",
                                     use_spot=True, disk_size=256))
    task.update_envs({"B": "2"})
    task.set_file_mounts({"/data": "./data"})
    cfg = task.to_yaml_config()
    assert cfg["resources"] == {"infra": "aws/us-east-1", "accelerators": "A100:8",
                                "use_spot": True, "disk_size": 256}
    assert cfg["envs"] == {"A": "1", "B": "2"} and cfg["file_mounts"] == {"/data": "./data"}
    r = next(iter(task.resources))
    assert r.cloud == "aws" and r.use_spot and r.copy(use_spot=False).use_spot is False
    # a set of Resources is any_of; a list is ordered
    task.set_resources({sky.Resources(accelerators="H100:8"), sky.Resources(accelerators="A100:8")})
    assert len(task.to_yaml_config()["resources"]["any_of"]) == 2
    task.set_resources([sky.Resources(infra="gcp"), sky.Resources(infra="aws")])
    assert [x["infra"] for x in task.to_yaml_config()["resources"]["ordered"]] == ["gcp", "aws"]
    # older SkyPilot docs: cloud objects, status enums
    r2 = sky.Resources(cloud=sky.AWS(), accelerators="V100")
    assert r2.to_yaml_config() == {"infra": "aws", "accelerators": "V100"}
    assert {"status": "UP"}["status"] == sky.ClusterStatus.UP
    f = tmp_path / "t.yaml"
    f.write_text("name: fromfile\nresources:\n  cpus: 2+\nrun: echo x\n")
    t2 = sky.Task.from_yaml(str(f))
    assert t2.name == "fromfile" and t2.base_dir == str(tmp_path)
    assert sky.Task.from_yaml_config({"run": "x"}, env_overrides={"E": "v"}).envs == {"E": "v"}
    with sky.Dag() as dag:
        a = sky.Task(name="a", run="echo a")
        b = sky.Task(name="b", run="echo b")
        a >> b
    assert [t.name for t in dag.tasks] == ["a", "b"]


def test_wrong_arguments_name_the_argument() -> None:
    with pytest.raises(TypeError, match="'gpus'"):
        sky.Resources(gpus="A100")  # SkyPilot's name is accelerators
    with pytest.raises(TypeError, match="'clustr_name'"):
        sky.launch(sky.Task(run="x"), clustr_name="c")
    with pytest.raises(TypeError, match="idle_minutes"):
        sky.autostop("c", "10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cluster_names"):
        sky.status(cluster_names=[1, 2])
    with pytest.raises(TypeError, match="sky.Task"):
        sky.launch(42)
    with pytest.raises(TypeError, match="set_resources"):
        sky.Task(run="x").set_resources([object()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="'service_nam'"):
        sky.serve.up(sky.Task(run="x"), service_name="s", service_nam="y")


def test_a_skypilot_script_runs_against_skyd(daemon: Any, tmp_path: Path) -> None:
    task = sky.Task(name="sdk", setup="echo setting-up", run="echo hello-from-sdk; echo $GREETING",
                    envs={"GREETING": "hola"})
    task.set_resources(sky.Resources(infra="local", cpus="1+"))
    out = io.StringIO()
    job_id, handle = sky.stream_and_get(sky.launch(task, cluster_name="sdk"), output_stream=out)
    assert job_id == 1 and handle["cluster"] == "sdk"
    logs = io.StringIO()
    assert sky.tail_logs("sdk", job_id, follow=True, output_stream=logs) == 0
    assert "hello-from-sdk" in logs.getvalue() and "hola" in logs.getvalue()
    records = sky.get(sky.status())
    assert [r["name"] for r in records] == ["sdk"] and records[0]["status"] == "UP"
    assert sky.get(sky.status(cluster_names=["nope"])) == []
    job2, _ = sky.get(sky.exec(sky.Task(run="echo second"), cluster_name="sdk"))
    assert job2 == 2
    jobs = sky.get(sky.queue("sdk"))
    assert {int(j["job_id"]) for j in jobs} == {1, 2}
    sky.get(sky.autostop("sdk", 30))
    assert sky.get(sky.status("sdk"))[0]["autostop"] == 30
    sky.get(sky.autostop("sdk", -1))
    sky.get(sky.down("sdk"))
    assert sky.get(sky.status()) == []


def test_managed_jobs_and_async_variants(daemon: Any) -> None:
    import anyio

    rid = sky.jobs.launch(sky.Task(name="mj", run="echo managed-sdk").set_resources(
        sky.Resources(infra="local")), name="mj")
    ids, _ = sky.get(rid)
    assert ids and isinstance(ids[0], int)
    out = io.StringIO()
    assert sky.jobs.tail_logs(job_id=ids[0], follow=True, output_stream=out) == 0
    assert "managed-sdk" in out.getvalue()
    rows = sky.get(sky.jobs.queue())
    assert any(r.get("name") == "mj" for r in rows)

    async def main() -> Any:
        rid = await sky.launch_async(sky.Task(run="echo async-ok").set_resources(
            sky.Resources(infra="local")), cluster_name="asy")
        return await sky.aio.get(rid)

    job_id, handle = anyio.run(main)
    assert handle["cluster"] == "asy" and job_id == 1


def test_serve_up_status_down(daemon: Any, tmp_path: Path) -> None:
    import sys

    from tests.cli.test_compat_cli import REPLICA

    app = tmp_path / "app.py"
    app.write_text(REPLICA)
    task = sky.Task(name="sdksvc", run=f"exec {sys.executable} {app}")
    task.set_service({"readiness_probe": {"path": "/health", "initial_delay_seconds": 60},
                      "replicas": 1})
    task.set_resources(sky.Resources(infra="local"))
    name, endpoint = sky.get(sky.serve.up(task, service_name="sdksvc"))
    assert name == "sdksvc" and endpoint.startswith("http://127.0.0.1:")
    rows = sky.get(sky.serve.status("sdksvc"))
    assert [r["name"] for r in rows] == ["sdksvc"]
    assert sky.get(sky.serve.down("sdksvc")) is None
    assert sky.get(sky.serve.status()) == []
