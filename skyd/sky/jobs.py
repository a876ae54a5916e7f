"""``sky.jobs``: managed jobs with SkyPilot 0.14's argument names (request ids + get)."""

from __future__ import annotations

import sys
from typing import Any


def launch(task: Any, name: str | None = None, pool: str | None = None,
           num_jobs: int | None = None, **kw: Any) -> str:
    if kw:
        raise TypeError(f"jobs.launch() got an unexpected keyword argument {sorted(kw)[0]!r}")
    from skyd import sdk
    from skyd.sdk import payloads
    from skyd.sky.api import source_of

    body = payloads.jobs_launch_payload(source_of(task), name=name)
    if pool:
        body["pool"] = pool
    if num_jobs is not None:
        body["num_jobs"] = num_jobs
    return str(sdk.client().submit("jobs.launch", body))


def queue(refresh: bool = False, skip_finished: bool = False, all_users: bool = False,
          job_ids: list[int] | None = None, **kw: Any) -> str:
    from skyd import sdk
    from skyd.sky.api import answered_now

    rows = sdk.jobs_queue(skip_finished=skip_finished)
    if job_ids:
        rows = [r for r in rows if r.get("job_id", r.get("id")) in set(job_ids)]
    return answered_now(rows)


def cancel(name: str | None = None, job_ids: list[int] | None = None, all: bool = False,  # noqa: A002
           all_users: bool = False, pool: str | None = None) -> str:
    from skyd import sdk

    return str(sdk.jobs_cancel(job_ids, name=name, all_jobs=all))


def tail_logs(name: str | None = None, job_id: int | None = None, follow: bool = True,
              controller: bool = False, refresh: bool = False, tail: int | None = None,
              output_stream: Any = None) -> int:
    from skyd import sdk

    out = output_stream or sys.stdout
    if job_id is None:  # SkyPilot: the latest job (of that name)
        rows = [r for r in sdk.jobs_queue() if not name or r.get("name") == name]
        if not rows:
            from skyd.errors import NotFoundError

            raise NotFoundError("no managed job" + (f" named {name!r}" if name else ""))
        job_id = max(int(r.get("job_id") or r.get("id") or 0) for r in rows)
    params: dict[str, Any] = {"follow": "1" if follow else "0"}
    if controller:
        params["controller"] = "1"
    for item in sdk.client().stream_ndjson(f"/v1/jobs/{int(job_id)}/logs", params):
        out.write(str(item.get("text", "")))
        out.flush()
    return 0
