"""skyd completion bash|zsh|fish: print a completion script generated from the parser."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "completion", help="print a shell completion script",
        description="Print a completion script. Install it with, e.g.:\n"
                    "  skyd completion bash > ~/.local/share/bash-completion/completions/skyd\n"
                    "  skyd completion zsh > \"${fpath[1]}/_skyd\"\n"
                    "  skyd completion fish > ~/.config/fish/completions/skyd.fish",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from skyd.cli.completion import generate
    from skyd.cli.main import build_parser

    sys.stdout.write(generate(build_parser(), args.shell))
    return 0
