"""Set or cancel a cluster's autostop."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label


class AutostopScreen(ModalScreen[tuple[int, bool] | None]):
    """Answers (idle_minutes, down); minutes < 0 cancels autostop; None = dismissed."""

    DEFAULT_CSS = """
    AutostopScreen { align: center middle; }
    AutostopScreen > Vertical { width: 60; max-width: 100%; height: auto; border: thick $primary;
                                background: $surface; padding: 1 2; }
    AutostopScreen Horizontal { height: auto; align: right middle; }
    AutostopScreen #autostop-error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Back")]

    def __init__(self, cluster: str, minutes: int | None, down: bool) -> None:
        super().__init__()
        self.cluster = cluster
        self.minutes = minutes
        self.down = down

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"Autostop for {self.cluster!r}: idle minutes (-1 cancels)")
            yield Input(str(self.minutes) if self.minutes is not None else "10",
                        id="minutes", type="integer")
            yield Checkbox("tear down instead of stop", self.down, id="down")
            yield Label("", id="autostop-error")
            with Horizontal():
                yield Button("Cancel", id="no")
                yield Button("Set", id="yes", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#minutes", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "yes":
            self._submit()
        else:
            self.dismiss(None)

    def _submit(self) -> None:
        raw = self.query_one("#minutes", Input).value.strip()
        try:
            minutes = int(raw)
        except ValueError:
            self.query_one("#autostop-error", Label).update(
                f"idle minutes must be a whole number, got {raw!r}")
            return
        self.dismiss((minutes, self.query_one("#down", Checkbox).value))

    def action_cancel(self) -> None:
        self.dismiss(None)
