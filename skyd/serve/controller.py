"""One service's controller: a task in the daemon that keeps the replicas at the
autoscaler's target, probes them, and feeds the ready ones to the load balancer.

Replicas are clusters launched through the cluster-ops seam (skyd.jobs.ops.ClusterOps).
Every replica transition is written to SQLite before it is acted on; after a daemon
restart the controller picks the rows up: probed replicas are probed again (their
clusters and programs outlived the daemon), a half-made launch is torn down and redone,
an unfinished teardown is finished.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from skyd import settings
from skyd.serve import status as st
from skyd.serve.autoscalers import Autoscaler, Decision, autoscaler_for
from skyd.serve.lb import LoadBalancer
from skyd.serve.probe import Prober
from skyd.serve.replica_port import local_replica_port

if TYPE_CHECKING:
    from skyd.serve.manager import ServeManager

JOB_ENDED = frozenset({"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"})
MAX_FAILED_LAUNCHES = 3
DEFAULT_FAILURE_TIMEOUT = 180.0


def lb_class() -> type[LoadBalancer]:
    """The raw-protocol proxy (httptools) unless SKYD_SERVE_LB=aiohttp or it is missing."""
    if settings.SERVE_LB.get() != "aiohttp":
        try:
            from skyd.serve.fastlb import FastLoadBalancer
        except ImportError:
            return LoadBalancer
        return FastLoadBalancer
    return LoadBalancer


@asynccontextmanager
async def _nolock() -> AsyncIterator[None]:
    yield


class ServiceController:
    def __init__(self, manager: ServeManager, name: str) -> None:
        self.m = manager
        self.db = manager.db
        self.name = name
        self.busy: set[int] = set()
        self.scopes: dict[int, anyio.CancelScope] = {}
        self.weights: dict[int, float] = {}  # instance_aware_least_load: the replica's target qps
        self.wake = anyio.Event()
        self.done = anyio.Event()
        # set once the load balancer listens (or could not, with the service FAILED saying
        # why): a resuming daemon serves its API only after that, so READY is reachable
        self.listening = anyio.Event()
        self.lb: LoadBalancer | None = None
        self.scaler: Autoscaler | None = None
        self.scaler_version = 0
        self.last: Decision | None = None
        self.failed_launches = 0
        self.prober = Prober()
        self.cancel_scope = anyio.CancelScope()
        self.placing = anyio.Lock()  # spot launches one at a time, so each sees the others' zones

    def log(self, text: str) -> None:
        self.m.log(self.name, text)

    def poke(self) -> None:
        self.wake.set()

    # -- main loop ---------------------------------------------------------------------
    async def run(self) -> None:
        try:
            with self.cancel_scope:
                await self._run()
        finally:
            with anyio.CancelScope(shield=True):
                await self.prober.close()
            self.m.forget(self.name, self)
            self.listening.set()
            self.done.set()

    async def _run(self) -> None:
        svc = await self.db.get_service(self.name)
        if svc is None:
            return
        spec = svc["spec"]["service"]
        lbspec = spec.get("load_balancer") or {}
        self.lb = lb_class()(
            self.name, host=self.m.host, port=int(svc["lb_port"]),
            policy=spec.get("load_balancing_policy") or "least_load",
            affinity_header=lbspec.get("affinity_header"),
            affinity_body_prefix=lbspec.get("affinity_body_prefix"),
            stream_timeout=lbspec.get("stream_timeout_seconds"),
            ssl_context=self.m.ssl_context(spec.get("tls")),
            qps_window=self.m.qps_window)
        async with anyio.create_task_group() as tg:
            if svc["status"] != st.SHUTTING_DOWN:
                ready = [r for r in await self.db.replicas(self.name) if r["status"] == st.READY]
                self.lb.set_replicas([(int(r["replica_id"]), str(r["url"]), 1.0) for r in ready])
                await self._listen(tg, svc)
            self.listening.set()  # a service shutting down gets no listener
            tg.start_soon(self._publish_traffic)
            tg.start_soon(self._write_access_log)
            while True:
                svc = await self.db.get_service(self.name)
                if svc is None:
                    break
                if svc["status"] == st.SHUTTING_DOWN:
                    await self._shutdown(tg)
                    break
                await self._step(tg, svc)
                self.wake = anyio.Event()
                with anyio.move_on_after(self._interval(svc)):
                    await self.wake.wait()
            tg.cancel_scope.cancel()

    async def _publish_traffic(self) -> None:
        """A `serve` event each second the load balancer served something (the TUI's live
        rates re-read on it)."""
        last = -1
        while True:
            await anyio.sleep(1.0)
            n = self.lb.total if self.lb is not None else 0
            if n != last:
                last = n
                self.m.publish(self.name)

    async def _write_access_log(self) -> None:
        """The load balancer's access entries into `<service>.access.log`, every second
        (skyd.serve.access: rotated at its size limit)."""
        from skyd.serve.access import max_bytes, write_entries

        path, limit = self.m.access_log_path(self.name), max_bytes()
        try:
            while True:
                await anyio.sleep(1.0)
                if self.lb is not None and self.lb.access.entries:
                    await anyio.to_thread.run_sync(write_entries, path, *self.lb.access.take(), limit)
        finally:
            if self.lb is not None and self.lb.access.entries:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(write_entries, path, *self.lb.access.take(), limit)

    async def _listen(self, tg: Any, svc: dict[str, Any]) -> None:
        """Open the load balancer's port; while something else holds it (after a restart),
        the service is FAILED with that reason and the controller tries again."""
        assert self.lb is not None
        while True:
            try:
                await tg.start(self.lb.serve)
            except OSError as e:
                why = f"load balancer port {self.lb.port}: {e.strerror or e}"
                if svc["status_reason"] != why:
                    self.log(why)
                    await self.db.set_service_status(self.name, st.FAILED, why)
                    svc = {**svc, "status_reason": why}
                self.listening.set()
                await anyio.sleep(5)
                cur = await self.db.get_service(self.name)
                if cur is None or cur["status"] == st.SHUTTING_DOWN:
                    return
                continue
            self.log(f"load balancer on {svc['endpoint']}")
            return

    def _interval(self, svc: dict[str, Any]) -> float:
        probe = svc["spec"]["service"].get("readiness_probe") or {}
        v = probe.get("endpoint_probe_interval_seconds")
        if v is None:
            v = settings.SERVE_PROBE_INTERVAL.get()
        return max(0.05, float(v))

    async def _step(self, tg: Any, svc: dict[str, Any]) -> None:
        spec = svc["spec"]
        self._configure_lb(spec["service"])
        reps = await self.db.replicas(self.name)
        for r in reps:
            rid = int(r["replica_id"])
            if rid in self.busy:
                continue
            if r["status"] in (st.PENDING, st.PROVISIONING):
                if int(r["version"] or 1) != int(svc["version"] or 1) and r["status"] == st.PENDING:
                    await self._retire(r, None, "an older version")
                    continue
                self._spawn(tg, rid, self._launch, r, spec)
            elif r["status"] == st.SHUTTING_DOWN:
                self._spawn(tg, rid, self._teardown, r)
        probed = [r for r in reps if r["status"] in st.PROBED and int(r["replica_id"]) not in self.busy]
        if probed:
            async with anyio.create_task_group() as ptg:
                for r in probed:
                    ptg.start_soon(self._probe, r, spec["service"])
            reps = await self.db.replicas(self.name)
        # a replica the probes just found READY takes traffic now, not after scaling (which
        # may wait on launches and teardowns)
        await self._route(spec["service"], reps, "no replica is ready yet"
                          if any(r["status"] in st.ALIVE for r in reps) else
                          "the service has no replica")
        await self._scale(svc, reps)
        reps = await self.db.replicas(self.name)
        ready = [r for r in reps if r["status"] == st.READY]
        alive = [r for r in reps if r["status"] in st.ALIVE]
        assert self.lb is not None
        if ready:
            status, reason = st.READY, None
        elif self.failed_launches >= MAX_FAILED_LAUNCHES and not alive:
            status, reason = st.FAILED, (f"{self.failed_launches} replicas in a row failed; "
                                         "see `skyd serve logs`")
        elif alive:
            status, reason = st.REPLICA_INIT, None
        else:
            status, reason = st.NO_REPLICA, None
        why = reason or ("no replica is ready yet" if alive else "the service has no replica")
        await self._route(spec["service"], reps, why)
        if status != svc["status"] or reason != svc["status_reason"]:
            await self.db.set_service_status(self.name, status, reason)
            self.log(f"service {status}" + (f": {reason}" if reason else ""))
            self.m.publish(self.name)

    async def _route(self, service: dict[str, Any], reps: list[dict[str, Any]], why: str) -> None:
        """The load balancer sends traffic to the READY replicas of ``reps`` (``why``: its
        answer while there is none)."""
        assert self.lb is not None
        ready = [r for r in reps if r["status"] == st.READY]
        for r in ready:
            if int(r["replica_id"]) not in self.weights:
                self.weights[int(r["replica_id"])] = await self._weight(service, r)
        self.lb.set_replicas([(int(r["replica_id"]), str(r["url"]),
                               self.weights[int(r["replica_id"])]) for r in ready], why)

    async def _weight(self, service: dict[str, Any], r: dict[str, Any]) -> float:
        """The replica's target_qps_per_replica for its accelerator (a mapping like
        {"A100:1": 10, "T4": 2}); 1.0 without a mapping, its smallest target when the
        replica's accelerator is not in it."""
        tq = (service.get("replica_policy") or {}).get("target_qps_per_replica")
        if not isinstance(tq, dict):
            return 1.0
        from skyd.pipeline import clusters_db as cdb

        row = await cdb.get_cluster(self.m.store, str(r["cluster"]))
        handle = cdb.handle_of(row) if row else None
        accs = handle.accelerators if handle is not None else {}
        for key, qps in tq.items():
            name, _, count = str(key).partition(":")
            for acc, n in accs.items():
                if acc.lower() == name.lower() and (not count or float(count) == float(n)):
                    return max(0.001, float(qps))
        return min(float(v) for v in tq.values())

    def _configure_lb(self, service: dict[str, Any]) -> None:
        """After `serve update`: the new version's policy and affinity settings."""
        from skyd.serve.policies import make_policy

        lb = self.lb
        assert lb is not None
        name = service.get("load_balancing_policy") or "least_load"
        lbspec = service.get("load_balancer") or {}
        header = lbspec.get("affinity_header")
        if lb.policy.name != name:
            lb.policy = make_policy(name)
            lb.policy.set_backends(list(lb.backends.values()))
        lb.affinity_body_prefix = lbspec.get("affinity_body_prefix") or 0
        if lb.affinity_header != header:
            lb.affinity_header = header
            if hasattr(lb, "affinity_header_b"):
                lb.affinity_header_b = header.lower().encode() if header else None

    def _spawn(self, tg: Any, rid: int, fn: Any, *args: Any) -> None:
        self.busy.add(rid)
        scope = self.scopes[rid] = anyio.CancelScope()

        async def go() -> None:
            try:
                with scope:
                    await fn(*args)
            except Exception as e:  # noqa: BLE001 - logged; the next step retries
                self.log(f"replica {rid}: {type(e).__name__}: {e}")
            finally:
                self.busy.discard(rid)
                self.scopes.pop(rid, None)
                self.poke()

        tg.start_soon(go)

    # -- scaling -----------------------------------------------------------------------
    async def _scale(self, svc: dict[str, Any], reps: list[dict[str, Any]]) -> None:
        """Replicas of the current version up/down to the autoscaler's target; those of
        older versions retired as the update mode allows (rolling: one per new READY
        replica; blue_green: all once the new set is READY)."""
        policy = svc["spec"]["service"].get("replica_policy") or {}
        version = int(svc["version"] or 1)
        alive = [r for r in reps if r["status"] in st.ALIVE]
        new = [r for r in alive if int(r["version"] or 1) == version]
        old = [r for r in alive if int(r["version"] or 1) != version]
        if self.scaler is None or self.scaler_version != version:
            self.scaler = autoscaler_for(policy, len(new) or len(old))
            self.scaler_version = version
        assert self.lb is not None
        inflight = sum(b.inflight for b in self.lb.backends.values())
        per = [self.weights.get(int(r["replica_id"])) if r["status"] == st.READY else None
               for r in new]  # instance_aware: each replica's qps target, None if not known
        d = self.scaler.decide(time.monotonic(), self.lb.qps(), inflight, per)
        if self.last is None or d.reason != self.last.reason or d.target != self.last.target:
            self.log(f"autoscaler {self.scaler.name}: target {d.target} ({d.reason}) {d.inputs}")
        self.last = d
        if self.failed_launches >= MAX_FAILED_LAUNCHES:
            return
        for _ in range(d.target - len(new)):
            r = await self.db.new_replica(self.name, version, None)
            self.log(f"replica {r['replica_id']}: PENDING (version {version}, scale to {d.target})")
            self.poke()
        order = {st.PENDING: 0, st.PROVISIONING: 1, st.STARTING: 2, st.NOT_READY: 3, st.READY: 4}

        def worst_first(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return sorted(rs, key=lambda r: (order.get(r["status"], 0), -int(r["replica_id"])))

        if len(new) > d.target:
            for r in worst_first(new)[: len(new) - d.target]:
                await self._retire(r, None, f"scale down to {d.target}")
        if old:
            ready_new = sum(r["status"] == st.READY for r in new)
            if svc["spec"].get("update_mode") == "blue_green":
                keep = len(old) if ready_new < d.target else 0
            else:
                keep = max(0, d.target - ready_new)
            useful = [r for r in old if r["status"] == st.READY]
            for r in worst_first(old)[: len(old) - min(keep, len(useful))]:
                await self._retire(r, None, f"replaced by version {version}")

    async def _retire(self, r: dict[str, Any], final: str | None, reason: str) -> None:
        """Mark for teardown (final: the status the row keeps afterwards; None: removed)."""
        await self.db.update_replica(self.name, int(r["replica_id"]), status=st.SHUTTING_DOWN,
                                     final_status=final, status_reason=reason)
        self.log(f"replica {r['replica_id']}: SHUTTING_DOWN ({reason})")
        if final is not None and final != st.PREEMPTED and not r.get("ready_at"):
            self.failed_launches += 1
        self.poke()

    # -- one replica -------------------------------------------------------------------
    async def _launch(self, r: dict[str, Any], spec: dict[str, Any]) -> None:
        rid = int(r["replica_id"])
        cluster = str(r["cluster"])
        if r["status"] == st.PROVISIONING:  # a launch the last daemon did not finish
            self.log(f"replica {rid}: redoing an unfinished launch")
            await self.m.ops.teardown(cluster)
        task = dict(spec["task"])
        task.pop("service", None)
        local = self.m.is_local(task)
        port = int(r["port"]) if r["port"] else (local_replica_port() if local else self.m.replica_port(spec))
        await self.db.update_replica(self.name, rid, status=st.PROVISIONING, port=port)
        self.log(f"replica {rid}: PROVISIONING {cluster} (port {port})")
        envs = {"SKYPILOT_SERVE_REPLICA_ID": str(rid), "SKYPILOT_SERVE_PORT": str(port),
                "SKYPILOT_SERVICE_NAME": self.name}
        res = await self._place_and_launch(r, spec, task, cluster, envs)
        if res is None:
            return
        host = await self.m.replica_host(cluster)
        await self.db.update_replica(
            self.name, rid, status=st.STARTING, job_id=res.job_id, url=f"http://{host}:{port}",
            cloud=res.cloud, region=res.region, zone=res.zone, started_at=time.time())
        self.log(f"replica {rid}: STARTING at http://{host}:{port}")

    async def _place_and_launch(self, r: dict[str, Any], spec: dict[str, Any], task: dict[str, Any],
                                cluster: str, envs: dict[str, str]) -> Any:
        """Launch through the spot placer's attempts (skyd.serve.spot); None when none
        provisioned (the replica is then FAILED_PROVISION)."""
        from skyd.errors import ResourcesUnavailableError
        from skyd.jobs.ops import TaskSpec
        from skyd.serve import spot

        rid = int(r["replica_id"])
        log = lambda s: self.log(f"replica {rid}: {s}")  # noqa: E731
        policy = spec["service"].get("replica_policy") or {}
        spot_task = spot.wants_spot(task)
        async with self.placing if spot_task else _nolock():
            others = [o for o in await self.db.replicas(self.name)
                      if int(o["replica_id"]) != rid and o["status"] in st.ALIVE]
            bad = await self.db.recent_preemptions(self.name, time.time() - spot.memory_s())
            plan = spot.attempts(task, policy, others, bad)
            err: Exception | None = None
            for a in plan:
                if spot_task:
                    where = ", ".join(f"{b.region}/{b.zone}" if b.zone else str(b.region)
                                      for b in a.blocked)
                    self.log(f"replica {rid}: placing {a.why}" + (f" (avoiding {where})" if where else ""))
                await self.db.update_replica(self.name, rid, use_spot=int(a.use_spot))
                ts = TaskSpec(name=cluster, task=spot.with_spot(task, a.use_spot) if spot_task else task,
                              job_id=rid, task_index=0, attempt=1, envs=envs,
                              secrets_ref=spec.get("secrets_ref"))
                try:
                    res = await self.m.ops.launch(ts, cluster, blocked=list(a.blocked), log=log)
                except ResourcesUnavailableError as e:
                    err = e
                    continue
                except Exception as e:  # noqa: BLE001 - any other launch failure ends this replica
                    err = e
                    break
                # where it went, before the next spot launch looks
                await self.db.update_replica(self.name, rid, cloud=res.cloud, region=res.region,
                                             zone=res.zone)
                return res
        assert err is not None
        await self._retire(r, st.FAILED_PROVISION, f"{type(err).__name__}: {err}")
        return None

    async def _teardown(self, r: dict[str, Any]) -> None:
        rid = int(r["replica_id"])
        await self._drain(rid)
        await self.m.ops.teardown(str(r["cluster"]))
        if r.get("final_status"):
            await self.db.update_replica(self.name, rid, status=r["final_status"])
            self.log(f"replica {rid}: {r['final_status']} (cluster removed)")
        else:
            await self.db.delete_replica(self.name, rid)
            self.log(f"replica {rid}: removed")

    async def _drain(self, rid: int, timeout: float = 30.0) -> None:
        """Take the replica out of the load balancer and let its requests finish."""
        lb = self.lb
        if lb is None or rid not in lb.backends:
            return
        b = lb.backends[rid]
        lb.set_replicas([(k, v.url, v.weight) for k, v in lb.backends.items() if k != rid])
        with anyio.move_on_after(timeout):
            while b.inflight > 0:
                await anyio.sleep(0.05)

    async def _probe(self, r: dict[str, Any], service: dict[str, Any]) -> None:
        rid = int(r["replica_id"])
        probe = service.get("readiness_probe") or {}
        ok, why = await self.prober.probe(str(r["url"]), probe)
        now = time.time()
        if ok:
            if r["status"] != st.READY:
                await self.db.update_replica(self.name, rid, status=st.READY, fail_since=None,
                                             ready_at=r.get("ready_at") or now, status_reason=None)
                self.log(f"replica {rid}: READY")
                self.failed_launches = 0
            return
        # Not answering: has its program ended, or its cluster gone?
        if r["job_id"] is not None:
            info = await self.m.ops.job_status(str(r["cluster"]), int(r["job_id"]))
            if info is not None and info.status in JOB_ENDED:
                await self._retire(r, st.FAILED_USER, f"its program ended ({info.status}, "
                                   f"exit code {info.exit_code})")
                return
            if info is None:
                cs = await self.m.ops.cluster_status(str(r["cluster"]))
                if cs in ("PREEMPTED", "TERMINATED", "STOPPED"):
                    if r.get("cloud") and r.get("use_spot"):
                        await self.db.record_preemption(self.name, str(r["cloud"]), r.get("region"),
                                                        r.get("zone"))
                    await self._retire(r, st.PREEMPTED, f"its cluster is {cs}")
                    return
        if r["status"] == st.STARTING:
            delay = float(probe.get("initial_delay_seconds") or 0)
            if now - float(r["started_at"] or now) > delay:
                await self._retire(r, st.FAILED_INITIAL_DELAY,
                                   f"not ready within initial_delay_seconds={delay:g}: {why}")
            return
        limit = probe.get("consecutive_failure_threshold_timeout")
        limit = DEFAULT_FAILURE_TIMEOUT if limit is None else float(limit)
        if r["status"] == st.READY:
            await self.db.update_replica(self.name, rid, status=st.NOT_READY, fail_since=now,
                                         status_reason=why)
            self.log(f"replica {rid}: NOT_READY ({why})")
        elif now - float(r["fail_since"] or now) > limit:
            await self._retire(r, st.FAILED_PROBING, f"failing probes for over {limit:g}s: {why}")

    async def _shutdown(self, tg: Any) -> None:
        assert self.lb is not None
        self.lb.set_replicas([], f"service {self.name} is shutting down")
        for scope in list(self.scopes.values()):
            scope.cancel()  # launches in flight stop; their clusters go below
        while self.busy:
            await anyio.sleep(0.05)
        while True:
            reps = await self.db.replicas(self.name)
            live = [r for r in reps if r["status"] not in st.FINAL]
            if not live:
                break
            for r in live:
                if r["status"] != st.SHUTTING_DOWN:
                    await self.db.update_replica(self.name, int(r["replica_id"]),
                                                 status=st.SHUTTING_DOWN, final_status=None)
            reps = await self.db.replicas(self.name)
            async with anyio.create_task_group() as dtg:
                for r in reps:
                    if r["status"] == st.SHUTTING_DOWN:
                        dtg.start_soon(self._teardown, {**r, "final_status": None})
        await self.db.delete_service(self.name)
        self.log("service removed")
        self.m.publish(self.name)
