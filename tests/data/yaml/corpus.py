"""Shared by tests/models/test_models_corpus.py and by regeneration of the expected files.

Regenerate (then READ every diff): ``.venv/bin/python tests/data/yaml/corpus.py``
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOOD = HERE / "good"
BAD = HERE / "bad"
BASE_DIR = Path("/base")  # relative paths in the corpus resolve here, not to the checkout

_DIRECTIVE = re.compile(r"^# skyd-test:\s*(.*)$", re.M)


def load_args(path: Path) -> dict[str, Any]:
    """``# skyd-test: --env K=V --secret K=V`` lines -> load_dag keyword arguments."""
    env: dict[str, str] = {}
    secret: dict[str, str] = {}
    for m in _DIRECTIVE.finditer(path.read_text()):
        toks = m.group(1).split()
        for flag, val in zip(toks[::2], toks[1::2], strict=True):
            k, _, v = val.partition("=")
            (env if flag == "--env" else secret)[k] = v
    return {"env_overrides": env or None, "secret_overrides": secret or None,
            "base_dir": BASE_DIR}


def normalized(path: Path) -> dict[str, Any]:
    from skyd.models import load_dag

    return load_dag(path, **load_args(path)).to_normalized()


def main() -> None:
    for y in sorted(GOOD.glob("*.yaml")):
        out = y.with_suffix(".expected.json")
        out.write_text(json.dumps(normalized(y), indent=2) + "\n")
        print("wrote", out.name)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2]))
    main()
