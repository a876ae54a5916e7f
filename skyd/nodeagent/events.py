"""The agent's event loop: scheduler tick, heartbeat file, autostop. Python 3.8 compatible."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time

from .core import Agent
from .diskguard import DiskGuard

log = logging.getLogger("skyd.nodeagent")


async def run_autostop_action(agent: Agent, down: bool) -> None:
    action = agent.autostop_action
    log.info("autostop: idle for %.0f s, action %s (down=%s)", agent.idle_seconds(), action, down)
    if action.startswith("command:"):
        agent.queue.set_meta("autostop", {"idle_minutes": -1.0, "down": down})  # fire once
        await agent.cancel(None)
        env = dict(os.environ, SKYD_AUTOSTOP_DOWN="1" if down else "0")
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", action[len("command:") :], env=env
        )
        await proc.wait()
    elif action == "local-stop":
        await agent.stop_node(down)


async def event_loop(agent: Agent, tick_s: float = 2.0, heartbeat_s: float = 5.0) -> None:
    """Runs until cancelled. Wakes on agent.wake (submit, job end, autostop set) or every
    tick_s; on a quiet node (``Agent.is_quiet``) only when the heartbeat or autostop is due."""
    next_beat = 0.0
    heartbeat = agent.home / "heartbeat"
    guard = DiskGuard(agent)
    while not agent.exit_requested.is_set():
        now = time.time()
        try:
            guard.tick()  # a full disk: job logs stop growing (before anything else writes)
        except Exception as e:  # noqa: BLE001 - never ends the loop
            log.warning("disk guard: %r", e)
        try:
            if now >= next_beat:
                tmp = heartbeat.with_suffix(".tmp")
                tmp.write_text(f"{now:f}\n")
                os.replace(str(tmp), str(heartbeat))
                next_beat = now + heartbeat_s
            agent.schedule()
            agent.reap_orphans()
            auto = agent.autostop
        except (OSError, sqlite3.Error) as e:
            # A full disk or a failing write must not end the loop: once writes work again
            # the next tick catches up (drivers restarted, pending jobs admitted).
            log.warning("event loop: %r; retrying", e)
            await asyncio.sleep(min(tick_s, 1.0))
            continue
        if (auto["idle_minutes"] >= 0 and agent.is_idle()
                and agent.idle_seconds() >= auto["idle_minutes"] * 60):
            await run_autostop_action(agent, bool(auto["down"]))
            continue
        agent.wake.clear()
        wait = min(tick_s, 1.0)
        if not guard.cut and agent.is_quiet():
            # Nothing queued, running or capped: what is due next is the heartbeat or
            # autostop (a submit, a job's end and a new autostop setting wake the loop).
            until = next_beat
            if auto["idle_minutes"] >= 0:
                until = min(until, agent.last_activity + auto["idle_minutes"] * 60)
            wait = max(wait, until - time.time())
        try:
            await asyncio.wait_for(agent.wake.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass
