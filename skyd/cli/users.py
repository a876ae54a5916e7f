"""`--all-users` (`-u`, as SkyPilot has it) on the listing commands, and their USER column.

A daemon shared by several Unix users shows each of them their own objects; with
``--all-users`` the listing has every user's, with a USER column."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Column = tuple[str, str | Callable[[dict[str, Any]], Any]]


def add_all_users_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-u", "--all-users", action="store_true",
                   help="every user's (a daemon shared by several users; default: your own)")


def params(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The query parameters with ``all_users=1`` when the flag was given."""
    if not getattr(args, "all_users", False):
        return base
    return {**(base or {}), "all_users": 1}


def columns(args: argparse.Namespace, cols: list[Any]) -> list[Any]:
    """``cols`` with a USER column after the first when the flag was given."""
    if not getattr(args, "all_users", False):
        return cols
    return [cols[0], ("USER", "user"), *cols[1:]]


def not_yours(err: Exception) -> bool:
    """An error that says the object is another user's (the daemon refused, 403)."""
    return " belongs to user " in str(err)
