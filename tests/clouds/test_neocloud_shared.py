"""The shared neocloud parts: provider GPU names and PCI ids onto the canonical registry,
Retry-After forms, and API refusals onto failover scopes."""

from __future__ import annotations

import email.utils
import time

from skyd.clouds.neocloud.classify import classify
from skyd.clouds.neocloud.gpus import canonical_gpu, provider_gpu_id
from skyd.clouds.neocloud.http import APIError, error_text, parse_retry_after
from skyd.clouds.vm.provisioner import of_tag, vm_name
from skyd.errors import CredentialsError, ResourcesUnavailableError


def test_gpu_names_by_provider_spelling_and_pci_id() -> None:
    assert canonical_gpu("runpod", "AMD Instinct MI300X OAM") == "MI300X"
    assert canonical_gpu("do", "amd_mi300x") == "MI300X"
    assert canonical_gpu("crusoe", "MI355X_288GB") == "MI355X"
    assert canonical_gpu("vultr", "AMD_MI325X") == "MI325X"  # case-insensitive map
    assert canonical_gpu("anything", "gfx942", device_id="0x74a1") == "MI300X"
    assert canonical_gpu("anything", None, device_id=0x75A3) == "MI355X"
    assert canonical_gpu("runpod", "AMD Instinct MI9999") is None
    assert provider_gpu_id("runpod", "MI300X") == "AMD Instinct MI300X OAM"


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("3") == 3.0 and parse_retry_after(None) is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (parse_retry_after(later) or 0) <= 31
    assert parse_retry_after("soon") is None


def test_error_bodies_of_each_shape() -> None:
    assert error_text({"error": "Invalid API token.", "status": 401}) == ("", "Invalid API token.")
    assert error_text({"errors": [{"message": "no", "extensions": {"code": "X"}}]}) == ("X", "no")
    assert error_text({"detail": "Not found."})[1] == "Not found."


def test_refusals_onto_scopes() -> None:
    def cls(status: int, msg: str, zone: bool = True) -> object:
        return classify(APIError("P", status, msg), where="p/r", has_zone=zone, cred_hint="set P_KEY")

    e = cls(401, "Unauthorized")
    assert isinstance(e, CredentialsError) and e.hint == "set P_KEY"
    for status, msg, zone, scope in [
        (400, "There are no longer any instances available", True, "zone"),
        (422, "out of capacity", False, "region"),
        (403 - 3, "vCPU quota exceeded", True, "region"),
        (429, "slow down", True, "cloud"),
        (503, "maintenance", True, "cloud"),
        (400, "invalid image", True, "stop"),
    ]:
        r = cls(status, msg, zone)
        assert isinstance(r, ResourcesUnavailableError) and r.scope == scope, (msg, r)
        assert msg in str(r.provider_message)


def test_machine_names_carry_the_tag() -> None:
    n = vm_name("My_Cluster-x1", 3)
    assert n.startswith("skyd-my-cluster-x1-") and n.endswith("-3") and len(n) <= 60
    assert of_tag(n, "My_Cluster-x1") and not of_tag(n, "My_Cluster-x2")
    assert not of_tag(vm_name("ab", 0), "a")  # a prefix of another tag is not that tag
