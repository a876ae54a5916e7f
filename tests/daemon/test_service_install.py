"""`skyd daemon install-service` / `uninstall-service`: the unit file, the systemctl calls,
and `systemd-analyze --user verify` on what we generate."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from skyd.daemon import service_install as si
from skyd.errors import SkydError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def xdg(tmp_path: Path, skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def fake_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rc: int = 0) -> Path:
    """A `systemctl` executable on PATH that records its arguments (systemd is not running
    here); only PATH changes, our code runs unmodified."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "systemctl.log"
    exe = bindir / "systemctl"
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\necho 'Failed to connect to bus' >&2\n"
                   f"exit {rc}\n" if rc else f"#!/bin/sh\necho \"$@\" >> {log}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return log


def test_install_writes_unit_and_enables_it(xdg: Path, skyd_home: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_systemctl(tmp_path, monkeypatch)
    out = si.install(now=True)
    unit = xdg / "systemd" / "user" / "skyd.service"
    assert out.unit == unit and unit.exists()
    text = unit.read_text()
    assert f"ExecStart={sys.executable} -m skyd.daemon\n" in text
    assert "Type=notify\n" in text and "Restart=on-failure\n" in text
    assert f"Environment=SKYD_HOME={skyd_home.resolve()}\n" in text
    assert f"Environment=SKYD_SOCKET={Path(os.environ['SKYD_SOCKET']).resolve()}\n" in text
    assert log.read_text().splitlines() == [
        "--user daemon-reload", "--user enable --now skyd.service", "--user restart skyd.service"]
    assert any("started" in m for m in out.messages)


def test_install_without_now_only_enables(xdg: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_systemctl(tmp_path, monkeypatch)
    si.install(now=False)
    assert log.read_text().splitlines() == ["--user daemon-reload", "--user enable skyd.service"]


def test_failing_systemctl_says_why_and_keeps_the_unit(xdg: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fake_systemctl(tmp_path, monkeypatch, rc=1)
    with pytest.raises(SkydError, match="daemon-reload.*Failed to connect to bus") as ei:
        si.install(now=False)
    assert "skyd daemon start" in (ei.value.hint or "")
    assert si.unit_path().exists()


def test_no_systemctl_prints_the_commands(xdg: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    from skyd.cli import cmd_daemon, cmd_service

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cmd_daemon.register(sub)
    cmd_service.register(sub)
    args = parser.parse_args(["daemon", "install-service", "--now"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "systemctl not found" in printed
    assert "systemctl --user enable --now skyd.service" in printed
    assert si.unit_path().exists()
    args = parser.parse_args(["daemon", "uninstall-service"])
    assert args.func(args) == 0
    assert not si.unit_path().exists()
    assert "removed" in capsys.readouterr().out


def test_quoting_survives_odd_paths() -> None:
    text = si.render_unit(["/opt/my skyd/bin/skyd", "daemon", "run"],
                          {"SKYD_HOME": "/tmp/a b/$x%y"})
    assert 'ExecStart="/opt/my skyd/bin/skyd" daemon run\n' in text
    assert 'Environment="SKYD_HOME=/tmp/a b/$$x%%y"\n' in text


def test_frozen_unit_names_the_one_file_not_its_cache(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-file build runs from ~/.cache/skyd/onefile/<hash>/ (cleaned by a newer version):
    the unit starts the one file its launcher names in SKYD_ONEFILE."""
    cached = tmp_path / "cache" / "abc" / "skyd" / "skyd"
    cached.parent.mkdir(parents=True)
    cached.write_text("")
    one = tmp_path / "bin" / "skyd"
    one.parent.mkdir()
    one.write_text("")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(cached))
    monkeypatch.delenv("SKYD_ONEFILE", raising=False)
    assert si.exec_start_argv() == [str(cached), "daemon", "run"]  # the one-folder build
    monkeypatch.setenv("SKYD_ONEFILE", str(one))
    assert si.exec_start_argv() == [str(one), "daemon", "run"]
    monkeypatch.setenv("SKYD_ONEFILE", str(tmp_path / "gone"))  # moved away since: not used
    assert si.exec_start_argv() == [str(cached), "daemon", "run"]


def _verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze missing (apt-get install systemd)")
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(run)}
    return subprocess.run([exe, "--user", "verify", str(unit)], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_generated_unit_passes_systemd_analyze_verify(xdg: Path, tmp_path: Path) -> None:
    unit = tmp_path / "skyd.service"
    unit.write_text(si.render_unit(si.exec_start_argv(), si.install_env()))
    res = _verify(unit, tmp_path)
    assert res.returncode == 0, res.stderr
    broken = tmp_path / "broken.service"  # the check can fail: a bad Type and ExecStart
    broken.write_text(unit.read_text().replace("Type=notify", "Type=bogus")
                      .replace(f"ExecStart={sys.executable}", "ExecStart=nowhere/skyd"))
    assert _verify(broken, tmp_path).returncode != 0


def test_shipped_unit_matches_template_and_verifies(tmp_path: Path) -> None:
    shipped = (REPO / "packaging" / "skyd.service").read_text()
    assert shipped == si.UNIT_TEMPLATE.format(
        exec_start="%h/.local/bin/skyd daemon run", environment="Environment=PYTHONUNBUFFERED=1\n")
    unit = tmp_path / "skyd.service"
    unit.write_text(shipped.replace("%h/.local/bin/skyd", sys.executable + " -m skyd.cli.main"))
    res = _verify(unit, tmp_path)
    assert res.returncode == 0, res.stderr
