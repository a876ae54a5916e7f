"""The daemon's side of the agent's mutual TLS (see auth.py and docs/nodeagent.md
"Authentication"): the cluster CA, fresh agent credentials for every agent start, and the
daemon's client context. Needs ``cryptography``: imported by the daemon only, never on a node.

The cluster CA's key is derived from the cluster secret (the handle's token, which never
leaves the daemon's machine), so nothing new is stored: any daemon holding the handle can
issue agent certificates and its own client certificate, and nodes hold only their own
certificate, key and the CA's certificate.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import secrets
import shutil
import ssl
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .auth import CA, CERT, KEY, SERVER_NAME, client_context

_CURVE = ec.SECP256R1()
_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256 group order
_LOCK = threading.Lock()
_CAS: dict[str, tuple[ec.EllipticCurvePrivateKey, x509.Certificate, bytes]] = {}
_CLIENTS: dict[str, ssl.SSLContext] = {}


def _key_id(secret: str) -> str:
    return hashlib.sha256(b"skyd-agent-ca\0" + secret.encode()).hexdigest()


def _ca(secret: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, bytes]:
    """(key, certificate, certificate PEM) of the cluster CA derived from ``secret``."""
    if not secret:
        raise ValueError("an empty cluster secret cannot authenticate a node agent")
    kid = _key_id(secret)
    with _LOCK:
        hit = _CAS.get(kid)
        if hit is not None:
            return hit
        seed = HKDF(algorithm=hashes.SHA256(), length=48, salt=b"skyd agent CA v1",
                    info=b"ca-key").derive(secret.encode())  # fmt: skip
        key = ec.derive_private_key(int.from_bytes(seed, "big") % (_N - 1) + 1, _CURVE)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"skyd cluster CA {kid[:16]}")])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(int(kid[:30], 16) | 1)
            .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC))
            .not_valid_after(datetime.datetime(2120, 1, 1, tzinfo=datetime.UTC))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        out = (key, cert, cert.public_bytes(serialization.Encoding.PEM))
        _CAS[kid] = out
        return out


def _leaf(secret: str, common_name: str, days: int) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a fresh key pair the cluster CA signs, valid as both a
    server (for SERVER_NAME) and a client."""
    ca_key, ca_cert, _ = _ca(secret)
    key = ec.generate_private_key(_CURVE)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def agent_credentials(secret: str) -> dict[str, bytes]:
    """Fresh credentials for one agent start: {file name: content}, each to be written 0600
    in the agent's home. A new key pair every time: a restarted agent never reuses one."""
    cert, key = _leaf(secret, f"{SERVER_NAME} {secrets.token_hex(8)}", days=3650)
    return {CERT: cert, KEY: key, CA: _ca(secret)[2]}


def write_agent_credentials(home: Path, secret: str) -> None:
    """Write fresh credentials into a local agent home (0600 from creation, atomically)."""
    home.mkdir(parents=True, exist_ok=True)
    for name, data in agent_credentials(secret).items():
        tmp = home / f".{name}.{os.getpid()}.tmp"
        fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(str(tmp), str(home / name))


def cached_client_ssl(secret: str) -> ssl.SSLContext | None:
    """client_ssl's context if it is built already (no blocking work), else None."""
    with _LOCK:
        return _CLIENTS.get(_key_id(secret))


def client_ssl(secret: str) -> ssl.SSLContext:
    """The daemon's TLS client context for a cluster: trusts only the cluster CA (server name
    SERVER_NAME), presents a certificate that CA signed. Built once per cluster and process;
    its key exists only in this process (the file ssl needs to load it is removed at once)."""
    kid = _key_id(secret)
    with _LOCK:
        hit = _CLIENTS.get(kid)
    if hit is not None:
        return hit
    cert, key = _leaf(secret, "skyd-daemon", days=3650)
    d = tempfile.mkdtemp(prefix="skyd-tls-")  # 0700
    try:
        for name, data in ((CERT, cert), (KEY, key)):
            fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx = client_context(os.path.join(d, CERT), os.path.join(d, KEY),
                             cadata=_ca(secret)[2].decode())  # fmt: skip
    finally:
        shutil.rmtree(d, ignore_errors=True)
    with _LOCK:
        return _CLIENTS.setdefault(kid, ctx)
