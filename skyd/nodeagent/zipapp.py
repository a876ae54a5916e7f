"""Build the node agent as a self-contained zipapp (`python3 agent.pyz --home ...`).

Packs skyd/nodeagent + skyd/proto and the pure-Python runtime deps. Compiled extensions are
left out (they cannot load from a zip); multidict runs its pure-Python fallback
(MULTIDICT_NO_EXTENSIONS=1 is set in __main__). The archive is deterministic (sorted entries,
fixed timestamps), so its sha256 identifies the version to upload.

A zip holds no ``__pycache__``, so an agent started from one compiles every module it imports
(~0.8 CPU-s against ~0.2 from bytecode). The archive therefore also carries, beside each
``x.py``, an ``x.pyc`` for the building interpreter's Python version: unchecked hash-based
bytecode (PEP 552), which zipimport uses where the magic number matches and otherwise
skips for the source. It is compiled in a fresh interpreter (``-S``, ``PYTHONHASHSEED=0``)
so the bytes, and so the archive's sha256, depend only on the sources and the Python
version. A finished archive is cached under ``<cache_dir>/agent-zipapp/`` by the sha256 of
its inputs: the next daemon of this install reuses it instead of compiling again.

The deps are taken from `deps_dirs` first, then from this interpreter's sys.path. Those are
the daemon's own (current) releases, which need Python >= 3.11 (multidict's pure-Python fallback uses typing.Self). So that a
node needs only Python >= 3.8, the archive can also carry a second set, older releases of
the same pure-Python packages (COMPAT_PINS, fetched once by skyd.nodeagent.compat_deps),
under ``_py38/``; ``__main__`` puts it first on sys.path on an interpreter older than 3.11. Without
that set, the agent says on such a node exactly what is missing instead of failing
obscurely.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import marshal
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

# module -> distribution (a METADATA stub is packed too: betterproto reads its own version).
DEPS = {"grpclib": "grpclib", "betterproto": "betterproto", "h2": "h2", "hpack": "hpack",
        "hyperframe": "hyperframe", "multidict": "multidict", "dateutil": "python_dateutil",
        "six": "six", "typing_extensions": "typing_extensions"}  # fmt: skip
_SKIP_DIRS = {"__pycache__", "tests", "plugin", "templates"}
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_KEEP_CACHED = 4  # finished archives kept in the cache (the newest used)

# Run by a fresh `python -S`: stdin is marshal([(arc, source), ...]), stdout marshal([(arc,
# pyc), ...]). PEP 552 unchecked hash-based pycs: header = magic, flags 0b01, source hash.
_COMPILE = """import importlib.util, marshal, sys
out = []
for arc, src in marshal.loads(sys.stdin.buffer.read()):
    code = compile(src, "skyd-agent.pyz/" + arc, "exec", dont_inherit=True, optimize=0)
    head = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(src)
    out.append((arc + "c", head + marshal.dumps(code)))
sys.stdout.buffer.write(marshal.dumps(out))
"""

MAIN = """import os, sys
os.environ.setdefault("MULTIDICT_NO_EXTENSIONS", "1")
if sys.version_info < (3, 11):
    import zipfile
    with zipfile.ZipFile(sys.path[0]) as _z:
        _compat = "_py38/COMPAT" in _z.namelist()
    if not _compat:
        sys.exit("skyd node agent: this build carries dependencies for Python >= 3.11 only and "
                 "this node has %d.%d; rebuild the agent with network access to PyPI (it then "
                 "adds a Python 3.8 set) or install Python >= 3.11 as python3" % sys.version_info[:2])
    sys.path.insert(0, os.path.join(sys.path[0], "_py38"))
from skyd.proto import seed_betterproto_version
seed_betterproto_version("@BETTERPROTO_PY38@" if sys.version_info < (3, 11) else "@BETTERPROTO@")
from skyd.nodeagent.__main__ import main
main()
"""
SKYD_INIT = '"""skyd (node agent zipapp: only skyd.nodeagent and skyd.proto)."""\n'


def _module_root(name: str, deps_dirs: Sequence[str]) -> Path:
    for d in deps_dirs:
        for cand in (Path(d) / name, Path(d) / (name + ".py")):
            if cand.exists():
                return cand
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"dependency {name} is not installed")
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _dist_version(dist: str, site: Path) -> str:
    from skyd.proto import dist_info_version

    return dist_info_version(dist, str(site)) or importlib.metadata.version(dist)


def _collect(root: Path, arc_prefix: str, out: dict[str, bytes]) -> None:
    if root.is_file():
        out[arc_prefix] = root.read_bytes()
        return
    for dirpath, dirnames, filenames in os.walk(str(root)):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        rel = Path(dirpath).relative_to(root)
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed", ".pyi")) and not fn.endswith("_pb2.py"):
                out[str(Path(arc_prefix) / rel / fn)] = (Path(dirpath) / fn).read_bytes()


def _add_deps(files: dict[str, bytes], dirs: Sequence[str], prefix: str) -> dict[str, str]:
    """Pack the deps under ``prefix``; return each distribution's version."""
    versions = {}
    for name, dist in DEPS.items():
        root = _module_root(name, dirs)
        _collect(root, prefix + (name if root.is_dir() else root.name), files)
        version = versions[dist] = _dist_version(dist, root.parent)
        files[f"{prefix}{dist}-{version}.dist-info/METADATA"] = (
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        ).encode()
    return versions


