"""skyd node agent: gRPC job queue, gang scheduling, GPU detection, logs, autostop.

Runs on nodes with Python >= 3.8 and only grpclib + betterproto (shipped as a zipapp).
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

VERSION = "0.1.0"
