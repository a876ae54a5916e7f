"""``skyd``: the one-shot CLI. Fast start: argparse + stdlib socket client only."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from skyd import settings
from skyd.errors import SkydError


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with ``argv``, only the command it names is built, with SkyPilot's
    compatibility flags for it (each CLI run builds what it parses)."""
    from skyd import __version__
    from skyd.cli.commands import COMMAND_MODULES, COMMAND_OF, command_word

    parser = argparse.ArgumentParser(
        prog="skyd", formatter_class=_Formatter,
        description="Run AI workloads on any infrastructure from one local daemon.\n"
                    "Task YAMLs use SkyPilot's schema.",
        epilog="Every command starts the daemon when it is not running.\n"
               "Run 'skyd COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"skyd {__version__}")
    parser.add_argument("--host", dest="daemon_host", metavar="ssh://USER@HOST",
                        help="talk to the daemon on this host (as SKYD_HOST does)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    word = command_word(argv) if argv is not None else ""
    for name in COMMAND_OF.get(word, COMMAND_MODULES):
        importlib.import_module(name).register(sub)
    from skyd.cli import compat_flags

    # SkyPilot's flags skyd lacks: accepted or refused by name
    compat_flags.install(parser, only=word if argv is not None else None)
    return parser


def _deepest(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub-)command parser the words of argv lead to (for its usage on an error)."""
    cur = parser
    for word in argv:
        nxt = None
        for a in cur._actions:
            if isinstance(a, argparse._SubParsersAction):
                nxt = a.choices.get(word)
        if nxt is not None:
            cur = nxt
    return cur


def main(argv: list[str] | None = None) -> int:
    from skyd.cli.compat_flags import normalize_argv

    argv = normalize_argv(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # an unknown flag: the sub-command's usage, not the top level's
        _deepest(parser, argv).error(
            "unrecognized arguments: " + " ".join(extra))
    if getattr(args, "daemon_host", None):
        os.environ[settings.HOST.name] = args.daemon_host  # the client reads it (skyd.sdk.remote)
    func = getattr(args, "func", None)
    if func is None:
        # A command group without its subcommand prints the group's help.
        (getattr(args, "_parser", None) or parser).print_help()
        return 0
    try:
        from skyd.cli import compat_flags

        compat_flags.check(args)
        rc = func(args)
        return int(rc or 0)
    except SkydError as e:
        _print_error(e, json_out=getattr(args, "output", None) == "json")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - avoid a second EPIPE at exit
        except OSError:
            pass
        return 141
    except Exception as e:  # noqa: BLE001
        if settings.DEBUG.is_set():
            raise
        path = _save_traceback()
        err = SkydError(f"internal error: {type(e).__name__}: {e}",
                        hint=f"traceback in {path}; daemon log: {_daemon_log()}")
        _print_error(err, json_out=getattr(args, "output", None) == "json")
        return 1


def _print_error(e: SkydError, json_out: bool = False) -> None:
    """``error:``/``hint:`` lines on stderr; with ``-o json`` one JSON document on stdout
    instead (``{"error": {type, message, field, hint, line, exit_code}}``)."""
    if json_out:
        from skyd.cli.output import print_json

        print_json({"error": e.to_dict()})
        return
    sys.stderr.write(f"error: {e}\n")
    if e.hint:
        sys.stderr.write(f"hint: {e.hint}\n")


def _daemon_log() -> str:
    from skyd import paths

    return str(paths.daemon_log())


def _save_traceback() -> str:
    import traceback

    from skyd import paths
    from skyd.privatefs import open_private, private_mkdir

    p = paths.logs_dir() / "cli-errors.log"
    try:
        private_mkdir(p.parent)  # SKYD_HOME and logs/ 0700, the file 0600
        with os.fdopen(open_private(p), "a") as fh:
            fh.write(f"--- skyd {' '.join(sys.argv[1:])}\n{traceback.format_exc()}\n")
    except OSError:
        return "(could not write the log)"
    return str(p)


if __name__ == "__main__":
    sys.exit(main())
