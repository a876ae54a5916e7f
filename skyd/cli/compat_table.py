"""SkyPilot 0.14.1's `sky` surface (its click definitions in sky/client/cli/command.py):
the top-level commands and the flags of the verbs users type, with what skyd does for each
flag it does not implement under the same name (docs/cli-compat.md is the table).
Data only: imported when the CLI parser is built."""

from __future__ import annotations

TOP_COMMANDS: tuple[str, ...] = (
    'api',
    'autostop',
    'cancel',
    'check',
    'cost-report',
    'dashboard',
    'debug-dump',
    'down',
    'exec',
    'gpus',
    'jobs',
    'launch',
    'local',
    'logs',
    'queue',
    'serve',
    'show-gpus',
    'ssh',
    'start',
    'status',
    'status-kubernetes',
    'stop',
    'storage',
    'ui',
    'volume',
    'volumes',
    'workspace',
)

SKYPILOT_FLAGS: dict[str, list[str]] = {
    'launch': [
        '--config', '--cluster/-c', '--dryrun', '--detach-run/-d/-no-d', '--docker',
        '--name/-n', '--workdir', '--infra', '--cloud', '--region', '--zone', '--num-nodes',
        '--cpus', '--memory', '--disk-size', '--disk-tier', '--network-tier',
        '--use-spot/--no-use-spot', '--image-id', '--env-file', '--env', '--secret-file',
        '--secret', '--local-disk', '--gpus', '--instance-type/-t', '--ports', '--priority',
        '--async/--no-async', '--idle-minutes-to-autostop/-i', '--wait-for', '--down',
        '--retry-until-up/-r', '--yes/-y', '--no-setup', '--clone-disk-from/--clone', '--fast',
        '--resize', '--git-url', '--git-ref', '--workspace/-w',
    ],
    'exec': [
        '--config', '--cluster/-c', '--detach-run/-d', '--name/-n', '--workdir', '--infra',
        '--cloud', '--region', '--zone', '--num-nodes', '--cpus', '--memory', '--disk-size',
        '--disk-tier', '--network-tier', '--use-spot/--no-use-spot', '--image-id', '--env-file',
        '--env', '--secret-file', '--secret', '--local-disk', '--gpus', '--instance-type/-t',
        '--ports', '--async/--no-async', '--git-url', '--git-ref',
    ],
    'status': [
        '--config', '--verbose/-v', '--refresh/-r', '--ip', '--endpoints', '--endpoint',
        '--show-managed-jobs/--no-show-managed-jobs', '--show-services/--no-show-services',
        '--show-pools/--no-show-pools', '--all-users/-u', '--output/-o',
    ],
    'down': [
        '--config', '--all/-a', '--all-users/-u', '--yes/-y', '--purge/-p', '--graceful',
        '--graceful-timeout', '--async/--no-async',
    ],
    'stop': [
        '--config', '--all/-a', '--all-users/-u', '--yes/-y', '--graceful',
        '--graceful-timeout', '--async/--no-async',
    ],
    'start': [
        '--config', '--all/-a', '--yes/-y', '--idle-minutes-to-autostop/-i', '--wait-for',
        '--down', '--retry-until-up/-r', '--force/-f', '--async/--no-async',
    ],
    'autostop': [
        '--config', '--all/-a', '--all-users/-u', '--idle-minutes/-i', '--wait-for', '--cancel',
        '--down', '--yes/-y', '--async/--no-async',
    ],
    'queue': [
        '--config', '--all-users/-u', '--skip-finished/-s', '--output/-o',
    ],
    'logs': [
        '--config', '--provision', '--hook', '--autostop', '--worker/-w', '--sync-down/-s',
        '--status', '--follow/--no-follow', '--tail',
    ],
    'cancel': [
        '--config', '--all/-a', '--all-users/-u', '--yes/-y', '--async/--no-async',
    ],
    'jobs cancel': [
        '--config', '--name/-n', '--pool/-p', '--task', '--graceful', '--graceful-timeout',
        '--all/-a', '--yes/-y', '--all-users/-u',
    ],
    'jobs dashboard': [
        '--config',
    ],
    'jobs launch': [
        '--config', '--name/-n', '--workdir', '--infra', '--cloud', '--region', '--zone',
        '--num-nodes', '--cpus', '--memory', '--disk-size', '--disk-tier', '--network-tier',
        '--use-spot/--no-use-spot', '--image-id', '--env-file', '--env', '--secret-file',
        '--secret', '--local-disk', '--gpus', '--instance-type/-t', '--ports', '--priority',
        '--async/--no-async', '--cluster/-c', '--job-recovery', '--detach-run/-d', '--pool/-p',
        '--num-jobs', '--job-group', '--no-job-group', '--git-url', '--git-ref',
        '--workspace/-w', '--yes/-y',
    ],
    'jobs logs': [
        '--config', '--name/-n', '--follow/--no-follow', '--controller', '--refresh/-r',
        '--sync-down/-s', '--tail',
    ],
    'jobs pool apply': [
        '--config', '--pool/-p', '--mode', '--workers', '--workdir', '--infra', '--cloud',
        '--region', '--zone', '--num-nodes', '--cpus', '--memory', '--disk-size', '--disk-tier',
        '--network-tier', '--use-spot/--no-use-spot', '--image-id', '--env-file', '--env',
        '--secret-file', '--secret', '--local-disk', '--gpus', '--instance-type/-t', '--ports',
        '--async/--no-async', '--yes/-y',
    ],
    'jobs pool down': [
        '--config', '--all/-a', '--purge/-p', '--yes/-y', '--async/--no-async',
    ],
    'jobs pool logs': [
        '--config', '--follow/--no-follow', '--controller', '--sync-down/-s', '--tail',
    ],
    'jobs pool status': [
        '--config', '--verbose/-v', '--all/-a',
    ],
    'jobs queue': [
        '--config', '--verbose/-v', '--limit/-l', '--refresh/-r', '--skip-finished',
        '-s/--status', '--since', '--after', '--before', '--infra', '--all-users/-u',
        '--all/-a', '--output/-o',
    ],
    'serve down': [
        '--config', '--all/-a', '--purge/-p', '--yes/-y', '--replica-id', '--async/--no-async',
    ],
    'serve logs': [
        '--config', '--follow/--no-follow', '--controller', '--load-balancer', '--sync-down/-s',
        '--tail',
    ],
    'serve status': [
        '--config', '--verbose/-v', '--endpoint',
    ],
    'serve up': [
        '--config', '--service-name/-n', '--git-url', '--git-ref', '--workdir', '--infra',
        '--cloud', '--region', '--zone', '--num-nodes', '--cpus', '--memory', '--disk-size',
        '--disk-tier', '--network-tier', '--use-spot/--no-use-spot', '--image-id', '--env-file',
        '--env', '--secret-file', '--secret', '--local-disk', '--gpus', '--instance-type/-t',
        '--ports', '--async/--no-async', '--yes/-y',
    ],
    'serve update': [
        '--config', '--workdir', '--infra', '--cloud', '--region', '--zone', '--num-nodes',
        '--cpus', '--memory', '--disk-size', '--disk-tier', '--network-tier',
        '--use-spot/--no-use-spot', '--image-id', '--env-file', '--env', '--secret-file',
        '--secret', '--local-disk', '--gpus', '--instance-type/-t', '--ports',
        '--async/--no-async', '--mode', '--yes/-y',
    ],
    'storage delete': [
        '--config', '--all/-a', '--yes/-y', '--async/--no-async',
    ],
    'storage ls': [
        '--config', '--verbose/-v',
    ],
    'check': [
        '--config', '--verbose/-v', '--workspace/-w', '--output/-o',
    ],
    'gpus label': [
        '--config', '--context/-c', '--cleanup', '--async',
    ],
    'gpus list': [
        '--config', '--all/-a', '--infra', '--cloud', '--region', '--all-regions',
        '--verbose/-v', '--output/-o',
    ],
    'show-gpus': [
        '--config', '--all/-a', '--infra', '--cloud', '--region', '--all-regions',
        '--verbose/-v',
    ],
    'cost-report': [
        '--config', '--all/-a', '--days', '--output/-o',
    ],
}

