"""One persistence layer: the core's migrations, the schema components features register,
databases made by older skyd versions upgrading in place, and the one transaction helper
(Store.write) the managed jobs use."""

from __future__ import annotations

import ast
import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from skyd.daemon import schema
from skyd.daemon.store import KV, Store
from skyd.jobs import schema as jobs_schema
from skyd.jobs.state import JobsDB
from skyd.pipeline import schema as pipeline_schema
from skyd.serve import schema as serve_schema
from skyd.storage import schema as storage_schema

DATA = Path(__file__).resolve().parents[1] / "data"
FEATURE_TABLES = {
    "jobs": {"managed_jobs", "managed_job_attempts", "job_pools", "job_pool_workers"},
    "pipeline": {"clusters", "cluster_history", "cluster_jobs", "cloud_checks"},
    "serve": {"services", "replicas", "serve_preemptions"},
    "storage": {"storage_buckets"},
}


def _legacy_db(path: Path, script: str, version: int) -> None:
    con = sqlite3.connect(path)
    con.executescript((DATA / script).read_text())
    con.execute(f"PRAGMA user_version = {version}")
    con.commit()
    con.close()


def _columns(path: Path, table: str) -> list[tuple[str, str, int, object]]:
    con = sqlite3.connect(path)
    try:
        return [(r[1], r[2].upper(), r[3], r[4]) for r in con.execute(f"PRAGMA table_info({table})")]
    finally:
        con.close()


def _components(path: Path) -> dict[str, int]:
    con = sqlite3.connect(path)
    try:
        return dict(con.execute("SELECT name, version FROM schema_components").fetchall())
    finally:
        con.close()


@pytest.mark.anyio
async def test_every_feature_registers_its_own_tables_and_the_core_owns_only_its_own() -> None:
    names = {c.name for c in schema.components()}
    assert {"jobs", "pipeline", "serve", "storage"} <= names
    core = " ".join(s for s in schema.CORE_MIGRATIONS if isinstance(s, str))
    for tables in FEATURE_TABLES.values():
        for t in tables:
            assert f"TABLE IF NOT EXISTS {t} " not in core, t
    for mod, comp in ((jobs_schema, "jobs"), (pipeline_schema, "pipeline"),
                      (serve_schema, "serve"), (storage_schema, "storage")):
        assert mod.COMPONENT.name == comp


@pytest.mark.anyio
async def test_the_core_imports_no_feature() -> None:
    """Dependencies point one way: skyd.daemon's store and schema name no feature."""
    root = Path(schema.__file__).parent
    for name in ("schema.py", "store.py"):
        tree = ast.parse((root / name).read_text())
        mods = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        bad = {m for m in mods if m.split(".")[:2] in (["skyd", "jobs"], ["skyd", "serve"],
                                                       ["skyd", "pipeline"], ["skyd", "storage"])}
        assert not bad, f"{name} imports {bad}"


