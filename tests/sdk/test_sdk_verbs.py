"""The SDK mirrors the CLI's verbs: a script drives a cluster end to end without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd import sdk
from skyd.errors import InvalidSpecError, NotFoundError
from tests.support.daemon import running_daemon


def test_sdk_launch_exec_queue_logs_down(skyd_home: Path, tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    (tmp_path / "data.txt").write_text("payload\n")
    task.write_text("name: sdk-task\nworkdir: .\nrun: cat data.txt; echo rank $SKYPILOT_NODE_RANK\n")
    with running_daemon():
        try:
            res = sdk.get_result(sdk.launch(task, cluster_name="sdk", cpus="1+"))
            assert res["cluster"] == "sdk" and res["job_id"] == 1 and res["status"] == "SUCCEEDED"
            out = b"".join(sdk.tail_logs("sdk", 1, follow=False)).decode()
            assert "payload" in out and "rank 0" in out
            res2 = sdk.get_result(sdk.exec("sdk", command="exit 3"))
            assert res2["job_id"] == 2 and res2["status"] == "FAILED" and res2["exit_code"] == 3
            assert [j["job_id"] for j in sdk.queue("sdk")] == [2, 1]
            assert sdk.job_status("sdk", 2)["status"] == "FAILED"
            assert any(c["infra"] == "local" and c["launch"] for c in sdk.check())
            assert [c["name"] for c in sdk.cost_report()["clusters"]] == ["sdk"]
            plan = sdk.get_result(sdk.launch(command="echo x", dryrun=True))
            assert plan["tasks"][0]["chosen"]["cloud"] == "local"
            with pytest.raises(NotFoundError):
                sdk.get_result(sdk.exec("nope", command="true"))
            with pytest.raises(InvalidSpecError, match="unknown override"):
                sdk.launch(command="true", gpu="A100")  # a typo of `gpus`
        finally:
            sdk.get_result(sdk.down("sdk"))
        assert sdk.status() == []


@pytest.mark.anyio
async def test_async_sdk_launch_queue_down(skyd_home: Path) -> None:
    from skyd.sdk import aio

    with running_daemon():
        async with aio.AsyncClient() as c:
            res = await c.wait(await c.launch(command="echo async-hi", cluster_name="aio"))
            assert res["status"] == "SUCCEEDED"
            assert [j["job_id"] for j in await c.queue("aio")] == [1]
            await c.wait(await c.down("aio"))
            assert await c.status() == []
