"""The Python SDK, sync and async, against a real daemon (auto-started by the SDK)."""

from __future__ import annotations

from pathlib import Path

import pytest

import skyd.sdk as sdk
from skyd.errors import InvalidSpecError, NotFoundError
from skyd.sdk import aio
from tests.support.daemon import stop_autostarted


@pytest.fixture
def fresh_sdk(skyd_home: Path):  # type: ignore[no-untyped-def]
    sdk._client = None
    yield
    if sdk._client is not None:
        sdk._client.close()
    sdk._client = None
    stop_autostarted()


def test_sync_sdk_round_trip(fresh_sdk: None, skyd_home: Path) -> None:
    assert sdk.status() == []  # auto-starts the daemon
    assert sdk.health()["status"] == "ok"
    rid = sdk.submit("sleep", {"seconds": 0.3, "log_every": 0.1})
    gen = sdk.stream_and_get(rid)
    events = []
    try:
        while True:
            events.append(next(gen))
    except StopIteration as stop:
        result = stop.value
    assert result["slept"] >= 0.3
    assert [e["type"] for e in events].count("log") == 3
    assert sdk.get_result(rid) == result  # replay
    assert sdk.requests_get(rid[:4])["status"] == "SUCCEEDED"
    assert [r["id"] for r in sdk.requests_ls(status="SUCCEEDED")] == [rid]
    bad = sdk.submit("sleep", {"seconds": 0, "fail": "nope"})
    with pytest.raises(InvalidSpecError, match="nope"):
        sdk.get_result(bad)
    long = sdk.submit("sleep", {"seconds": 60})
    assert sdk.requests_cancel(long)["status"] == "CANCELLED"
    with pytest.raises(NotFoundError):
        sdk.requests_get("abcdef12")


def test_sync_sdk_validate(fresh_sdk: None, tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text("name: v\nresources:\n  accelerators: MI300X:8\nrun: nvidia-smi\n")
    out = sdk.validate(path=y)
    assert out["dag"]["name"] == "v"
    assert any("NVIDIA" in w for w in out["warnings"])
    with pytest.raises(InvalidSpecError):
        sdk.validate("num_nodes: -3\nrun: x\n")


@pytest.mark.anyio
async def test_async_sdk_round_trip(fresh_sdk: None) -> None:
    async with aio.AsyncClient() as c:
        assert await c.status() == []  # auto-starts the daemon
        rid = await c.submit("sleep", {"seconds": 0.2, "log_every": 0.1})
        kinds = [ev["type"] async for ev in c.stream(rid)]
        assert kinds[0] == "status" and kinds[-1] == "result"
        assert (await c.wait(rid))["slept"] >= 0.2
        rows = await c.requests_ls()
        assert rows[0]["id"] == rid
        bad = await c.submit("sleep", {"seconds": 0, "fail": "bad"})
        with pytest.raises(InvalidSpecError):
            await c.wait(bad)
        long = await c.submit("sleep", {"seconds": 60})
        assert (await c.requests_cancel(long))["cancelled"] is True
        with pytest.raises(InvalidSpecError):
            await c.submit("sleep", {"seconds": -1})
    assert await aio.status() == []
    got = [ev async for ev in aio.stream_and_get(rid)]
    assert got[-1]["type"] == "result"
