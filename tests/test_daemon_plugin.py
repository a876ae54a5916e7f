"""A daemon plugin for tests (loaded via SKYD_EXTRA_PLUGINS): a resumable verb."""

from __future__ import annotations

from skyd.daemon.api_models import SleepBody
from skyd.daemon.builtins import sleep
from skyd.daemon.registry import register_verb

register_verb("test.resumable_sleep", sleep, resumable=True, body=SleepBody)
