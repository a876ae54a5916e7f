"""Queue throughput on one `local` cluster: N trivial jobs submitted detached, all
scheduled and run to completion (target: 200 jobs <= 20 s wall).

    .venv/bin/python bench/queue_bench.py [-n 200] [--via sdk|cli] [--parallel 4]

--via sdk: each job is one `exec` request (detach_run) through one SDK client, as
`skyd exec -d` sends it, without a CLI process per job. --via cli: `skyd exec -d C true`
processes, --parallel at a time. Wall time from the first submission to the last job done.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import time

from launch_bench import bench_daemon, skyd

TERMINAL = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--via", choices=("sdk", "cli"), default="sdk")
    ap.add_argument("--parallel", type=int, default=4, help="concurrent CLI processes")
    args = ap.parse_args()
    with bench_daemon() as env:
        os.environ.update(env)
        from skyd.sdk.transport import Client

        skyd(env, "launch", "-c", "q", "echo up")
        t0 = time.perf_counter()
        with Client(autostart=False) as c:
            if args.via == "sdk":
                rids = [c.submit("exec", {"command": "true", "cluster_name": "q",
                                          "detach_run": True, "base_dir": "/"})
                        for _ in range(args.n)]
                for rid in rids:
                    for ev in c.events(rid, True):
                        if ev.get("type") == "error":
                            raise RuntimeError(ev)
            else:
                with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
                    list(pool.map(lambda _: skyd(env, "exec", "q", "-d", "true"), range(args.n)))
            t_submit = time.perf_counter() - t0
            while True:
                jobs = c.get("/v1/clusters/q/queue")["jobs"]
                if len(jobs) >= args.n + 1 and all(j["status"] in TERMINAL for j in jobs):
                    break
                time.sleep(0.1)
        wall = time.perf_counter() - t0
    ran = [j for j in jobs if j["job_id"] != 1]
    bad = [j for j in ran if j["status"] != "SUCCEEDED"]
    lat = [j["ended_at"] - j["submitted_at"] for j in ran if j.get("ended_at") and j.get("submitted_at")]
    run = [j["ended_at"] - j["started_at"] for j in ran if j.get("ended_at") and j.get("started_at")]
    print(f"{args.n} trivial jobs via {args.via}: submitted in {t_submit:.1f} s, all done in "
          f"{wall:.1f} s  ({args.n / wall:.1f} jobs/s)  target <= 20 s for 200")
    print(f"  per job: submit->end median {statistics.median(lat):.2f} s, run median "
          f"{statistics.median(run) * 1000:.0f} ms; not SUCCEEDED: {len(bad)}")


if __name__ == "__main__":
    main()
