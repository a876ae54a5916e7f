"""``python -m skyd.tui``: the TUI without the CLI (``skyd tui`` does the same)."""

import sys

from skyd.tui.app import run

sys.exit(run(exit_after_paint="--exit-after-paint" in sys.argv[1:]))
