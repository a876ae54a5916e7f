"""skyd's Textual TUI (``skyd tui``). Importing this package imports nothing heavy."""
