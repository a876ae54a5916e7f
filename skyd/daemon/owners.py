"""Who is asking, and what they own: one daemon shared by several Unix users.

The daemon learns a caller's uid from the socket (SO_PEERCRED), never from the request
body. Who may connect: the daemon's own user and, when the daemon is *shared*
(``SKYD_SHARED_GROUP``: ``skyd daemon start --shared-group G``), every member of Unix group
G. Who is an *admin* (acts on every user's objects): the daemon's own user and the members
of ``SKYD_ADMIN_GROUP`` (root is a user like any other here).

Every request, cluster, managed job, service and pool row records the user name that made
it (column ``user``). Listings show the caller's own rows unless ``all_users=1``; a read of
one named object and every mutation of another user's object are refused unless the
caller is an admin.
"""

from __future__ import annotations

import contextlib
import contextvars
import grp
import os
import pwd
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from skyd import settings
from skyd.errors import NotFoundError, SkydError

SHARED_GROUP_ENV = "SKYD_SHARED_GROUP"
ADMIN_GROUP_ENV = "SKYD_ADMIN_GROUP"
_TTL_S = 10.0  # group membership is looked up again after this long


class NotYoursError(SkydError):
    """An object of another user (HTTP 403)."""

    http_status = 403


@dataclass(frozen=True)
class Caller:
    uid: int
    name: str
    admin: bool


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("skyd_caller", default=None)


@contextlib.contextmanager
def acting_as(user: str | None) -> Iterator[None]:
    """Work started inside (tasks spawned here copy it) makes rows owned by ``user``: a
    controller a restarted daemon resumes keeps creating its submitter's clusters."""
    if not user:
        yield
        return
    token = CALLER.set(Caller(-1, user, False))
    try:
        yield
    finally:
        CALLER.reset(token)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def daemon_user() -> str:
    return user_name(os.getuid())


def current_user() -> str:
    """The user a new row belongs to: the caller of the request being served, else (work
    the daemon does by itself) the daemon's own user."""
    c = CALLER.get()
    return c.name if c is not None else daemon_user()


def group_gid(name: str, what: str) -> int:
    """The gid of group ``name`` (a name or a number); a clear error when there is none."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        from skyd.errors import DaemonUnavailableError

        raise DaemonUnavailableError(f"no Unix group {name!r} on this host ({what})",
                                     field=what, hint="create it (groupadd) or name another"
                                     ) from None


def _in_group(uid: int, gid: int) -> bool:
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return False
    if pw.pw_gid == gid:
        return True
    try:
        return pw.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


class Access:
    """The daemon's access policy (read once at start from the environment)."""

    def __init__(self, shared_group: str | None = None, admin_group: str | None = None) -> None:
        self.uid = os.getuid()
        shared = shared_group if shared_group is not None else settings.SHARED_GROUP.get()
        admin = admin_group if admin_group is not None else settings.ADMIN_GROUP.get()
        self.shared_gid = group_gid(shared, SHARED_GROUP_ENV) if shared else None
        self.admin_gid = group_gid(admin, ADMIN_GROUP_ENV) if admin else None
        self._cache: dict[int, tuple[float, Caller | None]] = {}

    @property
    def shared(self) -> bool:
        return self.shared_gid is not None

    def caller(self, uid: int | None) -> Caller | None:
        """The caller at uid, or None when it may not use this daemon."""
        if uid is None:
            return None
        hit = self._cache.get(uid)
        now = time.monotonic()
        if hit is not None and now - hit[0] < _TTL_S:
            return hit[1]
        c: Caller | None
        if uid == self.uid:
            c = Caller(uid, user_name(uid), True)
        elif self.shared_gid is not None and _in_group(uid, self.shared_gid):
            admin = self.admin_gid is not None and _in_group(uid, self.admin_gid)
            c = Caller(uid, user_name(uid), admin)
        else:
            c = None
        self._cache[uid] = (now, c)
        return c


# -- what each object is, where its owner is kept ----------------------------------------
# The features declare their kinds (own()): the daemon's core names no feature's table.
@dataclass(frozen=True)
class Kind:
    """A kind of object users own. ``table``/``key``: where its rows and their ``user``
    column are; ``noun``: how a user names one; ``all_key``: the payload key that lists them
    when a verb's ``all`` narrows to the caller's own; ``by_name``: a payload ``name``
    resolves to keys through this column; ``int_keys``: keys are integers (route parameters
    come as text); ``live``: the SQL condition of the rows ``all`` acts on (default every
    row)."""

    name: str
    table: str
    key: str
    noun: str
    all_key: str = ""
    by_name: str = ""
    int_keys: bool = False
    live: str = ""


