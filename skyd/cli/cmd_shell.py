"""skyd shell CLUSTER: a shell on a node, as its jobs see it; skyd ssh-proxy: the
ProxyCommand of `ssh CLUSTER` where a node has no SSH address (Kubernetes pods).

On ``local`` the shell runs in the node's mount namespace (skyd.transports.sandbox_ns), with
the node's HOME and workdir; on other infras it is ``ssh`` with skyd's generated entry for
the node (skyd.pipeline.sshconfig), so ``skyd shell c -n 1`` is ``ssh c-worker1``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "shell", help="open a shell on a cluster's node", usage="skyd shell [-n RANK] CLUSTER [COMMAND ...]",
        description="Open a shell on a node of CLUSTER as its jobs see it: on `local`, in the "
                    "node's mount namespace (file mounts at their paths, its HOME and workdir); "
                    "elsewhere through `ssh CLUSTER` (CLUSTER-workerN for node N).")
    p.add_argument("-n", "--node", type=int, default=0, metavar="RANK",
                   help="node rank (default 0: the head); before CLUSTER, as ssh's options")
    p.add_argument("cluster", metavar="CLUSTER")
    p.add_argument("remote_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="run this instead of an interactive shell")
    p.set_defaults(func=run)

    x = sub.add_parser(  # no help=: an internal verb, not listed in `skyd --help`
        "ssh-proxy",
        description="ProxyCommand of skyd's SSH config for nodes without an SSH address: runs "
                    "sshd -i in the node through the provider's exec transport.")
    x.add_argument("infra", choices=["kubernetes"])
    x.add_argument("--context", required=True)
    x.add_argument("--namespace", required=True)
    x.add_argument("--pod", required=True)
    x.add_argument("--dir", required=True, help="the node's directory for sshd's files")
    x.add_argument("--public-key", required=True, help="the client key allowed in (a .pub file)")
    x.set_defaults(func=run_proxy)


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.remote_command or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd


def run(args: argparse.Namespace) -> int:
    from skyd.cli.client import get_client
    from skyd.errors import ClusterStateError, InvalidSpecError

    row: dict[str, Any] = dict(get_client().get(f"/v1/clusters/{args.cluster}/addresses"))
    n = int(row.get("num_nodes") or 0)
    if not 0 <= args.node < max(n, 1):
        raise InvalidSpecError(f"cluster {args.cluster!r} has {n} node(s); no node {args.node}",
                               field="--node", hint=f"a rank from 0 to {max(n - 1, 0)}")
    if row.get("status") != "UP":
        raise ClusterStateError(f"cluster {args.cluster!r} is {row.get('status')}",
                                hint=f"skyd start {args.cluster}")
    cmd = _command(args)
    if row.get("cloud") == "local":
        from skyd.transports import sandbox_ns

        nd = str((row.get("node_dirs") or [""])[args.node])
        env = {**os.environ, "HOME": os.path.join(nd, "home")}
        env["SKYPILOT_NODE_RANK"] = env["SKYD_NODE_RANK"] = str(args.node)
        env["SKYPILOT_NODE_IPS"] = env["SKYD_NODE_IPS"] = "\n".join(row.get("node_ips") or [])
        os.chdir(os.path.join(nd, "workdir"))
        argv = sandbox_ns.shell_argv(nd, ["bash", "-c", " ".join(cmd)] if cmd else ["bash", "-i"])
        sys.stdout.flush()
        os.execvpe(argv[0], argv, env)
    from skyd.pipeline import sshconfig

    conf = sshconfig.config_dir() / args.cluster
    if not conf.exists():
        raise ClusterStateError(f"cluster {args.cluster!r} has no SSH entry (its infra, "
                                f"{row.get('cloud')}, is not reached over SSH)")
    host = sshconfig.host_names(args.cluster, n)[args.node]
    argv = ["ssh", "-F", str(conf), *(["-t"] if not cmd else []), host, *cmd]
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 0  # not reached


SSHD = r"""
d={dir}
mkdir -p "$d" && chmod 700 "$d" || exit 1
[ -f "$d/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_ed25519" >/dev/null </dev/null || exit 1
printf '%s\n' {pub} > "$d/authorized_keys"
printf '%s\n' "HostKey $d/host_ed25519" "AuthorizedKeysFile $d/authorized_keys" "PidFile none" \
  "UsePAM no" "StrictModes no" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
  > "$d/sshd_config"
s=$(command -v sshd || echo /usr/sbin/sshd)
exec "$s" -i -e -f "$d/sshd_config"
"""


def run_proxy(args: argparse.Namespace) -> int:
    import anyio

    return int(anyio.run(_proxy, args))


async def _proxy(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    import anyio

    from skyd.clouds.base import get_cloud

    pub = (await anyio.to_thread.run_sync(Path(args.public_key).read_text)).strip()
    prov: Any = get_cloud("kubernetes").provisioner()
    t = await prov.transport(args.context, args.namespace, args.pod)
    pipe = await t.open_stream(["sh", "-c", SSHD.format(dir=shlex.quote(args.dir), pub=shlex.quote(pub))])

    def write_out(chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view):]

    async def up() -> None:
        while True:
            data = await anyio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)
            if not data:
                pipe.writer.write_eof()
                await pipe.writer.drain()
                return
            pipe.writer.write(data)
            await pipe.writer.drain()

    async with anyio.create_task_group() as tg:
        tg.start_soon(up)
        while True:
            chunk = await pipe.reader.read(65536)
            if not chunk:
                break
            write_out(chunk)
        tg.cancel_scope.cancel()
    pipe.close()
    err = getattr(pipe.reader, "err", b"")
    if err:
        sys.stderr.write(bytes(err).decode(errors="replace"))
    await t.close()
    return 0
