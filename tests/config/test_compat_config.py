"""SkyPilot's layered config read as SkyPilot reads it (issue: a SkyPilot user switches
without rewriting their config). Cases are SkyPilot's documented config examples
(docs.skypilot.co/en/latest/reference/config.html)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from skyd import config
from skyd.config.layers import Sources
from skyd.errors import InvalidSpecError
from tests.support.daemon import cli, running_daemon

# From SkyPilot's config reference (a typical user's ~/.sky/config.yaml).
DOCUMENTED = """\
allowed_clouds:
  - aws
  - gcp
  - kubernetes
docker:
  run_options:
    - -v /var/run/docker.sock:/var/run/docker.sock
    - --shm-size=2g
nvidia_gpus:
  disable_ecc: false
admin_policy: my_package.SkyPilotPolicyV1
jobs:
  controller:
    resources:
      cpus: 4+
      memory: 8x
    consolidation_mode: true
aws:
  labels:
    map-migrated: my-value
    Owner: user-unique-name
  vpc_name: skypilot-vpc
  use_internal_ips: true
  ssh_proxy_command: ssh -W %h:%p user@host
  security_group_name: my-security-group
  remote_identity: LOCAL_CREDENTIALS
gcp:
  labels:
    Owner: user-unique-name
  vpc_name: skypilot-vpc
  use_internal_ips: true
kubernetes:
  ports: loadbalancer
  allowed_contexts: [context1, context2]
  provision_timeout: 10
  autoscaler: gke
  pod_config:
    metadata:
      labels:
        my-label: my-value
    spec:
      runtimeClassName: nvidia
      containers:
        - env:
            - name: HTTP_PROXY
              value: http://proxy-host:3128
azure:
  resource_group_vm: my-rg
