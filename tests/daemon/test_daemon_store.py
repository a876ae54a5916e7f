"""The SQLite store: migrations, WAL, transactions (in-process)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from skyd.daemon.schema import CORE_MIGRATIONS as MIGRATIONS
from skyd.daemon.store import Store
from skyd.jobs import schema as _jobs_schema  # noqa: F401 - the features' tables
from skyd.pipeline import schema as _pipeline_schema  # noqa: F401
from skyd.serve import schema as _serve_schema  # noqa: F401

TABLES = {"requests", "clusters", "cluster_history", "cluster_jobs", "managed_jobs",
          "managed_job_attempts", "services", "replicas", "kv"}


@pytest.mark.anyio
async def test_migrations_create_tables_in_wal(tmp_path: Path) -> None:
    st = Store(tmp_path / "state.db")
    await st.open()
    try:
        rows = await st.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
        assert TABLES <= {r["name"] for r in rows}
        assert await st.user_version() == len(MIGRATIONS)
        mode = await st.fetchone("PRAGMA journal_mode")
        assert mode is not None and list(mode.values())[0] == "wal"
    finally:
        await st.close()
    # Reopening does not re-run migrations, and the file closed cleanly (no WAL left).
    assert not (tmp_path / "state.db-wal").exists()
    st2 = Store(tmp_path / "state.db")
    await st2.open()
    assert await st2.user_version() == len(MIGRATIONS)
    await st2.close()


@pytest.mark.anyio
async def test_tx_commits_or_rolls_back(tmp_path: Path) -> None:
    st = Store(tmp_path / "state.db")
    await st.open()
    try:
        gen = st.generation
        async with st.tx() as db:
            await db.execute("INSERT INTO kv(key, value) VALUES('a', '1')")
        assert st.generation == gen + 1
        with pytest.raises(RuntimeError):
            async with st.tx() as db:
                await db.execute("INSERT INTO kv(key, value) VALUES('b', '2')")
                raise RuntimeError("boom")
        rows = await st.fetchall("SELECT key FROM kv ORDER BY key")
        assert [r["key"] for r in rows] == ["a"]
        await st.kv_set("x", {"n": [1, 2]})
        assert await st.kv_get("x") == {"n": [1, 2]}
        await st.execute(
            "INSERT INTO clusters(name, status, accelerators) VALUES(?, ?, ?)",
            ("c1", "UP", '{"H100": 8}'),
        )
        row = await st.fetchone("SELECT * FROM clusters", json_cols=("accelerators",))
        assert row is not None and row["accelerators"] == {"H100": 8}
    finally:
        await st.close()


@pytest.mark.anyio
async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "state.db"
    con = sqlite3.connect(p)
    con.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    con.close()
    st = Store(p)
    with pytest.raises(RuntimeError, match="newer than this skyd"):
        await st.open()
    await st.close()


@pytest.mark.anyio
async def test_a_write_cancelled_at_any_point_leaves_the_store_writable(tmp_path: Path) -> None:
    """A request cancelled right after it was submitted (its first write still on
    aiosqlite's thread) must not leave the writer connection inside a transaction: every
    later write, including the one that records the cancellation, has to succeed."""
    import anyio

    st = Store(tmp_path / "state.db")
    await st.open()
    try:
        for k in range(40):  # cancel after k scheduler turns: before, during and after BEGIN
            async with anyio.create_task_group() as tg:
                async def write(i: int = k) -> None:
                    await st.execute("INSERT INTO kv(key, value) VALUES(?, ?)", (f"c{i}", "x"))
                tg.start_soon(write)
                for _ in range(k):
                    await anyio.sleep(0)
                tg.cancel_scope.cancel()
            await st.execute("INSERT INTO kv(key, value) VALUES(?, ?)", (f"after{k}", "y"))
        rows = await st.fetchall("SELECT key FROM kv WHERE key LIKE 'after%'")
        assert len(rows) == 40
    finally:
        await st.close()


@pytest.mark.anyio
async def test_a_stale_queue_snapshot_never_moves_a_mirrored_job_back(tmp_path: Path) -> None:
    """The refresher reads a cluster's queue, then saves it; a `queue` read in between may
    already have saved the job's end. The earlier snapshot must not undo it."""
    from skyd.pipeline import clusters_db as cdb

    st = Store(tmp_path / "state.db")
    await st.open()
    try:
        running = {"job_id": 2, "status": "RUNNING", "started_at": 1.0, "ended_at": None}
        ended = {"job_id": 2, "status": "SUCCEEDED", "started_at": 1.0, "ended_at": 2.0,
                 "exit_code": 0}
        await cdb.upsert_jobs(st, "c", [running])
        await cdb.upsert_jobs(st, "c", [ended])
        await cdb.upsert_jobs(st, "c", [running])  # the stale snapshot, saved last
        row = await st.fetchone("SELECT status, ended_at, exit_code FROM cluster_jobs"
                                " WHERE cluster = 'c' AND job_id = 2")
        assert row == {"status": "SUCCEEDED", "ended_at": 2.0, "exit_code": 0}
        await cdb.upsert_jobs(st, "c", [{**ended, "status": "FAILED", "exit_code": 1}])
        row = await st.fetchone("SELECT status FROM cluster_jobs WHERE job_id = 2")
        assert row == {"status": "FAILED"}  # a terminal row still takes a terminal update
    finally:
        await st.close()
