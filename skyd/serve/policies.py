"""Load-balancing policies: which ready replica takes the next request.

A policy sees `Backend`s (one per ready replica) whose ``inflight`` counts the load
balancer keeps exact (incremented before a request goes upstream, decremented in a
``finally`` whatever the outcome).
"""

from __future__ import annotations

import abc
import bisect
import hashlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Backend:
    replica_id: int
    url: str  # http://host:port, no trailing slash
    weight: float = 1.0
    inflight: int = 0
    served: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class Policy(abc.ABC):
    name = ""

    def set_backends(self, backends: Sequence[Backend]) -> None:
        self.backends = list(backends)

    @abc.abstractmethod
    def pick(self, exclude: Collection[Backend], key: bytes | None) -> Backend | None:
        """The backend for the next request, none of ``exclude``; None when none is left."""


def _least(cands: Sequence[Backend]) -> Backend | None:
    best: Backend | None = None
    for b in cands:
        if best is None or b.inflight / b.weight < best.inflight / best.weight:
            best = b
    return best


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self) -> None:
        self.backends: list[Backend] = []
        self._i = 0

    def pick(self, exclude: Collection[Backend], key: bytes | None) -> Backend | None:
        n = len(self.backends)
        for _ in range(n):
            b = self.backends[self._i % n]
            self._i += 1
            if b not in exclude:
                return b
        return None


class LeastLoad(Policy):
    """Fewest in-flight requests (per unit of weight; ties go to the first)."""

    name = "least_load"

    def __init__(self) -> None:
        self.backends: list[Backend] = []
        self._rot = 0

    def pick(self, exclude: Collection[Backend], key: bytes | None) -> Backend | None:
        n = len(self.backends)
        if not n:
            return None
        self._rot = (self._rot + 1) % n  # rotate the tie-break so idle replicas share
        order = self.backends[self._rot:] + self.backends[:self._rot]
        return _least([b for b in order if b not in exclude])


class InstanceAwareLeastLoad(LeastLoad):
    """Least load where each replica's load is divided by its weight (its
    target_qps_per_replica for its accelerator)."""

    name = "instance_aware_least_load"


def _h(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class Affinity(Policy):
    """Consistent hashing of a key (a header, or the body's first bytes) onto a ring of
    64 points per replica: a key stays on its replica while that replica is ready, and
    only the keys of a replica that goes move. An overloaded pick (more than twice the
    mean in-flight plus 2) falls back to least load; so does a request without a key."""

    name = "affinity"
    VNODES = 64

    def __init__(self) -> None:
        self.backends: list[Backend] = []
        self._ring: list[tuple[int, Backend]] = []
        self._keys: list[int] = []
        self._least = LeastLoad()

    def set_backends(self, backends: Sequence[Backend]) -> None:
        self.backends = list(backends)
        self._least.set_backends(backends)
        ring = [(_h(f"{b.replica_id}#{v}".encode()), b) for b in backends
                for v in range(self.VNODES)]
        ring.sort(key=lambda t: t[0])
        self._ring = ring
        self._keys = [k for k, _ in ring]

    def pick(self, exclude: Collection[Backend], key: bytes | None) -> Backend | None:
        if key is None or not self._ring:
            return self._least.pick(exclude, None)
        i = bisect.bisect(self._keys, _h(key))
        chosen: Backend | None = None
        for j in range(len(self._ring)):
            b = self._ring[(i + j) % len(self._ring)][1]
            if b not in exclude:
                chosen = b
                break
        if chosen is None:
            return None
        total = sum(b.inflight for b in self.backends)
        mean = total / max(1, len(self.backends))
        if chosen.inflight > 2 * mean + 2:
            return self._least.pick(exclude, None)
        return chosen


POLICIES: dict[str, Callable[[], Policy]] = {
    "round_robin": RoundRobin, "least_load": LeastLoad,
    "instance_aware_least_load": InstanceAwareLeastLoad, "affinity": Affinity,
}  # fmt: skip


def make_policy(name: str) -> Policy:
    return POLICIES[name]()