"""


def _write(p: Path, text: str) -> Path:
    p.write_text(textwrap.dedent(text))
    return p


def _load(tmp_path: Path, user: str | None = None, project: str | None = None,
          cli_items: list[str] | None = None) -> config.Config:
    u = _write(tmp_path / "user.yaml", user) if user is not None else None
    pj = _write(tmp_path / "proj.yaml", project) if project is not None else None
    return config.load(Sources(None, str(u) if u else None, str(pj) if pj else None,
                               tuple(cli_items or ()), str(tmp_path)))


def test_the_documented_config_loads_and_only_what_skyd_ignores_is_reported(
        skyd_home: Path, tmp_path: Path) -> None:
    from skyd.clouds.config_support import unsupported

    cfg = _load(tmp_path, DOCUMENTED)
    assert cfg.allowed_clouds() == {"aws", "gcp", "kubernetes"}
    assert cfg.get("aws", "vpc_name") == "skypilot-vpc"
    ignored = unsupported(cfg)
    # keys a provider (or the core) declares are honoured ...
    for k in ("aws.vpc_name", "aws.labels", "aws.use_internal_ips", "aws.security_group_name",
              "aws.remote_identity", "gcp.vpc_name", "gcp.labels", "kubernetes.pod_config",
              "kubernetes.provision_timeout", "kubernetes.autoscaler", "kubernetes.ports",
              "kubernetes.allowed_contexts", "docker.run_options", "allowed_clouds",
              "admin_policy", "jobs.controller.consolidation_mode"):
        assert k not in ignored, k
    # ... the others are named, once each
    assert "aws.ssh_proxy_command" in ignored and "azure.resource_group_vm" in ignored
    assert "jobs.controller.resources" in ignored
    assert len(ignored) == len(set(ignored))
    # nvidia_gpus.disable_ecc: false is set (not null): honoured, not reported
    assert "nvidia_gpus.disable_ecc" not in ignored
    # a value of an honoured key that skyd does not offer is said too
    from skyd.clouds.config_support import warning_lines

    lines = warning_lines(_load(tmp_path, "kubernetes:\n  ports: ingress\n"))
    assert len(lines) == 1 and "ingress" in lines[0] and "user.yaml:2" in lines[0]


_PROVIDERS_LOADED = """import sys
from skyd import config
from skyd.config.layers import Sources
from skyd.clouds.config_support import warning_lines
print(warning_lines(config.load(Sources(None, sys.argv[1], None, (), sys.argv[2]))))
print(sorted(m for m in sys.modules if m.startswith("skyd.clouds.") and m.endswith(".cloud")))
"""


@pytest.mark.parametrize("text,loaded", [
    ("", False),  # no config: nothing to check, no provider loaded
    ("allowed_clouds: [local]\ndocker:\n  run_options: [--shm-size=2g]\n", False),  # core keys
    ("aws:\n  vpc_name: v\n", True),  # a provider's key: the providers say what they honour
    ("azure:\n  resource_group_vm: g\n", True),
])  # fmt: skip
def test_checking_a_config_loads_providers_only_for_a_key_the_core_does_not_cover(
        skyd_home: Path, tmp_path: Path, text: str, loaded: bool) -> None:
    """Every request checks the user's config for keys skyd ignores; that must not import
    every provider when the config has no provider key (most configs, every local launch)."""
    import subprocess
    import sys

    user = _write(tmp_path / "user.yaml", text)
    out = subprocess.run([sys.executable, "-c", _PROVIDERS_LOADED, str(user), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    warned, modules = out.stdout.splitlines()
    assert ("azure.resource_group_vm" in warned) == text.startswith("azure")
    assert ("warning" in warned) == text.startswith("azure")
    assert (modules != "[]") == loaded, modules
    if loaded:
        assert "skyd.clouds.aws.cloud" in modules


@pytest.mark.parametrize("text,key,line", [
    ("aws:\n  use_internal_ips: maybe\n", "aws.use_internal_ips", 2),
    ("kubernetes:\n  provision_timeout: soon\n", "kubernetes.provision_timeout", 2),
    ("allowed_clouds: aws\n", "allowed_clouds", 1),
    ("allowed_clouds: [aws, nimbus]\n", "allowed_clouds", 1),
    ("gcp:\n  labels:\n    team: 7\n", "gcp.labels.team", 3),
    ("docker:\n  run_options: 5\n", "docker.run_options", 2),
    ("kubernetes:\n  ports: nodeport\n", "kubernetes.ports", 2),
    ("jobs:\n  status_check:\n    min_retries: -1\n", "jobs.status_check.min_retries", 3),
])
def test_a_key_of_the_wrong_type_names_the_key_file_and_line(
        skyd_home: Path, tmp_path: Path, text: str, key: str, line: int) -> None:
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path, text)
    assert e.value.exit_code == 2
    assert e.value.field == key and e.value.line == line
    assert "user.yaml" in str(e.value)


def test_an_unknown_key_or_unparsable_file_is_an_error_not_an_empty_config(
        skyd_home: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path, "aws:\n  vpc_nmae: x\n")
    assert e.value.field == "aws.vpc_nmae" and "unknown key" in str(e.value) and e.value.line == 2
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path, "colour: blue\n")
    assert e.value.field == "colour"
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path, "aws: [\n")
    assert "not valid YAML" in str(e.value)
    with pytest.raises(InvalidSpecError):
        _load(tmp_path, "- just\n- a list\n")
    # skyd's own config.yaml too (it used to be read as empty when unparsable)
    cdir = Path(skyd_home).parent / "config"
    cdir.mkdir(exist_ok=True)
    (cdir / "config.yaml").write_text("kubernetes: {namespace: [\n")
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path)
    assert "config.yaml" in str(e.value)
    (cdir / "config.yaml").write_text("kubernetes:\n  pending_timeout_s: 30\n")
    from skyd.clouds.settings import section

    with config_active(_load(tmp_path)):
        assert section("kubernetes") == {"pending_timeout_s": 30}


class config_active:
    def __init__(self, cfg: config.Config) -> None:
        self.cfg = cfg

    def __enter__(self) -> None:
        self.token = config.activate(self.cfg)

    def __exit__(self, *a: Any) -> None:
        config._CURRENT.reset(self.token)


def test_layers_merge_in_skypilots_order_and_each_key_says_where_it_came_from(
        skyd_home: Path, tmp_path: Path) -> None:
    cfg = _load(tmp_path,
                user="kubernetes:\n  namespace: user-ns\n  provision_timeout: 60\naws:\n  vpc_name: u\n",
                project="kubernetes:\n  namespace: proj-ns\n",
                cli_items=["kubernetes.provision_timeout=900", "aws.labels.team=ml"])
    assert cfg.get("kubernetes", "namespace") == "proj-ns"  # project over user
    assert cfg.get("kubernetes", "provision_timeout") == 900  # --config over both, typed
    assert cfg.get("aws", "vpc_name") == "u" and cfg.get("aws", "labels") == {"team": "ml"}
    assert cfg.origin[("kubernetes", "namespace")].endswith("proj.yaml:2")
    assert cfg.origin[("kubernetes", "provision_timeout")] == "--config"
    # the task's config: block is above --config, for the keys SkyPilot lets a task set
    t = cfg.with_task({"kubernetes": {"provision_timeout": 30}})
    assert t.get("kubernetes", "provision_timeout") == 30
    assert t.get("kubernetes", "namespace") == "proj-ns"
    with pytest.raises(InvalidSpecError) as e:
        cfg.with_task({"kubernetes": {"namespace": "x"}})
    assert e.value.field == "config.kubernetes.namespace" and e.value.exit_code == 2
    with pytest.raises(InvalidSpecError) as e:
        cfg.with_task({"kubernetes": {"pod_config": "not-a-mapping"}})
    assert e.value.field == "kubernetes.pod_config"
    # --config with a file
    f = _write(tmp_path / "cli.yaml", "gcp:\n  use_internal_ips: true\n")
    assert _load(tmp_path, cli_items=[str(f)]).get("gcp", "use_internal_ips") is True
    with pytest.raises(InvalidSpecError) as e:
        _load(tmp_path, cli_items=["novalue"])
    assert e.value.field == "--config"


def test_pod_config_merges_as_skypilot_merges_it(skyd_home: Path, tmp_path: Path) -> None:
    from skyd.clouds.kubernetes.config import with_pod_config

    cfg = _load(tmp_path,
                user="kubernetes:\n  pod_config:\n    spec:\n      containers:\n"
                     "        - env: [{name: A, value: '1'}]\n",
                project="kubernetes:\n  pod_config:\n    spec:\n      containers:\n"
                        "        - env: [{name: B, value: '2'}, {name: A, value: '3'}]\n")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "main", "image": "x", "env": [{"name": "Z", "value": "0"}]}]}}
    out = with_pod_config(pod, cfg.section("kubernetes"))
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    assert env == {"Z": "0", "A": "3", "B": "2"}  # merged by name into the unnamed first container
    assert out["spec"]["containers"][0]["image"] == "x" and pod["spec"]["containers"][0]["env"] == [
        {"name": "Z", "value": "0"}]


def test_skypilot_config_replaces_the_user_and_project_files(
        skyd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / ".sky.yaml", "kubernetes:\n  namespace: proj\n")
    only = _write(tmp_path / "only.yaml", "kubernetes:\n  namespace: only\n")
    src = config.caller_sources(None, cwd=str(tmp_path))
    assert src.project and src.project.endswith(".sky.yaml")
    assert config.load(src).get("kubernetes", "namespace") == "proj"
    monkeypatch.setenv("SKYPILOT_CONFIG", str(only))
    assert config.load(config.caller_sources(None, cwd=str(tmp_path))).get(
        "kubernetes", "namespace") == "only"
    monkeypatch.setenv("SKYPILOT_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(InvalidSpecError) as e:
        config.caller_sources(None, cwd=str(tmp_path))
    assert e.value.field == "SKYPILOT_CONFIG"


def test_docker_run_options_accessor(skyd_home: Path, tmp_path: Path) -> None:
    cfg = _load(tmp_path, "docker:\n  run_options:\n    - -v /data:/data\n    - --shm-size=2g\n")
    with config_active(cfg):
        assert config.docker_run_options() == ["-v", "/data:/data", "--shm-size=2g"]
    with config_active(_load(tmp_path, "docker:\n  run_options: --privileged\n")):
        assert config.docker_run_options() == ["--privileged"]


POLICY = '''
import sky


class AddLabelsAndNoSpot(sky.AdminPolicy):
    """SkyPilot's documented example policies, combined."""

    @classmethod
    def validate_and_mutate(cls, user_request: sky.UserRequest) -> sky.MutatedUserRequest:
        task = user_request.task
        if task.name == "forbidden":
            raise RuntimeError("tasks named forbidden are not allowed here")
        new_resources = []
        for r in task.resources:
            if r.use_spot:
                raise RuntimeError("spot is disabled by policy")
            new_resources.append(r.copy(labels={"team": "ml"}))
        task.set_resources(type(task.resources)(new_resources))
        task.update_envs({"POLICY": "applied"})
        config = user_request.skypilot_config
        config.set_nested(("kubernetes", "namespace"), "policy-ns")
        return sky.MutatedUserRequest(task=task, skypilot_config=config)
