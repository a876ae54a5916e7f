"""SkyPilot 0.14's client calls (``sky.launch``, ``sky.exec``, ``sky.status``, ...) with
its argument names, over skyd's SDK. Every call returns a request id (reads included, as
SkyPilot's do); :func:`get` returns its result in SkyPilot's shape."""

from __future__ import annotations

import os
import secrets
import sys
import threading
from typing import Any

from skyd.errors import InvalidSpecError

_LOCAL: dict[str, Any] = {}  # request ids of reads answered at once -> their result
_LOCK = threading.Lock()


def answered_now(result: Any) -> str:
    rid = "local-" + secrets.token_hex(4)
    with _LOCK:
        _LOCAL[rid] = result
    return rid


def source_of(task: Any) -> dict[str, Any]:
    """A Task, a Dag, a YAML path or YAML text -> skyd's task source."""
    import yaml

    from skyd.sdk import payloads
    from skyd.sky.task import Dag, Task

    if isinstance(task, Task):
        return payloads.task_source(yaml_text=yaml.safe_dump(task.to_yaml_config(), sort_keys=False),
                                    base_dir=task.base_dir)
    if isinstance(task, Dag):
        base = task.tasks[0].base_dir if task.tasks else os.getcwd()
        return payloads.task_source(yaml_text=yaml.safe_dump_all(task.to_yaml_docs(), sort_keys=False),
                                    base_dir=base)
    if isinstance(task, (str, os.PathLike)) and str(task).endswith((".yaml", ".yml")):
        return payloads.task_source(task)
    raise TypeError(f"task must be a sky.Task, sky.Dag or a YAML path, got {type(task).__name__}")


def _c() -> Any:
    from skyd import sdk

    return sdk.client()


def launch(task: Any, cluster_name: str | None = None, retry_until_up: bool = False,
           idle_minutes_to_autostop: int | None = None, dryrun: bool = False,
           down: bool = False, backend: Any = None, optimize_target: Any = None,
           no_setup: bool = False, clone_disk_from: str | None = None, fast: bool = False,
           _need_confirmation: bool = False, **kw: Any) -> str:
    """``sky.launch(task, cluster_name=..., ...)`` -> request id."""
    if kw:
        raise TypeError(f"launch() got an unexpected keyword argument {sorted(kw)[0]!r}")
    if clone_disk_from:
        raise InvalidSpecError("clone_disk_from is not supported by skyd", field="clone_disk_from")
    from skyd.sdk import payloads

    minimize = "time" if str(getattr(optimize_target, "name", optimize_target) or "").upper() == "TIME" else "cost"
    body = payloads.launch_payload(source_of(task), cluster_name=cluster_name, dryrun=dryrun,
                                   idle_minutes=idle_minutes_to_autostop, down=down,
                                   no_setup=no_setup, retry_until_up=retry_until_up,
                                   minimize=minimize, detach_run=True)
    return str(_c().submit("launch", body))


def exec(task: Any, cluster_name: str | None = None, dryrun: bool = False,  # noqa: A001
         down: bool = False, backend: Any = None, **kw: Any) -> str:
    if kw:
        raise TypeError(f"exec() got an unexpected keyword argument {sorted(kw)[0]!r}")
    if not cluster_name:
        raise TypeError("exec() missing required argument: 'cluster_name'")
    from skyd.sdk import payloads

    return str(_c().submit("exec", payloads.exec_payload(source_of(task), cluster_name=cluster_name,
                                                        detach_run=True)))


def _names(cluster_names: Any) -> list[str] | None:
    if cluster_names is None:
        return None
    if isinstance(cluster_names, str):
        return [cluster_names]
    if not isinstance(cluster_names, (list, tuple)) or not all(isinstance(n, str) for n in cluster_names):
        raise TypeError("cluster_names must be a cluster name or a list of names")
    return list(cluster_names)


def status(cluster_names: Any = None, refresh: Any = False, all_users: bool = False,
           _include_credentials: bool = False) -> str:
    """``sky.status()`` -> request id; ``sky.get`` gives a list of cluster records."""
    from skyd import sdk

    names = _names(cluster_names)
    rows = sdk.status(names)
    return answered_now([_record(r) for r in rows])


