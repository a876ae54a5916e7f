"""The request registry and executor: one task group + cancel scope per request."""

from __future__ import annotations

import json
import logging
import re
import secrets
import sqlite3
import time
import traceback
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import pydantic

from skyd import paths
from skyd.daemon import owners, request_config, request_secrets
from skyd.daemon.context import TERMINAL_EVENTS, RequestContext
from skyd.daemon.http import internal_error_dict
from skyd.daemon.registry import VERBS
from skyd.daemon.request_secrets import SecretAwareContext
from skyd.daemon.store import dumps, dumps_finite
from skyd.errors import InvalidSpecError, NotFoundError, SkydError

if TYPE_CHECKING:
    from skyd.daemon.host import Host

log = logging.getLogger("skyd.daemon.requests")

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = (
    "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
)
TERMINAL = (SUCCEEDED, FAILED, CANCELLED)
REQUEST_ID_HEADER = "X-Skyd-Request-Id"
CLIENT_ID_RE = re.compile(r"[0-9a-f]{8,32}")
LIST_COLUMNS = ("id, verb, status, created_at, started_at, finished_at, cluster_name, error, "
                "user")
MAX_READ_CHUNK = 1 << 20


class RequestIdTakenError(SkydError):
    """A client-chosen request id that another request already has (HTTP 409)."""

    http_status = 409


def validation_error(exc: pydantic.ValidationError, what: str) -> InvalidSpecError:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or what
    return InvalidSpecError(
        f"{first.get('msg', 'invalid value')}",
        field=loc,
        hint=f"fix the {what} body ({len(exc.errors())} error(s)); see GET /v1/openapi.json",
    )


async def run_check(check: Any, payload: dict[str, Any]) -> None:
    """A verb's submit-time check. Input too deep for the checker is the user's mistake."""
    try:
        await check(payload)
    except RecursionError:
        raise InvalidSpecError("the request nests too deeply", field="body",
                               hint="flatten the input") from None


async def _recheck(verb: Any, payload: Any) -> dict[str, Any] | None:
    """Before a restarted daemon resumes a request: its error dict if it fails the verb's
    check now (e.g. input accepted by an older daemon), else None."""
    if verb.check is None:
        return None
    try:
        await run_check(verb.check, payload if isinstance(payload, dict) else {})
    except SkydError as e:
        return e.to_dict()
    except Exception as e:  # noqa: BLE001 - a check that crashes refuses the resume too
        log.error("re-checking a request failed:\n%s", "".join(traceback.format_exception(e)))
        return internal_error_dict(e, str(paths.daemon_log()))
    return None


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup):
        leaves = exc.exceptions
        exc = next((e for e in leaves if isinstance(e, SkydError)), leaves[0])
    return exc


def clusters_of(payload: dict[str, Any]) -> str | None:
    """The cluster(s) a request is about, for `requests ls`: ``cluster_name``, or the
    ``clusters`` of stop/start/down/autostop (``all`` when -a)."""
    name = payload.get("cluster_name")
    if isinstance(name, str) and name:
        return name
    names = payload.get("clusters")
    if isinstance(names, list) and names:
        return ", ".join(str(n) for n in names)
    return "all" if payload.get("all") is True and "clusters" in payload else None


