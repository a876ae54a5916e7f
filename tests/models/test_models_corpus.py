"""The YAML corpus: every good file normalizes to its reviewed JSON; every bad file fails
with its expected message; everything round-trips through the normalized form."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from skyd.errors import InvalidSpecError
from skyd.models import Dag, Task, load_dag

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "yaml"))
import corpus  # noqa: E402

GOOD = sorted(corpus.GOOD.glob("*.yaml"))
BAD = sorted(corpus.BAD.glob("*.yaml"))


def test_corpus_sizes() -> None:
    assert len(GOOD) >= 28
    assert len(BAD) >= 16


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_yaml_normalizes_to_expected(path: Path) -> None:
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    assert corpus.normalized(path) == expected


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_round_trip(path: Path) -> None:
    dag = load_dag(path, **corpus.load_args(path))
    stored = dag.to_normalized(redact_secrets=False)
    # what the daemon does: JSON text in SQLite, back to objects
    back = Dag.from_normalized(json.loads(json.dumps(stored)))
    assert back == dag
    assert back.to_normalized(redact_secrets=False) == stored
    assert back.to_normalized() == dag.to_normalized()


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_yaml_fails_with_message(path: Path) -> None:
    expected = path.with_suffix(".expected.txt").read_text().strip()
    with pytest.raises(InvalidSpecError) as ei:
        load_dag(path)
    err = ei.value
    assert expected in str(err)
    assert err.exit_code == 2
    d = err.to_dict()
    assert d["type"] == "InvalidSpecError" and d["message"]


def test_bad_errors_carry_hints() -> None:
    hinted = 0
    for path in BAD:
        try:
            load_dag(path)
        except InvalidSpecError as e:
            hinted += bool(e.hint)
    assert hinted >= len(BAD) - 8


def test_multi_doc_chain_shape() -> None:
    dag = load_dag(corpus.GOOD / "chain.yaml")
    assert dag.name == "train-eval-pipeline"
    assert [t.name for t in dag.tasks] == ["preprocess", "train", "eval"]
    assert dag.edges == [(0, 1), (1, 2)]
    assert dag.is_chain()


def test_secrets_redacted_but_stored() -> None:
    task = load_dag(corpus.GOOD / "secrets.yaml").task
    norm = task.to_normalized()
    assert norm["secrets"] == {"WANDB_API_KEY": "<redacted>", "HF_TOKEN": "<redacted>"}
    assert "abc123secret" not in json.dumps(norm)
    raw = task.to_normalized(redact_secrets=False)
    assert raw["secrets"]["WANDB_API_KEY"] == "abc123secret"
    assert Task.from_normalized(raw).secrets == task.secrets