def _record(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out.setdefault("name", r.get("name"))
    out["cluster_name"] = r.get("name")
    out["autostop"] = r.get("autostop_minutes", r.get("autostop", -1))
    return out


def queue(cluster_name: str, skip_finished: bool = False, all_users: bool = False) -> str:
    from skyd import sdk

    return answered_now(sdk.queue(cluster_name, skip_finished=skip_finished))


def _lifecycle(verb: str, cluster_name: str, purge: bool = False) -> str:
    if not isinstance(cluster_name, str):
        raise TypeError(f"{verb}() takes one cluster name, got {type(cluster_name).__name__}")
    from skyd import sdk

    return str(getattr(sdk, verb)([cluster_name]))


def stop(cluster_name: str, purge: bool = False) -> str:
    return _lifecycle("stop", cluster_name)


def down(cluster_name: str, purge: bool = False) -> str:
    return _lifecycle("down", cluster_name)


def start(cluster_name: str, idle_minutes_to_autostop: int | None = None,
          retry_until_up: bool = False, down: bool = False, force: bool = False) -> str:
    rid = _lifecycle("start", cluster_name)
    if idle_minutes_to_autostop is not None:
        get(rid)
        return autostop(cluster_name, idle_minutes_to_autostop, down=down)
    return rid


def autostop(cluster_name: str, idle_minutes: int, wait_for: Any = None, down: bool = False) -> str:
    from skyd import sdk

    if not isinstance(idle_minutes, int):
        raise TypeError("autostop(): idle_minutes must be an int (-1 cancels)")
    if idle_minutes < 0:
        return str(sdk.autostop([cluster_name], None, cancel=True))
    return str(sdk.autostop([cluster_name], idle_minutes, down=down))


def cancel(cluster_name: str, all: bool = False, all_users: bool = False,  # noqa: A002
           job_ids: list[int] | None = None, _try_cancel_if_cluster_is_init: bool = False) -> str:
    from skyd import sdk

    return str(sdk.cancel(cluster_name, job_ids, all_jobs=all))


def tail_logs(cluster_name: str, job_id: int | None, follow: bool, tail: int = 0,
              output_stream: Any = None, *, preload_content: bool = True) -> int:
    """Print a job's log; returns its exit code as SkyPilot does (0 when it succeeded)."""
    from skyd import sdk

    out = output_stream or sys.stdout
    for chunk in sdk.tail_logs(cluster_name, job_id, follow=follow, tail=tail):
        out.write(chunk.decode(errors="replace"))
        out.flush()
    if not follow:
        return 0
    st = sdk.job_status(cluster_name, int(job_id)) if job_id is not None else {}
    return 0 if st.get("status") in (None, "SUCCEEDED") else 100


def optimize(dag: Any, minimize: Any = None, admin_policy_request_options: Any = None) -> str:
    from skyd.sdk import payloads

    body = payloads.launch_payload(source_of(dag), dryrun=True)
    return str(_c().submit("launch", body))


def get(request_id: str) -> Any:
    """Wait for a request; its result in SkyPilot's shape (launch/exec: (job_id, handle))."""
    with _LOCK:
        if request_id in _LOCAL:
            return _LOCAL.pop(request_id)
    from skyd import sdk

    return _shape(sdk.requests_get(request_id).get("verb"), sdk.get_result(request_id))


def _shape(verb: str | None, result: Any) -> Any:
    if verb in ("launch", "exec") and isinstance(result, dict) and "job_id" in result:
        return result.get("job_id"), result
    if verb == "serve.up" and isinstance(result, dict):
        return result.get("name"), result.get("endpoint")
    if verb in ("serve.update", "serve.down", "jobs.cancel", "cancel", "stop", "start", "down",
                "autostop"):
        return None
    if verb == "jobs.launch" and isinstance(result, dict):
        ids = result.get("job_ids") or ([result["job_id"]] if result.get("job_id") is not None else [])
        return ids, result
    return result


def stream_and_get(request_id: str | None = None, log_path: str | None = None,
                   tail: int | None = None, follow: bool = True,
                   output_stream: Any = None) -> Any:
    """Print the request's output as it comes; return its result (as :func:`get`)."""
    if request_id is None:
        raise TypeError("stream_and_get() needs a request_id")
    with _LOCK:
        if request_id in _LOCAL:
            return _LOCAL.pop(request_id)
    from skyd import sdk

    out = output_stream or sys.stdout
    gen = sdk.stream_and_get(request_id, follow=follow)
    while True:
        try:
            ev = next(gen)
        except StopIteration as stop:
            return _shape(sdk.requests_get(request_id).get("verb"), stop.value)
        if ev.get("type") in ("log", "job_log") and ev.get("text"):
            out.write(str(ev["text"]))
            out.flush()


def api_status(request_ids: list[str] | None = None, all_status: bool = False) -> list[dict[str, Any]]:
    from skyd import sdk

    if request_ids:
        return [sdk.requests_get(r) for r in request_ids]
    return sdk.requests_ls()


def api_cancel(request_ids: str | list[str] | None = None, all_users: bool = False) -> list[str]:
    from skyd import sdk

    ids = [request_ids] if isinstance(request_ids, str) else list(request_ids or [])
    for r in ids:
        sdk.requests_cancel(r)
    return ids
