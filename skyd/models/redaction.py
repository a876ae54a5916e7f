"""The value a secret shows wherever it is not needed: payloads, saved DAGs, logs (stdlib)."""

REDACTED = "<redacted>"
