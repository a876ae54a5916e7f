"""A daemon with no usable GCP credentials: `skyd check` says why and how to fix it, and a
launch on gcp fails at once with that message (exit non-zero), without any network access
(the network guard records every attempt outside 127.0.0.0/8; none is made)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gcp import GEnv, guarded_module_env
from tests.support.pipeline import cli, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GEnv]:
    base = tmp_path_factory.mktemp("nocreds")
    with guarded_module_env(tmp_path_factory, base / "guard.log", {
        "GOOGLE_APPLICATION_CREDENTIALS": str(base / "missing-key.json"),
        "CLOUDSDK_CONFIG": str(base / "gcloud"),
    }) as e:
        yield e


def test_missing_credentials_one_message_with_the_fix(env: GEnv, tmp_path: Path) -> None:
    rows = {r["infra"]: r for r in json.loads(env.ok("check", "-o", "json").stdout)}
    assert rows["gcp"]["launch"] is False
    assert "missing-key.json, which does not exist" in rows["gcp"]["reason"]
    assert "gcloud auth application-default login" in rows["gcp"]["reason"]
    y = write(tmp_path / "t.yaml", "resources:\n  infra: gcp\n  cpus: 2\nrun: echo hi\n")
    r = cli("launch", "-y", "-c", "nc1", str(y), timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "gcp" in r.stderr and "does not exist" in r.stderr, r.stderr
    assert env.status("nc1") is None
