"""Mutual TLS of the node agent's channel (stdlib only, Python 3.8; see docs/nodeagent.md
"Authentication").

Every agent start gets fresh credentials in its home (all 0600): ``agent.key`` + ``agent.crt``
(a new key pair, certificate signed by the cluster's CA) and ``ca.crt`` (the cluster CA's
certificate). The agent serves TLS with them and accepts only clients whose certificate
that CA signed; its clients (the daemon, and the head agent reaching its workers) accept only
a server whose certificate that CA signed for ``SERVER_NAME``. Nothing secret crosses the
wire before the server has proven it holds a key the CA signed: a process that took a dead
agent's port gets a TLS ClientHello and nothing else.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import os
import ssl
from pathlib import Path

CERT = "agent.crt"
KEY = "agent.key"
CA = "ca.crt"
FILES = (CERT, KEY, CA)
#: the name every agent certificate carries (and every client checks)
SERVER_NAME = "skyd-agent"
#: where a daemon of an older version left the cluster token: removed at start
LEGACY_TOKEN = "token"


def _common(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")  # TLS 1.2 only; 1.3 suites are all fine
    ctx.set_alpn_protocols(["h2"])
    return ctx


def check_files(tls_dir: Path) -> str | None:
    """Why the credentials in ``tls_dir`` are unusable (missing, or readable by others), or
    None when they are fine."""
    for name in FILES:
        p = tls_dir / name
        try:
            st = os.stat(str(p))
        except OSError:
            return "missing %s (the daemon writes it before starting the agent)" % p
        if st.st_mode & 0o077:
            return "%s is readable by others (mode %o); it must be 0600" % (p, st.st_mode & 0o777)
    return None


def server_context(tls_dir: Path) -> ssl.SSLContext:
    """The agent's listener: its own certificate; clients must present one the CA signed."""
    ctx = _common(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    ctx.load_cert_chain(str(tls_dir / CERT), str(tls_dir / KEY))
    ctx.load_verify_locations(cafile=str(tls_dir / CA))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(cert: str, key: str, cafile: str | None = None,
                   cadata: str | None = None) -> ssl.SSLContext:  # fmt: skip
    """A client: presents (cert, key); accepts only a server the CA signed for SERVER_NAME."""
    ctx = _common(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=cafile, cadata=cadata)
    ctx.load_cert_chain(cert, key)
    return ctx


def peer_context(tls_dir: Path) -> ssl.SSLContext:
    """The head agent reaching its workers: the agent's own certificate as the client's."""
    return client_context(str(tls_dir / CERT), str(tls_dir / KEY), cafile=str(tls_dir / CA))
