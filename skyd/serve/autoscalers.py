"""Autoscalers in a registry: each turns what it sees into a decision (target replica
count + why). `autoscaler_for(policy)` picks by the replica_policy:

- ``fixed``: min_replicas, always (no target_qps_per_replica, or min == max).
- ``request_rate``: ceil(qps / target_qps_per_replica) (+ num_overprovision), clamped to
  [min, max], with hysteresis: it moves up only after the wish held for
  upscale_delay_seconds, down only after downscale_delay_seconds.
- ``queue_length``: ceil(requests in the load balancer / target_queue_length_per_replica)
  (+ num_overprovision), clamped and delayed like request_rate. "In the load balancer" is
  every request picked for a replica and not yet answered (in flight, including those
  still waiting on the replica to answer): a slow model shows up here before its QPS rises.
- ``instance_aware``: target_qps_per_replica is a mapping per accelerator
  (``{A100: 10, H100: 20}``). Capacity is the sum of the targets of the replicas' actual
  accelerators (a replica whose accelerator is not known yet, or not in the mapping, counts
  with the smallest target); the wish keeps the largest replicas that cover the QPS and adds
  replicas at the smallest target for what they do not cover. Same hysteresis as request_rate.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Decision:
    target: int
    reason: str
    inputs: dict[str, Any]


class Autoscaler(abc.ABC):
    name = ""

    def __init__(self, policy: dict[str, Any], current: int) -> None:
        self.policy = policy
        self.min = int(policy.get("min_replicas") or 0)
        mx = policy.get("max_replicas")
        self.max = int(mx) if mx is not None else self.min
        self.target = max(self.min, min(self.max, current))

    @abc.abstractmethod
    def decide(self, now: float, qps: float, inflight: int = 0,
               replica_qps: Sequence[float | None] = ()) -> Decision:
        """The target at ``now`` (monotonic seconds) from the load balancer's QPS, its
        requests in flight, and each alive replica's QPS target (None: not known yet)."""


class Fixed(Autoscaler):
    name = "fixed"

    def decide(self, now: float, qps: float, inflight: int = 0,
               replica_qps: Sequence[float | None] = ()) -> Decision:
        self.target = self.min
        return Decision(self.min, "fixed replica count", {"min_replicas": self.min})


def _qps_target(v: Any) -> float:
    if isinstance(v, dict):  # per accelerator: the smallest is the conservative divisor
        vals = [float(x) for x in v.values() if float(x) > 0]
        return min(vals) if vals else 1.0
    return float(v)


class RequestRate(Autoscaler):
    name = "request_rate"

    def __init__(self, policy: dict[str, Any], current: int) -> None:
        super().__init__(policy, current)
        self.per = _qps_target(policy.get("target_qps_per_replica") or 1)
        self.up_delay = float(policy.get("upscale_delay_seconds") or 0)
        self.down_delay = float(policy.get("downscale_delay_seconds") or 0)
        self.over = int(policy.get("num_overprovision") or 0)
        self._up_since: float | None = None
        self._down_since: float | None = None

    def decide(self, now: float, qps: float, inflight: int = 0,
               replica_qps: Sequence[float | None] = ()) -> Decision:
        want = max(self.min, min(self.max, math.ceil(qps / self.per) if self.per > 0 else self.min))
        inputs = {"qps": round(qps, 3), "target_qps_per_replica": self.per, "wish": want,
                  "current": self.target}
        return self._hysteresis(now, want, inputs, f"qps {qps:.2f}")

    def _hysteresis(self, now: float, want: int, inputs: dict[str, Any], why: str) -> Decision:
        reason = "steady"
        if want > self.target:
            self._down_since = None
            self._up_since = now if self._up_since is None else self._up_since
            if now - self._up_since >= self.up_delay:
                reason = f"upscale {self.target} -> {want} ({why})"
                self.target, self._up_since = want, None
            else:
                reason = f"upscale to {want} in {self.up_delay - (now - self._up_since):.0f}s"
        elif want < self.target:
            self._up_since = None
            self._down_since = now if self._down_since is None else self._down_since
            if now - self._down_since >= self.down_delay:
                reason = f"downscale {self.target} -> {want} ({why})"
                self.target, self._down_since = want, None
            else:
                reason = f"downscale to {want} in {self.down_delay - (now - self._down_since):.0f}s"
        else:
            self._up_since = self._down_since = None
        return Decision(self.target + self.over, reason, inputs)


class QueueLength(RequestRate):
    name = "queue_length"

    def __init__(self, policy: dict[str, Any], current: int) -> None:
        super().__init__(policy, current)
        self.per = float(policy.get("target_queue_length_per_replica") or 1)

    def decide(self, now: float, qps: float, inflight: int = 0,
               replica_qps: Sequence[float | None] = ()) -> Decision:
        want = max(self.min, min(self.max, math.ceil(inflight / self.per)))
        inputs = {"inflight": inflight, "target_queue_length_per_replica": self.per,
                  "qps": round(qps, 3), "wish": want, "current": self.target}
        return self._hysteresis(now, want, inputs, f"{inflight} in flight")


class InstanceAware(RequestRate):
    name = "instance_aware"

    def __init__(self, policy: dict[str, Any], current: int) -> None:
        super().__init__(policy, current)
        tq = policy.get("target_qps_per_replica")
        self.targets = {str(k): float(v) for k, v in tq.items()} if isinstance(tq, dict) else {}
        # self.per (the smallest target) prices replicas not launched or not known yet

    def decide(self, now: float, qps: float, inflight: int = 0,
               replica_qps: Sequence[float | None] = ()) -> Decision:
        known = sorted((float(q) if q else self.per for q in replica_qps), reverse=True)
        want, covered = 0, 0.0
        for q in known:  # the biggest replicas first: keep those that cover the load
            if covered >= qps:
                break
            want, covered = want + 1, covered + q
        if covered < qps:
            want += math.ceil((qps - covered) / self.per) if self.per > 0 else 0
        want = max(self.min, min(self.max, want))
        inputs = {"qps": round(qps, 3), "target_qps_per_replica": self.targets,
                  "replica_qps": [round(q, 3) for q in known],
                  "capacity": round(sum(known), 3), "wish": want, "current": self.target}
        return self._hysteresis(now, want, inputs, f"qps {qps:.2f} vs capacity {sum(known):.2f}")


AUTOSCALERS: dict[str, Callable[[dict[str, Any], int], Autoscaler]] = {
    "fixed": Fixed, "request_rate": RequestRate, "queue_length": QueueLength,
    "instance_aware": InstanceAware,
}  # fmt: skip


def autoscaler_for(policy: dict[str, Any], current: int) -> Autoscaler:
    mx = policy.get("max_replicas")
    if mx is not None and mx != policy.get("min_replicas") and policy.get("target_queue_length_per_replica"):
        return AUTOSCALERS["queue_length"](policy, current)
    if policy.get("target_qps_per_replica") is None or mx is None or mx == policy.get("min_replicas"):
        return AUTOSCALERS["fixed"](policy, current)
    if isinstance(policy.get("target_qps_per_replica"), dict):
        return AUTOSCALERS["instance_aware"](policy, current)
    return AUTOSCALERS["request_rate"](policy, current)
