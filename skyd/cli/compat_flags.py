"""Flags SkyPilot users type, shared by the verbs that take them (see docs/cli-compat.md)."""

from __future__ import annotations

import argparse


def add_config_flag(p: argparse.ArgumentParser) -> None:
    """SkyPilot's ``--config``: one config file, or ``KEY.SUB=VALUE`` items (repeatable)."""
    p.add_argument("--config", action="append", default=None, metavar="FILE|KEY=VALUE",
                   help="config for this command: a config file, or KEY=VALUE items "
                        "(e.g. kubernetes.namespace=ml); over ~/.sky/config.yaml and .sky.yaml")
