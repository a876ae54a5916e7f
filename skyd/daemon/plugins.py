"""Modules the daemon imports at start; importing one registers its verbs and reads.

Append here (e.g. "skyd.pipeline.verbs", "skyd.jobs.verbs", "skyd.serve.verbs").
``$SKYD_EXTRA_PLUGINS`` (comma separated module names) adds more at run time (tests).
"""

from __future__ import annotations

PLUGIN_MODULES: list[str] = ["skyd.pipeline.verbs", "skyd.jobs.verbs", "skyd.pipeline.ssh_warmup",
                             "skyd.serve.verbs", "skyd.storage.verbs", "skyd.jobs.pool_verbs",
                             "skyd.storage.volume_verbs", "skyd.pipeline.uploads"]
