"""Provider facts live on the provider (skyd.clouds.base.REQUIRED_FACTS): a provider class
that leaves one out is refused when it is made, naming the fact; a provider added as one
folder plus one registry line ($SKYD_CLOUD_PLUGINS) is planned onto, with its own egress
prices, minimum billing and GPU ids, without any central table naming it."""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from skyd.clouds.base import (
    REQUIRED_FACTS,
    Cloud,
    ProviderFactError,
    get_cloud,
    provider_facts,
    registered_clouds,
)
from skyd.errors import SkydError

ALL_FACTS = {
    "egress_tiers": "((math.inf, 0.0),)",
    "inter_region_per_gb": "None",
    "minimum_billing_minutes": "0.0",
    "gpu_ids": "()",
}

TOY = '''
from __future__ import annotations

import math

from skyd.clouds.base import Cloud, Provisioner
from skyd.clouds.offering import Offering


class ToyCloud(Cloud):
    name = "{name}"
{facts}

    async def check(self) -> tuple[bool, str]:
        return True, "toy"

    def dynamic_offerings(self) -> list[Offering]:
        return [Offering("{name}", "toy.gpu1", "H100", 1, 8, 64.0, "toy-r1", "toy-r1-a", 2.5, None)]

    def provisioner(self) -> Provisioner:
        raise NotImplementedError("plans only")

    async def close(self) -> None:
        return None
'''


def _facts(**over: str) -> str:
    facts = {**ALL_FACTS, **over}
    return "\n".join(f"    {k} = {v}" for k, v in facts.items() if v != "<missing>")


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "plugins"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    yield d
    for mod in [m for m in sys.modules if m.startswith("toyprov_")]:
        del sys.modules[mod]


def _write_provider(d: Path, pkg: str, name: str, facts: str) -> str:
    """One folder: ``<pkg>/__init__.py`` + ``<pkg>/cloud.py``; returns its registry line."""
    (d / pkg).mkdir()
    (d / pkg / "__init__.py").write_text("")
    (d / pkg / "cloud.py").write_text(textwrap.dedent(TOY).format(name=name, facts=facts))
    return f"{name}={pkg}.cloud:ToyCloud"


@pytest.mark.parametrize("fact", sorted(REQUIRED_FACTS))
def test_a_provider_class_missing_a_fact_is_refused_naming_it(fact: str) -> None:
    ns: dict[str, Any] = {"math": math}
    body = _facts(**{fact: "<missing>"})
    src = f"class Forgetful(Cloud):\n    name = 'forgetful'\n{body}\n"
    with pytest.raises(ProviderFactError, match=repr(fact)):
        exec(src, {"Cloud": Cloud, **ns})  # noqa: S102 - a class statement made at run time


@pytest.mark.parametrize(("fact", "value"), [
    ("egress_tiers", "((100.0, 0.09),)"),  # no unbounded last tier
    ("egress_tiers", "0.09"),
    ("inter_region_per_gb", "'0.02'"),
    ("minimum_billing_minutes", "None"),
    ("gpu_ids", '(("H100", "h100"),)'),  # no spellings
])
def test_a_malformed_fact_is_refused_naming_it(fact: str, value: str) -> None:
    with pytest.raises(ProviderFactError, match=fact):
        exec("class Bad(Cloud):\n" + _facts(**{fact: value}),  # noqa: S102
             {"Cloud": Cloud, "math": math})


def test_a_plugin_missing_a_fact_fails_to_load_naming_provider_and_fact(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = _write_provider(plugin_dir, "toyprov_forgetful", "toyforgetful",
                           _facts(minimum_billing_minutes="<missing>"))
    monkeypatch.setenv("SKYD_CLOUD_PLUGINS", line)
    with pytest.raises(SkydError) as ei:
        get_cloud("toyforgetful")
    assert "'toyforgetful'" in str(ei.value) and "'minimum_billing_minutes'" in str(ei.value)


def test_a_toy_provider_from_one_folder_and_one_line_is_planned_onto(
        plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, skyd_home: Path) -> None:
    from skyd.clouds import gpunames
    from skyd.models import task_from_config
    from skyd.pipeline.plan_view import format_planned
    from skyd.pipeline.planner import plan_dag
    from skyd.solver.costs import egress_cost

    line = _write_provider(plugin_dir, "toyprov_good", "toygood", _facts(
        egress_tiers="((1024.0, 0.05), (math.inf, 0.02))", inter_region_per_gb="0.01",
        minimum_billing_minutes="30.0", gpu_ids='(("H100", "toy-h100-pcie", ("h100",)),)'))
    monkeypatch.setenv("SKYD_CLOUD_PLUGINS", line)
    assert "toygood" in registered_clouds()

    # its facts, asked of the registry by the central code
    facts = provider_facts("toygood")
    assert facts is not None and facts.minimum_billing_minutes == 30.0
    assert egress_cost("toygood", "toy-r1", "aws", None, 2048) == pytest.approx(1024 * 0.05 + 1024 * 0.02)
    assert egress_cost("toygood", "toy-r1", "toygood", "toy-r2", 100) == pytest.approx(1.0)
    assert gpunames.canonical_gpu("toygood", "TOY-H100-PCIE") == "H100"
    assert gpunames.provider_gpu_id("toygood", "H100") == "toy-h100-pcie"

    # planned onto, as `infra: toygood` (the models accept the name from the registry)
    task = task_from_config({"resources": {"infra": "toygood", "accelerators": "H100:1"},
                             "run": "nvidia-smi"})
    checks = {"toygood": SimpleNamespace(ok=True, reason="toy")}
    planned = plan_dag([task], [], [], "cost", checks=checks)
    assert planned.plans, planned.error
    chosen = planned.plans[0].tasks[0].chosen
    assert (chosen.cloud, chosen.region) == ("toygood", "toy-r1")
    table = format_planned(planned, [task])
    assert "Minimum charge: toygood bills at least 30 min per machine: $ 1.25" in table


def test_every_in_tree_provider_states_its_own_egress() -> None:
    """No in-tree provider pays the default rate of a name skyd does not know: AMD Developer
    Cloud is DigitalOcean's platform (DO's price), a Slurm cluster is the user's own."""
    from skyd.cloudnames import PROVIDERS
    from skyd.solver.costs import DEFAULT_EGRESS_PER_GB, egress_cost

    for name in PROVIDERS:
        assert provider_facts(name) is not None, name
    assert egress_cost("amddevcloud", "r1", "aws", None, 100) == egress_cost("do", "r1", "aws", None, 100)
    assert egress_cost("slurm", "c1", "aws", None, 100) == 0.0
    assert egress_cost("cloudflare", None, "aws", None, 100) == pytest.approx(100 * DEFAULT_EGRESS_PER_GB)


def test_gpu_only_catalog_rows_need_the_providers_pairing() -> None:
    from skyd.clouds.catalog_csv import COLUMNS, CatalogFormatError, parse_rows

    gpu_only = ",".join(COLUMNS) + "\n,T4,1,,,,us-central1,us-central1-a,0.35,0.14\n"
    offs = parse_rows("gcp", gpu_only)  # GCP pairs a T4 with its n1 host
    assert [(o.instance_type, o.accelerator) for o in offs] == [("n1-highmem-8", "T4")]
    with pytest.raises(CatalogFormatError, match="'aws'.*catalog_split_rows"):
        parse_rows("aws", gpu_only)
