"""The frozen binary (packaging/build.sh): --version, daemon start, the node-agent entry and
bundled zipapp, a local launch when the pipeline works, down. Slow: builds take ~1 min."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["onefile", "onedir"])
def binary(request: pytest.FixtureRequest) -> Path:
    mode = request.param
    exe = ROOT / ("dist/onefile/skyd" if mode == "onefile" else "dist/onedir/skyd/skyd")
    if os.environ.get("SKYD_SKIP_BUILD") != "1" or not exe.exists():
        subprocess.run([str(ROOT / "packaging/build.sh"), mode], check=True, timeout=900)
    return exe


def run(exe: Path, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def test_frozen_binary_end_to_end(binary: Path, tmp_path: Path) -> None:
    env = {**os.environ, "SKYD_HOME": str(tmp_path / "home"),
           "SKYD_SOCKET": tempfile.mkdtemp(dir="/tmp") + "/s.sock"}
    env.pop("SKYD_EXTRA_PLUGINS", None)
    assert run(binary, "--version", env=env).stdout.strip() == "skyd 0.1.0"
    agent = run(binary, "__agent__", "--help", env=env)
    assert agent.returncode == 0 and "--home" in agent.stdout
    internal = binary.parent / "_internal" / "skyd" / "nodeagent"
    if binary.parent.name == "skyd":  # one-folder build: the bundled agent zipapp is visible
        assert (internal / "skyd-agent.pyz").stat().st_size > 100_000
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
