"""A CLI run builds only the command it names (skyd.cli.commands.COMMAND_OF): that command
parses and helps exactly as in the full parser, and every command is in the table."""

from __future__ import annotations

import argparse

from skyd.cli.commands import COMMAND_OF, command_word
from skyd.cli.main import build_parser


def _subs(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _helps(p: argparse.ArgumentParser, path: str = "") -> dict[str, str]:
    """Every (sub-)command's help text under p, by its path of words."""
    out = {path: p.format_help()}
    for word, sp in _subs(p).items():
        out.update(_helps(sp, f"{path} {word}".strip()))
    return out


def test_every_command_is_in_the_table_and_builds_alone_as_in_full() -> None:
    full = build_parser()
    words = set(_subs(full))
    assert words == set(COMMAND_OF), "skyd.cli.commands.COMMAND_OF out of date"
    for word in sorted(words):
        alone = build_parser([word])
        assert word in _subs(alone)
        assert _helps(_subs(alone)[word]) == _helps(_subs(full)[word]), word


def test_command_word_skips_options_and_the_host_value() -> None:
    assert command_word(["--host", "ssh://u@h", "status", "-a"]) == "status"
    assert command_word(["--host=ssh://u@h", "down", "c"]) == "down"
    assert command_word(["--version"]) == ""
    # an unknown word builds every command, so argparse lists them all
    p = build_parser(["nosuch"])
    assert {"status", "launch", "jobs", "serve"} <= set(_subs(p))
