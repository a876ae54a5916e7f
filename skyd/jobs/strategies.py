"""Recovery strategies: how a managed job's task is (re)launched. A registry, so a new
strategy plugs in without touching the controller.

A strategy turns "launch this task" / "relaunch it after X" into rounds of launch steps
(each step: a location pin and a set of blocked locations), holding a launch slot per
round and backing off exponentially between rounds. Without retry-until-up, an initial
launch gets one round and a recovery `recovery_rounds` rounds; after that the controller
marks the job FAILED_NO_RESOURCE.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace

import anyio

from skyd.errors import CredentialsError, InvalidSpecError, ResourcesUnavailableError
from skyd.jobs.ops import Block, ClusterOps, LaunchResult, LogFn, PrecheckError, TaskSpec

# Why a task is being relaunched.
PREEMPTED = "preempted"  # the cluster went away (or its agent stopped answering)
RESTART = "restart"  # user code failed and max_restarts_on_errors allows another run
EXIT_CODE = "exit_code"  # user code exited with a code listed in recover_on_exit_codes
INTERRUPTED = "interrupted"  # the controller died mid-launch; the half-launched cluster is gone


GLITCH_ROUNDS = 3  # rounds tried when every failure is an error of ours, not of capacity


class LaunchError(Exception):
    """A launch failed for a reason other than resources (the controller's side): the job
    ends FAILED_CONTROLLER with this reason, never FAILED_NO_RESOURCE."""


@dataclass
class StrategyEnv:
    ops: ClusterOps
    log: LogFn
    slot: Callable[[], AbstractAsyncContextManager[None]]  # a launch slot (scheduler)
    retry_until_up: bool = False
    backoff_initial: float = 10.0
    backoff_max: float = 300.0
    recovery_rounds: int = 3
    on_backoff: Callable[[float], Awaitable[None]] | None = None  # persist WAITING, etc.


@dataclass(frozen=True)
class Step:
    pin: Block | None = None
    blocked: tuple[Block, ...] = ()


class RecoveryStrategy(ABC):
    name: str = ""

    def __init__(self, env: StrategyEnv) -> None:
        self.env = env

    async def launch(self, spec: TaskSpec, cluster: str) -> LaunchResult:
        """First launch of a task."""
        return await self.run_rounds(spec, cluster, [Step()], None if self.env.retry_until_up else 1)

    async def recover(
        self, spec: TaskSpec, cluster: str, last: Block | None, reason: str
    ) -> LaunchResult:
        """Relaunch after `reason`; `last` is where the previous attempt ran."""
        if reason in (RESTART, EXIT_CODE) and last is not None:
            # The cluster is healthy; run the job again on it first.
            try:
                return await self.run_rounds(spec, cluster, [Step(pin=last)], 1)
            except (ResourcesUnavailableError, LaunchError):
                pass
        await self.env.ops.teardown(cluster)
        rounds = None if self.env.retry_until_up else self.env.recovery_rounds
        return await self.run_rounds(spec, cluster, self.recovery_steps(spec, last), rounds)

    @abstractmethod
    def recovery_steps(self, spec: TaskSpec, last: Block | None) -> list[Step]:
        """The steps of one recovery round, tried in order."""

    async def run_rounds(
        self, spec: TaskSpec, cluster: str, steps: list[Step], rounds: int | None
    ) -> LaunchResult:
        delay = self.env.backoff_initial
        done = 0
        errors: list[str] = []
        no_resources = False  # did any step fail for lack of resources (not our own fault)?
        while True:
            async with self.env.slot():
                for i, step in enumerate(steps):
                    if i:
                        await self.env.ops.teardown(cluster)
                    try:
                        return await self.env.ops.launch(
                            replace(spec, pin=step.pin), cluster, blocked=step.blocked,
                            log=self.env.log,
                        )  # fmt: skip
                    except PrecheckError:
                        raise
                    except (CredentialsError, InvalidSpecError) as e:
                        raise PrecheckError(str(e), hint=e.hint) from e
                    except ResourcesUnavailableError as e:
                        errors.append(str(e))
                        no_resources = True
                        self.env.log(f"launch step {i + 1}/{len(steps)} failed: {e}")
                    except Exception as e:  # noqa: BLE001 - provisioning glitches are retried
                        errors.append(f"{type(e).__name__}: {e}")
                        self.env.log(f"launch step {i + 1}/{len(steps)} error: {e!r}")
            done += 1
            if rounds is not None and done >= max(rounds, 0 if no_resources else GLITCH_ROUNDS):
                if not no_resources:
                    # Every step failed on our side (agent, transport, state): not a lack of
                    # resources, so never labelled as one.
                    raise LaunchError(f"launch failed {done} time(s): {errors[-1] if errors else '?'}")
                raise ResourcesUnavailableError(
                    f"no launchable resources after {done} round(s): {errors[-1] if errors else '?'}",
                    hint="use --retry-until-up to keep trying, or relax the resources",
                )
            self.env.log(f"launch round {done} failed; retrying in {delay:.1f}s")
            if self.env.on_backoff is not None:
                await self.env.on_backoff(delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, self.env.backoff_max)


class FailoverStrategy(RecoveryStrategy):
    """Relaunch in the same cloud/region (zone cleared) first, then anywhere."""

    name = "FAILOVER"

    def recovery_steps(self, spec: TaskSpec, last: Block | None) -> list[Step]:
        if last is None:
            return [Step()]
        return [Step(pin=Block(last.cloud, last.region, None)), Step()]


class EagerNextRegionStrategy(RecoveryStrategy):
    """Block the region that was just lost and relaunch elsewhere; then anywhere. When the
    user pinned a region or zone there is nowhere else to go: behave like FAILOVER."""

    name = "EAGER_NEXT_REGION"

    def recovery_steps(self, spec: TaskSpec, last: Block | None) -> list[Step]:
        if last is None:
            return [Step()]
        if spec.region_pinned or spec.zone_pinned:
            return FailoverStrategy.recovery_steps(self, spec, last)  # type: ignore[arg-type]
        return [Step(blocked=(Block(last.cloud, last.region, None),)), Step()]


_STRATEGIES: dict[str, type[RecoveryStrategy]] = {}
_DEFAULT: list[str] = []


def register_recovery_strategy(
    name: str, cls: type[RecoveryStrategy], default: bool = False
) -> None:
    key = name.upper()
    _STRATEGIES[key] = cls
    if default:
        _DEFAULT[:] = [key]


def strategy_names() -> list[str]:
    return sorted(_STRATEGIES)


def default_strategy() -> str:
    return _DEFAULT[0] if _DEFAULT else "EAGER_NEXT_REGION"


def get_strategy(name: str | None) -> type[RecoveryStrategy]:
    key = (name or default_strategy()).upper()
    try:
        return _STRATEGIES[key]
    except KeyError:
        raise InvalidSpecError(
            f"unknown recovery strategy {name!r}",
            field="resources.job_recovery.strategy",
            hint="known: " + ", ".join(strategy_names()),
        ) from None


register_recovery_strategy("FAILOVER", FailoverStrategy)
register_recovery_strategy("EAGER_NEXT_REGION", EagerNextRegionStrategy, default=True)
