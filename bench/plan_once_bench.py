"""A launch that runs the plan its dry run showed against one that plans again.

    .venv/bin/python bench/plan_once_bench.py [-n 5]

The interactive `skyd launch` shows the plan (a dry run) and then launches; the launch now
names the plan shown (`plan_id`) and the daemon runs it without solving again. Measured:
the launch's OPTIMIZE stage (its own `elapsed`, as the daemon records it) with the plan id
and without, side by side in each round, over every bundled catalog (SKYD_CATALOG_DIR holds
them all: the wide view solves over all of them; none is launchable here, so the launch
lands on `local`). Clusters are torn down between rounds (not timed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launch_bench import bench_daemon  # noqa: E402


def _optimize_s(rid: str) -> tuple[float, bool]:
    from skyd import sdk

    gen = sdk.stream_and_get(rid)
    got: tuple[float, bool] | None = None
    while True:
        try:
            ev = next(gen)
        except StopIteration:
            break
        if ev.get("type") == "stage" and ev.get("name") == "OPTIMIZE" and ev.get("state") == "done":
            got = (float(ev.get("elapsed") or 0.0), bool(ev.get("reused")))
    assert got is not None, "no OPTIMIZE stage"
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    n = ap.parse_args().n
    import skyd.clouds

    cats = Path(tempfile.mkdtemp(prefix="skyd-plan-cats-"))
    for f in (Path(skyd.clouds.__file__).parent / "data").glob("*.csv"):
        shutil.copy(f, cats / f.name)
    task = cats.parent / f"{cats.name}-task.yaml"
    task.write_text("resources:\n  cpus: 1+\nrun: echo planned\n")
    shown_s: list[float] = []
    again_s: list[float] = []
    try:
        with bench_daemon() as env:
            for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR"):
                os.environ[k] = env[k]
            from skyd import sdk
            from skyd.sdk.payloads import launch_payload, task_source

            def payload(**kw: Any) -> dict[str, Any]:
                p = launch_payload(task_source(str(task)), detach_run=True, **kw)
                return {**p, "catalog_dir": str(cats)}

            for i in range(n):
                shown = sdk.get_result(sdk.submit("launch", {**payload(), "dryrun": True}))
                t, reused = _optimize_s(sdk.submit("launch", {**payload(cluster_name=f"po-a{i}"),
                                                              "plan_id": shown["plan_id"]}))
                assert reused
                shown_s.append(t)
                t, reused = _optimize_s(sdk.submit("launch", payload(cluster_name=f"po-b{i}")))
                assert not reused
                again_s.append(t)
                sdk.get_result(sdk.submit("down", {"clusters": [f"po-a{i}", f"po-b{i}"]}))
    finally:
        shutil.rmtree(cats, ignore_errors=True)
        task.unlink(missing_ok=True)
    load = Path("/proc/loadavg").read_text().split()[0]
    a, b = statistics.median(shown_s), statistics.median(again_s)
    print(f"OPTIMIZE stage, median of {n} (load {load}):")
    print(f"  runs the plan shown (plan_id): {a * 1000:.1f} ms")
    print(f"  plans again (no plan_id):      {b * 1000:.1f} ms  ({b / a:.1f}x)" if a else "")


if __name__ == "__main__":
    main()
