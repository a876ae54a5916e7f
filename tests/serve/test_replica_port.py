"""A `local` replica's port is picked where no connection of this machine can take it in the
meantime (below the kernel's ephemeral range) and free on every address when picked."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from skyd.serve.replica_port import FIRST, SPAN, ephemeral_range, local_replica_port


def test_the_port_is_below_the_ephemeral_range_that_outbound_connections_draw_from() -> None:
    lo, hi = ephemeral_range()
    # what a connection to a node address gets as its local port on that address
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with socket.create_connection(srv.getsockname()) as c:
            assert lo <= c.getsockname()[1] <= hi
    for _ in range(20):
        port = local_replica_port()
        assert max(FIRST, lo - SPAN) <= port < lo
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free now


def test_a_port_in_use_on_any_address_is_not_picked() -> None:
    lo, _ = ephemeral_range()
    first = random.Random(7).randrange(max(FIRST, lo - SPAN), lo)
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))  # another program's (not even on the wildcard)
        held.listen(1)
        port = local_replica_port(random.Random(7))
        assert port != first and max(FIRST, lo - SPAN) <= port < lo


def test_without_room_below_the_range_any_free_port_does(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("1100\t60999\n")
    assert ephemeral_range(str(f)) == (1100, 60999)
    port = local_replica_port(ephemeral=ephemeral_range(str(f)))
    assert port >= 1100  # from binding port 0: the ephemeral range itself
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
