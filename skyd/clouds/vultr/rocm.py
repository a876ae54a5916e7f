"""ROCm on Vultr's AMD plans: the default OS plus first-boot user data that installs it.

Vultr publishes no OS, application or marketplace image with ROCm for its AMD Instinct plans
(``GET /v2/os`` and ``GET /v2/applications`` list none; dstack boots its bare metal with the
"Docker on Ubuntu 22.04" application and SkyPilot has no Vultr provider), and Ubuntu 22.04
(``os_id`` 1743) alone has no amdgpu driver: ``amd-smi`` shows no GPU. So an AMD offer whose
task names no image gets Ubuntu 22.04 plus ``user_data`` (the create API's base64 cloud-init
field, for ``/bare-metals`` and ``/instances`` alike) that installs ROCm the way AMD documents
for Ubuntu 22.04 ("Quick start installation", ROCm 6.3): the ``amdgpu-install`` package from
repo.radeon.com, then the ``amdgpu-dkms`` driver and the ``rocm`` meta-package (which carries
``amd-smi``), then a reboot into the driver. A oneshot unit enabled before that reboot writes
`READY` once the driver is loaded after it, and skyd deploys the node agent only then
(`VMProvisioner.ready_marker`), so the agent's GPU detection sees the GPUs.

The install takes minutes (packages, DKMS build, a bare-metal reboot); the provisioning
deadline covers it (``$SKYD_PROVISION_TIMEOUT_S``). A task that sets ``resources.image_id`` (a
ROCm snapshot of its own) or ``vultr.os_id`` gets no user data.
"""

from __future__ import annotations

import base64

ROCM_VERSION = "6.3"
AMDGPU_INSTALL_DEB = "amdgpu-install_6.3.60300-1_all.deb"
AMDGPU_INSTALL_URL = f"https://repo.radeon.com/amdgpu-install/{ROCM_VERSION}/ubuntu/jammy/{AMDGPU_INSTALL_DEB}"
READY = ".skyd-rocm-ready"  # in the SSH user's (root's) home: /root/.skyd-rocm-ready

SCRIPT = f"""#!/bin/bash
# skyd: install ROCm {ROCM_VERSION} (AMD's documented Ubuntu 22.04 path), then reboot into the driver.
set -eux
export DEBIAN_FRONTEND=noninteractive
cd /tmp
wget -q {AMDGPU_INSTALL_URL}
apt-get install -y ./{AMDGPU_INSTALL_DEB}
apt-get update
apt-get install -y "linux-headers-$(uname -r)" "linux-modules-extra-$(uname -r)" python3-setuptools python3-wheel
apt-get install -y amdgpu-dkms rocm
cat > /etc/systemd/system/skyd-rocm-ready.service <<'UNIT'
[Unit]
Description=skyd: ROCm is installed and the amdgpu driver is loaded
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'modprobe amdgpu && /opt/rocm/bin/amd-smi list >/dev/null && touch /root/{READY}'
[Install]
WantedBy=multi-user.target
UNIT
systemctl enable skyd-rocm-ready.service
reboot
"""


def user_data() -> str:
    """The create body's ``user_data`` (base64 of the script above)."""
    return base64.b64encode(SCRIPT.encode()).decode()