class RequestManager:
    def __init__(self, daemon: Host) -> None:
        self.daemon = daemon
        self.active: dict[str, RequestContext] = {}
        self.accepting = True

    # -- submit / run ----------------------------------------------------------------
    async def submit(self, verb_name: str, payload: Any, request_id: str | None = None) -> str:
        """Create and start a request; its id. ``request_id``: the id the client chose, so a
        client that lost the answer (the daemon died, the connection broke) can send the same
        request again and never run it twice: a row with that id and the same verb and
        payload is the answer (its id is returned, nothing new starts); a row with that id
        for anything else is RequestIdTakenError (409, the client picks another id)."""
        rid, _ = await self.submit_idempotent(verb_name, payload, request_id)
        return rid

    async def submit_idempotent(self, verb_name: str, payload: Any,
                                request_id: str | None = None) -> tuple[str, bool]:
        """:meth:`submit`, plus whether the request was created now (False: a resubmit)."""
        if request_id is not None and not CLIENT_ID_RE.fullmatch(request_id):
            raise InvalidSpecError(
                f"request id {request_id[:40]!r} must be 8 to 32 lowercase hex characters",
                field=REQUEST_ID_HEADER)
        if not self.accepting:
            from skyd.errors import DaemonUnavailableError

            raise DaemonUnavailableError("the daemon is shutting down", hint="retry in a moment")
        verb = VERBS.get(verb_name)
        if verb is None:
            raise NotFoundError(
                f"unknown verb {verb_name!r}", hint=f"known verbs: {', '.join(sorted(VERBS))}"
            )
        if payload is None:
            payload = {}
        if verb.body is not None:
            try:
                payload = verb.body.model_validate(payload).model_dump(mode="json")
            except pydantic.ValidationError as e:
                raise validation_error(e, verb_name) from None
        elif not isinstance(payload, dict):
            raise InvalidSpecError("the request body must be a JSON object", field="body")
        caller = owners.CALLER.get()  # another user's object: refused (403), no request row
        payload = await owners.check_mutation(self.daemon.store, caller, verb_name, payload)
        user = caller.name if caller is not None else owners.daemon_user()
        clean, held = await request_secrets.asplit(payload)  # secret values: a 0600 file
        cfg = await request_config.load_for(payload)  # a bad config file or key: 400, exit 2
        if verb.check is not None:
            try:
                with request_config.active(cfg):
                    await run_check(verb.check, payload)
            except SkydError as e:
                raise request_secrets.mask_error(e, held) from None
        if request_id is not None:
            if await self._same_request(request_id, verb_name, clean):
                return request_id, False
        now = time.time()
        pid = self.daemon.pid
        for _ in range(10):
            rid = request_id or secrets.token_hex(4)
            stored = await request_secrets.store(rid, clean, held)
            if stored is None:
                if request_id is not None:  # left by an attempt that died before its row
                    await request_secrets.discard(rid, held)
                    stored = await request_secrets.store(rid, clean, held)
                if stored is None:
                    continue
            try:
                await self.daemon.store.execute(
                    "INSERT INTO requests(id, verb, status, created_at, payload, stages, pid, "
                    "cluster_name, user) VALUES(?, ?, ?, ?, ?, '[]', ?, ?, ?)",
                    (rid, verb_name, PENDING, now, dumps(stored), pid, clusters_of(stored), user),
                )
                payload = stored
                break
            except sqlite3.IntegrityError:
                await request_secrets.discard(rid, held)
                if request_id is not None:  # the same id raced in: it is the answer, or taken
                    if await self._same_request(request_id, verb_name, clean):
                        return request_id, False
                continue
        else:  # pragma: no cover - 10 collisions of 32 random bits
            raise RuntimeError("could not allocate a request id")
        ctx = SecretAwareContext(rid, verb_name, payload, self.daemon, paths.request_log(rid))
        ctx.user = user
        self._start(ctx)
        return rid, True

    async def _same_request(self, rid: str, verb: str, clean: dict[str, Any]) -> bool:
        """True when request ``rid`` exists and is this request (verb and payload, secret
        values aside); RequestIdTakenError when it exists and is another; False if absent."""
        row = await self.daemon.store.fetchone(
            "SELECT verb, payload FROM requests WHERE id = ?", (rid,), json_cols=("payload",))
        if row is None:
            return False
        had = dict(row["payload"] or {})
        had.pop(request_secrets.SECRET_REF, None)
        if row["verb"] == verb and had == json.loads(dumps(clean)):
            log.info("request %s (%s) submitted again: answered with the existing one", rid, verb)
            return True
        raise RequestIdTakenError(
            f"request id {rid} is already used by another request",
            field=REQUEST_ID_HEADER, hint="send the request with a new id")

    def _start(self, ctx: RequestContext) -> None:
        self.active[ctx.request_id] = ctx
        self.daemon.tg.start_soon(self._run, ctx, name=f"request {ctx.request_id} {ctx.verb}")

    async def _run(self, ctx: RequestContext) -> None:
        store = self.daemon.store
        status, result, error = FAILED, None, None
        cancelled_exc = anyio.get_cancelled_exc_class()
        if ctx.user is not None:  # the rows this request makes are its submitter's
            owners.CALLER.set(owners.Caller(-1, ctx.user, False))
        try:
            with ctx.cancel_scope:
                await store.execute(
                    "UPDATE requests SET status = ?, started_at = COALESCE(started_at, ?), pid = ? "
                    "WHERE id = ?",
                    (RUNNING, time.time(), self.daemon.pid, ctx.request_id),
                )
                self.daemon.bus.publish("requests", {"id": ctx.request_id, "status": RUNNING})
                ctx.emit({"type": "status", "status": RUNNING, "resumed": ctx.resumed})
                verb = VERBS[ctx.verb]
                cfg = await request_config.load_for(ctx.payload)
                for line in request_config.warnings(cfg):
                    ctx.log(line)
                async with anyio.create_task_group() as tg:
                    ctx.tg = tg
                    with request_config.active(cfg):
                        result = await verb.handler(ctx, await request_secrets.attach(ctx, ctx.payload))
                status = SUCCEEDED
            if ctx.cancel_scope.cancel_called:
                status, result = CANCELLED, None
        except cancelled_exc as e:
            if self.daemon.stray_cancel():  # not the daemon stopping: this request crashed
                if ctx.cancel_scope.cancel_called:
                    status = CANCELLED
                else:
                    log.error("request %s (%s) ended by a stray cancellation:\n%s",
                              ctx.request_id, ctx.verb, request_secrets.redact(
                                  ctx, "".join(traceback.format_exception(e))))
                    error = internal_error_dict(e, str(paths.daemon_log()))
                with anyio.CancelScope(shield=True):
                    await self._finish(ctx, status, None, error)
                return
            # The root scope is being cancelled (daemon exit) without ours being cancelled.
            status = CANCELLED
            ctx.shutdown = True
            with anyio.CancelScope(shield=True):
                await self._finish(ctx, status, None, None)
            raise
        except BaseException as raw:  # noqa: BLE001 - a request must never kill the daemon
            exc = _unwrap(raw)
            if isinstance(exc, cancelled_exc) or ctx.cancel_scope.cancel_called:
                status = CANCELLED
            elif isinstance(exc, SkydError):
                error = exc.to_dict()
            else:
                log.error(
                    "request %s (%s) crashed:\n%s", ctx.request_id, ctx.verb,
                    request_secrets.redact(ctx, "".join(traceback.format_exception(exc))),
                )
                error = internal_error_dict(exc, str(paths.daemon_log()))
        with anyio.CancelScope(shield=True):
            await self._finish(ctx, status, result, error)

    async def _finish(
        self, ctx: RequestContext, status: str, result: Any, error: dict[str, Any] | None
    ) -> None:
        if ctx.finished:
            return
        ctx.finished = True
        if ctx.storage_error is not None and not ctx.shutdown:
            # Its state could not be written (a full disk): FAILED, saying where.
            status, result, error = FAILED, None, ctx.storage_error.to_dict()
        try:
            if status == CANCELLED and ctx.shutdown and VERBS[ctx.verb].resumable:
                # Leave it RUNNING: the next daemon resumes it.
                ctx.emit({"type": "status", "status": "INTERRUPTED", "reason": "daemon stopped"})
                return
            if status == CANCELLED:
                msg = "daemon stopped" if ctx.shutdown else "request cancelled"
                error = {"type": "CancelledError", "message": msg, "field": None,
                         "hint": None, "line": None, "exit_code": 130}
            if result is None and ctx.partial_result and status == SUCCEEDED:
                result = ctx.partial_result
            result, error = request_secrets.redact(ctx, result), request_secrets.redact(ctx, error)
            try:
                rj = dumps(result)
            except (TypeError, ValueError) as e:  # pragma: no cover - handler bug
                status, rj = FAILED, "null"
                error = internal_error_dict(e, str(paths.daemon_log()))
            if self.daemon.store.is_open:
                await self.daemon.store.execute(
                    "UPDATE requests SET status = ?, finished_at = ?, result = ?, error = ? "
                    "WHERE id = ?",
                    (status, time.time(), rj, dumps(error) if error else None, ctx.request_id),
                )
            if error is not None:
                ctx.emit({"type": "error", "status": status, "error": error})
            else:
                ctx.emit({"type": "result", "status": status, "result": result})
            self.daemon.bus.publish("requests", {"id": ctx.request_id, "status": status})
            await request_secrets.forget(ctx)
        except Exception:  # pragma: no cover
            log.exception("finishing request %s", ctx.request_id)
        finally:
            await ctx.close_log()
            self.active.pop(ctx.request_id, None)
            ctx.done.set()

    # -- cancel / shutdown -----------------------------------------------------------
    async def cancel(self, rid: str) -> dict[str, Any]:
        row = await self.get(rid)
        rid = row["id"]
        ctx = self.active.get(rid)
        if ctx is None:
            return {"request_id": rid, "status": row["status"], "cancelled": False}
        ctx.cancel_scope.cancel()
        with anyio.move_on_after(10):
            await ctx.done.wait()
        row = await self.get(rid)
        return {"request_id": rid, "status": row["status"], "cancelled": True}

    async def shutdown(self, grace: float) -> None:
        """Cancel every in-flight request and wait up to ``grace`` seconds for them."""
        self.accepting = False
        ctxs = list(self.active.values())
        for ctx in ctxs:
            ctx.shutdown = True
            ctx.cancel_scope.cancel()
        with anyio.move_on_after(grace):
            for ctx in ctxs:
                await ctx.done.wait()
        left = [c.request_id for c in ctxs if not c.done.is_set()]
        if left:
            log.warning("requests still unwinding after %.1fs: %s", grace, left)

    # -- reconcile -------------------------------------------------------------------
    async def reconcile(self) -> None:
        """Requests the previous daemon left PENDING/RUNNING: resume or fail them."""
        store = self.daemon.store
        rows = await store.fetchall(
            "SELECT id, verb, payload, stages, result, user FROM requests WHERE status IN (?, ?) "
            "ORDER BY created_at",
            (PENDING, RUNNING),
            json_cols=("payload", "stages", "result"),
        )
        for r in rows:
            verb = VERBS.get(r["verb"])
            refused = await _recheck(verb, r["payload"]) if verb is not None else None
            if refused is not None:
                await self._fail_stale(r["id"], r["verb"], refused)
                continue
            if verb is not None and verb.resumable:
                log.info("resuming request %s (%s)", r["id"], r["verb"])
                ctx = SecretAwareContext(
                    r["id"], r["verb"], r["payload"] or {}, self.daemon,
                    paths.request_log(r["id"]), resumed=True,
                )
                ctx.user = r.get("user")
                ctx._seq = await anyio.to_thread.run_sync(_count_lines, ctx.log_path)
                ctx._stages = r["stages"] or []
                if isinstance(r["result"], dict):
                    ctx._partial = r["result"]
                self._start(ctx)
                continue
            error = {"type": "SkydError", "message": "daemon restarted", "field": None,
                     "hint": "the daemon stopped while this request ran; run the command again",
                     "line": None, "exit_code": 1}
            await self._fail_stale(r["id"], r["verb"], error)
        await request_secrets.sweep(set(self.active))  # files of requests that end here

    async def _fail_stale(self, rid: str, verb: str, error: dict[str, Any]) -> None:
        await self.daemon.store.execute(
            "UPDATE requests SET status = ?, finished_at = ?, error = ? WHERE id = ?",
            (FAILED, time.time(), dumps(error), rid),
        )
        await anyio.to_thread.run_sync(_append_error, paths.request_log(rid), error)
        log.info("request %s (%s) failed: %s", rid, verb, error.get("message"))

    # -- reads -----------------------------------------------------------------------
    async def resolve(self, prefix: str) -> str:
        if prefix in self.active:
            return prefix
        if not prefix or any(c not in "0123456789abcdef" for c in prefix.lower()):
            raise NotFoundError(f"no request {prefix!r}", hint="list them: skyd requests ls")
        rows = await self.daemon.store.fetchall(
            "SELECT id FROM requests WHERE id >= ? AND id < ? ORDER BY id LIMIT 6",
            (prefix.lower(), prefix.lower() + "g"),
        )
        if not rows:
            raise NotFoundError(f"no request {prefix!r}", hint="list them: skyd requests ls")
        if len(rows) > 1 and rows[0]["id"] != prefix:
            ids = ", ".join(r["id"] for r in rows[:5])
            raise SkydError(
                f"request id prefix {prefix!r} is ambiguous: it matches {ids}",
                field="request_id", hint="give more characters of the id",
            )
        return str(rows[0]["id"])

    async def get(self, prefix: str) -> dict[str, Any]:
        rid = await self.resolve(prefix)
        row = await self.daemon.store.fetchone(
            "SELECT * FROM requests WHERE id = ?", (rid,),
            json_cols=("payload", "result", "error", "stages"),
        )
        if row is None:  # pragma: no cover - resolved a moment ago
            raise NotFoundError(f"no request {prefix!r}")
        return row

    async def ls(
        self, statuses: list[str] | None, verb: str | None, limit: int, all_: bool,
        *, user: str | None = None,
    ) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        if user is not None:  # one user's requests (rows from before: the daemon user's)
            where.append("COALESCE(user, ?) = ?")
            args.extend([owners.daemon_user(), user])
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(s.upper() for s in statuses)
        if verb:
            where.append("verb = ?")
            args.append(verb)
        sql = f"SELECT {LIST_COLUMNS} FROM requests"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC LIMIT ?"
        args.append(limit)
        return await self.daemon.store.fetchall(sql, args, json_cols=("error",))

    async def events(self, prefix: str, follow: bool) -> AsyncIterator[bytes]:
        """Replay the request's event log from the start, then (follow) live events,
        ending with the terminal ``result``/``error`` event. Yields ndjson lines."""
        rid = await self.resolve(prefix)
        path = paths.request_log(rid)
        offset = 0
        seen_terminal = False
        while True:
            ctx = self.active.get(rid)
            wake = ctx.changed_event() if ctx is not None else None
            chunk, offset = await anyio.to_thread.run_sync(_read_lines, path, offset)
            if chunk:
                seen_terminal = seen_terminal or _has_terminal(chunk)
                yield chunk
                if seen_terminal:
                    return
                continue  # more may be there (chunk cap)
            if wake is None or not follow:
                break
            await wake.wait()
        if seen_terminal or (follow is False and rid in self.active):
            return
        row = await self.get(rid)
        if row["status"] in TERMINAL:
            if row["error"]:
                ev = {"type": "error", "status": row["status"], "error": row["error"]}
            else:
                ev = {"type": "result", "status": row["status"], "result": row["result"]}
            yield (dumps_finite(ev) + "\n").encode()


def _read_lines(path: Any, offset: int) -> tuple[bytes, int]:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(MAX_READ_CHUNK)
    except FileNotFoundError:
        return b"", offset
    end = data.rfind(b"\n")
    if end < 0:
        return b"", offset
    return data[: end + 1], offset + end + 1


def _has_terminal(chunk: bytes) -> bool:
    last = chunk.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        return json.loads(last).get("type") in TERMINAL_EVENTS
    except ValueError:
        return False


def _append_error(path: Any, error: dict[str, Any]) -> None:
    """The terminal event of a request the previous daemon left unfinished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        ev = {"seq": _count_lines(path) + 1, "ts": round(time.time(), 3), "type": "error",
              "status": FAILED, "error": error}
        fh.write((dumps_finite(ev) + "\n").encode())


def _count_lines(path: Any) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except FileNotFoundError:
        return 0
