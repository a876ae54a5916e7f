"""What real SkyPilot YAMLs need: job-group headers, accelerator sets with any_of/ordered,
TPU slices and registry names, the gpus alias, literal `$` in resources, MI300, Kubernetes
images, storage mounts, and every error of a file reported at once."""

from __future__ import annotations

import json

import pytest

from skyd.errors import InvalidSpecError, InvalidSpecErrors, error_from_dict
from skyd.models import (
    Dag,
    Resources,
    accelerator_info,
    canonical_accelerator,
    expand_accelerators,
    load_dag,
    load_task,
)

# ---------------------------------------------------------------- multi-document headers


def test_job_group_header_is_not_a_task() -> None:
    text = ("name: grp\nexecution: parallel\nprimary_tasks: [a]\ntermination_delay: 1m\n"
            "---\nname: a\nrun: echo a\n---\nname: b\nrun: echo b\n---\nname: c\nrun: echo c\n")
    dag = load_dag("g.yaml", text=text)
    assert dag.name == "grp" and [t.name for t in dag.tasks] == ["a", "b", "c"]
    assert dag.is_job_group and dag.edges == [] and not dag.is_chain()
    assert dag.primary_tasks == ["a"] and dag.termination_delay == 60
    norm = dag.to_normalized()
    assert norm["execution"] == "parallel" and norm["edges"] == []
    back = Dag.from_normalized(json.loads(json.dumps(norm)))
    assert back == dag and back.is_job_group


def test_serial_header_is_a_chain_and_name_only_header_still_names_it() -> None:
    dag = load_dag("s.yaml", text="name: p\nexecution: serial\n---\nrun: a\n---\nrun: b\n")
    assert (dag.name, dag.execution, dag.edges) == ("p", "serial", [(0, 1)])
    assert dag.is_chain() and not dag.is_job_group
    dag = load_dag("s.yaml", text="name: p\n---\nrun: a\n---\nrun: b\n")
    assert (dag.name, dag.execution, dag.edges) == ("p", None, [(0, 1)])
    assert "execution" not in dag.to_normalized()


def test_single_document_with_execution_is_a_task_error() -> None:
    with pytest.raises(InvalidSpecError, match="unknown field 'execution'"):
        load_dag("x.yaml", text="name: p\nexecution: parallel\nrun: a\n")


@pytest.mark.parametrize("header,msg", [
    ("execution: concurrent", "bad execution 'concurrent'"),
    ("execution: parallel\nprimary_tasks: [zz]", "primary_tasks names 'zz'"),
    ("execution: parallel\ntermination_delay: soon", "bad termination_delay 'soon'"),
    ("execution: parallel\ntermination_delay: {zz: 5}", "termination_delay names 'zz'"),
    ("execution: parallel\ninter_connection: maybe", "inter_connection must be true or false"),
    ("execution: serial\nresources: {cpus: 2}", "unknown field 'resources' in the header"),
    ("execution: serial\nprimary_tasks: [a]", "primary_tasks applies to a job group only"),
])
def test_bad_headers(header: str, msg: str) -> None:
    with pytest.raises(InvalidSpecError, match=msg):
        load_dag("g.yaml", text=f"name: g\n{header}\n---\nname: a\nrun: a\n---\nname: b\n"
                                "run: b\n")


def test_job_group_names_and_ignored_header_fields() -> None:
    body = "---\nname: a\nrun: a\n---\nname: b\nrun: b\n"
    with pytest.warns(UserWarning, match="unknown field 'placement' in the job group header"):
        dag = load_dag("g.yaml", text="name: g\nexecution: parallel\nplacement: x\n" + body)
    assert dag.is_job_group and dag.inter_connection is None
    dag = load_dag("g.yaml", text="name: g\nexecution: parallel\ninter_connection: true\n"
                   + body)
    assert dag.inter_connection is True and dag.to_normalized()["inter_connection"] is True
    for header, msg in [("execution: parallel", "needs a name"),
                        ("name: 'my group'\nexecution: parallel", "letters, digits")]:
        with pytest.raises(InvalidSpecError, match=msg):
            load_dag("g.yaml", text=f"{header}\n" + body)
    with pytest.raises(InvalidSpecErrors) as ei:
        load_dag("g.yaml", text="name: g\nexecution: parallel\n---\nrun: a\n---\nname: b\n"
                                "run: b\n---\nname: b\nrun: c\n---\nname: b c\nrun: d\n")
    assert [(e.field, e.line) for e in ei.value.errors] == [
        ("tasks[0].name", 4), ("tasks[2].name", 9), ("tasks[3].name", 12)]


