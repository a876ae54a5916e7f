"""Launch: pick a task YAML, dry-run the solver's plan with costs, adjust overrides,
confirm, then watch the request's stages in the log viewer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Checkbox, DirectoryTree, Footer, Input, Label, Static

from skyd.errors import InvalidSpecError, SkydError
from skyd.sdk.payloads import catalog_dir
from skyd.tui import fmt


class YamlTree(DirectoryTree):
    """Directories and task YAML files only."""

    def filter_paths(self, paths: Any) -> Any:
        return [p for p in paths if p.is_dir() and not p.name.startswith(".")
                or p.suffix in (".yaml", ".yml")]


def build_payload(path: str, *, cluster: str, gpus: str, infra: str, spot: bool,
                  num_nodes: str, dryrun: bool) -> dict[str, Any]:
    """The ``launch`` request body for the form's values (raises InvalidSpecError)."""
    if not path:
        raise InvalidSpecError("choose a task YAML", field="path", hint="type a path or browse (ctrl+b)")
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as e:
        raise InvalidSpecError(f"cannot read {p}: {e.strerror}", field="path") from None
    overrides: dict[str, Any] = {}
    if gpus.strip():
        overrides["gpus"] = gpus.strip()
    if infra.strip():
        overrides["infra"] = infra.strip()
    if spot:
        overrides["use_spot"] = True
    if num_nodes.strip():
        try:
            n = int(num_nodes)
            if n < 1:
                raise ValueError
        except ValueError:
            raise InvalidSpecError(f"num_nodes must be a positive integer, got {num_nodes!r}",
                                   field="num_nodes") from None
        overrides["num_nodes"] = n
    return {
        "yaml": text, "yaml_path": str(p.resolve()), "base_dir": str(p.resolve().parent),
        "env": {}, "cluster_name": cluster.strip() or None, "overrides": overrides,
        "dryrun": dryrun, "detach_run": False, "catalog_dir": catalog_dir(),
    }


def plan_text(plan: dict[str, Any]) -> str:
    """Human text of a dry-run result (the solver's plan)."""
    if not isinstance(plan, dict):
        return str(plan)
    lines = [f"objective: {plan.get('objective', 'cost')}    "
             f"total: {fmt.cost(plan.get('total_hourly_cost'))}/h"]
    if plan.get("table"):
        lines.append(str(plan["table"]))
        return "\n".join(lines)
    for t in plan.get("tasks") or []:
        ch = t.get("chosen") or {}
        lines.append(f"task {t.get('name') or '-'}: {_choice(ch)}  ← chosen")
        for alt in (t.get("alternatives") or [])[:5]:
            lines.append(f"    {_choice(alt)}")
    return "\n".join(lines)


def _choice(c: dict[str, Any]) -> str:
    where = c.get("infra") or "/".join(str(c[k]) for k in ("cloud", "region", "zone") if c.get(k))
    acc = fmt.accelerators(c.get("accelerators"))
    cost = c.get("hourly_cost", c.get("cost"))
    spot = " spot" if c.get("use_spot") else ""
    return f"{where or '-'} {c.get('instance_type') or ''} {acc}{spot}  {fmt.cost(cost)}/h".strip()


class LaunchScreen(Screen[str | None]):
    """Dismisses with the launch request id (or None when backed out)."""

    DEFAULT_CSS = """
    LaunchScreen { layout: vertical; }
    LaunchScreen #launch-path-row, LaunchScreen #launch-opts, LaunchScreen #launch-buttons {
        height: auto; }
    LaunchScreen #path { width: 1fr; }
    LaunchScreen #launch-opts Input { width: 1fr; }
    LaunchScreen YamlTree { height: 8; display: none; }
    LaunchScreen YamlTree.visible { display: block; }
    LaunchScreen #plan-box { height: 1fr; border: round $primary; }
    LaunchScreen #launch-buttons Button { margin-right: 1; }
    """
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("ctrl+b", "browse", "Browse"),
        Binding("ctrl+r", "plan", "Plan (dry run)"),
        Binding("ctrl+l", "launch", "Launch"),
    ]

    def __init__(self, start_dir: str | None = None, path: str = "") -> None:
        super().__init__()
        self.start_dir = start_dir or os.getcwd()
        self.initial_path = path
        self.plan: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="launch-path-row"):
            yield Input(self.initial_path, placeholder="task YAML path (ctrl+b: browse)", id="path")
        yield YamlTree(self.start_dir, id="tree")
        with Horizontal(id="launch-opts"):
            yield Input(placeholder="cluster name", id="cluster")
            yield Input(placeholder="gpus e.g. H100:8", id="gpus")
            yield Input(placeholder="infra e.g. aws", id="infra")
            yield Input(placeholder="nodes", id="num_nodes", type="integer")
        with Horizontal(id="launch-buttons"):
            yield Checkbox("spot", id="spot")
            yield Button("Plan", id="plan")
            yield Button("Launch", id="launch", variant="primary")
        with VerticalScroll(id="plan-box"):
            yield Static("Plan: press ctrl+r for the solver's plan with costs", id="plan-text")
        yield Label("", id="launch-error")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    def values(self, dryrun: bool) -> dict[str, Any]:
        q = self.query_one
        return build_payload(
            q("#path", Input).value.strip(), cluster=q("#cluster", Input).value,
            gpus=q("#gpus", Input).value, infra=q("#infra", Input).value,
            spot=q("#spot", Checkbox).value, num_nodes=q("#num_nodes", Input).value,
            dryrun=dryrun,
        )

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        self.query_one("#path", Input).value = str(event.path)
        self.query_one("#tree").remove_class("visible")
        self.query_one("#cluster", Input).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "plan":
            self.action_plan()
        elif event.button.id == "launch":
            self.action_launch()

    def action_back(self) -> None:
        self.dismiss(None)

    def action_browse(self) -> None:
        tree = self.query_one("#tree")
        tree.toggle_class("visible")
        if tree.has_class("visible"):
            tree.focus()

    def _error(self, e: SkydError) -> None:
        hint = f"  hint: {e.hint}" if e.hint else ""
        self.query_one("#plan-text", Static).update(f"error: {e}{hint}")

    @work(exclusive=True, group="plan")
    async def action_plan(self) -> None:
        from skyd.tui.app import SkydApp

        app = self.app
        assert isinstance(app, SkydApp)
        text = self.query_one("#plan-text", Static)
        try:
            payload = self.values(dryrun=True)
            text.update("planning…")
            rid = await app.client.submit("launch", payload)
            self.plan = await app.client.wait(rid)
        except SkydError as e:
            self._error(e)
            return
        text.update(plan_text(self.plan or {}))

    @work(exclusive=True, group="launch")
    async def action_launch(self) -> None:
        from skyd.tui.app import SkydApp
        from skyd.tui.screens.confirm import ConfirmScreen

        app = self.app
        assert isinstance(app, SkydApp)
        try:
            payload = self.values(dryrun=False)
        except SkydError as e:
            self._error(e)
            return
        o = payload["overrides"]
        extra = " ".join(f"{k}={v}" for k, v in o.items())
        cost = f" at {fmt.cost(self.plan.get('total_hourly_cost'))}/h" if self.plan else ""
        where = payload["cluster_name"] or "a new cluster"
        msg = f"Launch {Path(payload['yaml_path']).name} on {where}{cost}? {extra}".strip()
        if not await app.push_screen_wait(ConfirmScreen(msg)):
            return
        try:
            rid = await app.client.submit("launch", payload)
        except SkydError as e:
            self._error(e)
            return
        self.dismiss(rid)
