"""Ignore patterns and local directory sync (rsync and the Python fallback agree)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from skyd.transports.sync import IgnoreMatcher, load_excludes, rsync_filter_args, sync_local_dir

pytestmark = pytest.mark.anyio


def make_tree(root: Path) -> None:
    files = {
        "main.py": "print(1)\n",
        "pkg/mod.py": "x = 1\n",
        "pkg/cache.pyc": "bin",
        "data/big.bin": "B" * 1000,
        "data/keep.bin": "K",
        "logs/run.log": "log",
        "build/out.o": "o",
        "src/build/gen.c": "c",
        "notes.tmp": "t",
        ".gitignore": "*.pyc\n# comment\n/data/*.bin\n!/data/keep.bin\nlogs/\nbuild/\n*.tmp\n",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


EXPECTED = {".gitignore", "main.py", "pkg/mod.py", "data/keep.bin"}


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_ignore_matcher_gitignore_semantics() -> None:
    m = IgnoreMatcher(["*.pyc", "/top.txt", "docs/*.md", "!docs/keep.md", "out/", "**/gen/*.c"])
    assert m.ignored("a/b/x.pyc", False)
    assert m.ignored("top.txt", False) and not m.ignored("sub/top.txt", False)
    assert m.ignored("docs/a.md", False) and not m.ignored("docs/keep.md", False)
    assert not m.ignored("x/docs/a.md", False)  # inner slash anchors
    assert m.ignored("out", True) and not m.ignored("out", False)  # dir-only
    assert m.ignored("a/gen/z.c", False) and m.ignored("gen/z.c", False)


def test_load_excludes_skydignore_replaces_gitignore(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log\n\n# c\n")
    assert load_excludes(tmp_path) == ["*.log"]
    (tmp_path / ".skydignore").write_text("data/\n")
    assert load_excludes(tmp_path) == ["data/"]
    assert load_excludes(tmp_path / "missing") == []


def test_rsync_filter_args_reverse_order_and_anchor() -> None:
    assert rsync_filter_args(["*.bin", "!keep.bin", "a/b"]) == [
        "--exclude=/a/b", "--include=keep.bin", "--exclude=*.bin"]  # fmt: skip


@pytest.mark.parametrize("use_rsync", [True, False], ids=["rsync", "python"])
async def test_sync_local_dir_excludes_stats_and_resync(tmp_path: Path, use_rsync: bool) -> None:
    if use_rsync and not shutil.which("rsync"):
        pytest.skip("rsync not installed (apt-get install rsync)")
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tree(src)
    stats = await sync_local_dir(src, dst, None, use_rsync=use_rsync)
    assert listing(dst) == EXPECTED
    assert (stats.files, stats.bytes) == (4, sum((src / f).stat().st_size for f in EXPECTED))
    again = await sync_local_dir(src, dst, None, use_rsync=use_rsync)
    assert (again.files, again.bytes) == (0, 0)
    (src / "main.py").write_text("print(2)  # changed\n")
    os.utime(src / "main.py", (1, 1))
    third = await sync_local_dir(src, dst, None, use_rsync=use_rsync)
    assert third.files == 1 and (dst / "main.py").read_text().endswith("changed\n")


@pytest.mark.parametrize("use_rsync", [True, False], ids=["rsync", "python"])
@pytest.mark.parametrize("single", [False, True], ids=["dir", "file"])
async def test_an_edit_of_the_same_size_within_the_same_second_is_synced(
    tmp_path: Path, use_rsync: bool, single: bool
) -> None:
    """Two quick launches: the workdir's copy changed (same size) within the second of the
    last sync. A whole-second quick check (rsync's default) kept the old file on the node."""
    if use_rsync and not shutil.which("rsync"):
        pytest.skip("rsync not installed (apt-get install rsync)")
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    f = src / "train.py"
    f.write_text("print('train-v1')\n")
    os.utime(f, ns=(1_700_000_000_100_000_000, 1_700_000_000_100_000_000))
    a, b = (f, tmp_path / "one.py") if single else (src, dst)
    await sync_local_dir(a, b, [], use_rsync=use_rsync)
    f.write_text("print('train-v2')\n")
    os.utime(f, ns=(1_700_000_000_600_000_000, 1_700_000_000_600_000_000))  # the same second
    st = await sync_local_dir(a, b, [], use_rsync=use_rsync)
    out = b if single else dst / "train.py"
    assert out.read_text() == "print('train-v2')\n"
    assert st.files == 1


async def test_sync_single_file(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("abc")
    st = await sync_local_dir(tmp_path / "f.txt", tmp_path / "out" / "g.txt", [], use_rsync=False)
    assert (st.files, st.bytes) == (1, 3) and (tmp_path / "out" / "g.txt").read_text() == "abc"
