"""The SKYD_* knobs: one module names each once (type, default, doc line); docs/settings.md
is generated from it; code reads the environment only through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skyd import settings

ROOT = Path(__file__).resolve().parents[1]


def test_the_doc_lists_every_knob_as_the_module_does() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc == settings.markdown(), (
        "docs/settings.md is stale: run `python -m skyd.settings > docs/settings.md`")
    for name in settings.KNOBS:
        assert f"| `{name}` |" in doc


def test_every_skyd_variable_the_code_reads_is_a_knob() -> None:
    """No module outside skyd/settings.py reads a SKYD_* variable from os.environ (the node
    agent, which runs without skyd.settings, reads only knobs named there)."""
    reads = re.compile(r"""environ(?:\.get\(|\[|\.setdefault\()\s*["'](SKYD_[A-Z0-9_]+)""")
    getenv = re.compile(r"""getenv\(\s*["'](SKYD_[A-Z0-9_]+)""")
    offenders, unknown = [], set()
    for path in sorted((ROOT / "skyd").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "skyd/settings.py":
            continue
        text = path.read_text()
        for m in [*reads.finditer(text), *getenv.finditer(text)]:
            if m.group(1) not in settings.KNOBS:
                unknown.add(m.group(1))
            if not rel.startswith("skyd/nodeagent/"):
                offenders.append(f"{rel}: {m.group(1)}")
    assert not offenders, offenders
    assert not unknown, unknown


def test_every_skyd_name_in_the_code_is_a_knob_or_set_by_skyd() -> None:
    """Names kept as data (a provider's poll_env, a flavour's url_env) are knobs too."""
    quoted = re.compile(r"""["'](SKYD_[A-Z0-9_]+)["']""")
    stray = set()
    for path in sorted((ROOT / "skyd").rglob("*.py")):
        if path.name == "settings.py" and path.parent.name == "skyd":
            continue
        for m in quoted.finditer(path.read_text()):
            if m.group(1) not in settings.KNOBS and m.group(1) not in settings.SET_BY_SKYD:
                stray.add(f"{path.relative_to(ROOT)}: {m.group(1)}")
    assert not stray, stray
    with pytest.raises(KeyError, match="SKYD_NOPE is not a knob"):
        settings.knob("SKYD_NOPE")


def test_knobs_are_read_at_call_time_and_empty_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYD_REFRESH_S", raising=False)
    assert settings.REFRESH_S.get() == 10.0
    monkeypatch.setenv("SKYD_REFRESH_S", "0.5")
    assert settings.REFRESH_S.get() == 0.5
    monkeypatch.setenv("SKYD_REFRESH_S", "")
    assert settings.REFRESH_S.get() == 10.0 and not settings.REFRESH_S.is_set()
    monkeypatch.setenv("SKYD_EXTRA_PLUGINS", " a.b , ,c ")
    assert settings.EXTRA_PLUGINS.get() == ("a.b", "c")
    for text, want in (("1", True), ("yes", True), ("0", False), ("off", False)):
        monkeypatch.setenv("SKYD_SSH_STRICT_HOST_KEYS", text)
        assert settings.SSH_STRICT_HOST_KEYS.get() is want


def test_a_bad_value_names_the_variable_and_what_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYD_SSH_MAX_CONNECTS", "many")
    with pytest.raises(settings.SettingError) as e:
        settings.SSH_MAX_CONNECTS.get()
    assert "SKYD_SSH_MAX_CONNECTS='many' is not a whole number" in str(e.value)
    assert "unset it" in (e.value.hint or "")
    monkeypatch.setenv("SKYD_NO_AUTOSTART", "perhaps")
    with pytest.raises(settings.SettingError, match="SKYD_NO_AUTOSTART"):
        settings.NO_AUTOSTART.get()


def test_every_knob_has_a_doc_line_and_a_known_reader() -> None:
    for k in settings.KNOBS.values():
        assert k.doc.endswith(".") and len(k.doc) > 10, k.name
        assert k.where in ("daemon", "client", "agent"), k.name
        assert k.kind in ("str", "int", "float", "bool", "path", "list"), k.name