def _bytecode(files: dict[str, bytes]) -> dict[str, bytes]:
    """``x.pyc`` for every ``x.py`` this interpreter's Python runs (not the ``_py38/`` set),
    compiled in a fresh interpreter so that the bytes are the same at every build."""
    todo = [(arc, src) for arc, src in sorted(files.items())
            if arc.endswith(".py") and not arc.startswith("_py38/")]  # fmt: skip
    if getattr(sys, "frozen", False):
        return {}  # no interpreter to run (a frozen skyd ships a prebuilt archive)
    out = subprocess.run([sys.executable, "-S", "-c", _COMPILE], input=marshal.dumps(todo),
                         capture_output=True, check=True, timeout=300,
                         env={"PYTHONHASHSEED": "0"})  # fmt: skip
    return dict(marshal.loads(out.stdout))


def _inputs_key(files: dict[str, bytes], interpreter: str) -> str:
    h = hashlib.sha256(b"skyd-agent-zipapp 1\0" + importlib.util.MAGIC_NUMBER)
    h.update(interpreter.encode() + b"\0")
    for arc in sorted(files):
        h.update(arc.encode() + b"\0" + hashlib.sha256(files[arc]).digest())
    return h.hexdigest()


def _cached(cache: Path | None, key: str) -> bytes | None:
    if cache is None:
        return None
    p = cache / "agent-zipapp" / (key + ".pyz")
    try:
        data = p.read_bytes()
        os.utime(str(p))  # used now: kept by _store's pruning
    except OSError:
        return None
    return data


def _store(cache: Path | None, key: str, data: bytes) -> None:
    """Keep ``data`` under the cache (atomically), and only the newest few archives."""
    if cache is None:
        return
    d = cache / "agent-zipapp"
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / ("%s.%d.tmp" % (key, os.getpid()))
        tmp.write_bytes(data)
        os.replace(str(tmp), str(d / (key + ".pyz")))
        old = sorted(d.glob("*.pyz"), key=lambda p: p.stat().st_mtime, reverse=True)
        for p in old[_KEEP_CACHED:]:
            p.unlink()
    except OSError:
        pass  # a cache: the archive was built all the same


def build_zipapp(out_path: Path, *, deps_dirs: Sequence[str] | None = None,
                 compat_dir: str | Path | None = None,
                 interpreter: str = "/usr/bin/env python3",
                 cache_dir: Path | None = None) -> str:  # fmt: skip
    """Write the agent zipapp to out_path; return its sha256 hex digest.

    `compat_dir`: a --target directory of COMPAT_PINS (see compat_deps), packed under _py38/
    for nodes with Python 3.8/3.9. `cache_dir`: reuse (and keep) finished archives there."""
    dirs: list[str] = list(deps_dirs or [])
    from skyd import settings  # (daemon side: the zipapp itself holds no skyd.settings)

    env_dir = settings.AGENT_DEPS_DIR.get()
    if env_dir is not None:
        dirs.append(str(env_dir))
    pkg = Path(__file__).resolve().parent
    files: dict[str, bytes] = {"skyd/__init__.py": SKYD_INIT.encode()}
    _collect(pkg, "skyd/nodeagent", files)
    _collect(pkg.parent / "proto", "skyd/proto", files)
    main = MAIN.replace("@BETTERPROTO@", _add_deps(files, dirs, "")["betterproto"])
    if compat_dir is not None:
        # Only from compat_dir: never fall back to this interpreter's (too new) releases.
        for name in DEPS:
            if not any((Path(compat_dir) / c).exists() for c in (name, name + ".py")):
                raise RuntimeError(f"{compat_dir} lacks {name}: fetch the compat set again")
        old = _add_deps(files, [str(compat_dir)], "_py38/")
        main = main.replace("@BETTERPROTO_PY38@", old["betterproto"])
        files["_py38/COMPAT"] = b"dependencies for Python 3.8 and 3.9\n"
    # (the version betterproto would otherwise look up with importlib.metadata: skyd/proto)
    files["__main__.py"] = main.encode()
    key = _inputs_key(files, interpreter)
    data = _cached(cache_dir, key)
    if data is None:
        data = _pack(files, _bytecode(files), interpreter)
        _store(cache_dir, key, data)
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_bytes(data)
    os.chmod(str(tmp), 0o755)
    os.replace(str(tmp), str(out_path))
    return hashlib.sha256(data).hexdigest()


def _pack(files: dict[str, bytes], pycs: dict[str, bytes], interpreter: str) -> bytes:
    files = {**files, **pycs}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arc in sorted(files):
            info = zipfile.ZipInfo(arc.replace(os.sep, "/"), _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, files[arc])
    return b"#!" + interpreter.encode() + b"\n" + buf.getvalue()


if __name__ == "__main__":
    print(build_zipapp(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("skyd-agent.pyz")))