@pytest.mark.anyio
async def test_a_fresh_database_has_the_same_columns_as_one_upgraded_from_v6(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    _legacy_db(old, "state_db_v6.sql", 6)
    for p in (fresh, old):
        st = Store(p)
        await st.open()
        await st.close()
    for tables in FEATURE_TABLES.values():
        for t in sorted(tables):
            assert {c[0] for c in _columns(fresh, t)} == {c[0] for c in _columns(old, t)}, t
    want = {c.name: len(c.steps) for c in schema.components()}
    assert _components(fresh) == want
    assert _components(old) == want
    assert len(schema.CORE_MIGRATIONS) == 8


@pytest.mark.anyio
async def test_a_v6_database_with_rows_opens_and_works(tmp_path: Path) -> None:
    """A state file written by the previous release: its rows stay readable and every
    feature keeps writing to it."""
    p = tmp_path / "state.db"
    _legacy_db(p, "state_db_v6.sql", 6)
    con = sqlite3.connect(p)
    now = time.time()
    con.execute("INSERT INTO clusters(name, status, accelerators, billed_s) VALUES"
                " ('c1', 'UP', '{\"H100\": 8}', 12.5)")
    con.execute("INSERT INTO managed_jobs(name, status, schedule_state, submitted_at, dag)"
                " VALUES ('mj', 'RUNNING', 'ALIVE', ?, '{}')", (now,))
    con.execute("INSERT INTO services(name, status, spec, created_at) VALUES"
                " ('svc', 'READY', '{}', ?)", (now,))
    con.execute("INSERT INTO job_pools(name, task, workers, status, created_at) VALUES"
                " ('p', '{}', 2, 'READY', ?)", (now,))
    con.execute("INSERT INTO kv(key, value) VALUES ('launch:x', '{\"job_id\": 4}')")
    con.commit()
    con.close()

    st = Store(p)
    await st.open()
    try:
        assert await st.user_version() == len(schema.CORE_MIGRATIONS)
        row = await st.fetchone("SELECT * FROM clusters WHERE name = 'c1'",
                                json_cols=("accelerators",))
        assert row is not None and row["accelerators"] == {"H100": 8} and row["billed_s"] == 12.5
        assert await st.kv_get("launch:x") == {"job_id": 4}
        db = JobsDB(st)
        jobs = await db.list_jobs()
        assert [j["name"] for j in jobs] == ["mj"]
        jid = await db.create_job(name="new", dag_json="{}", strategy=None, request_key="rk")
        assert await db.create_job(name="new", dag_json="{}", strategy=None,
                                   request_key="rk") == jid
        assert jid > int(jobs[0]["id"])
        assert await db.update_job(jid, {"status": "STARTING"}, only_active=False)
        got = await db.get_job(jid)
        assert got is not None and got["status"] == "STARTING"
        assert [r["name"] for r in await st.fetchall("SELECT name FROM job_pools")] == ["p"]
        svc = await st.fetchone("SELECT status, status_reason FROM services")
        assert svc == {"status": "READY", "status_reason": None}
    finally:
        await st.close()


@pytest.mark.anyio
async def test_a_v1_database_gains_the_columns_and_tables_added_since(tmp_path: Path) -> None:
    p = tmp_path / "state.db"
    _legacy_db(p, "state_db_v1.sql", 1)
    con = sqlite3.connect(p)
    con.execute("INSERT INTO replicas(service, replica_id, status) VALUES ('s', 1, 'READY')")
    con.commit()
    con.close()
    st = Store(p)
    await st.open()
    await st.close()
    cols = {c[0] for c in _columns(p, "clusters")}
    assert {"up_since", "billed_s", "tag"} <= cols
    assert {"retry_until_up", "exit_code", "last_cloud", "last_zone"} <= {
        c[0] for c in _columns(p, "managed_jobs")}
    assert "final_status" in {c[0] for c in _columns(p, "replicas")}
    con = sqlite3.connect(p)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert con.execute("SELECT status FROM replicas").fetchall() == [("READY",)]
    finally:
        con.close()
    for tables in FEATURE_TABLES.values():
        assert tables <= names


@pytest.mark.anyio
async def test_a_file_made_by_the_old_standalone_jobs_store_opens(tmp_path: Path) -> None:
    """The managed-jobs store used to create its tables itself (stricter columns, no
    user_version, no kv): such a file opens, and gains what the rest of skyd needs."""
    p = tmp_path / "jobs.db"
    con = sqlite3.connect(p)
    con.executescript(
        "CREATE TABLE managed_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT,"
        " status TEXT NOT NULL, schedule_state TEXT NOT NULL, priority INTEGER NOT NULL"
        " DEFAULT 0, submitted_at REAL NOT NULL, started_at REAL, ended_at REAL, recoveries"
        " INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0, failure_reason"
        " TEXT, dag TEXT NOT NULL, strategy TEXT, current_task INTEGER NOT NULL DEFAULT 0,"
        " cluster TEXT, cluster_job_id INTEGER, last_region TEXT, updated_at REAL);"
        "INSERT INTO managed_jobs(name, status, schedule_state, submitted_at, dag)"
        " VALUES ('old', 'SUCCEEDED', 'DONE', 1.0, '{}');"
    )
    con.close()
    db = await JobsDB.open(p)
    try:
        assert [j["name"] for j in await db.list_jobs()] == ["old"]
        jid = await db.create_job(name="n", dag_json="{}", strategy=None, request_key="k")
        assert (await db.get_job(jid) or {}).get("retry_until_up") == 0
        assert await db.store.kv_get("k") == jid
    finally:
        await db.close()


@pytest.mark.anyio
async def test_a_component_step_added_later_runs_once_and_a_newer_one_is_refused(
    tmp_path: Path,
) -> None:
    p = tmp_path / "state.db"
    name = "zz_test_component"
    try:
        schema.register(name, ["CREATE TABLE IF NOT EXISTS zz (a INTEGER);"])
        st = Store(p)
        await st.open()
        await st.close()
        calls: list[int] = []

        async def step2(db: object) -> None:
            calls.append(1)
            await schema.add_columns(db, "zz", {"b": "TEXT"})

        schema.register(name, ["CREATE TABLE IF NOT EXISTS zz (a INTEGER);", step2])
        for _ in range(2):
            st = Store(p)
            await st.open()
            await st.close()
        assert calls == [1]
        assert [c[0] for c in _columns(p, "zz")] == ["a", "b"]
        assert _components(p)[name] == 2
        schema.register(name, ["CREATE TABLE IF NOT EXISTS zz (a INTEGER);"])
        st = Store(p)
        with pytest.raises(RuntimeError, match=f"{name} schema version 2, newer than this skyd"):
            await st.open()
        await st.close()
    finally:
        schema._COMPONENTS.pop(name, None)  # noqa: SLF001 - undo the test's registration


@pytest.mark.anyio
async def test_two_stores_opening_one_new_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    p = tmp_path / "state.db"
    stores = [Store(p), Store(p)]
    async with anyio.create_task_group() as tg:
        for s in stores:
            tg.start_soon(s.open)
    for s in stores:
        await s.close()
    assert _components(p) == {c.name: len(c.steps) for c in schema.components()}


@pytest.mark.anyio
async def test_write_is_one_transaction_kept_whole_under_cancellation(tmp_path: Path) -> None:
    st = Store(tmp_path / "state.db")
    await st.open()
    try:
        gen = st.generation

        def two(conn: sqlite3.Connection) -> int:
            KV.put_sync(conn, "a", 1)
            KV.put_sync(conn, "b", {"x": 2})
            return 7

        assert await st.write(two) == 7
        assert st.generation == gen + 1
        assert (await st.kv_get("a"), await st.kv_get("b")) == (1, {"x": 2})

        def half(conn: sqlite3.Connection) -> None:
            KV.put_sync(conn, "c", 3)
            raise ValueError("boom")

        with pytest.raises(ValueError):
            await st.write(half)
        assert await st.kv_get("c") is None
        with anyio.CancelScope() as scope:  # a cancelled caller: the write still completes
            scope.cancel()
            await st.write(lambda conn: KV.put_sync(conn, "d", 4))
        assert await st.kv_get("d") == 4
        await st.kv_delete("d")
        assert await st.kv_get("d", "gone") == "gone"
    finally:
        await st.close()


def test_a_plain_connection_waits_out_another_writer_instead_of_failing(tmp_path: Path) -> None:
    """skyd.sqlite_tx.immediate (the allocation files' transactions): "database is locked"
    from a busy handler that gave up is retried until the other writer commits."""
    import threading

    from skyd.sqlite_tx import immediate

    p = tmp_path / "alloc.db"
    holder = sqlite3.connect(p, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (v INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    threading.Timer(0.5, lambda: holder.execute("COMMIT")).start()
    waiter = sqlite3.connect(p, isolation_level=None, timeout=0)  # gives up at once alone
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            waiter.execute("BEGIN IMMEDIATE")
        with immediate(waiter):
            waiter.execute("INSERT INTO t VALUES (2)")
        with pytest.raises(ValueError), immediate(waiter):
            waiter.execute("INSERT INTO t VALUES (3)")
            raise ValueError("rolled back")
        assert [r[0] for r in waiter.execute("SELECT v FROM t ORDER BY v")] == [1, 2]
        assert not waiter.in_transaction
    finally:
        waiter.close()
        holder.close()


@pytest.mark.anyio
async def test_a_row_just_committed_is_read_back_while_other_tasks_read(tmp_path: Path) -> None:
    """Read-after-write holds on the store's reader even under concurrent reads (a
    statement left open between hops used to pin an older snapshot: a managed job's
    controller then read no row for its just-created job and never started it)."""
    db = await JobsDB.open(tmp_path / "state.db")
    missed: list[int] = []
    try:
        async def reader() -> None:
            for _ in range(400):
                await db.fetchone("SELECT COUNT(*) AS n FROM managed_jobs")

        async def creator(i: int) -> None:
            jid = await db.create_job(name=f"j{i}", dag_json="{}", strategy=None)
            if await db.get_job(jid) is None:
                missed.append(jid)

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(reader)
            for i in range(200):
                tg.start_soon(creator, i)
    finally:
        await db.close()
    assert missed == []