def test_header_only_is_one_trivial_task() -> None:
    for text in ("name: solo\n", "name: solo\nexecution: serial\n"):
        dag = load_dag("h.yaml", text=text)
        assert [t.name for t in dag.tasks] == ["solo"] and dag.name == "solo"


# ---------------------------------------------------------------- accelerators x entries


def _accs(text: str) -> tuple[list[tuple[str | None, str]], bool]:
    t = load_task("t.yaml", text=text)
    out = []
    for r in t.resources:
        acc = r.accelerator
        assert acc is not None
        out.append((r.infra, f"{acc[0]}:{acc[1]}"))
    return out, t.resources_ordered


def test_accelerator_set_times_any_of() -> None:
    got, ordered = _accs("resources:\n  accelerators: {T4, L4}\n  any_of:\n"
                         "    - infra: aws\n    - infra: gcp\n      accelerators: H100:8\n")
    assert got == [("aws", "T4:1"), ("aws", "L4:1"), ("gcp", "H100:8")] and not ordered


def test_accelerator_list_times_ordered_keeps_entry_then_list_order() -> None:
    got, ordered = _accs("resources:\n  accelerators: [A100:8, H100:8]\n  ordered:\n"
                         "    - infra: aws\n    - infra: gcp\n")
    assert got == [("aws", "A100:8"), ("aws", "H100:8"), ("gcp", "A100:8"), ("gcp", "H100:8")]
    assert ordered


def test_accelerator_list_times_any_of_and_set_inside_ordered() -> None:
    got, ordered = _accs("resources:\n  accelerators: [A100, V100]\n  any_of:\n"
                         "    - infra: aws\n    - infra: azure\n")
    assert len(got) == 4 and not ordered
    got, ordered = _accs("resources:\n  ordered:\n    - accelerators: {A100: 1, V100: 1}\n"
                         "    - accelerators: T4\n")
    assert [a for _, a in got] == ["A100:1", "V100:1", "T4:1"] and ordered


def test_any_of_entry_labels_merge_with_the_base() -> None:
    t = load_task("t.yaml", text="resources:\n  labels: {team: ml}\n  any_of:\n"
                                 "    - labels: {tier: a}\n    - infra: aws\n")
    assert [r.labels for r in t.resources] == [{"team": "ml", "tier": "a"}, {"team": "ml"}]


# ---------------------------------------------------------------- names


@pytest.mark.parametrize("given,name,vendor", [
    ("tpu-v2-8", "tpu-v2-8", "google"), ("TPU-V5LITEPOD-16", "tpu-v5litepod-16", "google"),
    ("tpu-v6e-8", "tpu-v6e-8", "google"), ("tpu-v5p", "tpu-v5p", "google"),
    ("inferentia", "Inferentia", "aws"), ("INFERENTIA2", "Inferentia2", "aws"),
    ("trainium", "Trainium", "aws"), ("trainium2", "Trainium2", "aws"),
    ("gaudi", "Gaudi", "intel"), ("gaudi2", "Gaudi2", "intel"), ("Gaudi3", "Gaudi3", "intel"),
    ("gaudi hl-205", "Gaudi HL-205", "intel"), ("a10g", "A10G", "nvidia"),
    ("l4", "L4", "nvidia"), ("L40s", "L40S", "nvidia"), ("t4", "T4", "nvidia"),
    ("v100", "V100", "nvidia"), ("p100", "P100", "nvidia"), ("k80", "K80", "nvidia"),
    ("m60", "M60", "nvidia"), ("a100-80gb", "A100-80GB", "nvidia"),
    ("h100-mega", "H100-MEGA", "nvidia"), ("h200", "H200", "nvidia"), ("b200", "B200", "nvidia"),
    ("gb200", "GB200", "nvidia"), ("rtx4090", "RTX4090", "nvidia"), ("a4000", "A4000", "nvidia"),
    ("radeon pro v520", "Radeon Pro V520", "amd"), ("radeon mi25", "Radeon MI25", "amd"),
    ("mi300", "MI300", "amd"), ("MI300A", "MI300A", "amd"),
    ("virtex ultrascale (vu9p)", "Virtex UltraScale (VU9P)", "xilinx"),
])
def test_known_names_and_vendors(given: str, name: str, vendor: str) -> None:
    assert canonical_accelerator(given) == name
    assert accelerator_info(given).vendor == vendor


