"""Command modules of the CLI, imported when the parser is built.

Contract for a module listed here (keep it cheap: at import time only argparse-level
stdlib and skyd.cli.* helpers; import heavy things inside the handler):

    def register(subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser("queue", help="...", description="...")
        p.add_argument(...)
        add_output_flag(p)                 # from skyd.cli.output, for listing verbs
        p.set_defaults(func=run)           # run(args) -> int | None (exit code)

Handlers raise SkydError for user mistakes; main() prints ``error:``/``hint:`` and exits
with its exit_code. Every command module of the CLI is listed here.
"""

from __future__ import annotations

COMMAND_MODULES: list[str] = [
    "skyd.cli.cmd_status",
    "skyd.cli.cmd_validate",
    "skyd.cli.cmd_requests",
    "skyd.cli.cmd_daemon",
    "skyd.cli.cmd_context",
    "skyd.cli.cmd_service",
    "skyd.cli.cmd_tui",
    "skyd.cli.cmd_completion",
    "skyd.cli.cmd_launch",
    "skyd.cli.cmd_cluster",
    "skyd.cli.cmd_gpus",
    "skyd.cli.cmd_check",
    "skyd.cli.cmd_ssh",
    "skyd.cli.cmd_shell",
    "skyd.cli.cmd_storage",
    "skyd.cli.cmd_config",
    "skyd.cli.cmd_debug",
    "skyd.cli.cmd_volumes",
    "skyd.jobs.cli",
    "skyd.serve.cli",
]
