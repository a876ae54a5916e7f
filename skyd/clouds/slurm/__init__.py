"""Slurm as infra: clusters from ``~/.slurm/config``, a skyd cluster = one sbatch allocation
whose srun step runs the node agent on every allocated node (see docs/slurm.md)."""
