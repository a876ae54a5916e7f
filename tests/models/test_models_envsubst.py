"""Env substitution: $VAR, ${VAR}, ${VAR:-default}, nesting, $$, errors, precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.errors import InvalidSpecError
from skyd.models import load_task, parse_env_file


def mounts(text: str, **kw: object) -> dict[str, object]:
    task = load_task("t.yaml", text=text, base_dir=Path("/b"), **kw)  # type: ignore[arg-type]
    return {k: v.source for k, v in task.file_mounts.items()}


def test_skypilot_mangling_case_is_correct_here() -> None:
    # SkyPilot turns this into '/m/13:-7}b'; skyd keeps the default's meaning: '/m/13b'.
    text = "envs: {SIZE: 13}\nfile_mounts:\n  /m/${SIZE:-7}b: s3://b/x\n"
    assert mounts(text) == {"/m/13b": "s3://b/x"}


def test_default_used_when_unset_or_empty() -> None:
    text = "envs: {EMPTY: ''}\nfile_mounts:\n  /a: s3://b/${NOPE:-d1}/${EMPTY:-d2}/${EMPTY-d3}\n"
    assert mounts(text) == {"/a": "s3://b/d1/d2/"}


def test_nested_default() -> None:
    text = "envs: {B: inner}\nfile_mounts:\n  /a: s3://x/${A:-${B:-z}}/${C:-${D:-deep}}\n"
    assert mounts(text) == {"/a": "s3://x/inner/deep"}


def test_plain_and_braced_forms() -> None:
    text = "envs: {X: one, Y: two}\nfile_mounts:\n  /a: s3://$X/${Y}suffix/$X-$Y\n"
    assert mounts(text) == {"/a": "s3://one/twosuffix/one-two"}


def test_double_dollar_is_literal() -> None:
    text = "envs: {X: one}\nfile_mounts:\n  /a: s3://b/$$X/$${X}/cost$$\n"
    assert mounts(text) == {"/a": "s3://b/$X/${X}/cost$"}


def test_lone_dollar_kept() -> None:
    text = "file_mounts:\n  /a: s3://b/$5/x$\n"
    assert mounts(text) == {"/a": "s3://b/$5/x$"}


def test_unset_variable_error_names_var_field_and_fix() -> None:
    text = "name: ok\nfile_mounts:\n  /data: s3://bucket/${DATASET}\n"
    with pytest.raises(InvalidSpecError) as ei:
        load_task("t.yaml", text=text)
    e = ei.value
    assert "$DATASET" in e.message
    assert e.field == "file_mounts['/data']"
    assert e.line == 3
    assert e.hint and "--env DATASET=" in e.hint and "envs:" in e.hint


def test_resources_substitute_only_defined_variables() -> None:
    # SkyPilot keeps `$` text in resources that is not a defined variable: an OCI shape.
    t = load_task("t.yaml", text="resources:\n  instance_type: VM.Standard.E4.Flex$_2_16\n")
    assert t.resources[0].instance_type == "VM.Standard.E4.Flex$_2_16"
    t = load_task("t.yaml", text="resources:\n  infra: aws/$REGION\n")
    assert t.resources[0].region == "$REGION"
    text = ("envs: {R: us-east-1}\nresources:\n  infra: aws/$R\n"
            "  instance_type: ${TYPE:-m5.large}\n  labels: {a: '${1x}', b: '${open'}\n")
    r = load_task("t.yaml", text=text).resources[0]
    assert (r.region, r.instance_type) == ("us-east-1", "m5.large")
    assert r.labels == {"a": "${1x}", "b": "${open"}
    r = load_task("t.yaml", text=text, env_overrides={"TYPE": "c5.xlarge"}).resources[0]
    assert r.instance_type == "c5.xlarge"


def test_unset_outside_resources_stays_an_error() -> None:
    with pytest.raises(InvalidSpecError) as ei:
        load_task("t.yaml", text="workdir: /src/$PROJ\nresources:\n  cpus: 2\n")
    assert ei.value.field == "workdir" and "$PROJ" in ei.value.message


def test_override_precedence() -> None:
    text = "envs: {R: from-yaml}\nresources:\n  infra: aws/${R}\n"
    t = load_task("t.yaml", text=text)
    assert t.resources[0].region == "from-yaml"
    t = load_task("t.yaml", text=text, env_overrides={"R": "from-cli"})
    assert t.resources[0].region == "from-cli"
    assert t.envs["R"] == "from-cli"


def test_override_adds_new_env() -> None:
    t = load_task("t.yaml", text="name: job-${WHO}\n", env_overrides={"WHO": "alice"})
    assert t.name == "job-alice"
    assert t.envs == {"WHO": "alice"}


def test_secrets_substitute_and_override() -> None:
    text = "secrets: {TOKEN: abc}\nfile_mounts:\n  /a: https://h/${TOKEN}\n"
    assert mounts(text) == {"/a": "https://h/abc"}
    assert mounts(text, secret_overrides={"TOKEN": "xyz"}) == {"/a": "https://h/xyz"}


def test_keys_substituted_and_run_untouched() -> None:
    text = ("envs: {D: data}\nfile_mounts:\n  /${D}: s3://b\n"
            "setup: echo ${D} $MISSING\nrun: echo ${NOT_SET:-x} $D\n")
    t = load_task("t.yaml", text=text)
    assert list(t.file_mounts) == ["/data"]
    assert t.setup == "echo ${D} $MISSING"
    assert t.run == "echo ${NOT_SET:-x} $D"


def test_service_and_workdir_substituted() -> None:
    text = ("envs: {P: /ready, W: code}\nworkdir: ./${W}\n"
            "service:\n  readiness_probe: ${P}\n")
    t = load_task("t.yaml", text=text, base_dir=Path("/proj"))
    assert t.workdir == "/proj/code"
    assert t.service is not None and t.service.readiness_probe.path == "/ready"


def test_null_env_required_then_supplied() -> None:
    text = "envs: {TOKEN: null}\nfile_mounts:\n  /a: s3://b/${TOKEN}\n"
    with pytest.raises(InvalidSpecError) as ei:
        load_task("t.yaml", text=text)
    assert ei.value.hint is not None and "--env TOKEN=" in ei.value.hint
    assert mounts(text, env_overrides={"TOKEN": "t1"}) == {"/a": "s3://b/t1"}


def test_allow_missing_env_keeps_reference() -> None:
    text = "envs: {TOKEN: null}\nfile_mounts:\n  /a: s3://b/${TOKEN}\n"
    t = load_task("t.yaml", text=text, allow_missing_env=True)
    assert t.required_envs() == ["TOKEN"]
    assert t.file_mounts["/a"].source == "s3://b/${TOKEN}"


def test_bad_syntax_is_an_error() -> None:
    with pytest.raises(InvalidSpecError, match="unsupported substitution"):
        load_task("t.yaml", text="envs: {A: x}\nname: ${A:?boom}\n")
    with pytest.raises(InvalidSpecError, match="unclosed"):
        load_task("t.yaml", text="name: ${A\n")


def test_substituted_value_is_validated() -> None:
    text = "envs: {GPU: Q100}\nresources:\n  accelerators: ${GPU}:8\n"
    with pytest.raises(InvalidSpecError, match="unknown accelerator 'Q100'"):
        load_task("t.yaml", text=text)


def test_env_values_keep_yaml_text() -> None:
    t = load_task("t.yaml", text="envs: {LR: 1.5e-4, N: 8, F: yes, S: 'x y'}\n")
    assert t.envs == {"LR": "1.5e-4", "N": "8", "F": "yes", "S": "x y"}


def test_parse_env_file(tmp_path: Path) -> None:
    p = tmp_path / ".env"
    p.write_text(
        "# comment\n\nA=1\nexport B = two words\nC='single # kept'\nD=\"dq\\n\"\n"
        "E=val # trailing comment\nF=\n"
    )
    assert parse_env_file(p) == {"A": "1", "B": "two words", "C": "single # kept",
                                 "D": "dq\n", "E": "val", "F": ""}


def test_parse_env_file_errors(tmp_path: Path) -> None:
    p = tmp_path / "bad.env"
    p.write_text("OK=1\nnot a line\n")
    with pytest.raises(InvalidSpecError) as ei:
        parse_env_file(p)
    assert ei.value.line == 2
    with pytest.raises(InvalidSpecError, match="cannot read"):
        parse_env_file(tmp_path / "missing.env")
