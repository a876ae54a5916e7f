"""The spot placer on the fake preemptible provider (fakecloud: r1..r3 x zones a/b, r1
cheapest): spot replicas spread over regions, a preempted zone is avoided by the
replacement, on-demand takes over when spot capacity is short, and the base on-demand
replicas are on-demand."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import anyio

from tests.fakes import preemptible
from tests.serve.test_serve_e2e import APP, PROBE, _get, _ready, _svc, _up, leave_nothing  # noqa: F401
from tests.support.daemon import cli, running_daemon, wait_for


def _spot_yaml(tmp_path: Path, name: str, policy: str, run: str = f"exec {sys.executable} {APP}") -> Path:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"name: {name}\nresources:\n  infra: fakecloud\n  use_spot: true\n"
                 f"service:\n{PROBE}{policy}  ports: {port}\n"
                 f"run: {run}\n")
    return f


def _live(name: str) -> dict[int, dict[str, Any]]:
    return {r["replica_id"]: r for r in _svc(name)["replicas"]}


def test_spot_replicas_spread_over_regions(skyd_home: Path, tmp_path: Path,
                                           leave_nothing: None) -> None:  # noqa: F811
    # fakecloud's nodes share this machine's loopback, so two replicas cannot both listen
    # on the service port: placement is what is checked here (rows are written at launch).
    f = _spot_yaml(tmp_path, "spread", "  replicas: 3\n", run="sleep 600")
    with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
        _up(f)

        def placed() -> dict[int, dict[str, Any]] | None:
            live = _live("spread")
            ok = len(live) == 3 and all(r["status"] == "STARTING" for r in live.values())
            return live if ok else None

        live = wait_for(placed, timeout=90, interval=0.3)
        assert all(r["use_spot"] == 1 for r in live.values())
        assert sorted(r["region"] for r in live.values()) == ["r1", "r2", "r3"]
        assert cli("serve", "down", "spread").returncode == 0


def test_replacement_avoids_the_preempted_zone(skyd_home: Path, tmp_path: Path,
                                               leave_nothing: None) -> None:  # noqa: F811
    f = _spot_yaml(tmp_path, "pz", "  replicas: 1\n")
    with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
        out = _up(f)
        first = _ready("pz", 1)["replicas"][0]
        assert first["use_spot"] == 1 and first["zone"] == "r1-a"  # the cheapest
        assert anyio.run(preemptible.PreemptibleProvisioner().preempt, first["cluster"]) > 0

        def replaced() -> dict[int, dict[str, Any]] | None:
            live = _live("pz")
            st = {k: r["status"] for k, r in live.items()}
            return live if st == {1: "PREEMPTED", 2: "READY"} else None

        live = wait_for(replaced, timeout=90, interval=0.3)
        assert live[2]["zone"] not in (None, "r1-a") and live[2]["use_spot"] == 1
        assert _get(out["endpoint"] + "/") == (200, "replica 2")
        log = cli("serve", "logs", "pz", "--no-follow").stdout
        assert "replica 2: placing spot" in log and "(avoiding r1/r1-a)" in log
        assert cli("serve", "down", "pz").returncode == 0


def test_on_demand_fallback_and_base(skyd_home: Path, tmp_path: Path,
                                     leave_nothing: None) -> None:  # noqa: F811
    # No spot capacity anywhere: the dynamic fallback launches on-demand.
    preemptible.write_knobs(refused=[[None, None, "spot"]])
    f = _spot_yaml(tmp_path, "fb", "  replica_policy:\n    min_replicas: 2\n"
                   "    dynamic_ondemand_fallback: true\n    base_ondemand_fallback_replicas: 1\n")
    with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
        _up(f)
        reps = _ready("fb", 2)["replicas"]
        assert [r["use_spot"] for r in reps] == [0, 0]
        assert cli("serve", "down", "fb").returncode == 0
        # Spot is back: one replica (the base) on-demand, the other on spot.
        preemptible.write_knobs(refused=[])
        _up(f)
        reps = _ready("fb", 2)["replicas"]
        assert sorted(r["use_spot"] for r in reps) == [0, 1]
        assert cli("serve", "down", "fb").returncode == 0
