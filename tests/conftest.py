"""Shared fixtures. Each test that touches state gets its own SKYD_HOME and socket."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Fixtures many modules share (a module's own fixture of the same name takes precedence).
pytest_plugins = ["tests.support.plugin"]

# -- bytecode -------------------------------------------------------------------------------
# The suite starts ~1,600 Python processes (daemons, CLI calls, agents) that import skyd.
# Where bytecode writing is off (PYTHONDONTWRITEBYTECODE, common in containers) each would
# compile from source every module it imports: about 0.3 CPU-s per daemon start, a third of
# a CLI call. So the session compiles the checkout's own sources once, into their
# __pycache__ (ignored by git), and lets pytest keep its rewritten test modules there too;
# the processes it starts only read them.
_ROOT = Path(__file__).resolve().parent.parent
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller compiled already
        return
    import compileall

    for d in ("skyd", "tests"):
        compileall.compile_dir(_ROOT / d, quiet=1, workers=0)


# -- the garbage collector ------------------------------------------------------------------
# A test process holds ~500,000 objects (moto's data, textual, the skyd modules), and each of
# CPython's full collections walks them all: ~0.3 CPU-s, about once a minute of a worker's
# tests at the default thresholds (gen2 after 10 gen1 runs) -- ~13 % of an AWS/TUI file's CPU.
# What is alive once the tests are collected (modules, test items) is set aside for good
# (gc.freeze), and a full collection runs after 100 gen1 runs instead of 10: garbage cycles
# still go (the young generations are collected as often as before), old ones later.
def pytest_collection_finish(session: pytest.Session) -> None:
    import gc

    gc.freeze()
    gc.set_threshold(700, 10, 100)


@pytest.fixture(scope="session", autouse=True)
def shared_tmp_untouched() -> Iterator[None]:
    """Nothing skyd or its tests do may change the mode of the shared /tmp (a daemon once
    tightened its socket's parent directory, and SKYD_SOCKET=/tmp/x.sock made that /tmp)."""
    import stat

    before = stat.S_IMODE(os.stat("/tmp").st_mode)
    yield
    after = stat.S_IMODE(os.stat("/tmp").st_mode)
    assert after == before, f"/tmp mode changed during the tests: {oct(before)} -> {oct(after)}"


@pytest.fixture(scope="session", autouse=True)
def aws_loopback_only() -> Iterator[None]:
    """The aws provider may reach 127.0.0.0/8 endpoints and hosts only (a moto server and
    fake SSH hosts), never AWS, instance metadata or a developer's ~/.aws profiles."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYD_AWS_LOOPBACK_ONLY", "1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/skyd-tests/aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/skyd-tests/aws-credentials")
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                  "AWS_ENDPOINT_URL"):
            mp.delenv(k, raising=False)
        yield


@pytest.fixture(scope="session", autouse=True)
def user_ssh_config_untouched() -> Iterator[None]:
    """No test adds skyd's Include line to the real ~/.ssh/config: daemons the tests start
    leave it alone (SKYD_SSH_CONFIG=off); the tests of that line set HOME to a temp dir and
    turn it back on (tests/clouds/test_ssh_config.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYD_SSH_CONFIG", "off")
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def skyd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated skyd instance: SKYD_HOME, SKYD_SOCKET and SKYD_CONFIG_DIR under tmp.

    The socket lives under /tmp directly because AF_UNIX paths are limited to ~107 bytes.
    """
    import tempfile

    home = tmp_path / "home"
    home.mkdir()
    sockdir = Path(tempfile.mkdtemp(prefix="skyd-", dir="/tmp"))
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_SOCKET", str(sockdir / "s.sock"))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("SKYD_CATALOG_DIR", raising=False)
    # SkyPilot's config layers (skyd.config): never the developer's ~/.sky/config.yaml
    (tmp_path / "sky-config.yaml").write_text("")
    monkeypatch.setenv("SKYPILOT_GLOBAL_CONFIG", str(tmp_path / "sky-config.yaml"))
    monkeypatch.delenv("SKYPILOT_CONFIG", raising=False)
    monkeypatch.delenv("SKYPILOT_PROJECT_CONFIG", raising=False)
    yield home
    try:
        for p in sockdir.iterdir():
            p.unlink()
        sockdir.rmdir()
    except OSError:
        pass


# -- the network rule, for every test (tests/fakes/netguard) -----------------------------------

_GUARD_DIR = Path(__file__).resolve().parent / "fakes" / "netguard"


@pytest.fixture(scope="session", autouse=True)
def network_guard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test reaches anything outside 127.0.0.0/8 (and AF_UNIX): the audit hook refuses any
    other connection or name lookup in this process, and in every Python process the tests
    start (daemons, CLIs: the guard's ``sitecustomize`` is first on their PYTHONPATH and
    refusals go to one log). Credential discovery is kept off the instance-metadata
    addresses: AWS by AWS_EC2_METADATA_DISABLED (see aws_loopback_only), Google's libraries by
    NO_GCE_CHECK and a metadata host on a closed loopback port."""
    from tests.fakes.netguard import sitecustomize as netguard

    log = tmp_path_factory.mktemp("netguard") / "refused.log"
    log.write_text("")
    netguard.install()
    from skyd import paths

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYD_NETGUARD_LOG", str(log))
        # The node agent's Python 3.8 dependency set comes from the cache the setup step
        # filled (python -m skyd.nodeagent.compat_deps), whatever HOME a test sets.
        mp.setenv("SKYD_CACHE_DIR", str(paths.cache_dir()))
        mp.setenv("PYTHONPATH", os.pathsep.join(
            p for p in (str(_GUARD_DIR), os.environ.get("PYTHONPATH", "")) if p))
        mp.setenv("NO_GCE_CHECK", "True")  # google-auth: do not probe the metadata server
        mp.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # ...and if it does, a closed local port
        mp.setenv("GCE_METADATA_IP", "127.0.0.1:9")
        mp.setenv("GCE_METADATA_ROOT", "127.0.0.1:9")
        yield log
    assert not netguard.VIOLATIONS, f"connections outside 127.0.0.0/8: {netguard.VIOLATIONS}"
    assert log.read_text() == "", f"connections outside 127.0.0.0/8 (subprocesses): {log.read_text()}"


@pytest.fixture(autouse=True)
def no_traffic_out(network_guard: Path) -> Iterator[None]:
    """Each test fails on its own refused connection, even one the code under test caught."""
    from tests.fakes.netguard import sitecustomize as netguard

    before, size = len(netguard.VIOLATIONS), network_guard.stat().st_size
    yield
    new = netguard.VIOLATIONS[before:]
    with open(network_guard) as f:
        f.seek(size)
        sub = f.read()
    assert not new and not sub, f"connections outside 127.0.0.0/8: {new} {sub}"


# -- running in parallel (pytest -n N, pytest-xdist) ------------------------------------------

# A unit of work is a test file: its module fixtures are set up once, on one worker. What
# is machine-wide (the Unix test users real sshd wipes and pkills, the Slurm daemons' fixed
# ports) is one set per worker (tests/fakes/unixnames.py), so any two files may run at once.
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole test files to one worker each (xdist's own loadscope would split a file's
    classes; its loadgroup marks no longer reach the scheduler on pytest 9.2:
    pytest-dev/pytest-xdist#1386), the files with the most tests first."""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # the workers' collection order (below) is the plan
    return FileScheduling(config, log)  # type: ignore[arg-type]


# The order files are handed out in: the longest first, so that no long file starts late and
# runs alone at the end. tests/file_walls.tsv holds the seconds each file took in a run on
# four workers (regenerated from a SKYD_TEST_CPU_LOG: docs/README.md); a file not in it
# counts 0.2 s a test. Only the order depends on it.
def _file_walls() -> dict[str, float]:
    try:
        rows = (_ROOT / "tests" / "file_walls.tsv").read_text().splitlines()
    except OSError:
        return {}
    return {f: float(w) for f, w in (r.split("\t") for r in rows if r.strip())}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a serial run keeps pytest's order
    walls = _file_walls()
    count: dict[str, int] = {}
    for it in items:
        f = it.nodeid.split("::", 1)[0]
        count[f] = count.get(f, 0) + 1
    first: dict[str, int] = {}
    for i, it in enumerate(items):
        first.setdefault(it.nodeid.split("::", 1)[0], i)

    def key(it: pytest.Item) -> tuple[float, int]:
        f = it.nodeid.split("::", 1)[0]
        return (-walls.get(f, 0.2 * count[f]), first[f])

    items.sort(key=key)  # stable: a file's tests keep their order


@pytest.fixture(scope="session", autouse=True)
def worker_local_net() -> Iterator[None]:
    """Each xdist worker hands out `local` node addresses from its own loopback range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYD_LOCAL_NET", f"127.{100 + int(worker[2:])}.0.0/16")
        yield


# -- where the suite's CPU goes (SKYD_TEST_CPU_LOG=<file>: one line per test) ----------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With SKYD_TEST_CPU_LOG set, append "<nodeid>\\t<wall s>\\t<this process's CPU s>\\t<reaped
    children's CPU s>" per test (set-up and tear-down included): what to make cheaper first."""
    log = os.environ.get("SKYD_TEST_CPU_LOG")
    if not log:
        yield
        return
    import resource
    import time

    def cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    w0, s0, c0 = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    line = (f"{item.nodeid}\t{time.monotonic() - w0:.2f}\t{cpu(resource.RUSAGE_SELF) - s0:.2f}"
            f"\t{cpu(resource.RUSAGE_CHILDREN) - c0:.2f}\n")
    with open(log, "a") as f:
        f.write(line)
