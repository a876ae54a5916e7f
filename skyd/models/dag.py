"""Dag: tasks plus edges. A multi-document YAML is a chain (a pipeline), or a job group when
its header says ``execution: parallel`` (all tasks at once, no edges)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skyd.errors import InvalidSpecError
from skyd.models.task import Task


class Dag:
    """Tasks and edges ``(upstream, downstream)`` as indices into ``tasks``."""

    def __init__(self, tasks: Iterable[Task], edges: Iterable[tuple[int, int]] = (),
                 name: str | None = None, *, execution: str | None = None,
                 primary_tasks: list[str] | None = None,
                 termination_delay: int | float | dict[str, int | float] | None = None,
                 inter_connection: bool | None = None) -> None:
        self.tasks: list[Task] = list(tasks)
        self.edges: list[tuple[int, int]] = [(int(a), int(b)) for a, b in edges]
        self.name = name
        # From the header document: "serial" (a pipeline) or "parallel" (a job group);
        # None when the YAML had no `execution:` (a plain chain).
        self.execution = execution
        self.primary_tasks = list(primary_tasks) if primary_tasks is not None else None
        self.termination_delay = termination_delay  # seconds, or per task name
        self.inter_connection = inter_connection
        if not self.tasks:
            raise InvalidSpecError("a DAG needs at least one task", hint="add a task document")
        n = len(self.tasks)
        for a, b in self.edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise InvalidSpecError(f"bad edge ({a}, {b}) for {n} tasks", field="edges")
        self.topological_order()  # rejects cycles

    @classmethod
    def chain(cls, tasks: Iterable[Task], name: str | None = None) -> Dag:
        ts = list(tasks)
        return cls(ts, [(i, i + 1) for i in range(len(ts) - 1)], name)

    def topological_order(self) -> list[int]:
        n = len(self.tasks)
        indeg = [0] * n
        succ: list[list[int]] = [[] for _ in range(n)]
        for a, b in self.edges:
            indeg[b] += 1
            succ[a].append(b)
        ready = [i for i in range(n) if indeg[i] == 0]
        order: list[int] = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    ready.append(j)
        if len(order) != n:
            raise InvalidSpecError("the DAG has a cycle", field="edges")
        return order

    def is_chain(self) -> bool:
        """True when the tasks form one path (a single task is a chain)."""
        n = len(self.tasks)
        if len(set(self.edges)) != n - 1:
            return False
        outs = [0] * n
        ins = [0] * n
        for a, b in self.edges:
            outs[a] += 1
            ins[b] += 1
        if any(x > 1 for x in outs + ins):
            return False
        return sum(1 for x in ins if x == 0) == 1  # acyclic (checked) + one source => path

    @property
    def task(self) -> Task:
        """The only task (for single-task DAGs)."""
        if len(self.tasks) != 1:
            raise InvalidSpecError(f"expected one task, the DAG has {len(self.tasks)}")
        return self.tasks[0]

    @property
    def is_job_group(self) -> bool:
        """All tasks run at once (header ``execution: parallel``)."""
        return self.execution == "parallel"

    def _group_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("execution", "primary_tasks", "termination_delay", "inter_connection"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out

    def to_normalized(self, *, redact_secrets: bool = True) -> dict[str, Any]:
        """One task -> that task's dict; several -> ``{name, tasks, edges}`` (plus
        ``execution``/``primary_tasks``/``termination_delay`` when the header gave them)."""
        group = self._group_fields()
        if len(self.tasks) == 1 and not self.edges and not group:
            d = self.tasks[0].to_normalized(redact_secrets=redact_secrets)
            if self.name is not None and self.name != d.get("name"):
                d = {"name": self.name, "tasks": [d], "edges": []}
            return d
        return {
            "name": self.name,
            **group,
            "tasks": [t.to_normalized(redact_secrets=redact_secrets) for t in self.tasks],
            "edges": [[a, b] for a, b in self.edges],
        }

    @classmethod
    def from_normalized(cls, d: dict[str, Any]) -> Dag:
        if "tasks" in d and isinstance(d["tasks"], list):
            return cls([Task.from_normalized(t) for t in d["tasks"]],
                       [tuple(e) for e in d.get("edges") or []],  # type: ignore[misc]
                       d.get("name"), execution=d.get("execution"),
                       primary_tasks=d.get("primary_tasks"),
                       termination_delay=d.get("termination_delay"),
                       inter_connection=d.get("inter_connection"))
        return cls([Task.from_normalized(d)])

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Dag) and self.tasks == other.tasks
                and self.edges == other.edges and self.name == other.name
                and self._group_fields() == other._group_fields())

    def __repr__(self) -> str:
        ex = f", execution={self.execution!r}" if self.execution else ""
        return f"Dag(name={self.name!r}, tasks={len(self.tasks)}, edges={self.edges}{ex})"