KINDS: dict[str, Kind] = {}
# verb -> (kind, payload keys naming the objects, whether `all: true` means every object)
MUTATIONS: dict[str, tuple[str, tuple[str, ...], bool]] = {}
# route path -> (kind, the row field holding the key): listings filtered to the caller's own
LISTINGS: dict[str, tuple[str, str]] = {}
# route path -> (kind, the route's match_info key): reads of one named object
NAMED: dict[str, tuple[str, str]] = {}
# watch topic -> (kind, the event data's field holding the key)
TOPICS: dict[str, tuple[str, str]] = {}


def own(kind: Kind, *, mutations: dict[str, tuple[tuple[str, ...], bool]] | None = None,
        listings: dict[str, str] | None = None, named: dict[str, str] | None = None,
        topics: dict[str, str] | None = None) -> Kind:
    """Declare ``kind`` and what names one of its objects: verbs (verb -> (payload keys,
    whether ``all`` means every object)), listing routes (path -> row field), routes of one
    object (path -> route parameter) and watch topics (topic -> event field). A name
    declared twice by two kinds is a programming error."""
    if KINDS.get(kind.name, kind) != kind:
        raise ValueError(f"kind {kind.name!r} is declared twice")
    KINDS[kind.name] = kind
    for table, entries in ((MUTATIONS, {v: (kind.name, *spec) for v, spec in (mutations or {}).items()}),
                           (LISTINGS, {p: (kind.name, f) for p, f in (listings or {}).items()}),
                           (NAMED, {p: (kind.name, f) for p, f in (named or {}).items()}),
                           (TOPICS, {t: (kind.name, f) for t, f in (topics or {}).items()})):
        for k, v in entries.items():
            if table.get(k, v) != v:
                raise ValueError(f"{k!r} is already declared for another kind: {table[k]}")
            table[k] = v  # type: ignore[assignment]
    return kind


REQUEST = own(Kind("request", "requests", "id", "request"), topics={"requests": "id"})


async def owners_of(store: Any, kind: str, keys: list[Any] | None = None) -> dict[Any, str | None]:
    """key -> owning user, for every object of ``kind`` (or those ``keys``)."""
    k = KINDS[kind]
    sql = f"SELECT {k.key} AS k, user FROM {k.table}"
    args: list[Any] = []
    if keys is not None:
        if not keys:
            return {}
        sql += f" WHERE {k.key} IN ({','.join('?' * len(keys))})"
        args = list(keys)
    try:
        rows = await store.fetchall(sql, args)
    except Exception as e:  # a table a feature has not created yet: nothing of that kind
        if "no such table" in str(e):
            return {}
        raise
    return {r["k"]: r["user"] for r in rows}


def _mine(owner: str | None, caller: Caller) -> bool:
    return (owner or daemon_user()) == caller.name


async def check_owned(store: Any, caller: Caller | None, kind: str, keys: list[Any],
                      verb: str) -> None:
    """Refuse (NotYoursError) when any of ``keys`` is another user's and the caller is not
    an admin. Objects that do not exist are the handler's to report."""
    if caller is None or caller.admin or not keys:
        return
    owners = await owners_of(store, kind, keys)
    for key in keys:
        if key in owners and not _mine(owners[key], caller):
            noun = KINDS[kind].noun
            raise NotYoursError(
                f"{noun} {key!r} belongs to user {owners[key] or daemon_user()}: "
                f"{caller.name} may not {verb} it",
                field=kind, hint="act on your own (list them: --all-users shows whose is whose); "
                                 "the daemon's admin group may act on every user's")


# -- mutations: which objects a verb's payload touches -----------------------------------
def _names(payload: dict[str, Any], *keys: str) -> list[Any]:
    out: list[Any] = []
    for k in keys:
        v = payload.get(k)
        if isinstance(v, list):
            out.extend(x for x in v if isinstance(x, (str, int)) and not isinstance(x, bool))
        elif isinstance(v, (str, int)) and not isinstance(v, bool) and v != "":
            out.append(v)
    return out