def test_tpu_slice_info_and_bad_tpu_names() -> None:
    info = accelerator_info("tpu-v2-8")
    assert (info.kind, info.memory_gib) == ("tpu", None)
    assert expand_accelerators("tpu-v4-64:1") == ([("tpu-v4-64", 1)], False)
    for bad in ("tpu-5p", "tpu-v5p-", "tpu-"):
        with pytest.raises(InvalidSpecError, match="unknown TPU") as ei:
            canonical_accelerator(bad)
        assert ei.value.hint and "tpu-v2-8" in ei.value.hint
    # the vendor check copes with slices
    assert load_task("t.yaml", text="resources: {accelerators: tpu-v6e-8}\nrun: x\n"
                     ).validate() == []


def test_mi300_is_not_an_mi300x_and_not_picked_by_memory() -> None:
    assert load_task("t.yaml", text="resources: {accelerators: MI300:8}\n"
                     ).resources[0].accelerators == {"MI300": 8}
    names = {n for n, _ in expand_accelerators("amd:128GB+")[0]}
    assert "MI300" not in names and {"MI300X", "MI300A"} <= names


def test_gpus_is_an_alias_of_accelerators() -> None:
    assert Resources.model_validate({"gpus": "H100:8"}).accelerators == {"H100": 8}
    t = load_task("t.yaml", text="resources:\n  gpus: [A100:8, H100:8]\n")
    assert [r.accelerators for r in t.resources] == [{"A100": 8}, {"H100": 8}]
    assert t.resources_ordered
    with pytest.raises(InvalidSpecError, match="same field") as ei:
        load_task("t.yaml", text="resources:\n  any_of:\n    - gpus: T4\n      accelerators: L4\n")
    assert ei.value.field == "resources.any_of[0].gpus" and ei.value.line == 3


# ---------------------------------------------------------------- images, storage


def test_bare_image_on_kubernetes_is_a_container_image() -> None:
    r = Resources.model_validate({"infra": "k8s/ctx", "image_id": "ubuntu:22.04"})
    assert r.image_id == "docker:ubuntu:22.04" and r.docker_image == "ubuntu:22.04"
    r = Resources.model_validate({"cloud": "kubernetes", "image_id": {"ctx": "img:1"}})
    assert r.image_id == {"ctx": "docker:img:1"}
    assert Resources.model_validate({"infra": "aws", "image_id": "ami-1"}).image_id == "ami-1"
    moved = Resources.model_validate({"image_id": "img:2"}).copy(infra="kubernetes")
    assert moved.image_id == "docker:img:2"


@pytest.mark.parametrize("mount", ["{mode: MOUNT}", "{name: '', source: ''}",
                                   "{store: gcs, persistent: false}"])
def test_storage_mount_needs_name_or_source(mount: str) -> None:
    with pytest.raises(InvalidSpecError, match="needs a name or a source") as ei:
        load_task("t.yaml", text=f"file_mounts:\n  /data: {mount}\n")
    assert ei.value.field == "file_mounts['/data']"


# ---------------------------------------------------------------- every error at once


