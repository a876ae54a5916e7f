"""One pane (tab) per resource kind; each owns a DataTable and reloads itself on demand."""
