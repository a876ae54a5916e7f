"""Package faces: each package says what it offers (``__all__``), the names resolve, a face
costs nothing to import, and no module imports another module's ``_private`` name."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(
    ".".join(p.parent.relative_to(ROOT).parts)
    for p in (ROOT / "skyd").rglob("__init__.py")
    if "proto" not in p.parts and "nodeagent" not in p.parts and "panes" not in p.parts
    and "screens" not in p.parts and p.parent.parent.name != "clouds"
)
# No module imports another module's private name (what is shared gets a public name).
KNOWN: set[tuple[str, str, str]] = set()


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_says_what_it_offers_and_the_names_resolve(package: str) -> None:
    mod = importlib.import_module(package)
    names = getattr(mod, "__all__", None)
    assert names, f"{package}/__init__.py has no __all__"
    for name in names:
        assert getattr(mod, name, None) is not None or importlib.import_module(
            f"{package}.{name}"), f"{package}.{name} does not resolve"


def test_a_face_imports_nothing_until_a_name_is_used() -> None:
    code = ("import sys, skyd.daemon, skyd.pipeline, skyd.jobs, skyd.serve, skyd.transports, "
            "skyd.cli, skyd.storage, skyd.tui\n"
            "heavy = [m for m in ('aiohttp', 'aiosqlite', 'asyncssh', 'skyd.daemon.app', "
            "'skyd.pipeline.launch') if m in sys.modules]\n"
            "print(','.join(heavy))\n"
            "from skyd.daemon import Store\n"
            "assert 'aiosqlite' in sys.modules and Store.__name__ == 'Store'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_every_providers_facts_and_check_import_without_the_ssh_stack() -> None:
    """The planner asks every provider for its facts (config keys, catalog, check) on a
    launch: that must not load asyncssh, which only a transport's first connection needs."""
    code = ("import sys\n"
            "from skyd.clouds.base import get_cloud, registered_clouds\n"
            "for name in registered_clouds():\n"
            "    get_cloud(name).provisioner()\n"
            "print(','.join(m for m in ('asyncssh', 'skyd.transports.ssh_client') if m in sys.modules))\n"
            "from skyd.transports.ssh import SSHTransport\n"
            "assert 'asyncssh' not in sys.modules and SSHTransport.__name__ == 'SSHTransport'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_no_module_imports_another_modules_private_name() -> None:
    found = set()
    for path in sorted((ROOT / "skyd").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    and node.module.startswith("skyd.")):
                continue
            target = node.module.replace(".", "/")
            if rel in (f"{target}.py", f"{target}/__init__.py"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add((rel, node.module, alias.name))
    assert found <= KNOWN, sorted(found - KNOWN)
