"""Entry point of the frozen ``skyd`` binary (PyInstaller).

``skyd ARGS``                 -> the CLI (skyd.cli.main)
``skyd __agent__ ARGS``       -> the node agent (what ``python -m skyd.nodeagent ARGS`` runs)
``skyd -m MODULE ARGS``       -> ``python -m MODULE`` for skyd's own runnable modules, so
                                 code that builds ``[sys.executable, "-m", "skyd.x", ...]``
                                 keeps working when sys.executable is this binary.
"""

import runpy
import sys

RUNNABLE = ("skyd.nodeagent", "skyd.daemon", "skyd.tui", "skyd.cli.main")


def _run_module(name: str, args: list) -> None:
    sys.argv = [name, *args]
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["__agent__"]:
        _run_module("skyd.nodeagent", argv[1:])
        return
    if len(argv) >= 2 and argv[0] == "-m" and argv[1] in RUNNABLE:
        _run_module(argv[1], argv[2:])
        return
    from skyd.cli.main import main as cli_main

    sys.exit(cli_main(argv))


if __name__ == "__main__":
    main()
