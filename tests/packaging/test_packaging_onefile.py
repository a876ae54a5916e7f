"""The one-file launcher (packaging/onefile.py + onefile_launcher.sh) around a small stand-in
for the one-folder build: unpack once per version into the cache, exec from there, refuse a
damaged file, repair an incomplete cache, serialize concurrent first runs, clean old
versions no process runs from. (tests/packaging/test_packaging_frozen.py drives the real build.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packaging"))
import onefile  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")

FAKE = """#!/bin/sh
echo "version $(cat "$(dirname "$0")/_internal/version")"
for a in "$@"; do echo "[$a]"; done
echo "self=$0"
echo "onefile=$SKYD_ONEFILE"
exit ${FAKE_RC:-0}
"""


def fake_onedir(base: Path, version: str, exe: str | None = None) -> Path:
    """A one-folder tree: skyd/skyd (a script, or a copy of the real executable ``exe``)."""
    d = base / f"onedir-{version}" / "skyd"
    (d / "_internal" / "sub").mkdir(parents=True)
    (d / "_internal" / "version").write_text(version + "\n")
    (d / "_internal" / "sub" / "data.bin").write_bytes(os.urandom(200_000))
    os.symlink("sub/data.bin", d / "_internal" / "link")
    if exe:
        shutil.copy2(exe, d / "skyd")
    else:
        (d / "skyd").write_text(FAKE)
        (d / "skyd").chmod(0o755)
    return d


def pack(tmp: Path, version: str, exe: str | None = None) -> tuple[Path, str]:
    out = tmp / f"skyd-{version}"
    digest = onefile.build(fake_onedir(tmp, version, exe), out)
    return out, digest


def run(exe: Path | str, *args: str, cache: Path, cwd: Path | None = None,
        **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "SKYD_ONEFILE"}
    e.update(SKYD_ONEFILE_CACHE=str(cache), **env)
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=e, cwd=cwd,
                          timeout=60, check=False)


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_first_run_unpacks_later_runs_exec_the_cached_copy(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    cache = tmp_path / "cache"
    r = run(exe, "a b", "", "c'd", "$HOME", cache=cache)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:5] == ["version v1", "[a b]", "[]", "[c'd]", "[$HOME]"]
    assert f"self={cache}/{digest}/skyd/skyd" in lines
    assert f"onefile={exe}" in lines
    assert entries(cache) == [".lock", digest]  # no temp folder left
    assert (cache / digest / ".complete").read_text() == digest + "\n"
    assert (cache / digest / "skyd" / "_internal" / "link").is_symlink()
    # Later runs exec the cached copy (no unpack): a change there shows.
    (cache / digest / "skyd" / "_internal" / "version").write_text("cached\n")
    r = run(exe, "--version", cache=cache, FAKE_RC="3")
    assert r.returncode == 3 and r.stdout.startswith("version cached\n[--version]\n")
    # Started by a relative path, SKYD_ONEFILE is still absolute (the systemd unit uses it).
    r = run("./" + exe.name, cache=cache, cwd=exe.parent)
    assert f"onefile={exe}" in r.stdout.splitlines()


def test_default_cache_is_per_user_under_xdg_cache_home(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    e = {k: v for k, v in os.environ.items() if k not in ("SKYD_ONEFILE_CACHE", "SKYD_ONEFILE")}
    e["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=e, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "xdg" / "skyd" / "onefile" / digest / ".complete").exists()


def test_damaged_file_is_refused_and_nothing_is_published(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    data = bytearray(exe.read_bytes())
    data[-5000] ^= 0xFF
    exe.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    r = run(exe, cache=cache)
    assert r.returncode == 1 and "is damaged" in r.stderr and "download it again" in r.stderr
    assert entries(cache) == [".lock"]


def test_incomplete_cache_is_unpacked_again(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    cache = tmp_path / "cache"
    assert run(exe, cache=cache).returncode == 0
    (cache / digest / "skyd" / "_internal" / "version").write_text("stale\n")
    for broken in ("", "not-the-hash\n"):  # marker missing, or another build's
        (cache / digest / ".complete").unlink(missing_ok=True)
        if broken:
            (cache / digest / ".complete").write_text(broken)
        r = run(exe, cache=cache)
        assert r.returncode == 0 and r.stdout.startswith("version v1\n"), r.stderr
        assert (cache / digest / ".complete").read_text() == digest + "\n"
        (cache / digest / "skyd" / "_internal" / "version").write_text("stale\n")
    (cache / ".tmp.killed").mkdir()  # an unpack that was killed half-way
    shutil.rmtree(cache / digest)
    assert run(exe, cache=cache).returncode == 0
    assert entries(cache) == [".lock", digest]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a folder to another uid")
def test_someone_elses_cache_is_never_run(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    cache = tmp_path / "cache"
    assert run(exe, cache=cache).returncode == 0
    (cache / digest / "skyd" / "_internal" / "version").write_text("planted\n")
    os.chown(cache / digest / "skyd" / "skyd", 65534, 65534)  # now nobody's
    r = run(exe, cache=cache)
    assert r.returncode == 0 and r.stdout.startswith("version v1\n")  # unpacked again
    os.chown(cache, 65534, 65534)  # whoever owns the cache can swap what is in it
    r = run(exe, cache=cache)
    assert r.returncode == 1 and "belongs to another user" in r.stderr and r.stdout == ""


def test_concurrent_first_runs_share_one_unpack(tmp_path: Path) -> None:
    exe, digest = pack(tmp_path, "v1")
    cache = tmp_path / "cache"
    e = {**os.environ, "SKYD_ONEFILE_CACHE": str(cache)}
    procs = [subprocess.Popen([str(exe), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=e) for i in range(8)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [o[1] for o in outs]
    assert all(o[0].startswith(f"version v1\n[{i}]\n") for i, o in enumerate(outs))
    assert entries(cache) == [".lock", digest]


def test_new_version_removes_old_ones_no_process_runs_from(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    old, old_digest = pack(tmp_path, "v1")
    busy, busy_digest = pack(tmp_path, "busy", exe=shutil.which("sleep"))
    new, new_digest = pack(tmp_path, "v2")
    assert run(old, cache=cache).returncode == 0
    e = {**os.environ, "SKYD_ONEFILE_CACHE": str(cache)}
    running = subprocess.Popen([str(busy), "30"], env=e)  # a daemon of that version, say
    try:
        exe_link = Path(f"/proc/{running.pid}/exe")
        deadline = time.monotonic() + 30
        while busy_digest not in os.readlink(exe_link) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run(new, cache=cache).returncode == 0
        assert entries(cache) == sorted([".lock", busy_digest, new_digest])
    finally:
        running.kill()
        running.wait()
    assert old_digest not in entries(cache)


def test_payload_is_reproducible(tmp_path: Path) -> None:
    tree = fake_onedir(tmp_path, "v1")
    a = onefile.build(tree, tmp_path / "a")
    os.utime(tree / "_internal" / "version", (1, 1))
    b = onefile.build(tree, tmp_path / "b")
    assert a == b and (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
