"""The frozen binary (packaging/build.sh): --version, daemon start, the node-agent entry and
bundled zipapp, a local launch, down, the systemd unit's ExecStart; for the one-file build
also its unpack cache. Slow: the build takes ~2 min."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the build is in the fixture
EXES = {"onefile": ROOT / "dist/onefile/skyd", "onedir": ROOT / "dist/onedir/skyd/skyd"}


@pytest.fixture(scope="module")
def built() -> None:
    if os.environ.get("SKYD_SKIP_BUILD") != "1" or not all(p.exists() for p in EXES.values()):
        subprocess.run([str(ROOT / "packaging/build.sh"), "both"], check=True, timeout=1200)


@pytest.fixture(params=["onefile", "onedir"])
def binary(request: pytest.FixtureRequest, built: None) -> Path:
    return EXES[request.param]


def run(exe: Path, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def test_frozen_binary_end_to_end(binary: Path, tmp_path: Path) -> None:
    cache = tmp_path / "onefile-cache"
    bindir = tmp_path / "bin"  # a systemctl that only records (no user manager here)
    bindir.mkdir()
    (bindir / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "systemctl").chmod(0o755)
    env = {**os.environ, "SKYD_HOME": str(tmp_path / "home"),
           "SKYD_SOCKET": tempfile.mkdtemp(dir="/tmp") + "/s.sock",
           "SKYD_ONEFILE_CACHE": str(cache), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("SKYD_EXTRA_PLUGINS", None)
    env.pop("SKYD_ONEFILE", None)
    assert run(binary, "--version", env=env).stdout.strip() == "skyd 0.1.0"
    onefile = binary.parent.name == "onefile"
    if onefile:  # unpacked once into the cache: one version folder, the agent zipapp in it
        versions = [p for p in cache.iterdir() if not p.name.startswith(".")]
        assert len(versions) == 1 and (versions[0] / ".complete").exists()
        internal = versions[0] / "skyd" / "_internal" / "skyd" / "nodeagent"
    else:
        internal = binary.parent / "_internal" / "skyd" / "nodeagent"
    assert (internal / "skyd-agent.pyz").stat().st_size > 100_000
    agent = run(binary, "__agent__", "--help", env=env)
    assert agent.returncode == 0 and "--home" in agent.stdout
    out = run(binary, "daemon", "start", env=env)
    assert out.returncode == 0, out.stderr
    try:
        st = run(binary, "status", env=env)
        assert st.returncode == 0, st.stderr
        task = tmp_path / "t.yaml"
        task.write_text("resources:\n  infra: local\nrun: echo frozen-hello\n")
        launch = run(binary, "launch", "-y", "-c", "frozen", str(task), env=env, timeout=300)
        assert launch.returncode == 0, launch.stderr[-500:]
        assert "frozen-hello" in launch.stdout
        down = run(binary, "down", "-y", "frozen", env=env, timeout=300)
        assert down.returncode == 0, down.stderr
    finally:
        run(binary, "daemon", "stop", env=env)
    # The unit starts this very build: the one file itself (its cache folder may be cleaned
    # by a newer version), or the one-folder executable.
    inst = run(binary, "daemon", "install-service", env=env)
    assert inst.returncode == 0, inst.stderr
    unit = (tmp_path / "xdg" / "systemd" / "user" / "skyd.service").read_text()
    want = binary if onefile else Path(os.path.realpath(binary))
    assert f"ExecStart={want} daemon run\n" in unit
