"""The daemon keeps one channel per agent and reuses it (skyd.pipeline.agents): calls share
one TCP connection, a failed block or a restarted agent gets a fresh one, an event loop
never uses another's, and a stalled log stream does not hold up the calls beside it.

Real agents on 127.0.0.1 reached through the `local` provisioner; connections are counted
from the agent's side in /proc/net/tcp (ESTABLISHED sockets on the agent's port)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.clouds.base import ClusterHandle, NodeHandle
from skyd.clouds.local import LocalProvisioner
from skyd.pipeline import agents as pool
from skyd.pipeline.agents import agent, agent_healthy, close_agent_channels
from tests.nodeagent.test_nodeagent_helpers import Agent, AgentFactory, agents  # noqa: F401

pytestmark = pytest.mark.timeout(90)


def conns(port: int) -> set[int]:
    """The peer ports of the agent's established connections (one per daemon channel)."""
    out: set[int] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                local, peer, state = line.split()[1:4]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    out.add(int(peer.rsplit(":", 1)[1], 16))
    return out


def wait_conns(port: int, want: set[int], timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while (now := conns(port)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def handle_of(*nodes: Agent) -> ClusterHandle:
    return ClusterHandle(
        cluster_name="c1", cloud="local", region=None, zone=None, instance_type=None,
        use_spot=False, accelerators={}, num_nodes=len(nodes), hourly_cost=0.0,
        nodes=[NodeHandle(rank=i, instance_id=f"n{i}", internal_ip="127.0.0.1",
                          agent_port=int(a.info["port"]), node_dir=str(a.home))
               for i, a in enumerate(nodes)],
        token=nodes[0].token,
    )  # fmt: skip


def spec(a: Agent, run: str) -> dict[str, Any]:
    return {"name": "t", "run": run, "setup": "", "envs": {}, "workdir": "", "gpus": 0,
            "cpus": 0, "num_nodes": 1, "nodes": [{"rank": 0, "address": a.address}]}  # fmt: skip


@pytest.fixture
def one(agents: AgentFactory, tmp_path: Path) -> Iterator[tuple[Agent, LocalProvisioner, ClusterHandle]]:  # noqa: F811
    a = agents.start("node0")
    yield a, LocalProvisioner(tmp_path), handle_of(a)


def test_calls_to_an_agent_share_one_connection(one: Any) -> None:
    a, prov, h = one
    port = int(a.info["port"])

    async def main() -> list[set[int]]:
        seen = []
        async with agent(prov, h) as c:
            assert await c.health()
            seen.append(conns(port))
        async with agent(prov, h) as c:
            await c.job_queue()
            seen.append(conns(port))

        async def head(c: Any) -> None:
            await c.status()
            seen.append(conns(port))

        assert await agent_healthy(prov, h, head=head)
        seen.append(conns(port))  # kept open between calls
        close_agent_channels()
        seen.append(await anyio.to_thread.run_sync(wait_conns, port, set()))
        return seen

    seen = anyio.run(main)
    kept, closed = seen[:-1], seen[-1]
    assert len(kept[0]) == 1 and all(s == kept[0] for s in kept), seen
    assert closed == set(), seen


def test_a_block_that_raised_leaves_a_fresh_connection_to_the_next_call(one: Any) -> None:
    a, prov, h = one
    port = int(a.info["port"])

    async def main() -> tuple[set[int], set[int]]:
        with pytest.raises(RuntimeError):
            async with agent(prov, h) as c:
                await c.health()
                first = conns(port)
                raise RuntimeError("the caller's own failure")
        async with agent(prov, h) as c:
            await c.job_queue()
            after = await anyio.to_thread.run_sync(wait_conns, port, conns(port) - first)
        return first, after

    first, after = anyio.run(main)
    assert len(first) == 1 and len(after) == 1 and first != after, (first, after)


def test_an_agent_restarted_on_its_port_is_reached_again(agents: AgentFactory, tmp_path: Path) -> None:  # noqa: F811
    a = agents.start("node0")
    port = int(a.info["port"])
    prov, h = LocalProvisioner(tmp_path), handle_of(a)

    def restart() -> int:
        a.kill9()
        return int(agents.start("node0", listen=f"127.0.0.1:{port}").info["pid"])

    async def main() -> list[set[int]]:
        async with agent(prov, h) as c:
            assert (await c.status())["pid"] == a.info["pid"]
        pid = await anyio.to_thread.run_sync(restart)  # the daemon's loop runs meanwhile
        seen = []
        for _ in range(2):
            async with agent(prov, h) as c:
                assert (await c.status())["pid"] == pid
                seen.append(conns(port))
        return seen

    seen = anyio.run(main)
    assert len(seen[0]) == 1 and seen[0] == seen[1], seen


def test_an_event_loop_never_uses_anothers_channel(one: Any) -> None:
    a, prov, h = one
    port = int(a.info["port"])

    async def call() -> set[int]:
        async with agent(prov, h) as c:
            assert await c.health()
            return conns(port)

    first = anyio.run(call)
    assert wait_conns(port, set()) == set()  # the loop's end closed its channel
    second = anyio.run(call)  # a channel of the first loop would fail here
    assert len(first) == 1 and len(second) == 1 and first != second, (first, second)


def test_concurrent_blocks_share_a_channel_and_a_failing_one_spares_the_others_stream(
    one: Any,
) -> None:
    a, prov, h = one
    port = int(a.info["port"])
    lines = 10

    async def main() -> tuple[bytes, set[int], set[int]]:
        async with agent(prov, h) as c:
            job = await c.submit_job(spec(a, f"for i in $(seq 1 {lines}); do echo line$i; sleep 0.2; done"))
        streaming = anyio.Event()
        out = b""
        during: set[int] = set()

        async def follow() -> None:
            nonlocal out
            async with agent(prov, h) as c:
                async for chunk in c.tail_logs(job, follow=True):
                    out += chunk
                    streaming.set()

        async def fail_beside_it() -> None:
            nonlocal during
            await streaming.wait()
            with pytest.raises(RuntimeError):
                async with agent(prov, h) as c:
                    assert await c.health()
                    during = conns(port)
                    raise RuntimeError("one borrower fails")

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            tg.start_soon(fail_beside_it)
        before = conns(port)
        return out, during, before

    out, during, at_end = anyio.run(main)
    assert out.decode().split() == [f"line{i}" for i in range(1, lines + 1)]
    assert len(during) == 1 and at_end <= during, (during, at_end)
    # the failed block dropped the channel: closed once the stream's block ended
    assert wait_conns(port, set()) == set()


def test_a_log_stream_nobody_reads_does_not_stall_calls_beside_it(one: Any) -> None:
    a, prov, h = one
    port = int(a.info["port"])

    async def main() -> tuple[float, set[int]]:
        async with agent(prov, h) as c:
            # 20 MB of output at once: far more than a stream's 4 MiB window
            job = await c.submit_job(spec(a, "head -c 20000000 /dev/zero | tr '\\0' x; echo"))
        async with agent(prov, h) as c:
            stream = c.tail_logs(job, follow=True).__aiter__()
            try:
                await stream.__anext__()
                await anyio.sleep(2.0)  # the agent fills the stream's window meanwhile
                t0 = anyio.current_time()
                async with agent(prov, h) as c2:
                    with anyio.fail_after(10):
                        await c2.job_queue()
                    return anyio.current_time() - t0, conns(port)
            finally:
                await stream.aclose()

    took, seen = anyio.run(main)
    assert len(seen) == 1 and took < 5.0, (took, seen)


def test_idle_channels_are_closed_and_the_pool_is_bounded(
    agents: AgentFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    a, b = agents.start("node0"), agents.start("node1")
    pa, pb = int(a.info["port"]), int(b.info["port"])
    prov = LocalProvisioner(tmp_path)
    ha, hb = handle_of(a), handle_of(b)

    async def call(h: ClusterHandle) -> None:
        async with agent(prov, h) as c:
            await c.job_queue()

    async def main() -> dict[str, set[int]]:
        seen = {}
        monkeypatch.setattr(pool, "IDLE_S", 0.3)
        await call(ha)
        seen["a"] = conns(pa)
        await anyio.sleep(0.6)
        await call(hb)  # a borrow sweeps: a's channel was idle for longer than IDLE_S
        seen["a idle"] = await anyio.to_thread.run_sync(wait_conns, pa, set())
        monkeypatch.setattr(pool, "IDLE_S", 30.0)
        monkeypatch.setattr(pool, "MAX_CHANNELS", 1)
        await call(ha)  # beyond the bound: b's, the least recently used, is closed
        seen["b evicted"] = await anyio.to_thread.run_sync(wait_conns, pb, set())
        seen["a kept"] = conns(pa)
        return seen

    seen = anyio.run(main)
    assert len(seen["a"]) == 1 and seen["a idle"] == set(), seen
    assert seen["b evicted"] == set() and len(seen["a kept"]) == 1, seen


def test_a_call_whose_agent_died_leaves_no_stray_cancel_in_its_task(one: Any) -> None:
    """grpclib wakes a call whose connection was lost with a native cancel and raises its
    own error; a borrowed channel's block still takes that cancel request back (left, it
    turns a later cancel scope's timeout into a cancel of the task's group: the daemon's)."""
    import asyncio

    from grpclib.exceptions import StreamTerminatedError

    a, prov, h = one

    async def main() -> tuple[BaseException | None, int]:
        async with agent(prov, h) as c:
            job = await c.submit_job(spec(a, "sleep 100"))
        got: list[Any] = []

        async def follow() -> None:
            try:
                async with agent(prov, h) as c:
                    async for _ in c.tail_logs(job, follow=True):
                        pass
            except StreamTerminatedError as e:
                got.append(e)
            task = asyncio.current_task()
            got.append(task.cancelling() if task is not None else -1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.sleep(0.5)  # the follow waits for the job's output
            await anyio.to_thread.run_sync(a.kill9)
        return (got[0], got[1]) if len(got) == 2 else (None, got[0])

    err, cancels = anyio.run(main)
    assert isinstance(err, StreamTerminatedError) and cancels == 0, (err, cancels)


def test_a_call_beside_more_followed_logs_than_an_agent_serves_per_connection(one: Any) -> None:
    """An agent serves 100 streams per connection and queues the rest: a call beside 105
    followed logs of one cluster must not wait for one of them to end."""
    a, prov, h = one
    followers = 105

    async def main() -> float:
        async with agent(prov, h) as c:
            job = await c.submit_job(spec(a, "sleep 100"))
        entered = 0

        async def follow() -> None:
            nonlocal entered
            async with agent(prov, h) as c:
                entered += 1
                async for _ in c.tail_logs(job, follow=True):
                    pass

        async with anyio.create_task_group() as tg:
            for _ in range(followers):
                tg.start_soon(follow)
            while entered < followers:
                await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # their streams reach the agent
            t0 = anyio.current_time()
            with anyio.fail_after(10):
                async with agent(prov, h) as c:
                    await c.job_queue()
            tg.cancel_scope.cancel()
        return anyio.current_time() - t0

    assert anyio.run(main) < 5.0
