"""``python -m skyd.daemon``: run the daemon in the foreground."""

import sys

from skyd.daemon.app import main

sys.exit(main(sys.argv[1:]))
