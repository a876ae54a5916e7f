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

# The top-level words each module registers (aliases included): a CLI run that names one
# imports and registers only that module; no word or an unknown one builds every command
# (top-level help, "invalid choice" listing them all). tests/cli/test_cli_commands.py
# checks this table against what the modules register.
_CLUSTER = ("skyd.cli.cmd_cluster",)
COMMAND_OF: dict[str, tuple[str, ...]] = {
    "status": ("skyd.cli.cmd_status",),
    "validate": ("skyd.cli.cmd_validate",),
    "requests": ("skyd.cli.cmd_requests",),
    "daemon": ("skyd.cli.cmd_daemon", "skyd.cli.cmd_service"),
    "context": ("skyd.cli.cmd_context",),
    "tui": ("skyd.cli.cmd_tui",),
    "completion": ("skyd.cli.cmd_completion",),
    "launch": ("skyd.cli.cmd_launch",),
    "exec": ("skyd.cli.cmd_launch",),
    **dict.fromkeys(["stop", "start", "down", "autostop", "queue", "logs", "cancel",
                     "cost-report"], _CLUSTER),
    **dict.fromkeys(["show-gpus", "gpus", "catalog"], ("skyd.cli.cmd_gpus",)),
    "check": ("skyd.cli.cmd_check",),
    "ssh": ("skyd.cli.cmd_ssh",),
    "shell": ("skyd.cli.cmd_shell",),
    "ssh-proxy": ("skyd.cli.cmd_shell",),
    "storage": ("skyd.cli.cmd_storage",),
    "config": ("skyd.cli.cmd_config",),
    "debug-dump": ("skyd.cli.cmd_debug",),
    "volumes": ("skyd.cli.cmd_volumes",),
    "jobs": ("skyd.jobs.cli",),
    "serve": ("skyd.serve.cli",),
}


def command_word(argv: list[str]) -> str:
    """The top-level command argv names ("" when none): its first word that is not an
    option or the value of ``--host``."""
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--host":
            skip = True
        elif not a.startswith("-"):
            return a
    return ""
