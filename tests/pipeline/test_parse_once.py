"""A launch parses its YAML once: the submit-time check hands the DAG it parsed to the
request's handler (skyd.pipeline.parsememo), through the daemon's real secret split, store
and attach; anything that differs in between is parsed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skyd.daemon import request_secrets
from skyd.pipeline import checks, parsememo
from skyd.pipeline.taskload import load_task_from_payload
from skyd.sdk.payloads import launch_payload, task_source

pytestmark = pytest.mark.anyio

YAML = """\
resources:
  infra: local
secrets:
  INLINE_TOKEN: from-the-yaml-1234
run: echo "$CLI_TOKEN $INLINE_TOKEN"
"""


class _Ctx:
    """The daemon's handlers get a request context; attach reads only the secrets file."""


async def _handler_payload(payload: dict[str, Any], rid: str) -> dict[str, Any]:
    """What the daemon hands the request's handler: the payload as stored (secret values
    in the request's 0600 file), with the secret values attached back."""
    clean, held = await request_secrets.asplit(payload)
    stored = await request_secrets.store(rid, clean, held)
    assert stored is not None
    return await request_secrets.attach(_Ctx(), stored)  # type: ignore[arg-type]


def _payload(tmp_path: Path, token: str, **kw: Any) -> dict[str, Any]:
    return launch_payload(task_source(yaml_text=YAML, base_dir=str(tmp_path)),
                          secrets={"CLI_TOKEN": token}, **kw)


async def test_the_handler_takes_what_the_check_parsed(skyd_home: Path, tmp_path: Path) -> None:
    payload = _payload(tmp_path, "cli-secret-5678", cluster_name="once")
    await checks.check_launch(payload)
    before = parsememo.counts()
    task = await load_task_from_payload(await _handler_payload(payload, "0a0b0c0d"))
    after = parsememo.counts()
    assert after["parsed"] == before["parsed"]  # not parsed again
    assert after["handed_over"] == before["handed_over"] + 1
    assert task.secrets == {"INLINE_TOKEN": "from-the-yaml-1234", "CLI_TOKEN": "cli-secret-5678"}
    # Taken once: a second load of the same request (a resumed handler) parses.
    again = await load_task_from_payload(await _handler_payload(payload, "0a0b0c0e"))
    assert parsememo.counts()["parsed"] == after["parsed"] + 1
    assert again.secrets == task.secrets and again is not task


async def test_other_secret_values_are_parsed_again(skyd_home: Path, tmp_path: Path) -> None:
    await checks.check_launch(_payload(tmp_path, "first-value-1111", cluster_name="two"))
    before = parsememo.counts()
    other = _payload(tmp_path, "second-value-2222", cluster_name="two")
    task = await load_task_from_payload(await _handler_payload(other, "1a1b1c1d"))
    assert parsememo.counts()["parsed"] == before["parsed"] + 1
    assert task.secrets["CLI_TOKEN"] == "second-value-2222"


async def test_a_dry_run_and_its_launch_each_parse_once(skyd_home: Path, tmp_path: Path) -> None:
    """The interactive launch: a dry run, then the launch -- each request's check parses and
    its handler takes that: two parses in all (it was four)."""
    before = parsememo.counts()
    dry = {**_payload(tmp_path, "tok-3333"), "dryrun": True}
    await checks.check_launch(dry)
    await load_task_from_payload(await _handler_payload(dry, "2a2b2c2d"))
    real = _payload(tmp_path, "tok-3333")
    await checks.check_launch(real)
    await load_task_from_payload(await _handler_payload(real, "2a2b2c2e"))
    after = parsememo.counts()
    assert after["parsed"] - before["parsed"] == 2
    assert after["handed_over"] - before["handed_over"] == 2
