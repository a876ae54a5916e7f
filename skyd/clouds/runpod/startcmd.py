"""The start command (``dockerArgs``) of every pod skyd makes: it makes the container
reachable over SSH whatever the image.

A RunPod pod is a container, and only RunPod's own images start sshd from the
``PUBLIC_KEY`` env; ``rocm/pytorch``, ``vllm/*`` and users' images have no sshd at all. So, as
RunPod's "use SSH" docs, SkyPilot (``sky/provision/runpod/utils.py``: ``setup_cmd`` passed
as ``dockerArgs``) and dstack (``runpod/compute.py``: ``_get_docker_args``) do, the pod's
command installs openssh-server (and python3 and rsync, which the node agent and file sync
use) when the image lacks them (apt-get, dnf/yum or apk), puts the key
from ``$PUBLIC_KEY`` into root's ``authorized_keys``, generates host keys, starts sshd,
exports the image's environment to login shells (ROCm/CUDA paths) and keeps the container
running. The script is POSIX sh (images without bash work too) and travels base64-encoded
(``sh -c 'echo … | base64 -d …'``) so that no quoting of RunPod's command field can break it;
the key itself stays in the env, never in the command. An image whose ENTRYPOINT is not a
shell (it would receive the command as arguments) needs ``image_id`` of one that is.
"""

from __future__ import annotations

import base64
import shlex

SCRIPT = """\
set -u
if [ ! -x /usr/sbin/sshd ] || ! command -v python3 >/dev/null 2>&1 || ! command -v rsync >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -y && apt-get install -y --no-install-recommends openssh-server rsync python3
  elif command -v dnf >/dev/null 2>&1; then dnf install -y openssh-server rsync python3
  elif command -v yum >/dev/null 2>&1; then yum install -y openssh-server rsync python3
  elif command -v apk >/dev/null 2>&1; then apk add --no-cache openssh rsync python3
  fi
fi
mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh
printf '%s\\n' "$PUBLIC_KEY" >> /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A
sed -i 's/^#*PermitRootLogin.*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config || true
export -p | grep -v -e PUBLIC_KEY -e ' PWD=' -e ' HOME=' > /etc/profile.d/skyd-container-env.sh || true
/usr/sbin/sshd
exec sleep infinity
"""


def docker_args() -> str:
    """The ``dockerArgs`` value: a shell command that decodes and runs :data:`SCRIPT`."""
    enc = base64.b64encode(SCRIPT.encode()).decode()
    inner = f"echo {enc} | base64 -d > /tmp/skyd-start.sh && exec sh /tmp/skyd-start.sh"
    return f"sh -c {shlex.quote(inner)}"
