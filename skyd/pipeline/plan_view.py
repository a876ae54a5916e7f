"""How a plan is shown (`--dryrun`, and the plan a launch prints): SkyPilot's optimizer
table per task with a LAUNCH column, then how to enable the infras that cannot launch now.

The chosen row (✔) is the launch plan's choice -- what `skyd launch` runs -- and the other
rows come from the same solve and from the wide view over every catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skyd.solver import plan_to_json
from skyd.solver.plan import Choice, plan_row


def _key(c: Choice) -> tuple[Any, ...]:
    return (c.cloud, c.region, c.instance_type, c.use_spot)


@dataclass
class Row:
    choice: Choice
    chosen: bool
    enabled: bool  # the infra can launch now (credentials, checks)
    refused: str | None = None  # why the launch would refuse this row before provisioning

    @property
    def launch(self) -> bool:
        return self.enabled and self.refused is None

    def column(self) -> str:
        if not self.enabled:
            return "not enabled"
        return "no (see below)" if self.refused else "now"


def considered(planned: Any, v: int, task: Any | None = None) -> list[Row]:
    """Rows of task ``v``: the chosen one first, the rest by cost. With ``task``, each row
    also runs the checks the launch runs before provisioning (skyd.pipeline.preflight), and
    ✔ goes to the row the launch would really run (the chosen one, else the next that
    passes them)."""
    best = planned.best()
    chosen = best.tasks[v].chosen
    rows: dict[tuple[Any, ...], Choice] = {}
    for p in planned.plans[:1] + planned.wide[:1]:
        t = p.tasks[v]
        for c in (t.chosen, *t.alternatives):
            rows.setdefault(_key(c), c)
    rows.pop(_key(chosen), None)
    rest = sorted(rows.values(), key=lambda c: c.hourly_cost)
    ok = planned.launchable
    out = [Row(chosen, bool(planned.plans), chosen.cloud in ok)] + [
        Row(c, False, c.cloud in ok) for c in rest]
    if task is None:
        return out
    from skyd.pipeline import preflight

    whole = preflight.task_refusal(task)
    for r in out:
        why = whole or (preflight.choice_refusal(task, r.choice) if r.enabled else None)
        r.refused = preflight.describe(why) if why else None
    if out[0].chosen and not out[0].launch:
        out[0].chosen = False
        nxt = next((r for r in out if r.launch), None)
        if nxt is not None:
            nxt.chosen = True
    return out


def _tasks(planned: Any, tasks: list[Any] | None) -> list[Any | None]:
    n = len(planned.best().tasks)
    return list(tasks) if tasks and len(tasks) == n else [None] * n


def format_planned(planned: Any, tasks: list[Any] | None = None) -> str:
    best = planned.best()
    what = "cost ($)" if best.objective == "cost" else "time (s)"
    header = ["INFRA", "INSTANCE", "vCPUs", "Mem(GB)", "GPUS", "COST ($/h)", "CHOSEN", "LAUNCH"]
    lines: list[str] = []
    any_chosen = False
    for v, (t, task) in enumerate(zip(best.tasks, _tasks(planned, tasks), strict=True)):
        got = considered(planned, v, task)
        any_chosen = any_chosen or any(r.chosen for r in got)
        cells = [plan_row(r.choice, "✔" if r.chosen else "") + [r.column()] for r in got]
        widths = [max(len(header[i]), *(len(r[i]) for r in cells)) for i in range(len(header))]
        lines.append(f"Considered resources for task {t.name!r} (sorted by {what}):")
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for cell in cells:
            lines.append("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip())
        refused: dict[str, list[str]] = {}
        for r in got:
            if r.refused:
                refused.setdefault(r.refused, []).append(r.choice.cloud)
        for why, clouds in refused.items():
            where = ", ".join(dict.fromkeys(clouds))
            lines.append(f"  launch refuses ({where}): {why}")
        lines.append("")
    if planned.plans and any_chosen:
        lines.append("✔ = what `skyd launch` runs.")
    elif planned.plans:
        lines.append("Nothing can launch this now: the launch refuses every row (see above).")
    else:
        lines.append(f"Nothing can launch this now: {planned.error}")
    if planned.how:
        lines.append("Not enabled here, and how to enable them:")
        for cloud, how in planned.how.items():
            lines.append(f"  {cloud}: {how}")
    lines += minimum_charges(best)
    if best.objective == "cost":
        lines.append(f"Total: $ {best.total_hourly_cost:.2f}/h; estimated cost $ {best.total_cost:.2f} "
                     "(runtime estimates + egress)")
    else:
        lines.append(f"Total: $ {best.total_hourly_cost:.2f}/h; estimated makespan "
                     f"{best.makespan_s:.0f} s, cost $ {best.total_cost:.2f}")
    return "\n".join(lines)


def minimum_charges(best: Any) -> list[str]:
    """One line per chosen resource on a provider that bills a minimum reservation."""
    from skyd.clouds.billing import minimum_charge

    out = []
    for t in best.tasks:
        c = t.chosen
        got = minimum_charge(c.cloud, c.hourly_cost)
        if got:
            out.append(f"Minimum charge: {c.cloud} bills at least {got[0]:g} min per machine: "
                       f"$ {got[1]:.2f} for task {t.name!r} however short it runs")
    return out


def planned_to_json(planned: Any, tasks: list[Any] | None = None) -> dict[str, Any]:
    """The dry run's document; with ``tasks``, each row carries what the launch's own
    pre-provisioning checks say of it (``launch``, ``refused``)."""
    best = planned.best()
    out = plan_to_json(best)
    refusals: list[str] = []
    launchable = bool(planned.plans)
    for v, (t, task) in enumerate(zip(out["tasks"], _tasks(planned, tasks), strict=True)):
        got = considered(planned, v, task)
        t["considered"] = [{**r.choice.to_json(), "chosen": r.chosen, "launch": r.launch,
                            "refused": r.refused} for r in got]
        if not any(r.launch for r in got):
            launchable = False
            refusals += [r.refused for r in got if r.refused][:1]
    out["launchable"] = launchable
    out["launch_error"] = (None if launchable else
                           str(planned.error) if not planned.plans else "; ".join(refusals))
    out["infras"] = {
        **{c: {"launch": True, "how": ""} for c in sorted(planned.launchable)},
        **{c: {"launch": False, "how": how} for c, how in planned.how.items()},
    }
    out["table"] = format_planned(planned, tasks)
    out["dryrun"] = True
    return dict(out)


def note_reuse(doc: dict[str, Any], name: str, status: str, refusal: Any) -> None:
    """A dry run naming an existing cluster: the launch runs there (restarting it when
    STOPPED), or refuses a task that does not fit it -- say which, above the plan."""
    from skyd.pipeline import preflight

    if refusal is not None:
        why = preflight.describe(refusal)
        line = f"launch refuses (cluster {name!r} exists): {why}"
        doc["launchable"] = False
        doc["launch_error"] = why
        for t in doc.get("tasks") or []:
            for c in t.get("considered") or []:
                c["launch"], c["chosen"], c["refused"] = False, False, why
    else:
        verb = "restarts and reuses" if status == "STOPPED" else "reuses"
        line = f"Cluster {name!r} exists ({status}): `skyd launch` {verb} it; nothing is provisioned."
    doc["reuses"] = None if refusal is not None else name
    doc["table"] = line + "\n" + str(doc.get("table") or "")
