"""Dependencies point one way: every import of ``skyd/`` (lazy ones inside functions and
``TYPE_CHECKING`` ones included) goes to a package on a lower floor of the layer picture
in docs/README.md; the daemon's core never imports its app wiring nor reads a feature's
table."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The picture of docs/README.md ("The layers, as the imports draw them"), floor by floor.
FLOORS: dict[str, int] = {
    "serve": 12, "jobs": 11, "cli": 10, "pipeline": 9, "tui": 8, "sky": 8,
    "sdk": 7, "solver": 7, "storage": 7, "daemon": 6, "clouds": 6,
    "config": 5, "transports": 5, "models": 4, "nodeagent": 4, "secretfiles": 4,
    "paths": 3, "cloudnames": 3, "settings": 2, "fsutil": 2, "names": 2, "bounds": 2,
    "errors": 1, "human": 1, "face": 1, "sqlite_tx": 1, "privatefs": 1, "proto": 1,
}
# The daemon's app wiring (start-up, plugins, sockets) and its entry points: the only
# modules of skyd.daemon that may name skyd.daemon.app.
DAEMON_WIRING = {"skyd/daemon/app.py", "skyd/daemon/__init__.py", "skyd/daemon/__main__.py"}


@functools.cache  # the tree does not change during a run: parse it once for these tests
def _imports() -> list[tuple[str, str]]:
    """(file, imported module) for every absolute import of a skyd module."""
    out: list[tuple[str, str]] = []
    for path in sorted((ROOT / "skyd").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "skyd":
                    out.extend((rel, f"skyd.{a.name}") for a in node.names)
                elif node.module.startswith("skyd."):
                    out.append((rel, node.module))
            elif isinstance(node, ast.Import):
                out.extend((rel, a.name) for a in node.names if a.name.startswith("skyd."))
    return out


def _package(module_or_file: str) -> str:
    return module_or_file.replace("/", ".").removesuffix(".py").split(".")[1]


def test_every_package_has_a_floor() -> None:
    tops = {p.stem for p in (ROOT / "skyd").iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert tops <= set(FLOORS), f"give these a floor (docs/README.md too): {tops - set(FLOORS)}"


def test_every_import_points_down() -> None:
    up = sorted({(f, m) for f, m in _imports()
                 if _package(m) in FLOORS and _package(f) != _package(m)
                 and FLOORS[_package(m)] >= FLOORS[_package(f)]})
    assert not up, "imports that do not point down the layer picture:\n" + "\n".join(
        f"  {f} -> {m}" for f, m in up)


def test_the_daemon_core_does_not_import_its_app_wiring() -> None:
    back = sorted(f for f, m in _imports()
                  if m == "skyd.daemon.app" and f.startswith("skyd/daemon/")
                  and f not in DAEMON_WIRING)
    assert not back, f"type against skyd.daemon.host.Host instead: {back}"


def test_features_type_their_hooks_against_the_host_not_the_app() -> None:
    users = sorted(f for f, m in _imports()
                   if m == "skyd.daemon.app" and not f.startswith("skyd/daemon/")
                   and f != "skyd/cli/cmd_daemon.py")  # `skyd daemon run` starts the app
    assert not users, users


def test_the_daemon_core_reads_no_feature_table() -> None:
    """Which table keeps a feature's objects (and their owners) is the feature's to say
    (skyd.daemon.owners.own, called from the feature's schema module)."""
    feature_tables = ("clusters", "cluster_jobs", "cluster_history", "managed_jobs", "services",
                      "job_pools", "storage_buckets", "replicas")
    hits = []
    for path in sorted((ROOT / "skyd" / "daemon").glob("*.py")):
        text = path.read_text()
        hits += [f"{path.name}: {t}" for t in feature_tables
                 if f"FROM {t} " in text or f"FROM {t}\"" in text or f"JOIN {t} " in text]
    # ...nor declares where one keeps its owners: the features call owners.own()
    owners = (ROOT / "skyd" / "daemon" / "owners.py").read_text()
    hits += [f"owners.py: {t}" for t in feature_tables if f'"{t}"' in owners]
    assert not hits, hits