def test_every_error_of_a_task_is_reported_in_file_order() -> None:
    text = ("num_nodes: 0\nrunn: x\nenvs:\n  1BAD: x\n  OK: y\n  2BAD: z\n"
            "resources:\n  cpus: lots\n  memory: nope\n  accelerators: Q100\n"
            "workdir: /src/$NOPE\n")
    with pytest.raises(InvalidSpecErrors) as ei:
        load_dag("t.yaml", text=text)
    got = [(e.field, e.line) for e in ei.value.errors]
    assert got == [("num_nodes", 1), ("runn", 2), ("envs['1BAD']", 4), ("envs['2BAD']", 6),
                   ("resources.cpus", 8), ("resources.memory", 9),
                   ("resources.accelerators", 10), ("workdir", 11)]
    assert all(e.hint for e in ei.value.errors)
    assert ei.value.exit_code == 2 and "8 errors in t.yaml" in str(ei.value)


def test_errors_of_every_task_and_of_the_header() -> None:
    text = ("name: g\nexecution: sideways\n---\nnum_nodes: -2\nrun: a\n---\n"
            "resources: {disk_size: -1}\nrunn: b\n")
    with pytest.raises(InvalidSpecErrors) as ei:
        load_dag("g.yaml", text=text)
    assert [(e.field, e.line) for e in ei.value.errors] == [
        ("execution", 2), ("tasks[0].num_nodes", 4), ("tasks[1].resources.disk_size", 7),
        ("tasks[1].runn", 8)]


def test_base_field_error_inherited_by_entries_is_reported_once() -> None:
    text = "resources:\n  cpus: lots\n  any_of:\n    - infra: aws\n    - infra: gcp\n"
    with pytest.raises(InvalidSpecError) as ei:
        load_task("t.yaml", text=text)
    assert not isinstance(ei.value, InvalidSpecErrors)
    assert (ei.value.field, ei.value.line) == ("resources.cpus", 2)


def test_many_errors_travel_over_the_wire() -> None:
    with pytest.raises(InvalidSpecErrors) as ei:
        load_dag("t.yaml", text="num_nodes: 0\nrunn: x\n")
    d = json.loads(json.dumps(ei.value.to_dict()))
    assert d["type"] == "InvalidSpecError" and d["exit_code"] == 2
    assert [(e["field"], e["line"]) for e in d["errors"]] == [("num_nodes", 1), ("runn", 2)]
    back = error_from_dict(d)
    assert isinstance(back, InvalidSpecErrors) and back.exit_code == 2
    assert str(back) == str(ei.value)


def test_one_error_stays_one_plain_error() -> None:
    with pytest.raises(InvalidSpecError) as ei:
        load_dag("t.yaml", text="num_nodes: 0\n")
    assert type(ei.value) is InvalidSpecError and "errors" not in ei.value.to_dict()


def test_managed_jobs_refuse_a_job_group_rather_than_run_it_serially() -> None:
    from skyd.jobs.verbs import _load_docs

    group = "name: g\nexecution: parallel\n---\nname: a\nrun: a\n---\nname: b\nrun: b\n"
    with pytest.raises(InvalidSpecError, match="job group") as ei:
        _load_docs({"yaml": group})
    assert ei.value.hint and "execution: serial" in ei.value.hint
    docs, _ = _load_docs({"yaml": group.replace("parallel", "serial")})
    assert [d.get("name") for d in docs] == ["g", "a", "b"]


def test_docker_key_of_image_id_is_the_container_image() -> None:
    r = Resources.model_validate({"infra": "aws", "image_id": {"docker": "img:3",
                                                               "us-east-1": "ami-1"}})
    assert r.docker_image == "img:3"
    r = Resources.model_validate({"infra": "k8s", "image_id": {"docker": "img:4"}})
    assert r.image_id == {"docker": "img:4"} and r.docker_image == "img:4"


def test_errors_in_gpus_point_at_gpus() -> None:
    with pytest.raises(InvalidSpecErrors) as ei:
        load_task("t.yaml", text="resources:\n  cpus: lots\n  gpus: Q100\n  any_of:\n"
                                 "    - infra: aws\n    - gpus: Z9\n")
    assert [(e.field, e.line) for e in ei.value.errors] == [
        ("resources.cpus", 2), ("resources.gpus", 3), ("resources.any_of[1].gpus", 6)]
