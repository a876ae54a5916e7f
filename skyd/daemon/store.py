"""The state store: one SQLite file (WAL) under SKYD_HOME, via aiosqlite.

The one persistence layer of skyd: every feature's tables live in this file and every
write goes through one of the two transaction forms below, serialised by an anyio lock on
the writer connection (``BEGIN IMMEDIATE`` ... ``COMMIT``, retried while another process
holds SQLite's write lock — skyd.sqlite_tx):

* :meth:`Store.tx` — an async block (``async with store.tx() as db``);
* :meth:`Store.write` — a synchronous function run in one hop on the writer's thread
  (many small statements per transition, as the managed-jobs controllers do).

Reads use a second connection, so they see committed data only and never wait behind a
long transaction. Inside a transaction, read through its connection to see your own
writes. The ``kv`` table is read and written through :class:`KV`'s statements only.
The schema is the core's migrations plus the components features register
(skyd.daemon.schema).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import anyio

from skyd.daemon import schema
from skyd.errors import SkydError
from skyd.sqlite_tx import BEGIN_RETRY_S, backoff, begin_immediate, is_locked

Row = dict[str, Any]
T = TypeVar("T")


def finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (inf, -inf, nan) replaced by None: JSON has no
    such numbers, and skyd never writes ``Infinity``/``NaN`` (clients would choke on them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_json(v) for v in obj]
    return obj


def dumps_finite(obj: Any) -> str:
    """Compact JSON; never ``Infinity``/``NaN`` (see finite_json)."""
    try:
        return json.dumps(obj, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        return json.dumps(finite_json(obj), separators=(",", ":"), default=str, allow_nan=False)


def dumps(obj: Any) -> str:
    """Compact JSON for TEXT columns (never ``Infinity``/``NaN``)."""
    return dumps_finite(obj)


def decode_json(row: Row | None, cols: Iterable[str]) -> Row | None:
    """Decode the JSON TEXT columns ``cols`` of ``row`` in place (bad JSON stays a string)."""
    if row is None:
        return None
    for c in cols:
        v = row.get(c)
        if isinstance(v, str) and v:
            try:
                row[c] = json.loads(v)
            except ValueError:
                pass
    return row


class Store:
    """Async access to the daemon's SQLite state."""

    def __init__(self, path: Path | str, *, write_lock: anyio.Lock | None = None) -> None:
        """``write_lock``: share another Store's lock on the same file (one writer at a
        time in this process: two connections never busy-wait on each other)."""
        self.path = Path(path)
        self._w: aiosqlite.Connection | None = None
        self._r: aiosqlite.Connection | None = None
        self._wlock = write_lock or anyio.Lock()
        #: bumped after every committed transaction; cheap cache invalidation for reads.
        self.generation = 0
        self._cache: dict[str, tuple[tuple[int, int, int, int], Any]] = {}

    # -- lifecycle -------------------------------------------------------------------
    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._w = await self._connect()
        await self._w.execute("PRAGMA journal_mode=WAL")
        await self.migrate()
        self._r = await self._connect()
        await self._r.execute("PRAGMA query_only=1")

    async def _connect(self) -> aiosqlite.Connection:
        db = await aiosqlite.connect(str(self.path), isolation_level=None)
        db.row_factory = sqlite3.Row
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA foreign_keys=ON")
        return db

    async def close(self) -> None:
        """Close both connections; the last close checkpoints and removes the WAL file."""
        with anyio.CancelScope(shield=True):
            async with self._wlock:
                for attr in ("_r", "_w"):
                    db = getattr(self, attr)
                    setattr(self, attr, None)
                    if db is not None:
                        await db.close()

    @property
    def write_lock(self) -> anyio.Lock:
        """The lock every write transaction on this database file takes in this process
        (another Store on the same file shares it: ``Store(path, write_lock=...)``)."""
        return self._wlock

    @property
    def is_open(self) -> bool:
        return self._w is not None

    async def user_version(self) -> int:
        row = await self._writer().execute_fetchall("PRAGMA user_version")
        return int(list(row)[0][0])

    async def migrate(self) -> None:
        """Apply the core's migrations past the file's ``user_version``, then each
        registered component's steps past its recorded version; each step in its own
        transaction with its version bump (re-checked inside it: two processes opening one
        file at once apply each step once)."""
        db = self._writer()
        core = schema.CORE_MIGRATIONS
        current = await self.user_version()
        if current > len(core):
            raise RuntimeError(
                f"state database {self.path} has schema version {current}, newer than this "
                f"skyd ({len(core)}); upgrade skyd"
            )
        for version in range(current, len(core)):
            async with self._step(db):
                if await self.user_version() > version:
                    continue
                await _apply(db, core[version])
                await db.execute(f"PRAGMA user_version = {version + 1}")
        for comp in schema.components():
            have = await self._component_version(db, comp.name)
            if have > len(comp.steps):
                raise RuntimeError(
                    f"state database {self.path} has {comp.name} schema version {have}, "
                    f"newer than this skyd ({len(comp.steps)}); upgrade skyd"
                )
            for version in range(have, len(comp.steps)):
                async with self._step(db):
                    if await self._component_version(db, comp.name) > version:
                        continue
                    await _apply(db, comp.steps[version])
                    await db.execute(
                        "INSERT INTO schema_components(name, version) VALUES(?, ?) ON CONFLICT"
                        "(name) DO UPDATE SET version = excluded.version",
                        (comp.name, version + 1),
                    )

    @asynccontextmanager
    async def _step(self, db: aiosqlite.Connection) -> AsyncIterator[None]:
        """One migration step's transaction (commit on exit, rollback on error)."""
        async with self._wlock:
            await _begin_immediate(db)
            try:
                yield
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await db.execute("ROLLBACK")
                raise
            with anyio.CancelScope(shield=True):
                await db.execute("COMMIT")

    @staticmethod
    async def _component_version(db: aiosqlite.Connection, name: str) -> int:
        cur = await db.execute("SELECT version FROM schema_components WHERE name = ?", (name,))
        row = await cur.fetchone()
        return int(row[0]) if row is not None else 0

    # -- writes ----------------------------------------------------------------------
    def _writer(self) -> aiosqlite.Connection:
        if self._w is None:
            raise RuntimeError("store is closed")
        return self._w

    @asynccontextmanager
    async def tx(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction: ``async with store.tx() as db: await db.execute(...)``.

        Commits on normal exit, rolls back on exception. The commit/rollback is shielded
        from cancellation so a cancelled request never leaves a transaction open.
        """
        async with self._wlock:
            db = self._writer()
            await _begin_immediate(db)
            try:
                yield db
            except BaseException as e:
                with anyio.CancelScope(shield=True):
                    if not _on_write_error(e) or db.in_transaction:
                        # (SQLite may have rolled a full-disk failure back by itself)
                        await db.execute("ROLLBACK")
                raise
            with anyio.CancelScope(shield=True):
                try:
                    await db.execute("COMMIT")
                except BaseException as e:
                    # A COMMIT that fails (a full disk) can leave the transaction open: every
                    # later write would fail with it. Roll it back; the caller sees the error.
                    with contextlib.suppress(sqlite3.Error):
                        if db.in_transaction:
                            await db.execute("ROLLBACK")
                    _on_write_error(e)
                    raise
                self.generation += 1

    async def execute(self, sql: str, args: Sequence[Any] | dict[str, Any] = ()) -> int:
        """One statement in its own transaction; returns lastrowid (or rowcount if none)."""
        async with self.tx() as db:
            cur = await db.execute(sql, args)
            return cur.lastrowid or cur.rowcount

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` as one write transaction in a single hop to the writer's thread
        (``fn`` is synchronous and runs where the sqlite3 connection lives). Shielded from
        cancellation as a whole: a transition is fully on disk or not at all, and the
        caller learns which."""
        db = self._writer()

        def run() -> T:
            raw: sqlite3.Connection = db._conn  # noqa: SLF001 - on its own thread, see above
            begin_immediate(raw)
            try:
                result = fn(raw)
            except BaseException as e:
                if not _on_write_error(e) or raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
            try:
                raw.execute("COMMIT")
            except BaseException as e:
                with contextlib.suppress(sqlite3.Error):
                    if raw.in_transaction:
                        raw.execute("ROLLBACK")
                _on_write_error(e)
                raise
            return result

        with anyio.CancelScope(shield=True):
            async with self._wlock:
                result = await db._execute(run)  # noqa: SLF001 - aiosqlite's own thread
                self.generation += 1
                return result
        raise AssertionError("unreachable")  # pragma: no cover - the scope never swallows

    # -- reads -----------------------------------------------------------------------
    def _reader(self) -> aiosqlite.Connection:
        if self._r is None:
            raise RuntimeError("store is closed")
        return self._r

    async def fetchall(
        self, sql: str, args: Sequence[Any] | dict[str, Any] = (), *, json_cols: Iterable[str] = ()
    ) -> list[Row]:
        rows = await self._reader().execute_fetchall(sql, args)
        out = [dict(r) for r in rows]
        cols = tuple(json_cols)
        if cols:
            for r in out:
                decode_json(r, cols)
        return out

    async def fetchone(
        self, sql: str, args: Sequence[Any] | dict[str, Any] = (), *, json_cols: Iterable[str] = ()
    ) -> Row | None:
        # One hop that runs the statement to its end: a statement left open between hops
        # would hold the reader's snapshot for every other task's read (a row committed
        # just before could then be missed: read-after-write must hold).
        rows = await self._reader().execute_fetchall(sql, args)
        r = next(iter(rows), None)
        return decode_json(dict(r), json_cols) if r is not None else None

    # -- cache -----------------------------------------------------------------------
    def change_token(self) -> tuple[int, int, int, int]:
        """Changes whenever the database may have changed: our own commits (generation)
        and any other process's (WAL/db file size and mtime). Two stat() calls."""
        try:
            w = os.stat(f"{self.path}-wal")
            wt, ws = w.st_mtime_ns, w.st_size
        except OSError:
            wt = ws = 0
        try:
            dt = os.stat(self.path).st_mtime_ns
        except OSError:
            dt = 0
        return (self.generation, wt, ws, dt)

    async def cached(self, key: str, build: Callable[[], Awaitable[T]]) -> T:
        """``await build()`` once per database change; reads answered from memory
        between changes (e.g. the status listing many clients poll)."""
        token = self.change_token()
        hit = self._cache.get(key)
        if hit is not None and hit[0] == token:
            return hit[1]  # type: ignore[no-any-return]
        value = await build()
        self._cache[key] = (token, value)
        return value

    # -- kv --------------------------------------------------------------------------
    async def kv_get(self, key: str, default: Any = None) -> Any:
        row = await self.fetchone(KV.GET, (key,))
        return KV.decode(row["value"]) if row else default

    async def kv_set(self, key: str, value: Any) -> None:
        await self.execute(KV.PUT, (key, dumps(value)))

    async def kv_delete(self, key: str) -> None:
        await self.execute(KV.DELETE, (key,))


class KV:
    """The ``kv`` table's statements (values are JSON text), for the Store's own methods and
    for code inside a transaction: ``await KV.get(db, key)`` in a ``tx()`` block,
    ``KV.get_sync(conn, key)`` in a ``write()`` function."""

    GET = "SELECT value FROM kv WHERE key = ?"
    PUT = ("INSERT INTO kv(key, value) VALUES(?, ?) "
           "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
    DELETE = "DELETE FROM kv WHERE key = ?"

    @staticmethod
    def decode(text: str | None) -> Any:
        return json.loads(text) if text is not None else None

    @classmethod
    async def get(cls, db: aiosqlite.Connection, key: str, default: Any = None) -> Any:
        cur = await db.execute(cls.GET, (key,))
        row = await cur.fetchone()
        return cls.decode(row[0]) if row is not None else default

    @classmethod
    async def put(cls, db: aiosqlite.Connection, key: str, value: Any) -> None:
        await db.execute(cls.PUT, (key, dumps(value)))

    @classmethod
    async def delete(cls, db: aiosqlite.Connection, key: str) -> None:
        await db.execute(cls.DELETE, (key,))

    @classmethod
    def get_sync(cls, conn: sqlite3.Connection, key: str, default: Any = None) -> Any:
        row = conn.execute(cls.GET, (key,)).fetchone()
        return cls.decode(row[0]) if row is not None else default

    @classmethod
    def put_sync(cls, conn: sqlite3.Connection, key: str, value: Any) -> None:
        conn.execute(cls.PUT, (key, dumps(value)))


def _on_write_error(exc: BaseException) -> bool:
    """A write that failed because the disk is full releases the disk reserve (room for the
    writes that end the failure; skyd.daemon.diskspace). True for such a failure."""
    if isinstance(exc, sqlite3.Error | OSError):
        from skyd.daemon import diskspace

        if diskspace.is_full(exc):
            diskspace.release()
            return True
    return False


def storage_error(exc: BaseException, db_path: Path | None = None) -> SkydError | None:
    """A SkydError naming the path and the fix for a write that failed because the disk is
    full or the state database (or its directory) is read-only; None for anything else."""
    import errno

    from skyd import paths

    db = Path(db_path) if db_path is not None else paths.db_path()
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError):
        if "disk is full" in text or ("disk i/o error" in text and _full(db)):
            return SkydError(f"disk full at {db}: cannot write the state database",
                             hint=f"free space on the filesystem holding {db.parent}, then retry")
        if "readonly" in text or "read-only" in text:
            return SkydError(f"state database is read-only: {db}",
                             hint=f"make {db} and its directory {db.parent} writable, then retry")
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        where = exc.filename or db.parent
        return SkydError(f"disk full at {where}: cannot write it",
                         hint="free space on that filesystem, then retry")
    if isinstance(exc, OSError) and exc.errno == errno.EROFS:
        where = exc.filename or db.parent
        return SkydError(f"read-only filesystem: cannot write {where}",
                         hint="remount it read-write or point SKYD_HOME elsewhere")
    return None


def _full(path: Path) -> bool:
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return st.f_bavail == 0


BUSY_TIMEOUT_MS = 5000


async def _begin_immediate(db: aiosqlite.Connection, budget: float = BEGIN_RETRY_S) -> None:
    """skyd.sqlite_tx.begin_immediate for the async connection: the same retry and backoff,
    sleeping on the event loop (cancellable between attempts)."""
    delays = backoff(budget, anyio.current_time)
    while True:
        try:
            await db.execute("BEGIN IMMEDIATE")
            return
        except anyio.get_cancelled_exc_class():
            # Cancelled while the BEGIN was queued or running on aiosqlite's thread: it may
            # still open the transaction after we stop waiting. Wait for it (the thread runs
            # statements in order) and roll back what it opened, or the connection would be
            # left inside a transaction and every later write would fail.
            with anyio.CancelScope(shield=True):
                await db.execute("SELECT 1")
                if db.in_transaction:
                    await db.execute("ROLLBACK")
            raise
        except sqlite3.OperationalError as e:
            delay = next(delays, None) if is_locked(e) else None
            if delay is None:
                raise
        await anyio.sleep(delay)


async def _apply(db: aiosqlite.Connection, step: schema.Migration) -> None:
    if isinstance(step, str):
        for stmt in schema.split_sql(step):
            await db.execute(stmt)
    else:
        await step(db)
