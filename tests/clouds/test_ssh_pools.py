"""ssh_node_pools.yaml parsing, host allocation, offerings, CLI import cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import yaml

from skyd.clouds.ssh.cloud import SSHCloud
from skyd.clouds.ssh.pools import get_pool, load_pools, parse_pools, pools_file
from skyd.clouds.ssh.state import (
    allocate_sync,
    allocations_sync,
    release_sync,
    save_host_facts_sync,
)
from skyd.errors import InvalidSpecError, NotFoundError, ResourcesUnavailableError

GOOD = """
lab:
  user: alice
  identity_file: ~/.ssh/lab
  port: 2222
  hosts:
    - 10.0.0.1
    - gpu-box            # an ~/.ssh/config alias
    - ip: 10.0.0.3
      user: bob
      port: 22
      identity_file: /keys/bob
mi300:
  hosts: [192.0.2.10]
  proxy_jump: bastion
"""


def test_parse_good_pools_skypilot_format(skyd_home: Path) -> None:
    pools = parse_pools(yaml.safe_load(GOOD))
    lab = pools["lab"]
    assert [h.ip for h in lab.hosts] == ["10.0.0.1", "gpu-box", "10.0.0.3"]
    h0, _, h2 = lab.hosts
    assert (h0.user, h0.port, h0.identity_file) == ("alice", 2222, str(Path("~/.ssh/lab").expanduser()))
    assert (h2.user, h2.port, h2.identity_file) == ("bob", 22, "/keys/bob")
    assert h0.name == "10.0.0.1:2222" and h2.name == "10.0.0.3"
    assert pools["mi300"].hosts[0].proxy_jump == "bastion"
    assert pools["mi300"].hosts[0].user is None


@pytest.mark.parametrize(
    "doc, field, words",
    [
        ({"p": {"hosts": ["1.2.3.4"], "password": "x"}}, "pool 'p'.password", "keys only"),
        ({"p": {"hosts": [{"ip": "1.2.3.4", "password": "x"}]}}, "hosts[0].password", "identity_file"),
        ({"p": {"hosts": []}}, "pool 'p'.hosts", "non-empty"),
        ({"p": {"hosts": ["1.2.3.4"], "port": 70000}}, "pool 'p'.port", "1-65535"),
        ({"p": {"hosts": [{"user": "x"}]}}, "hosts[0]", "ip"),
        ({"p": {"hosts": ["1.2.3.4"], "usr": "x"}}, "pool 'p'", "allowed"),
        ({"p": {"hosts": ["1.2.3.4", "1.2.3.4"]}}, "hosts[1]", "duplicate"),
        ({"bad name": {"hosts": ["1.2.3.4"]}}, "pool 'bad name'", "letters"),
    ],
)
def test_parse_bad_pools_name_field_and_fix(doc: dict, field: str, words: str) -> None:
    with pytest.raises(InvalidSpecError) as ei:
        parse_pools(doc)
    err = ei.value
    assert field in str(err.field)
    assert words in (str(err.hint) + err.message)


def test_pools_file_location_and_typo(skyd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_pools() == {}
    cfg = pools_file()
    assert cfg.parent.name == "config"  # SKYD_CONFIG_DIR from the fixture
    cfg.parent.mkdir(parents=True)
    cfg.write_text(GOOD)
    assert set(load_pools()) == {"lab", "mi300"}
    with pytest.raises(NotFoundError) as ei:
        get_pool("labb")
    assert "did you mean 'lab'" in str(ei.value.hint)
    other = tmp_path / "other.yaml"
    other.write_text("x:\n  hosts: [1.1.1.1]\n")
    monkeypatch.setenv("SKYD_SSH_NODE_POOLS", str(other))
    assert set(load_pools()) == {"x"}
    other.write_text("x:\n  hosts: [1.1.1.1\n")
    with pytest.raises(InvalidSpecError, match="not valid YAML"):
        load_pools()


def test_allocation_is_exclusive_and_idempotent(skyd_home: Path) -> None:
    keys = ["@a:22", "@b:22", "@c:22"]
    assert allocate_sync("p", "c1", keys, 2) == ["@a:22", "@b:22"]
    assert allocate_sync("p", "c1", keys, 2) == ["@a:22", "@b:22"]  # same cluster: same hosts
    assert allocate_sync("p", "c2", keys, 1) == ["@c:22"]
    with pytest.raises(ResourcesUnavailableError) as ei:
        allocate_sync("p", "c3", keys, 1)
    assert "c1" in str(ei.value) and "c2" in str(ei.value)
    assert release_sync("c1") == ["@a:22", "@b:22"]
    assert allocate_sync("p", "c3", keys, 2) == ["@a:22", "@b:22"]
    assert allocations_sync() == {"@a:22": "c3", "@b:22": "c3", "@c:22": "c2"}


def test_allocation_exclusive_across_processes(skyd_home: Path) -> None:
    """Eight processes race for 3 hosts: exactly 3 win, no host twice."""
    code = (
        "import sys\nfrom skyd.clouds.ssh.state import allocate_sync\n"
        "try:\n print(allocate_sync('p', sys.argv[1], ['@a:22','@b:22','@c:22'], 1)[0])\n"
        "except Exception:\n print('none')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, f"c{i}"], stdout=subprocess.PIPE, text=True)
             for i in range(8)]  # fmt: skip
    got = [p.communicate()[0].strip() for p in procs]
    won = [g for g in got if g != "none"]
    assert sorted(won) == ["@a:22", "@b:22", "@c:22"]


def test_offerings_are_free_hosts_with_probed_gpus(skyd_home: Path) -> None:
    pools_file().parent.mkdir(parents=True)
    pools_file().write_text(GOOD)
    lab = load_pools()["lab"]
    save_host_facts_sync({lab.hosts[0].key: {"cpus": 64, "memory_gib": 512.0, "accelerator": "H100",
                                             "accelerator_count": 8, "accelerator_memory_gib": 79.6}})  # fmt: skip
    allocate_sync("lab", "busy", [lab.hosts[1].key], 1)
    cloud = SSHCloud()
    assert anyio.run(cloud.check)[0]
    offs = {o.instance_type: o for o in cloud.dynamic_offerings()}
    # held: still offered (a full pool fails in allocation, naming it), after the free hosts
    assert [o.instance_type for o in cloud.dynamic_offerings() if o.region == "lab"][-1] == "gpu-box:2222"
    o = offs["10.0.0.1:2222"]
    assert (o.cloud, o.region, o.price, o.accelerator, o.accelerator_count, o.vcpus) == (
        "ssh", "lab", 0.0, "H100", 8.0, 64.0)
    assert offs["10.0.0.3"].accelerator is None  # never probed


def test_cli_module_imports_no_asyncssh() -> None:
    code = ("import sys, argparse, skyd.cli.cmd_ssh as c\n"
            "p = argparse.ArgumentParser(); c.register(p.add_subparsers())\n"
            "a = p.parse_args(['ssh', 'check', 'lab', '-o', 'json'])\n"
            "print(a.pool, a.output, 'asyncssh' in sys.modules, 'yaml' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["lab", "json", "False", "False"]


def test_cli_ls_json(skyd_home: Path) -> None:
    pools_file().parent.mkdir(parents=True)
    pools_file().write_text(GOOD)
    out = subprocess.run([sys.executable, "-c", "import sys, argparse, skyd.cli.cmd_ssh as c\n"
                          "p = argparse.ArgumentParser(); c.register(p.add_subparsers())\n"
                          "a = p.parse_args(['ssh', 'ls', '-o', 'json']); sys.exit(a.func(a))"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    doc = json.loads(out.stdout)
    assert [h["host"] for h in doc["hosts"]][:2] == ["10.0.0.1:2222", "gpu-box:2222"]
