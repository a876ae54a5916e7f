"""The CLI's verbs as SDK calls (blocking), SkyPilot-style: mutating verbs return a request
id (follow it with `stream_and_get` / `get_result`), reads return data.

    from skyd import sdk
    rid = sdk.launch("task.yaml", cluster_name="dev", gpus="A100:1")
    result = sdk.get_result(rid)            # {"cluster": "dev", "job_id": 1, "status": ...}
    for chunk in sdk.tail_logs("dev", 1): print(chunk.decode(), end="")
    sdk.get_result(sdk.down("dev"))
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from skyd.sdk import payloads


def _q(segment: object) -> str:
    """One URL path segment, quoted whole (old names may hold `/`, `?`, `#`, spaces)."""
    return quote(str(segment), safe="")


def _c() -> Any:
    from skyd.sdk import client

    return client()


def launch(task: str | os.PathLike[str] | None = None, *, command: str | None = None,
           yaml_text: str | None = None, cluster_name: str | None = None,
           **kw: Any) -> str:
    """`skyd launch`: kw takes env, secrets, dryrun, detach_run, idle_minutes, down,
    no_setup, retry_until_up, minimize and the resource overrides (gpus, cpus, infra, ...).
    ``secrets={"HF_TOKEN": None}`` takes the value from this process's environment (as
    ``--secret HF_TOKEN``); values never land in the daemon's database or logs."""
    src = payloads.task_source(task, command=command, yaml_text=yaml_text)
    return str(_c().submit("launch", payloads.launch_payload(src, cluster_name=cluster_name, **kw)))


def exec(cluster_name: str, task: str | os.PathLike[str] | None = None, *,  # noqa: A001
         command: str | None = None, yaml_text: str | None = None, **kw: Any) -> str:
    """`skyd exec` (named like SkyPilot's `sky.exec`)."""
    src = payloads.task_source(task, command=command, yaml_text=yaml_text)
    return str(_c().submit("exec", payloads.exec_payload(src, cluster_name=cluster_name, **kw)))


def stop(clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
    return str(_c().submit("stop", payloads.clusters_payload(clusters, all_clusters)))


def start(clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
    return str(_c().submit("start", payloads.clusters_payload(clusters, all_clusters)))


def down(clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
    return str(_c().submit("down", payloads.clusters_payload(clusters, all_clusters)))


def autostop(clusters: list[str] | str, idle_minutes: float | None = None, *,
             down: bool = False, cancel: bool = False) -> str:
    body = {**payloads.clusters_payload(clusters), "idle_minutes": idle_minutes,
            "down": down, "cancel": cancel}
    return str(_c().submit("autostop", body))


def cancel(cluster_name: str, job_ids: list[int] | None = None, *, all_jobs: bool = False) -> str:
    body = {"cluster_name": cluster_name, "job_ids": list(job_ids or []), "all": all_jobs}
    return str(_c().submit("cancel", body))


def queue(cluster_name: str, *, skip_finished: bool = False) -> list[dict[str, Any]]:
    params = {"skip_finished": "1"} if skip_finished else None
    return list(_c().get(f"/v1/clusters/{_q(cluster_name)}/queue", params)["jobs"])


def job_status(cluster_name: str, job_id: int) -> dict[str, Any]:
    return dict(_c().get(f"/v1/clusters/{_q(cluster_name)}/jobs/{_q(job_id)}/logs",
                         {"status_only": "1"}))


def tail_logs(cluster_name: str, job_id: int | None = None, *, follow: bool = True,
              tail: int = 0) -> Iterator[bytes]:
    """A job's output as it comes (the latest job when job_id is None)."""
    path = (f"/v1/clusters/{_q(cluster_name)}/jobs/{_q(job_id)}/logs" if job_id is not None
            else f"/v1/clusters/{_q(cluster_name)}/logs")
    yield from _c().stream_bytes(path, {"follow": "1" if follow else "0", "tail": tail})


def cost_report(*, all_users: bool = False) -> dict[str, Any]:
    """Live and torn-down clusters with their cost: yours (``all_users``: every user's of
    a shared daemon, each row with its ``user``)."""
    return dict(_c().get("/v1/cost-report", {"all_users": 1} if all_users else None))


def check() -> list[dict[str, Any]]:
    return list(_c().get("/v1/check"))


def jobs_launch(task: str | os.PathLike[str] | None = None, *, command: str | None = None,
                yaml_text: str | None = None, name: str | None = None,
                env: dict[str, str] | None = None,
                secrets: dict[str, str | None] | None = None,
                job_recovery: str | None = None) -> str:
    """`skyd jobs launch` (a multi-document YAML is a pipeline)."""
    body = payloads.jobs_launch_payload(
        payloads.task_source(task, command=command, yaml_text=yaml_text), name=name, env=env,
        secrets=secrets, job_recovery=job_recovery)
    return str(_c().submit("jobs.launch", body))


def jobs_queue(*, skip_finished: bool = False, all_users: bool = False) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"skip_finished": "1"} if skip_finished else {}
    if all_users:  # every user's of a shared daemon, not only yours
        params["all_users"] = 1
    return list(_c().get("/v1/jobs", params or None))


def jobs_cancel(job_ids: list[int] | None = None, *, name: str | None = None,
                all_jobs: bool = False) -> str:
    return str(_c().submit("jobs.cancel", {"ids": list(job_ids or []), "name": name,
                                           "all": all_jobs}))
