"""Requests end to end against a real daemon subprocess: concurrency, cancel, events,
prefixes, validation, limits, OpenAPI, watch. One daemon serves the whole module: each test
looks only at the requests it made."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from skyd.errors import InvalidSpecError, NotFoundError, SkydError
from skyd.sdk.aio import AsyncClient
from skyd.sdk.transport import Client
from tests.support.pipeline import Env

SHARED_DAEMON_ENV: dict[str, str] = {}  # `shared`: one daemon for the module (tests/support/plugin.py)


@pytest.mark.anyio
async def test_100_concurrent_requests_all_complete(shared: Env) -> None:
    async with AsyncClient(autostart=False) as c:
        ids: list[str] = []

        async def one() -> None:
            ids.append(await c.submit("sleep", {"seconds": 0.3, "log_every": 0.1}))

        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(one)
        assert len(set(ids)) == 100
        results: dict[str, object] = {}

        async def wait(rid: str) -> None:
            results[rid] = await c.wait(rid)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for rid in ids:
                    tg.start_soon(wait, rid)
        assert all(isinstance(r, dict) and r["slept"] >= 0.3 for r in results.values())
        rows = [r for r in await c.requests_ls(limit=1000) if r["id"] in set(ids)]
        assert sorted(r["id"] for r in rows) == sorted(ids)
        assert {r["status"] for r in rows} == {"SUCCEEDED"}


def test_cancel_ends_cancelled(shared: Env) -> None:
    with Client(autostart=False) as c:
        rid = c.submit("sleep", {"seconds": 60})
        # wait until it runs
        for ev in c.events(rid):
            if ev["type"] == "log":
                break
        t0 = time.monotonic()
        out = c.delete(f"/v1/requests/{rid}")
        assert out == {"request_id": rid, "status": "CANCELLED", "cancelled": True}
        assert time.monotonic() - t0 < 3
        row = c.get(f"/v1/requests/{rid}")
        assert row["status"] == "CANCELLED" and row["error"]["type"] == "CancelledError"
        last = list(c.events(rid))[-1]
        assert last["type"] == "error" and last["status"] == "CANCELLED"
        # Cancelling a finished request says so and changes nothing.
        again = c.delete(f"/v1/requests/{rid[:5]}")
        assert again["cancelled"] is False and again["status"] == "CANCELLED"


def test_events_replay_and_follow(shared: Env) -> None:
    with Client(autostart=False) as c:
        rid = c.submit("sleep", {"seconds": 0.5, "log_every": 0.1})
        live = list(c.events(rid, follow=True))
        kinds = [e["type"] for e in live]
        assert kinds[0] == "status" and kinds[-1] == "result"
        assert kinds.count("log") == 5
        assert [e["seq"] for e in live] == list(range(1, len(live) + 1))
        assert live[-1]["result"]["slept"] >= 0.5
        # Replay after the end gives the same events; attaching mid-way too.
        assert list(c.events(rid, follow=False)) == live
        rid2 = c.submit("sleep", {"seconds": 0.4, "log_every": 0.1})
        time.sleep(0.25)
        partial = list(c.events(rid2, follow=False))
        assert partial and partial[-1]["type"] != "result"
        full = list(c.events(rid2, follow=True))
        assert full[: len(partial)] == partial and full[-1]["type"] == "result"
        # The log file is ndjson, one event per line.
        lines = (shared.home / "logs" / "requests" / f"{rid}.log").read_text().splitlines()
        assert [json.loads(x) for x in lines] == live


def test_failed_request_carries_error(shared: Env) -> None:
    with Client(autostart=False) as c:
        rid = c.submit("sleep", {"seconds": 0, "fail": "broken on purpose"})
        evs = list(c.events(rid))
        assert evs[-1]["type"] == "error"
        assert evs[-1]["error"]["type"] == "InvalidSpecError"
        row = c.get(f"/v1/requests/{rid}")
        assert row["status"] == "FAILED"
        assert "broken on purpose" in row["error"]["message"]


def test_prefix_ids(shared: Env) -> None:
    with Client(autostart=False) as c:
        ids = [c.submit("sleep", {"seconds": 0}) for _ in range(17)]
        assert all(len(i) == 8 for i in ids)
        firsts: dict[str, list[str]] = {}
        for i in ids:
            firsts.setdefault(i[0], []).append(i)
        shared = next(p for p, v in firsts.items() if len(v) > 1)  # pigeonhole: 17 > 16
        with pytest.raises(SkydError, match="ambiguous"):
            c.get(f"/v1/requests/{shared}")
        unique = ids[0][:7]
        assert c.get(f"/v1/requests/{unique}")["id"] == ids[0]
        with pytest.raises(NotFoundError):
            c.get("/v1/requests/ffffffff0")
        with pytest.raises(NotFoundError):
            c.get("/v1/requests/not-hex")


def test_bad_bodies_and_limits(shared: Env) -> None:
    with Client(autostart=False) as c:
        with pytest.raises(InvalidSpecError, match="seconds") as ei:
            c.submit("sleep", {"seconds": "soon"})
        assert ei.value.exit_code == 2
        with pytest.raises(InvalidSpecError):
            c.submit("sleep", {"seconds": 1, "bogus": 1})
        with pytest.raises(NotFoundError, match="unknown verb"):
            c.submit("no.such.verb", {})
        with pytest.raises(SkydError, match="(?i)too large"):
            c.post("/v1/requests/sleep", {"pad": "x" * (17 * 1024 * 1024)})
        assert c.get("/v1/requests", {"status": "PENDING"}) == []


def test_openapi_and_health(shared: Env) -> None:
    with Client(autostart=False) as c:
        doc = c.get("/v1/openapi.json")
        assert doc["openapi"].startswith("3.")
        assert "/v1/requests/sleep" in doc["paths"]
        body = doc["paths"]["/v1/requests/sleep"]["post"]["requestBody"]
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert "seconds" in doc["components"]["schemas"][ref]["properties"]
        assert "post" in doc["paths"]["/v1/validate"]
        h = c.get("/v1/health")
        assert h["status"] == "ok" and h["pid"] == shared.daemon.pid  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_watch_streams_request_state_changes(shared: Env) -> None:
    async with AsyncClient(autostart=False) as c:
        seen: list[dict[str, object]] = []
        with anyio.fail_after(10):
            stream = c.stream_ndjson("/v1/watch", {"topics": "requests"})
            rid = None
            async for ev in stream:
                seen.append(ev)
                if ev["topic"] == "_hello":
                    rid = await c.submit("sleep", {"seconds": 0})
                elif isinstance(ev["data"], dict) and ev["data"].get("status") == "SUCCEEDED":
                    break
            await stream.aclose()  # type: ignore[attr-defined]
        statuses = [e["data"]["status"] for e in seen if e["topic"] == "requests"]  # type: ignore[index]
        assert statuses == ["RUNNING", "SUCCEEDED"]
        assert all(e["data"]["id"] == rid for e in seen if e["topic"] == "requests")  # type: ignore[index]


def test_status_cache_sees_every_write(shared: Env) -> None:
    import sqlite3

    with Client(autostart=False) as c:
        assert c.get("/v1/status") == []
        assert c.get("/v1/status") == []  # now cached
        con = sqlite3.connect(shared.home / "state.db")
        con.execute("INSERT INTO clusters(name, status) VALUES('ext', 'UP')")
        con.commit()
        assert [r["name"] for r in c.get("/v1/status")] == ["ext"]
        con.execute("UPDATE clusters SET status = 'STOPPED'")
        con.commit()
        con.close()
        assert c.get("/v1/status")[0]["status"] == "STOPPED"
        assert c.get("/v1/status", {"name": ["nope"]}) == []
