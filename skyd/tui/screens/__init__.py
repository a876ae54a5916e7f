"""Modal and full screens of the TUI: confirm, autostop prompt, log viewer, launch."""
