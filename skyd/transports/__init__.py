"""How the daemon reaches a node: run a command, copy files, open a byte stream to its agent."""
