"""How a plan is shown (`--dryrun`, and the plan a launch prints): SkyPilot's optimizer
table per task with a LAUNCH column, then how to enable the infras that cannot launch now.

The chosen row (✔) is the launch plan's choice -- what `skyd launch` runs -- and the other
rows come from the same solve and from the wide view over every catalog.
"""

from __future__ import annotations

from typing import Any

from skyd.solver import plan_to_json
from skyd.solver.plan import Choice, _row


def _key(c: Choice) -> tuple[Any, ...]:
    return (c.cloud, c.region, c.instance_type, c.use_spot)


def considered(planned: Any, v: int) -> list[tuple[Choice, bool, bool]]:
    """(choice, chosen, can launch now) rows of task ``v``: the chosen one first, the rest by
    cost."""
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
    return [(chosen, bool(planned.plans), chosen.cloud in ok)] + [
        (c, False, c.cloud in ok) for c in rest]


def format_planned(planned: Any) -> str:
    best = planned.best()
    what = "cost ($)" if best.objective == "cost" else "time (s)"
    header = ["INFRA", "INSTANCE", "vCPUs", "Mem(GB)", "GPUS", "COST ($/h)", "CHOSEN", "LAUNCH"]
    lines: list[str] = []
    for v, t in enumerate(best.tasks):
        rows = [_row(c, "✔" if chosen else "") + ["now" if ok else "not enabled"]
                for c, chosen, ok in considered(planned, v)]
        widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
        lines.append(f"Considered resources for task {t.name!r} (sorted by {what}):")
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
    if planned.plans:
        lines.append("✔ = what `skyd launch` runs.")
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


def planned_to_json(planned: Any) -> dict[str, Any]:
    best = planned.best()
    out = plan_to_json(best)
    for v, t in enumerate(out["tasks"]):
        t["considered"] = [{**c.to_json(), "chosen": chosen, "launch": ok}
                           for c, chosen, ok in considered(planned, v)]
    out["launchable"] = bool(planned.plans)
    out["launch_error"] = None if planned.plans else str(planned.error)
    out["infras"] = {
        **{c: {"launch": True, "how": ""} for c in sorted(planned.launchable)},
        **{c: {"launch": False, "how": how} for c, how in planned.how.items()},
    }
    out["table"] = format_planned(planned)
    out["dryrun"] = True
    return dict(out)
