"""One daemon shared by several Unix users of a host (`--shared-group`): each user reaches it
over their own SSH login (real OpenSSH sshd on 127.0.0.x, one per test user), sees and acts
on their own clusters, jobs and requests; `--all-users` shows everyone's with a USER column;
another user's object is refused unless the caller is in the admin group.

Users: ``skydremote`` owns the daemon; ``skydtest`` (alice) and ``skydprobe`` (bob) share it
through group ``skydshare``; ``skyd-squat`` is in no group (refused at the socket)."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.sshd import RealSSHD, ensure_user, real_sshd, unavailable_reason
from tests.fakes.unixnames import per_worker
from tests.sdk.test_remote_daemon import SHARED_TMP, _user_dir, _wrapper
from tests.support import forkserver
from tests.support.daemon import SKYD_BIN

pytestmark = [pytest.mark.anyio]
_WHY_NOT = (unavailable_reason()
            or (shutil.which("ssh") is None and "needs the OpenSSH client (ssh)")
            or (shutil.which("groupadd") is None and "needs groupadd (passwd)")
            or (not os.path.exists("/usr/bin/python3")
                and "the host side runs the system /usr/bin/python3") or None)
needs_hosts = pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))

OWNER, ALICE, BOB, STRANGER = map(per_worker, ("skydremote", "skydtest", "skydprobe",
                                                "skyd-squat"))
SHARE, ADMINS = per_worker("skydshare"), per_worker("skydadmins")


def _group(name: str, members: list[str]) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", name], check=True)
    for m in members:
        ensure_user(m)
        subprocess.run(["usermod", "-aG", name, m], check=True)


@pytest.fixture(scope="module")
def groups() -> None:
    _group(SHARE, [OWNER, ALICE, BOB])
    _group(ADMINS, [])


@dataclass
class Host:
    wrapper: Path
    home: Path  # the daemon's SKYD_HOME (its owner's, private)
    socket: Path  # the shared socket
    logins: dict[str, tuple[RealSSHD, dict[str, str]]]

    def daemon(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the host's skyd as the daemon's owner (outside SSH)."""
        return subprocess.run(
            ["runuser", "-u", OWNER, "--", "env", f"SKYD_HOME={self.home}",
             f"SKYD_SHARED_SOCKET={self.socket}", str(self.wrapper), *args],
            capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)

    def cli(self, user: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The real `skyd` CLI on the user's laptop, talking to the shared daemon over the
        user's own SSH login."""
        return forkserver.run([str(SKYD_BIN), *args], self.logins[user][1], timeout=timeout)

    def ok(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        r = self.cli(user, *args)
        assert r.returncode == 0, (f"{user}: skyd {' '.join(args)} -> {r.returncode}\n"
                                   f"{r.stdout}\n{r.stderr}\n{self.logs()}")
        return r

    def json(self, user: str, *args: str) -> Any:
        return json.loads(self.ok(user, *args, "-o", "json").stdout)

    def logs(self) -> str:
        p = self.home / "logs" / "daemon.log"
        return p.read_text(errors="replace")[-3000:] if p.exists() else ""


@pytest.fixture
async def host(groups: None, tmp_path: Path) -> AsyncIterator[Host]:
    shared = Path(tempfile.mkdtemp(prefix="skyd-mu-", dir=SHARED_TMP))
    shared.chmod(0o755)
    home = _user_dir(OWNER, "skyd-muh-")
    sockets = _user_dir(OWNER, "skyd-mus-")  # the owner's: the daemon makes its socket dir
    sockets.chmod(0o755)
    h = Host(_wrapper(shared), home, sockets / "sock" / "skyd.sock", {})
    async with contextlib.AsyncExitStack() as stack:
        for i, user in enumerate((ALICE, BOB)):
            s = await stack.enter_async_context(
                real_sshd(shared / f"sshd-{user}", host=f"127.0.0.{21 + i}", user=user))
            url = f"ssh://{user}@{s.host}:{s.port}?socket={h.socket}"
            env = {**os.environ, "SKYD_HOME": str(tmp_path / f"laptop-{user}"),
                   "SKYD_CONFIG_DIR": str(tmp_path / f"config-{user}"), "SKYD_HOST": url,
                   "SKYD_SSH_OPTS": f"-i {s.key} -o StrictHostKeyChecking=no "
                                    "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"}
            env.pop("SKYD_SOCKET", None)
            h.logins[user] = (s, env)
        try:
            yield h
        finally:
            h.daemon("daemon", "stop")
            for _s, env in h.logins.values():
                from skyd.sdk.remote import close_master, parse_host

                saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SSH_OPTS")}
                os.environ.update({k: env[k] for k in saved})
                try:
                    close_master(parse_host(env["SKYD_HOST"]))
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
    for d in (home, sockets, shared):
        shutil.rmtree(d, ignore_errors=True)


def _start(h: Host, *flags: str) -> None:
    r = h.daemon("daemon", "start", "--shared-group", SHARE, *flags)
    assert r.returncode == 0, r.stdout + r.stderr
    st = h.socket.stat()
    assert oct(st.st_mode & 0o777) == "0o660" and st.st_gid == grp.getgrnam(SHARE).gr_gid
    d = h.socket.parent.stat()
    assert oct(d.st_mode & 0o777) == "0o750" and d.st_uid == pwd.getpwnam(OWNER).pw_uid
    assert (h.home.stat().st_mode & 0o077) == 0  # SKYD_HOME stays private to the owner
    assert f"shared {h.socket}" in h.daemon("daemon", "status").stdout


def _refused(r: subprocess.CompletedProcess[str], owner: str) -> None:
    assert r.returncode != 0, r.stdout + r.stderr
    assert f"belongs to user {owner}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@needs_hosts
async def test_each_user_sees_and_acts_on_their_own(host: Host, tmp_path: Path) -> None:
    _start(host)
    # `--workdir DIR` on the command line travels like a YAML's workdir (uploaded).
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "marker.txt").write_text("from-alices-laptop\n")
    r = host.ok(ALICE, "launch", "-y", "-c", "mu1", "--workdir", str(wd),
                "cat marker.txt; echo user=$SKYPILOT_USER")
    assert "from-alices-laptop" in r.stdout + r.stderr
    assert f"user={ALICE}" in r.stdout + r.stderr  # the job knows who submitted it
    host.ok(ALICE, "jobs", "launch", "-y", "-d", "-n", "mj", "sleep 120")
    rows = host.json(ALICE, "status")  # her cluster, and her managed job's cluster
    assert ("mu1", ALICE) in [(r["name"], r["user"]) for r in rows]
    assert {r["user"] for r in rows} == {ALICE}
    # Bob sees nothing of Alice's by default; --all-users shows it, with whose it is.
    assert host.json(BOB, "status") == []
    assert ("mu1", ALICE) in [(r["name"], r["user"]) for r in host.json(BOB, "status", "-u")]
    assert "USER" in host.ok(BOB, "status", "--all-users").stdout
    assert host.json(BOB, "cost-report")["clusters"] == []  # Alice's costs are hers
    r = host.ok(BOB, "cost-report", "-u")
    assert "USER" in r.stdout and "mu1" in r.stdout and ALICE in r.stdout, r.stdout
    sdk = ("import skyd.sdk as s\nfrom skyd.sdk import verbs as v\n"
           "print(len(s.status()), {r['user'] for r in s.status(all_users=True)}, "
           "len(v.jobs_queue()), len(v.jobs_queue(all_users=True)), len(s.requests_ls()), "
           "{r['user'] for r in s.requests_ls(all_users=True)})")
    r = subprocess.run([sys.executable, "-c", sdk], capture_output=True, text=True, timeout=60,
                       env=host.logins[BOB][1], stdin=subprocess.DEVNULL)
    assert r.stdout.split("\n")[0] == f"0 {{'{ALICE}'}} 0 1 0 {{'{ALICE}'}}", r.stdout + r.stderr
    assert host.json(BOB, "jobs", "queue") == []
    jobs = host.json(BOB, "jobs", "queue", "-u")
    assert [(j["name"], j["user"]) for j in jobs] == [("mj", ALICE)]
    assert host.json(BOB, "requests", "ls") == []
    assert {r["user"] for r in host.json(BOB, "requests", "ls", "-u")} == {ALICE}
    # Reading or acting on Alice's objects is refused, and changes nothing.
    _refused(host.cli(BOB, "queue", "mu1"), ALICE)
    _refused(host.cli(BOB, "logs", "mu1", "1"), ALICE)
    _refused(host.cli(BOB, "down", "-y", "mu1"), ALICE)
    _refused(host.cli(BOB, "exec", "mu1", "echo intruder"), ALICE)
    job_id = str(jobs[0]["id"])
    _refused(host.cli(BOB, "jobs", "cancel", "-y", job_id), ALICE)
    rid = host.json(BOB, "requests", "ls", "-u")[0]["id"]
    _refused(host.cli(BOB, "requests", "cancel", rid), ALICE)
    r = host.cli(BOB, "down", "-y", "-a")  # "all" is all of Bob's: none
    assert r.returncode != 0 and "no clusters" in r.stderr, r.stderr
    assert {r["name"]: r["status"] for r in host.json(ALICE, "status")}["mu1"] == "UP"
    assert [j["status"] for j in host.json(ALICE, "jobs", "queue")][0] not in ("CANCELLED",
                                                                               "CANCELLING")
    # A user outside the group cannot even connect to the shared socket.
    ensure_user(STRANGER)
    r = subprocess.run(["runuser", "-u", STRANGER, "--", "/usr/bin/python3", "-c",
                        "import socket,sys; s=socket.socket(socket.AF_UNIX);"
                        f"s.connect({str(host.socket)!r})"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "PermissionError" in r.stderr
    # Bob may not name a path of the host (the daemon's user could read it): only uploads.
    probe = ("import sys\nfrom skyd.cli.client import get_client\nfrom skyd.errors import "
             "SkydError\ntry:\n    get_client().request('POST', '/v1/requests/launch', "
             "{'command': 'ls', 'cluster_name': 'steal', 'base_dir': '/', "
             f"'overrides': {{'workdir': {str(host.home)!r}}}}})\n"
             "except SkydError as e:\n    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=60, env=host.logins[BOB][1], stdin=subprocess.DEVNULL)
    assert "REFUSED" in r.stdout and "only as uploads" in r.stdout, r.stdout + r.stderr
    assert "steal" not in [c["name"] for c in host.json(BOB, "status", "-u")]
    # Alice acts on her own.
    host.ok(ALICE, "jobs", "cancel", "-y", job_id)
    host.ok(ALICE, "down", "-y", "mu1")


@needs_hosts
async def test_the_admin_group_may_act_on_every_users_objects(host: Host) -> None:
    subprocess.run(["usermod", "-aG", ADMINS, BOB], check=True)
    try:
        _start(host, "--admin-group", ADMINS)
        host.ok(ALICE, "launch", "-y", "-c", "mu2", "echo hi")
        host.ok(BOB, "queue", "mu2")  # an admin may read it
        host.ok(BOB, "down", "-y", "mu2")
        assert host.json(ALICE, "status") == []
    finally:
        subprocess.run(["gpasswd", "-d", BOB, ADMINS], check=False, capture_output=True)


@needs_hosts
async def test_deploy_shares_the_daemon_and_prints_the_members_line(host: Host,
                                                                    tmp_path: Path) -> None:
    """`skyd daemon deploy --shared-group G` starts the host daemon shared with G and prints
    the SKYD_HOST line (with the shared socket) a member uses over their own login."""
    bindir = _user_dir(OWNER, "skyd-mub-")
    try:
        async with real_sshd(host.wrapper.parent / "sshd-owner", host="127.0.0.23",
                             user=OWNER) as s:
            env = {**os.environ, "SKYD_HOME": str(tmp_path / "laptop-owner"),
                   "SKYD_CONFIG_DIR": str(tmp_path / "config-owner"),
                   "SKYD_SSH_OPTS": f"-i {s.key} -o StrictHostKeyChecking=no "
                                    "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"}
            env.pop("SKYD_SOCKET", None)
            env.pop("SKYD_HOST", None)
            url = f"ssh://{OWNER}@{s.host}:{s.port}?bin={bindir}/skyd"
            r = subprocess.run([str(SKYD_BIN), "daemon", "deploy", url, "--remote-home",
                                str(host.home), "--binary", str(host.wrapper),
                                "--shared-group", SHARE], capture_output=True, text=True,
                               timeout=180, env=env, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, r.stdout + r.stderr
            line = next(ln for ln in r.stderr.splitlines() if f"group {SHARE}" in ln)
            member = line.split("export SKYD_HOST=", 1)[1]
            assert member.startswith("ssh://THEIR_USER@") and "socket=" in member
            sock = member.split("socket=", 1)[1]
            uid = pwd.getpwnam(OWNER).pw_uid
            assert sock == f"/var/tmp/skyd-shared-{uid}/skyd.sock"
            st = os.stat(sock)
            assert oct(st.st_mode & 0o777) == "0o660" and st.st_gid == grp.getgrnam(SHARE).gr_gid
            # Alice, over her own login, reaches it with that socket.
            alice = host.logins[ALICE]
            host.logins[ALICE] = (alice[0], {**alice[1], "SKYD_HOST":
                                             f"ssh://{ALICE}@{alice[0].host}:{alice[0].port}"
                                             f"?socket={sock}"})
            assert host.json(ALICE, "status") == []
            # A member never starts the daemon: once it is stopped, the error names the socket.
            host.daemon("daemon", "stop")
            r = host.cli(ALICE, "status")
            assert r.returncode != 0 and sock in r.stderr, r.stderr
    finally:
        host.daemon("daemon", "stop")
        shutil.rmtree(bindir, ignore_errors=True)
        shutil.rmtree(f"/var/tmp/skyd-shared-{pwd.getpwnam(OWNER).pw_uid}", ignore_errors=True)


def test_an_older_database_upgrades_with_rows_owned_by_the_daemon_user(tmp_path: Path) -> None:
    """The owner columns come with a migration step of each table's schema; rows from before
    (a database made by schema v6, tests/data/state_db_v6.sql) belong to the daemon's user."""
    import anyio

    import skyd.jobs.schema
    import skyd.pipeline.schema
    import skyd.serve.schema
    import skyd.storage.schema  # noqa: F401 - the features' tables, as the daemon loads them
    from skyd.daemon.owners import daemon_user
    from skyd.daemon.store import Store

    db = tmp_path / "state.db"
    with sqlite3.connect(db) as c:
        c.executescript((Path(__file__).resolve().parents[1] / "data" / "state_db_v6.sql").read_text())
        c.execute("PRAGMA user_version = 6")
        c.execute("INSERT INTO clusters (name, status) VALUES ('old', 'UP')")
        c.execute("INSERT INTO requests (id, verb, status, created_at) "
                  "VALUES ('abcd1234', 'launch', 'SUCCEEDED', 0)")
    with sqlite3.connect(db) as c:
        assert "user" not in {r[1] for r in c.execute("PRAGMA table_info(clusters)")}

    async def new() -> None:
        s = Store(db)
        await s.open()
        await s.close()

    anyio.run(new)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT user FROM clusters").fetchall() == [(daemon_user(),)]
        assert c.execute("SELECT user FROM requests").fetchall() == [(daemon_user(),)]
        for table in ("managed_jobs", "job_pools", "services", "storage_buckets"):
            assert "user" in {r[1] for r in c.execute(f"PRAGMA table_info({table})")}, table


async def test_every_mutation_of_another_users_object_is_refused(tmp_path: Path) -> None:
    """The whole class, verb by verb: each mutating verb naming another user's cluster, job,
    service, pool or bucket is refused for a plain member, allowed for an admin and for the
    owner; `all` means all of the caller's own."""
    from skyd.daemon import owners
    from skyd.daemon.store import Store

    store = Store(tmp_path / "state.db")
    await store.open()
    try:
        for table, cols, vals in (
                ("clusters", "name, status", ("c1", "UP")),
                ("services", "name, status", ("s1", "READY")),
                ("job_pools", "name, task, workers, status, created_at", ("p1", "{}", 1, "READY", 0)),
                ("storage_buckets", "name, store, persistent, status, created_at",
                 ("b1", "s3", 0, "READY", 0))):
            await store.execute(f"INSERT INTO {table} ({cols}, user) VALUES "
                                f"({','.join('?' * len(vals))}, 'alice')", vals)
        await store.execute("INSERT INTO managed_jobs (id, name, status, dag, user) VALUES "
                            "(7, 'mj', 'RUNNING', '{}', 'alice')")
        alice = owners.Caller(1, "alice", False)
        bob = owners.Caller(2, "bob", False)
        admin = owners.Caller(3, "carol", True)
        cases = {
            "launch": {"cluster_name": "c1"}, "exec": {"cluster_name": "c1"},
            "cancel": {"cluster_name": "c1", "job_ids": [1]},
            "stop": {"clusters": ["c1"]}, "start": {"clusters": ["c1"]},
            "down": {"clusters": ["c1"]}, "autostop": {"clusters": ["c1"], "idle_minutes": 5},
            "jobs.cancel": {"ids": [7]}, "serve.update": {"name": "s1"},
            "serve.down": {"names": ["s1"]}, "jobs.pool_apply": {"name": "p1"},
            "jobs.pool_down": {"names": ["p1"]}, "jobs.launch": {"pool": "p1"},
            "storage.delete": {"names": ["b1"]},
        }
        assert set(cases) == set(owners.MUTATIONS)
        for verb, payload in cases.items():
            with pytest.raises(owners.NotYoursError, match="belongs to user alice"):
                await owners.check_mutation(store, bob, verb, payload)
            assert await owners.check_mutation(store, alice, verb, payload) == payload
            assert await owners.check_mutation(store, admin, verb, payload) == payload
        with pytest.raises(owners.NotYoursError):  # a managed job named, not numbered
            await owners.check_mutation(store, bob, "jobs.cancel", {"name": "mj"})
        from skyd.errors import NotFoundError

        with pytest.raises(NotFoundError, match="bob has no clusters"):
            await owners.check_mutation(store, bob, "down", {"clusters": [], "all": True})
        # -a of one user's daemon (every row theirs) is unchanged; -a -u is an admin's only.
        all_down = {"clusters": [], "all": True}
        assert await owners.check_mutation(store, alice, "down", all_down) == all_down
        await store.execute("INSERT INTO clusters (name, status, user) VALUES ('c2', 'UP', 'bob')")
        with pytest.raises(NotFoundError, match="carol has no clusters"):  # an admin's -a: own
            await owners.check_mutation(store, admin, "down", all_down)
        assert await owners.check_mutation(store, admin, "down",
                                           {**all_down, "all_users": True}) == all_down
        with pytest.raises(owners.NotYoursError, match="every user's"):
            await owners.check_mutation(store, bob, "down", {**all_down, "all_users": True})
        assert (await owners.check_mutation(store, bob, "down", all_down))["clusters"] == ["c2"]
        out = await owners.check_mutation(store, alice, "stop", all_down)
        assert out == {"clusters": ["c1"], "all": False}  # all of hers, not Bob's c2
        # Listings: only the caller's own, or everyone's with all_users, each with its user.
        rows = [{"name": "c1"}]
        assert await owners.filter_listing(store, bob, "/v1/status", rows, False) == []
        assert await owners.filter_listing(store, bob, "/v1/status", rows, True) == [
            {"name": "c1", "user": "alice"}]
    finally:
        await store.close()


def test_work_resumed_by_the_daemon_keeps_its_submitters_ownership() -> None:
    """A controller a restarted daemon resumes (managed job, service) runs as its
    submitter: the clusters it makes are theirs, not the daemon user's."""
    from skyd.daemon.owners import acting_as, current_user, daemon_user

    with acting_as("alice"):
        assert current_user() == "alice"
    with acting_as(None):  # a row from before ownership: the daemon's user
        assert current_user() == daemon_user()
    assert current_user() == daemon_user()


@needs_hosts
def test_who_may_connect_and_who_is_an_admin(groups: None) -> None:
    from skyd.daemon.owners import Access
    from skyd.daemon.server import peer_allowed

    ensure_user(STRANGER)
    uid = {u: pwd.getpwnam(u).pw_uid for u in (ALICE, BOB, STRANGER)}
    private = Access(shared_group="", admin_group="")
    assert private.caller(uid[ALICE]) is None  # not shared: only the daemon's own user
    assert not peer_allowed(uid[ALICE], os.getuid(), private)
    shared = Access(shared_group=SHARE, admin_group=ADMINS)
    alice = shared.caller(uid[ALICE])
    assert alice is not None and (alice.name, alice.admin) == (ALICE, False)
    assert shared.caller(uid[STRANGER]) is None
    assert not peer_allowed(uid[STRANGER], os.getuid(), shared)
    me = shared.caller(os.getuid())
    assert me is not None and me.admin  # the daemon's own user


@needs_hosts
async def test_a_member_whose_sshd_refuses_socket_forwards_relays_with_dial_stdio(
        host: Host, tmp_path: Path) -> None:
    """Where the host's sshd refuses Unix-socket forwards, each connection runs
    `skyd daemon dial-stdio` as the member with SKYD_SOCKET set to the shared socket: it
    relays to the shared daemon and never starts one of the member's own."""
    _start(host)
    async with real_sshd(host.wrapper.parent / "sshd-stdio", host="127.0.0.24", user=ALICE,
                         allow_stream_local_forwarding=False) as s:
        env = {**host.logins[ALICE][1],
               "SKYD_HOST": f"ssh://{ALICE}@{s.host}:{s.port}?socket={host.socket}"
                            f"&bin={host.wrapper}",
               "SKYD_HOME": str(tmp_path / "laptop-stdio"),
               "SKYD_SSH_OPTS": f"-i {s.key} -o StrictHostKeyChecking=no "
                                "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"}
        host.logins["stdio"] = (s, env)
        host.ok("stdio", "launch", "-y", "-c", "mu3", "echo via-stdio")
        rows = host.json("stdio", "status")
        assert [(r["name"], r["user"]) for r in rows] == [("mu3", ALICE)]
        from skyd.sdk import remote as rm

        saved = {k: os.environ.get(k) for k in ("SKYD_HOME", "SKYD_SSH_OPTS")}
        os.environ.update({k: env[k] for k in saved})
        try:
            assert rm.forward_path(rm.parse_host(env["SKYD_HOST"])).with_suffix(
                ".refused").exists()  # it went through dial-stdio
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        host.ok("stdio", "down", "-y", "mu3")
        # The shared daemon stopped: the member's dial-stdio names it and starts nothing.
        host.daemon("daemon", "stop")
        r = host.cli("stdio", "status")
        assert r.returncode != 0 and "no shared skyd daemon" in r.stdout + r.stderr, r.stderr
        assert not (Path(pwd.getpwnam(ALICE).pw_dir) / ".local/share/skyd/state.db").exists()


async def _store_with_alices_objects(path: Path) -> Any:
    """A state store where user ``alice`` owns one object of every kind (and the daemon's
    user a request)."""
    import skyd.jobs.schema
    import skyd.pipeline.schema
    import skyd.serve.schema
    import skyd.storage.schema  # noqa: F401 - the features' tables
    from skyd.daemon.store import Store

    store = Store(path)
    await store.open()
    for table, cols, vals in (
            ("clusters", "name, status", ("c-alice", "UP")),
            ("services", "name, status", ("s-alice", "READY")),
            ("job_pools", "name, task, workers, status, created_at", ("p-alice", "{}", 1, "READY", 0)),
            ("storage_buckets", "name, store, persistent, status, created_at",
             ("b-alice", "s3", 0, "READY", 0)),
            ("managed_jobs", "id, name, status, dag", (7, "mj-alice", "RUNNING", "{}")),
            ("requests", "id, verb, status, created_at", ("ra11ce00", "launch", "RUNNING", 0))):
        await store.execute(f"INSERT INTO {table} ({cols}, user) VALUES "
                            f"({','.join('?' * len(vals))}, 'alice')", vals)
    return store


async def test_the_watch_stream_has_only_the_callers_own_objects(tmp_path: Path) -> None:
    """GET /v1/watch, event by event: a plain member sees the events of their own objects
    only (every topic), as the listings show them; ``all_users`` sees everyone's; an event
    of an object deleted after the watcher saw it still reaches its owner; an event of an
    unknown topic reaches only an all-users watcher."""
    from skyd.daemon.owners import Caller, EventFilter

    store = await _store_with_alices_objects(tmp_path / "state.db")
    try:
        await store.execute("INSERT INTO clusters (name, status, user) VALUES ('c-bob', 'UP', 'bob')")
        alices = [
            {"topic": "requests", "data": {"id": "ra11ce00", "status": "RUNNING"}},
            {"topic": "clusters", "data": {"name": "c-alice", "status": "UP"}},
            {"topic": "jobs", "data": {"cluster": "c-alice", "jobs": [[1, "RUNNING"]]}},
            {"topic": "managed_jobs", "data": {"id": 7, "status": "RUNNING"}},
            {"topic": "serve", "data": {"service": "s-alice"}},
            {"topic": "clusters", "data": {"name": "c-alice", "status": "TERMINATED",
                                           "user": "alice"}},  # a removed cluster says whose
        ]
        bobs = [{"topic": "clusters", "data": {"name": "c-bob", "status": "UP"}},
                {"topic": "jobs", "data": {"cluster": "c-bob", "jobs": []}}]
        control = [{"topic": "_hello", "data": {"pid": 1}}, {"topic": "_overflow", "data": None}]
        odd = [{"topic": "somefeature", "data": {"name": "c-alice"}},
               {"topic": "clusters", "data": {"name": "never-existed"}},
               {"topic": "clusters", "data": "c-alice"}]
        everything = alices + bobs + control + odd

        async def seen(caller: Caller, all_users: bool) -> list[dict[str, Any]]:
            f = EventFilter(store, caller, all_users)
            return [ev for ev in everything if await f.visible(ev)]

        bob = Caller(2, "bob", False)
        assert await seen(bob, False) == bobs + control
        assert await seen(Caller(1, "alice", False), False) == alices + control
        assert await seen(bob, True) == everything
        assert await seen(Caller(3, "carol", True), False) == control  # an admin: as listings
        # A service deleted after its owner's watcher saw it: its last event still arrives.
        f = EventFilter(store, Caller(1, "alice", False), False)
        ev = {"topic": "serve", "data": {"service": "s-alice"}}
        assert await f.visible(ev)
        await store.execute("DELETE FROM services WHERE name = 's-alice'")
        assert await f.visible(ev)
        assert not await EventFilter(store, bob, False).visible(ev)
    finally:
        await store.close()


async def test_worker_clusters_a_restarted_daemon_makes_are_the_pool_owners(
        tmp_path: Path) -> None:
    """A pool whose workers were still provisioning when the daemon stopped: the daemon
    that resumes it (as its own user, no caller) makes the worker clusters as the pool's
    owner; so does an admin's request driving another user's pool."""
    import anyio

    from skyd.daemon.owners import CALLER, Caller, current_user
    from skyd.jobs.pools import PoolManager
    from skyd.jobs.sim import SimClusterOps
    from skyd.jobs.state import JobsDB

    class WhoLaunches(SimClusterOps):  # the simulated cloud notes whose cluster it makes
        def __init__(self) -> None:
            super().__init__(default_duration=0.01)
            self.made_by: dict[str, str] = {}

        async def launch(self, task: Any, cluster_name: str, **kw: Any) -> Any:
            self.made_by[cluster_name] = current_user()
            return await super().launch(task, cluster_name, **kw)

    store = await _store_with_alices_objects(tmp_path / "state.db")
    try:
        await store.execute("INSERT INTO job_pool_workers (pool, idx, cluster, status) VALUES "
                            "('p-alice', 0, 'p-alice-w0', 'PROVISIONING')")
        ops = WhoLaunches()
        async with anyio.create_task_group() as tg:
            pools = PoolManager(JobsDB(store), ops, lambda _n, fn, *a: tg.start_soon(fn, *a),
                                poll=0.01)
            await pools.resume()  # the daemon's start: nobody's request
            with anyio.fail_after(20):
                while (await pools.workers("p-alice"))[0]["status"] == "PROVISIONING":
                    await anyio.sleep(0.02)
            assert ops.made_by == {"p-alice-w0": "alice"}
            # An admin scales Alice's pool up: the new worker is Alice's too.
            token = CALLER.set(Caller(3, "carol", True))
            try:
                await pools.apply("p-alice", {}, 2, lambda _m: None)
            finally:
                CALLER.reset(token)
            assert ops.made_by.get("p-alice-w1") == "alice", ops.made_by
    finally:
        await store.close()


# What a plain member runs on the host: raw HTTP on the shared socket (the system Python, no
# skyd), every GET route of the daemon's OpenAPI document with another user's object in each
# path parameter; then the live stream while the daemon's user and the member both submit.
_MEMBER = r'''
import http.client, json, socket, sys, time
SOCK, ARGS = sys.argv[1], json.loads(sys.argv[2])
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.settimeout(ARGS["timeout"])
        self.sock.connect(SOCK)
def call(method, path, body=None, read_for=None):
    c = C("skyd", timeout=ARGS["timeout"])
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse(); out = b""
    end = time.monotonic() + (read_for or 1e9)
    try:
        while time.monotonic() < end:
            chunk = r.read1(65536) if read_for else r.read()
            if not chunk: break
            out += chunk
            if not read_for: break
    except (socket.timeout, TimeoutError): pass
    c.close(); return r.status, out.decode(errors="replace")
if ARGS["mode"] == "walk":
    res = {}
    for path, ops in json.loads(call("GET", "/v1/openapi.json")[1])["paths"].items():
        if "get" not in ops or path == "/v1/watch": continue
        parts = path.split("/")
        for i, p in enumerate(parts):
            if p.startswith("{"):
                parts[i] = ARGS["objects"].get(p if p == "{job_id}" else parts[i - 1], "UNMAPPED")
        url = "/".join(parts)
        res["GET " + path] = call("GET", url + ARGS["query"], read_for=2 if "logs" in url or "events" in url else None)
    res["POST /v1/status/refresh"] = call("POST", "/v1/status/refresh" + ARGS["query"], {})
    res["POST /v1/status/refresh (named)"] = call("POST", "/v1/status/refresh" + ARGS["query"],
                                                  {"clusters": [ARGS["objects"]["clusters"]]})
    print(json.dumps(res))
else:
    import threading
    def mine():
        time.sleep(1.5); call("POST", "/v1/requests/sleep", {"seconds": 0.1})
    threading.Thread(target=mine).start()
    print(json.dumps(call("GET", "/v1/watch" + ARGS["query"], read_for=ARGS["watch_s"])))
'''


@needs_hosts
def test_no_read_route_shows_a_member_another_users_object(groups: None, skyd_home: Path,
                                                           tmp_path: Path) -> None:
    """The class, route by route: every GET route the daemon registers (its OpenAPI
    document), and the status refresh, read by a plain member (a real Unix user on the
    shared socket) with another user's object named in each path parameter, shows none of
    the other users' objects: named ones are refused (403), listings have only the member's
    own, the live stream only the member's own events. With ``all_users=1`` the listings
    have them (the objects are there to leak)."""
    from skyd import sdk
    from tests.support.daemon import running_daemon

    sdir = Path(tempfile.mkdtemp(prefix="skyd-muw-", dir=SHARED_TMP))
    sdir.chmod(0o755)
    shared = sdir / "sock" / "skyd.sock"
    script = sdir / "member.py"
    script.write_text(_MEMBER)
    script.chmod(0o644)
    db = skyd_home / "state.db"
    try:
        with running_daemon(SKYD_SHARED_GROUP=SHARE, SKYD_SHARED_SOCKET=str(shared),
                            SKYD_ADMIN_GROUP=""):
            with sqlite3.connect(db) as c:  # one object of every kind is Alice's
                for table, cols, vals in (
                        ("clusters", "name, status", ("c-alice", "STOPPED")),
                        ("cluster_history", "name, cost, duration_s", ("h-alice", 1.5, 60)),
                        ("services", "name, status", ("s-alice", "READY")),
                        ("job_pools", "name, task, workers, status, created_at",
                         ("p-alice", "{}", 0, "READY", 0)),
                        ("storage_buckets", "name, store, persistent, status, created_at",
                         ("b-alice", "s3", 0, "READY", 0)),
                        ("managed_jobs", "id, name, status, dag",
                         (7777, "mj-alice", "SUCCEEDED", "{}"))):
                    c.execute(f"INSERT INTO {table} ({cols}, user) VALUES "
                              f"({','.join('?' * len(vals))}, ?)", (*vals, ALICE))
            theirs = sdk.submit("sleep", {"seconds": 0.1})  # the daemon's user's request
            sdk.get_result(theirs)
            markers = ["c-alice", "h-alice", "s-alice", "p-alice", "b-alice", "mj-alice", theirs]

            def member(mode: str, query: str = "", watch_s: float = 0) -> Any:
                args = {"mode": mode, "query": query, "timeout": 10, "watch_s": watch_s,
                        "objects": {"clusters": "c-alice", "jobs": "7777", "services": "s-alice",
                                    "pools": "p-alice", "requests": theirs, "{job_id}": "1"}}
                r = subprocess.run(["runuser", "-u", BOB, "--", "/usr/bin/python3", str(script),
                                    str(shared), json.dumps(args)], capture_output=True,
                                   text=True, timeout=120)
                assert r.returncode == 0, r.stdout + r.stderr
                return json.loads(r.stdout)

            seen = member("walk")
            assert len(seen) > 15, seen  # every route was walked
            assert not [k for k, (_s, body) in seen.items() if "UNMAPPED" in body], seen
            for route, (code, body) in seen.items():
                if code == 403:
                    assert "belongs to user" in body, (route, body)
                    continue
                assert code < 500, (route, code, body)
                leaked = [m for m in markers if m in body]
                assert not leaked, f"{route} shows {BOB} another user's {leaked}: {body[:600]}"
            # Not vacuous: every listing has them with all_users=1.
            everyone = member("walk", "?all_users=1")
            lists = " ".join(everyone[f"GET {p}"][1] for p in (
                "/v1/status", "/v1/jobs", "/v1/services", "/v1/pools", "/v1/storage",
                "/v1/requests", "/v1/cost-report"))
            assert [m for m in markers if m not in lists] == [], lists[:2000]
            assert f'"user":"{ALICE}"' in everyone["GET /v1/cost-report"][1]

            # The live stream: the daemon's user submits while the member watches.
            with anyio_thread_submit(sdk, 2.5) as rids:
                code, stream = member("watch", watch_s=5)
            assert code == 200
            events = [json.loads(ln) for ln in stream.splitlines() if ln.strip()]
            ids = {(e.get("data") or {}).get("id") for e in events if e["topic"] == "requests"}
            assert rids and not ids & set(rids), (rids, events)  # none of the other user's
            assert len(ids - {None}) == 1, events  # the member's own request: its events
    finally:
        shutil.rmtree(sdir, ignore_errors=True)


@contextlib.contextmanager
def anyio_thread_submit(sdk: Any, after_s: float) -> Any:
    """Submit sleep requests as the daemon's user from a thread, ``after_s`` into the
    block (while the member watches); the ids come in the yielded list."""
    import threading
    import time

    rids: list[str] = []

    def go() -> None:
        time.sleep(after_s)
        rids.append(sdk.submit("sleep", {"seconds": 0.1}))

    t = threading.Thread(target=go)
    t.start()
    try:
        yield rids
    finally:
        t.join()


@pytest.fixture
def tui_daemon(skyd_home: Path) -> Iterator[Path]:
    """A daemon whose state has a cluster of its own user's and one of Alice's."""
    from tests.support.tui import seed_db, start_daemon, stop_daemon

    os.environ["SKYD_NO_AUTOSTART"] = "1"
    seed_db([{"name": "mine-1"}, {"name": "alices-1", "user": "alice"}])
    start_daemon()
    try:
        yield skyd_home
    finally:
        stop_daemon()
        os.environ.pop("SKYD_NO_AUTOSTART", None)


async def test_the_tui_shows_the_callers_own_and_u_shows_everyones(tui_daemon: Path) -> None:
    """`skyd tui` lists the caller's own clusters (another user's are not there);
    `skyd tui -u` and the key `u` show every user's (its live stream re-subscribed)."""
    from skyd.tui.app import SkydApp
    from tests.support.tui import screen_text, wait_for

    app = SkydApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.painted_at is not None, what="first paint")
        rows = app.pane("clusters").rows
        assert "mine-1" in rows and "alices-1" not in rows
        await pilot.press("u")
        await wait_for(pilot, lambda: "alices-1" in app.pane("clusters").rows,
                       what="every user's clusters")
        assert "alices-1" in screen_text(app)
        await pilot.press("u")
        await wait_for(pilot, lambda: "alices-1" not in app.pane("clusters").rows,
                       what="own clusters again")
    app = SkydApp(all_users=True)  # skyd tui -u
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.painted_at is not None, what="first paint")
        assert {"mine-1", "alices-1"} <= set(app.pane("clusters").rows)
