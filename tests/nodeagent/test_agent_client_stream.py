"""A followed log stream has no 30 s deadline (betterproto reads ``timeout=None`` as the
stub's default, which ended `skyd launch` of any job silent for 30 s)."""

from __future__ import annotations

from typing import Any

import anyio

from skyd.nodeagent.client import AgentClient


def test_log_streams_have_no_short_deadline(monkeypatch: Any) -> None:
    seen: list[float] = []

    async def fake_stream(self: Any, route: str, request: Any, response_type: Any,
                          *, timeout: float | None = None, **kw: Any) -> Any:
        seen.append(self.timeout if timeout is None else timeout)
        if False:
            yield None

    from betterproto.grpc.grpclib_client import ServiceStub

    monkeypatch.setattr(ServiceStub, "_unary_stream", fake_stream)

    async def go() -> None:
        c = AgentClient("127.0.0.1", 9, "t")
        try:
            async for _ in c.tail_logs(1):
                pass
            async for _ in c.tail_log_chunks(1):
                pass
        finally:
            c.close()

    anyio.run(go)
    assert len(seen) == 2 and min(seen) > 30 * 24 * 3600, seen