async def check_mutation(store: Any, caller: Caller | None, verb: str,
                         payload: dict[str, Any]) -> dict[str, Any]:
    """Refuse a mutation of another user's object; the payload to run (``all`` of a
    non-admin becomes the list of the caller's own objects)."""
    payload = dict(payload)
    everyone = payload.pop("all_users", None) is True  # -a -u
    spec = MUTATIONS.get(verb)
    if spec is None or caller is None:
        return payload
    kind, keys, has_all = spec
    if has_all and payload.get("all") is True and not _names(payload, *keys):
        owners = await owners_of(store, kind)
        if all(_mine(u, caller) for u in owners.values()):
            return payload  # nobody else's (one user's daemon): `all` as it always was
        if everyone and not caller.admin:
            raise NotYoursError(f"{caller.name} may not act on every user's {KINDS[kind].noun}s",
                                field="all_users", hint="leave out -u (-a is all of yours), "
                                                        "or ask a member of the admin group")
        if everyone:
            return payload
        mine = await _live(store, KINDS[kind], [k for k, u in owners.items() if _mine(u, caller)])
        if not mine:
            raise NotFoundError(f"{caller.name} has no {KINDS[kind].noun}s here",
                                field="all", hint="--all-users lists every user's")
        return {**payload, "all": False, KINDS[kind].all_key: mine}
    if caller.admin:
        return payload
    named = _names(payload, *keys)
    k = KINDS[kind]
    if k.by_name and payload.get("name"):
        rows = await store.fetchall(f"SELECT {k.key} AS k FROM {k.table} WHERE {k.by_name} = ?",
                                    (payload["name"],))
        named += [r["k"] for r in rows]
    if k.int_keys:
        named = [int(n) for n in named if str(n).isdigit()]
    await check_owned(store, caller, kind, named, verb.replace(".", " ").replace("_", " "))
    return payload


async def _live(store: Any, kind: Kind, keys: list[Any]) -> list[Any]:
    """Those of ``keys`` whose rows ``all`` acts on (``Kind.live``)."""
    if not kind.live or not keys:
        return keys
    rows = await store.fetchall(
        f"SELECT {kind.key} AS k FROM {kind.table} WHERE {kind.key} IN ({','.join('?' * len(keys))})"
        f" AND ({kind.live})", keys)
    return [r["k"] for r in rows]


# -- reads: listings filtered, named objects checked -------------------------------------
def wants_all(query: Any) -> bool:
    return str(query.get("all_users", "0")).lower() not in ("0", "false", "")


async def filter_listing(store: Any, caller: Caller | None, path: str, rows: Any,
                         all_users: bool) -> Any:
    """A listing's rows with a ``user`` field each; only the caller's own unless
    ``all_users``."""
    spec = LISTINGS.get(path)
    if spec is None or not isinstance(rows, list):
        return rows
    kind, field = spec
    owners = await owners_of(store, kind)
    out = []
    for r in rows:
        if not isinstance(r, dict):
            out.append(r)
            continue
        owner = owners.get(r.get(field)) or daemon_user()
        if all_users or caller is None or owner == caller.name:
            out.append({**r, "user": owner})
    return out


# -- the live event stream (GET /v1/watch): each event names one object -----------------
_CONTROL = {"_hello", "_overflow"}


class EventFilter:
    """Which events of the bus one watcher may see: the caller's own objects' (as the
    listings show them), every event with ``all_users``. An event of a topic that names no
    object of a known kind is shown only to an all-users watcher (closed by default).
    Owners seen are remembered, so the event of an object just deleted (its row gone) still
    reaches its owner."""

    def __init__(self, store: Any, caller: Caller | None, all_users: bool) -> None:
        self.store = store
        self.caller = caller
        self.everyone = all_users or caller is None
        self._seen: dict[tuple[str, Any], str] = {}

    async def visible(self, ev: dict[str, Any]) -> bool:
        topic = ev.get("topic")
        if self.everyone or topic in _CONTROL:
            return True
        spec = TOPICS.get(str(topic))
        data = ev.get("data")
        if spec is None or not isinstance(data, dict):
            return False
        kind, field = spec
        key = data.get(field)
        if key is None:
            return False
        owner = data.get("user") if isinstance(data.get("user"), str) else None
        if owner is None:
            owner = self._seen.get((kind, key))
        if owner is None:
            found = await owners_of(self.store, kind, [key])
            if key not in found:
                return False  # gone before this watcher saw it: nobody's it knows of
            owner = found[key] or daemon_user()
        self._seen[(kind, key)] = owner
        assert self.caller is not None
        return _mine(owner, self.caller)


__all__ = ["Access", "EventFilter", "CALLER", "Caller", "Kind", "NotYoursError", "check_mutation",
           "check_owned", "current_user", "filter_listing", "own", "wants_all"]
