"""CPU of asyncssh's ciphers over one loopback connection (client and server in this process).

    .venv/bin/python bench/ssh_cipher_bench.py [--size 200] [--count 5000]

Writes `count` chunks of `size` bytes through one SSH channel with each cipher, and reports
the CPU both ends spent (connect excluded). Small chunks are what agent calls are: every
gRPC frame to an agent crosses the daemon's SSH connection. skyd's SSHTransport prefers
AES-GCM (skyd.transports.ssh.cipher_order).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import asyncssh

CIPHERS = ("chacha20-poly1305@openssh.com", "aes256-gcm@openssh.com", "aes128-gcm@openssh.com",
           "aes256-ctr")


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True


async def _drain(proc: asyncssh.SSHServerProcess) -> None:
    n = 0
    while True:
        d = await proc.stdin.read(65536)
        if not d:
            break
        n += len(d)
    proc.stdout.write(str(n).encode())
    proc.exit(0)


async def main(size: int, count: int) -> None:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    srv = await asyncssh.create_server(_Server, "127.0.0.1", 0, server_host_keys=[host_key],
                                       process_factory=_drain, encoding=None)
    port = srv.sockets[0].getsockname()[1]
    chunk = os.urandom(size)
    print(f"{count} writes of {size} B ({count * size / 1e6:.1f} MB), CPU-s of both ends:")
    for alg in CIPHERS:
        async with asyncssh.connect("127.0.0.1", port, known_hosts=None, client_keys=[client_key],
                                    username="bench", encryption_algs=[alg]) as conn:
            t0 = time.process_time()
            proc = await conn.create_process(encoding=None)
            for _ in range(count):
                proc.stdin.write(chunk)
                await proc.stdin.drain()
            proc.stdin.write_eof()
            got = int(await proc.stdout.read())
            await proc.wait()
            cpu = time.process_time() - t0
        assert got == count * size
        print(f"  {alg:32s} {cpu:6.3f} CPU-s  ({cpu / count * 1e6:5.0f} us a write)")
    srv.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--count", type=int, default=5000)
    a = ap.parse_args()
    asyncio.run(main(a.size, a.count))