'''


def test_admin_policy_mutates_or_rejects(skyd_home: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.pipeline.taskload import load_dag_from_payload

    pkg = tmp_path / "pol"
    pkg.mkdir()
    (pkg / "mypolicy.py").write_text(POLICY)
    monkeypatch.syspath_prepend(str(pkg))
    cfg = _load(tmp_path, "admin_policy: mypolicy.AddLabelsAndNoSpot\n")
    with config_active(cfg):
        dag = load_dag_from_payload({"yaml": "name: ok\nresources: {cpus: 2}\nrun: echo hi\n",
                                     "base_dir": str(tmp_path)})
        t = dag.tasks[0]
        assert t.envs["POLICY"] == "applied"
        assert dict(t.resources[0].labels or {}) == {"team": "ml"}
        assert dag.policy_config.get("kubernetes", "namespace") == "policy-ns"
        for yaml_text, words in (("name: forbidden\nrun: x\n", "tasks named forbidden"),
                                 ("resources: {use_spot: true}\nrun: x\n", "spot is disabled")):
            with pytest.raises(InvalidSpecError) as e:
                load_dag_from_payload({"yaml": yaml_text, "base_dir": str(tmp_path)})
            assert e.value.exit_code == 2 and e.value.field == "admin_policy"
            assert words in str(e.value)
    with config_active(_load(tmp_path, "admin_policy: nowhere.Policy\n")):
        with pytest.raises(InvalidSpecError) as e:
            load_dag_from_payload({"yaml": "run: x\n", "base_dir": str(tmp_path)})
        assert e.value.field == "admin_policy" and "cannot be imported" in str(e.value)


def test_the_daemon_plans_only_allowed_clouds_and_reports_ignored_keys(
        skyd_home: Path, tmp_path: Path) -> None:
    user = Path(str(tmp_path / "sky-config.yaml"))
    user.write_text("allowed_clouds: [aws, kubernetes]\naws:\n  use_ssm: true\n")
    f = tmp_path / "t.yaml"
    f.write_text("resources:\n  cpus: 2\nrun: echo hi\n")
    with running_daemon():
        r = cli("launch", "--dryrun", "-o", "json", str(f))
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        clouds = {c["cloud"] for c in doc["tasks"][0]["considered"]}
        assert clouds and clouds <= {"aws", "kubernetes"}
        r = cli("launch", "--dryrun", str(f))
        out = r.stdout + r.stderr
        assert out.count("aws.use_ssm") == 1 and "not supported by skyd" in out
        # a pinned infra outside allowed_clouds, a bad --config, a bad file: exit 2, no traceback
        r = cli("launch", "--dryrun", "--infra", "gcp", str(f))
        assert r.returncode == 2 and "allowed_clouds" in r.stderr
        r = cli("launch", "--dryrun", "--config", "kubernetes.namespace=[", str(f))
        assert r.returncode == 2 and "--config" in r.stderr
        user.write_text("allowed_clouds: [aws]\naws:\n  labels: [a]\n")
        r = cli("launch", "--dryrun", str(f))
        assert r.returncode == 2 and "aws.labels" in r.stderr and "line 3" in r.stderr
        assert "Traceback" not in r.stderr
        # a task's config: block may not set allowed_clouds (as in SkyPilot): exit 2, named
        user.write_text("")
        f.write_text("resources:\n  cpus: 2\nrun: echo hi\nconfig:\n  allowed_clouds: [gcp]\n")
        r = cli("launch", "--dryrun", str(f))
        assert r.returncode == 2 and "config.allowed_clouds" in r.stderr
        # ... a key it may set is checked and reported like any other
        f.write_text("run: echo hi\nconfig:\n  gcp:\n    enable_gvnic: true\n")
        r = cli("launch", "--dryrun", str(f))
        assert r.returncode == 0 and "gcp.enable_gvnic" in r.stdout + r.stderr


def test_config_show_prints_the_merged_config_and_sources(skyd_home: Path, tmp_path: Path) -> None:
    (tmp_path / "sky-config.yaml").write_text("aws:\n  vpc_name: v\n  use_ssm: true\n")
    r = cli("config", "show", "--config", "kubernetes.namespace=ml")
    assert r.returncode == 0, r.stderr
    assert "aws.vpc_name" in r.stdout and "sky-config.yaml:2" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("aws.use_ssm"))
    assert "not supported by skyd" in line
    doc = json.loads(cli("config", "show", "-o", "json").stdout)
    assert doc["config"]["aws"]["vpc_name"] == "v"


def test_kubernetes_keys_reach_the_pods(skyd_home: Path, tmp_path: Path) -> None:
    """pod_config (user file) and namespace (project file via the caller's cwd) are read per
    request by the daemon and handed to the kubernetes provider."""
    from tests.fakes.kubeapi import FakeKube, gpu_node

    k = FakeKube(tmp_path / "kube").start()
    k.add_node(gpu_node("cpu-a", {}, cpu="16", memory="64Gi"))
    cfg = k.kubeconfig(tmp_path / "kubeconfig", {"lab": "", "other": ""})
    (tmp_path / "sky-config.yaml").write_text(
        "kubernetes:\n  allowed_contexts: [lab]\n  pod_config:\n    metadata:\n"
        "      labels: {cost-center: ml-42}\n    spec:\n      containers:\n"
        "        - env: [{name: FROM_POD_CONFIG, value: 'yes'}]\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / ".sky.yaml").write_text("kubernetes:\n  namespace: team-ns\n")
    f = proj / "t.yaml"
    f.write_text("resources:\n  infra: k8s\n  cpus: 1\nvolumes:\n  /mnt/data: data\n"
                 "run: echo pod-$FROM_POD_CONFIG\n")
    env = {"KUBECONFIG": str(cfg), "SKYD_K8S_POLL_S": "0.1"}
    try:
        with running_daemon(**env):
            r = subprocess_cli(["launch", "-y", "-c", "kp", str(f)], env, cwd=proj)
            assert r.returncode == 0, r.stdout + r.stderr
            pods = [p for (ns, _), p in k.pods.items()]
            assert pods and all(p["metadata"]["namespace"] == "team-ns" for p in pods)
            assert pods[0]["metadata"]["labels"]["cost-center"] == "ml-42"
            envs = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0].get("env") or []}
            assert envs.get("FROM_POD_CONFIG") == "yes"
            # the task's volumes: {path: PVC} mount through the same seam
            claims = [v["persistentVolumeClaim"]["claimName"] for v in pods[0]["spec"].get("volumes") or []
                      if "persistentVolumeClaim" in v]
            mounts = [m["mountPath"] for m in pods[0]["spec"]["containers"][0].get("volumeMounts") or []]
            assert claims == ["data"] and "/mnt/data" in mounts
            r = subprocess_cli(["launch", "--dryrun", "--infra", "k8s/other", str(f)], env, cwd=proj)
            assert r.returncode != 0 and "other" in r.stdout + r.stderr
            subprocess_cli(["down", "-a", "-y"], env, cwd=proj)
    finally:
        k.stop()


def subprocess_cli(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    import os

    from tests.support import forkserver
    from tests.support.daemon import SKYD_BIN

    return forkserver.run([str(SKYD_BIN), *args], {**os.environ, **env}, timeout=180, cwd=cwd)


@pytest.fixture(scope="module")
def aws_fake(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.support.aws import fake_aws

    with fake_aws(tmp_path_factory.mktemp("aws")) as c:
        yield c


@pytest.mark.anyio
async def test_aws_keys_reach_run_instances(aws_fake: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot's aws.{vpc_name, labels, security_group_name, ssh_user, use_internal_ips,
    remote_identity} in the user's config change what RunInstances asks moto for."""
    from skyd.clouds.aws.cloud import AWSCloud
    from skyd.clouds.base import ProvisionRequest
    from skyd.clouds.offering import Offering
    from tests.support.aws import REGION

    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    for k, v in aws_fake.env.items():
        monkeypatch.setenv(k, v)
    ec2 = aws_fake.boto()
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc], Tags=[{"Key": "Name", "Value": "skypilot-vpc"}])
    aws_fake.boto("iam").create_instance_profile(InstanceProfileName="my-node-role")
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24",
                               AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
    cfg = _load(tmp_path, "aws:\n  vpc_name: skypilot-vpc\n  labels: {Owner: me, team: ml}\n"
                          "  security_group_name: [{'aws-cfg*': shared-sg}]\n  ssh_user: admin\n"
                          "  use_internal_ips: true\n  remote_identity: my-node-role\n")
    off = Offering("aws", "m6i.large", None, 0, 2, 8, REGION, "use1-az1", 0.096, 0.03)
    aws = AWSCloud()
    prov = aws.provisioner()
    prov.deploy_agents = False  # type: ignore[attr-defined]
    try:
        with config_active(cfg):
            h = await prov.provision(ProvisionRequest("aws-cfg", 1, off, False, token="t",
                                                      tag="aws-cfg-x1", labels=(("team", "task"),)),
                                     lambda _m: None)
        run = aws_fake.proxy.run_requests[-1]
        assert run["NetworkInterface.1.SubnetId"] == subnet
        assert run["NetworkInterface.1.AssociatePublicIpAddress"] == "false"
        assert run["IamInstanceProfile.Name"] == "my-node-role"
        tags = {run[k]: run[k.replace(".Key", ".Value")] for k in run
                if k.startswith("TagSpecification.1.Tag.") and k.endswith(".Key")}
        assert tags["Owner"] == "me" and tags["team"] == "task"  # the task's label wins
        assert tags["skyd-ssh-user"] == "admin" and h.nodes[0].ssh["user"] == "admin"
        assert h.nodes[0].ssh["host"] == h.nodes[0].internal_ip
        sg = ec2.describe_security_groups(GroupIds=[h.extra["sg"]])["SecurityGroups"][0]
        assert sg["GroupName"] == "shared-sg" and sg["VpcId"] == vpc
        await prov.terminate(h, lambda _m: None)
    finally:
        await aws.close()
        for g in ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["shared-sg"]}])["SecurityGroups"]:
            ec2.delete_security_group(GroupId=g["GroupId"])


from tests.clouds.test_gcp_driver import cloud, gce, home  # noqa: E402,F401 - the fake Compute API's fixtures


@pytest.mark.anyio
async def test_gcp_keys_reach_the_instance_body(cloud: Any, gce: Any, tmp_path: Path) -> None:  # noqa: F811
    """gcp.{vpc_name, labels, use_internal_ips} from the user's config, on the fake Compute API."""
    from tests.clouds.test_gcp_driver import _req

    cfg = _load(tmp_path, "gcp:\n  vpc_name: skypilot-vpc\n  labels: {owner: me, team: infra}\n"
                          "  use_internal_ips: true\n")
    prov = cloud.provisioner()
    with config_active(cfg):
        handle = await prov.provision(_req("gcfg", labels=(("team", "task"),)), lambda _m: None)
    try:
        body = gce.inserts[-1]
        assert body["networkInterfaces"][0]["network"] == "global/networks/skypilot-vpc"
        assert body["labels"]["owner"] == "me" and body["labels"]["team"] == "task"
        (fw,) = gce.firewalls.values()
        assert fw["network"].endswith("global/networks/skypilot-vpc")
        node = handle.nodes[0]
        assert node.ssh["host"] == node.internal_ip
    finally:
        await prov.terminate(handle, lambda _m: None)