#: flags that take a value
VALUE_FLAGS: frozenset[str] = frozenset({
    '--after', '--before', '--clone-disk-from', '--cloud', '--cluster', '--config', '--context',
    '--cpus', '--days', '--disk-size', '--disk-tier', '--endpoint', '--env', '--env-file',
    '--git-ref', '--git-url', '--gpus', '--graceful-timeout', '--hook', '--idle-minutes',
    '--idle-minutes-to-autostop', '--image-id', '--infra', '--instance-type', '--job-group',
    '--job-recovery', '--limit', '--local-disk', '--memory', '--mode', '--name',
    '--network-tier', '--num-jobs', '--num-nodes', '--output', '--pool', '--ports',
    '--priority', '--region', '--replica-id', '--secret', '--secret-file', '--service-name',
    '--since', '--status', '--tail', '--task', '--wait-for', '--workdir', '--worker',
    '--workers', '--workspace', '--zone',
})

#: SkyPilot flags skyd takes where it lacks them, with what they mean in skyd (a
#: single-user daemon: no API server, no other users, no workspaces).
ACCEPTED: dict[str, str] = {
    "--config": "validated against the config schema; this verb reads no config key",
    "--all-users": "with -a: every user's, not only yours (an admin of a shared daemon)",
    "--async": "the request runs in the daemon either way; Ctrl-C detaches and it goes on",
    "--no-async": "skyd waits for the request (the default)",
    "--yes": "this verb asks nothing in skyd",
    "--verbose": "the output is already complete",
    "--refresh": "the daemon's state is live: there is nothing to refresh",
    "--wait-for": "skyd's autostop waits for jobs (SkyPilot's `jobs`); idle SSH sessions do not count",
    "--all": "every row is shown already",
    "--retry-until-up": "a stopped cluster starts where it was; there is nothing to retry",
}

