"""The node agent's dependency set for Python 3.8/3.9 nodes (workstation side, not shipped).

The daemon's own grpclib/h2/multidict releases need Python >= 3.11. Older releases of the
same pure-Python packages run on 3.8 through 3.12+; this module fetches them once from PyPI
(`pip install --target`, wheels only, no deps) into a cache keyed by the pin set, so the agent
zipapp can carry them (zipapp.build_zipapp(compat_dir=...)).
"""

# ruff: noqa: UP006, UP035  (runs on the workstation only, but keep the package 3.8-clean)

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

COMPAT_PINS = (
    "grpclib==0.4.8",
    "h2>=4.1,<4.2",
    "hpack>=4.0,<4.1",
    "hyperframe>=6.0,<6.1",
    "multidict>=6.0,<6.2",
    "typing_extensions>=4.7,<4.14",
    "python-dateutil>=2.8,<3",
    "six>=1.16,<2",
    "betterproto==2.0.0b7",
)


def cache_dir(cache: Path) -> Path:
    key = hashlib.sha256("\n".join(COMPAT_PINS).encode()).hexdigest()[:12]
    return cache / "agent-deps" / ("py38-" + key)


def ensure_compat_deps(cache: Path, *, timeout: float = 300.0) -> Path | None:
    """The cached compat set, fetched now if missing; None when it cannot be had (no pip,
    no network) -- the zipapp is then for Python >= 3.10 nodes only. Blocking: call it from
    a worker thread."""
    final = cache_dir(cache)
    if (final / ".complete").exists():
        return final
    if getattr(sys, "frozen", False):
        return None  # no pip inside a frozen binary; it bundles a prebuilt agent instead
    from skyd.fsutil import safe_rmtree  # daemon side only: the agent never calls this

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="fetch-", dir=str(final.parent)))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--target", str(tmp), "--python-version", "3.8", "--only-binary=:all:",
           "--no-deps", *COMPAT_PINS]  # fmt: skip
    try:
        subprocess.run(cmd, check=True, timeout=timeout, capture_output=True,
                       env={**os.environ, "PIP_NO_INPUT": "1"})
    except (OSError, subprocess.SubprocessError):
        safe_rmtree(tmp, final.parent)
        return None
    (tmp / ".complete").write_text("\n".join(COMPAT_PINS) + "\n")
    try:
        os.replace(str(tmp), str(final))
    except OSError:  # a concurrent fetch won
        safe_rmtree(tmp, final.parent)
    return final if (final / ".complete").exists() else None


def bundled_zipapp() -> Path | None:
    """The prebuilt agent zipapp inside a frozen skyd binary (built with the compat set at
    packaging time), or None when not frozen."""
    base = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or not base:
        return None
    p = Path(base) / "skyd" / "nodeagent" / "skyd-agent.pyz"
    return p if p.exists() else None


def main(argv: List[str]) -> int:
    """``python -m skyd.nodeagent.compat_deps [CACHE]``: fetch the set now (a setup step, so
    that nothing needs PyPI later, e.g. under the test suite's loopback-only network guard).
    CACHE: the cache directory (default: skyd's, ``$SKYD_CACHE_DIR`` or ``~/.cache/skyd``)."""
    from skyd import paths

    cache = Path(argv[0]) if argv else paths.cache_dir()
    got = ensure_compat_deps(cache)
    if got is None:
        sys.stderr.write("error: could not fetch the node agent's Python 3.8 dependencies "
                         "(pip and PyPI needed)\n")
        return 1
    sys.stdout.write(f"{got}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
