"""The batch script of a skyd allocation and the per-node agent wrapper (bash, run by Slurm).

Layout on the cluster's shared file system (the login user's home):
  ~/.skyd/agent-<sha>.pyz            the agent zipapp (shared with ``ssh`` pools' layout)
  ~/.skyd/slurm/<tag>/               job.sh, node.sh, token, agent.crt/agent.key/ca.crt (0600),
                                     slurm-<jobid>.out (node.sh copies the credentials)
  ~/.skyd/nodes/<tag>-<rank>/        the agent's --home on node <rank> (SLURM_NODEID)
"""

from __future__ import annotations

import shlex

from skyd.fsutil import REMOTE_SRC
from skyd.transports import agent_scripts

q = shlex.quote

# argv: node_dir base [kill|rm] [jobid] -> (kill: on the node itself) stop the agent and everything in
# its session; then remove the node dir (only inside base/nodes). "rm" only removes: pids in
# agent.json belong to the compute node, not to the login host it runs on. Zipapps stay:
# another allocation may be about to start from one.
KILL_NODE = agent_scripts._COMMON + REMOTE_SRC + r"""
nd, base = sys.argv[1:3]
mode = sys.argv[3] if len(sys.argv) > 3 else "kill"
try:
    confined_target(nd, os.path.join(base, "nodes"))
except ValueError as e:
    sys.stderr.write("skyd: %s\n" % e)
    sys.exit(4)
pid = running_pid(nd) if mode == "kill" else 0
if pid:
    stop(nd, grace=5.0)
    for p in session_pids(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
job = sys.argv[4] if len(sys.argv) > 4 else ""
if mode == "kill" and job:
    # what daemonized out of the agent's and the jobs' sessions still carries the allocation's
    # SLURM_JOB_ID (linuxproc tracks parents only): everything of this user with it, but us
    mine, p = set(), os.getpid()
    while p > 1:
        mine.add(p)
        try:
            with open("/proc/%d/stat" % p) as f:
                p = int(f.read().rsplit(")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    tag = ("SLURM_JOB_ID=%s" % job).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in mine:
            continue
        try:
            if os.stat("/proc/" + d).st_uid != os.getuid():
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if tag in env:
            try:
                os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass
safe_rmtree(nd, os.path.join(base, "nodes"))
print("removed")
"""


def node_script(*, base: str, tag: str, cluster: str, pyz: str, sha: str) -> str:
    """Run on every allocated node by the job's srun step: the agent, in the foreground (so
    Slurm's process tracking sees it and everything it starts). The agent schedules on what
    Slurm allocated on the node: ``$SLURM_CPUS_ON_NODE`` CPUs, and the GPUs its own detection
    finds (nvidia-smi / amd-smi / rocm-smi on the node) narrowed to the devices the gres
    allocation made visible (CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, see
    ``skyd.nodeagent.gpu.restrict_visible``): a node whose driver shows no GPU reports none,
    and the GPU check (``skyd.clouds.gpucheck``) fails the launch naming the partition."""
    return f"""#!/bin/bash
set -e
nd={q(base)}/nodes/{q(tag)}-"$SLURM_NODEID"
mkdir -p "$nd" && chmod 700 {q(base)} "$nd"
addr=$(scontrol show node "$SLURMD_NODENAME" -o 2>/dev/null | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')
[ -n "$addr" ] || addr=$(hostname)
rm -f "$nd/token"
(umask 077 && cp {q(base)}/slurm/{q(tag)}/agent.crt {q(base)}/slurm/{q(tag)}/agent.key {q(base)}/slurm/{q(tag)}/ca.crt "$nd/")
echo {q(sha)} > "$nd/agent.sha"
rm -f "$nd/agent.json" "$nd/stopped.json"
echo "$SLURMD_NODENAME $addr" > "$nd/slurm-node"
# Slurm's AMD gres sets ROCR_VISIBLE_DEVICES only: HIP sees the same devices renumbered 0..n-1.
if [ -n "${{ROCR_VISIBLE_DEVICES:-}}" ] && [ -z "${{HIP_VISIBLE_DEVICES:-}}" ]; then
  n=$(echo "$ROCR_VISIBLE_DEVICES" | tr ',' '\\n' | grep -c .)
  export HIP_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))
fi
# An allocation with no GPU on this node: the node's GPUs are not the agent's (nor its jobs').
if [ "${{SLURM_GPUS_ON_NODE:-0}}" = 0 ]; then
  for v in CUDA_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES; do
    [ -n "${{!v+x}}" ] || export "$v="
  done
fi
res=()
[ -n "${{SLURM_CPUS_ON_NODE:-}}" ] && res+=(--cpus "$SLURM_CPUS_ON_NODE")
cd "$nd"
exec python3 {q(pyz)} --home "$nd" --listen "$addr:0" \\
  --node-rank "$SLURM_NODEID" --cluster {q(cluster)} "${{res[@]}}" >> "$nd/agent.log" 2>&1
"""


def job_script(*, tag: str, num_nodes: int, partition: str | None, gres: str | None,
               cpus: int | None, options: dict[str, str], jobdir: str, nodes_glob: str) -> str:  # fmt: skip
    lines = ["#!/bin/bash", f"#SBATCH --job-name={q('skyd-' + tag)}", f"#SBATCH --nodes={num_nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --output={q(jobdir + '/slurm-%j.out')}"]  # fmt: skip
    if partition:
        lines.append(f"#SBATCH --partition={q(partition)}")
    if gres:
        lines.append(f"#SBATCH --gres={q(gres)}")
    if cpus and "cpus-per-task" not in options:
        lines.append(f"#SBATCH --cpus-per-task={int(cpus)}")
    for k, v in options.items():
        lines.append(f"#SBATCH --{k}" + (f"={q(v)}" if v != "" else ""))
    lines.append(f"srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=0 /bin/bash {q(jobdir + '/node.sh')}")
    # The agents exited. Unless they stopped on purpose (autostop: stopped.json), keep the
    # allocation a minute so the daemon's srun --overlap step can still clean every node.
    lines.append(f"for i in $(seq 60); do [ -e {q(jobdir + '/release')} ] && break; "
                 f"ls {q(nodes_glob)}*/stopped.json >/dev/null 2>&1 && break; sleep 1; done")
    return "\n".join(lines) + "\n"