#: SkyPilot flags skyd refuses, with the message (exit 2).
REFUSED: dict[str, str] = {
    "--workspace": "skyd has no workspaces (a single-user daemon); use separate SKYD_HOMEs",
    "--local-disk": "local (instance) disks are not selectable in skyd; use --disk-size",
    "--priority": "cluster launches have no priority in skyd; managed jobs do (skyd jobs launch --priority)",
    "--clone-disk-from": "cloning a cluster's disk is not offered by skyd",
    "--resize": "resizing a cluster's disk is not offered by skyd",
    "--docker": "local docker support is deprecated in SkyPilot too; use the `local` infra, or "
                "image_id: docker:<image> to run the task in a container",
    "--graceful": "not offered: skyd ends a cluster's jobs when it stops or goes down",
    "--graceful-timeout": "not offered: skyd ends a cluster's jobs when it stops or goes down",
    "--hook": "lifecycle hooks are not run by skyd",
    "--autostop": "autostop events are in the cluster's status (`skyd status`)",
    "--job-group": "job groups (execution: parallel) are not run by managed jobs yet",
    "--no-job-group": "job groups (execution: parallel) are not run by managed jobs yet",
    "--task": "cancel a whole managed job (skyd jobs cancel ID)",
    "--pool": "cancel a pool's jobs with `skyd jobs pool down POOL`",
    "--replica-id": "replicas are scaled by the service spec (skyd serve update)",
    "--infra": "filter with -o json (each row names its infra)",
    "--sync-down": "not offered by this verb: redirect the output (... logs NAME --no-follow > FILE)",
    "--tail": "not offered by this verb; `skyd logs CLUSTER --tail N` has it",
    "--force": "not offered: `skyd start` restarts what is stopped",
    "--days": "skyd's cost report covers every cluster it knows",
    "--controller": "this verb has no controller log",
    "--follow": "not offered by this verb",
    "--no-follow": "not offered by this verb",
    "--mode": "not offered by this verb",
    "--workers": "not offered by this verb",
    "--cleanup": "not offered: skyd reads the labels the GPU device plugins set",
    "--context": "not offered: skyd reads the labels the GPU device plugins set",
    "--region": "use --infra CLOUD/REGION",
    "--purge": "not offered by this verb: it removes what it made, or says why it could not",
    "--show-managed-jobs": "skyd status lists clusters; managed jobs: skyd jobs queue",
    "--show-services": "skyd status lists clusters; services: skyd serve status",
    "--show-pools": "skyd status lists clusters; pools: skyd jobs pool status",
    "--zone": "use --infra CLOUD/REGION/ZONE",
}

#: Flags refused on one verb only (the verb -> the message for each flag it lacks).
REFUSED_ON: dict[str, str] = {
    "jobs pool apply": "pool apply takes its resources from POOL.yaml only",
}

#: Top-level SkyPilot commands skyd does not have, and what replaces them.
REPLACED_COMMANDS: dict[str, str] = {
    "api": "no API server: the daemon is local (skyd daemon start/stop/status; requests: "
           "skyd requests ls/logs/cancel); `sky api login` has no equivalent",
    "dashboard": "skyd tui (a terminal UI)",
    "ui": "skyd tui (a terminal UI)",
    "local": "the `local` infra is built in; for a local Kubernetes cluster use kind/k3d and "
             "the kubernetes infra",
    "status-kubernetes": "skyd status, and skyd show-gpus --infra k8s for free GPUs per context",
    "workspace": "no workspaces in a single-user daemon",
    "volume": "skyd volumes",
    "gpus": "skyd show-gpus (gpus list); gpus label is not needed (device plugins label nodes)",
}
