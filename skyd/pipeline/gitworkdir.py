"""Git workdirs (``workdir: {url, ref}``, ``--git-url/--git-ref``), as SkyPilot runs them:
the repository at ``ref`` becomes the job's working directory on every node.

skyd clones on the workstation (the user's git, keys and credential helpers apply) into
``SKYD_HOME/git/<hash of url and ref>`` and syncs that checkout like a local workdir, so it
works on every infra, including nodes without git or without access to the repository.
A clone is refreshed (fetch + checkout) at each launch. Blocking (git runs as a
subprocess): call from a worker thread.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from skyd.errors import InvalidSpecError

GIT_TIMEOUT_S = 600.0


def checkout_dir(url: str, ref: str | None) -> Path:
    from skyd import paths

    h = hashlib.sha256(f"{url}\0{ref or ''}".encode()).hexdigest()[:16]
    return paths.home() / "git" / h


def require_git() -> str:
    git = shutil.which("git")
    if git is None:
        raise InvalidSpecError("a git workdir needs git on this machine", field="workdir",
                               hint="install git, or use a local directory as workdir")
    return git


def _run(git: str, args: list[str], cwd: Path | None = None) -> None:
    try:
        r = subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True,
                           timeout=GIT_TIMEOUT_S, env={"GIT_TERMINAL_PROMPT": "0",
                                                        **_env()})
    except subprocess.TimeoutExpired:
        raise InvalidSpecError(f"git {args[0]} took longer than {GIT_TIMEOUT_S:.0f}s",
                               field="workdir.url") from None
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["failed"]
        raise InvalidSpecError(f"git {args[0]} failed: {msg[0][:300]}", field="workdir.url",
                               hint="check workdir.url / workdir.ref (or --git-url/--git-ref), "
                                    "and that this machine can reach the repository")


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


_FRESH: dict[tuple[str, str | None], float] = {}  # (url, ref) -> when it was last updated
FRESH_S = 600.0


def checkout(url: str, ref: str | None) -> Path:
    """The local checkout of ``url`` at ``ref`` (default branch when None); updated at
    most once per FRESH_S (a launch asks several times: the first, in a worker thread,
    does the work)."""
    import time

    d = checkout_dir(url, ref)
    if (d / ".git").is_dir() and time.monotonic() - _FRESH.get((url, ref), -1e18) < FRESH_S:
        return d
    _update(url, ref, d)
    _FRESH[(url, ref)] = time.monotonic()
    return d


def _update(url: str, ref: str | None, d: Path) -> None:
    git = require_git()
    if not (d / ".git").is_dir():
        tmp = d.with_name(d.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        _run(git, ["clone", "--quiet", "--", url, str(tmp)])
        tmp.rename(d)
    else:
        _run(git, ["fetch", "--quiet", "--tags", "origin"], cwd=d)
    if ref:
        _run(git, ["checkout", "--quiet", "--force", ref], cwd=d)
        # a branch name: its newest commit (a tag or sha stays where it is)
        probe = subprocess.run([git, "rev-parse", "--verify", "--quiet", f"origin/{ref}"],
                               cwd=d, capture_output=True, text=True)
        if probe.returncode == 0:
            _run(git, ["reset", "--quiet", "--hard", f"origin/{ref}"], cwd=d)
    else:
        _run(git, ["reset", "--quiet", "--hard", "origin/HEAD"], cwd=d)
