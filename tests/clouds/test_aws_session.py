"""skyd.clouds.aws.session: botocore's data (service models, endpoints) is read once per
process, however many sessions the daemon opens (an S3 store per request, a mount, the
provisioner), and a session on another data path (AWS_DATA_PATH) reads its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.anyio


@pytest.fixture
def json_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every JSON file botocore's loaders read from here on."""
    from botocore.loaders import JSONFileLoader

    reads: list[str] = []
    real = JSONFileLoader.load_file

    def counted(self: Any, file_path: str) -> Any:
        reads.append(file_path)
        return real(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counted)
    return reads


async def _open_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.aws.session import Clients

    c = Clients()
    try:
        client = await c.client("s3", "us-east-1")
        assert client.meta.service_model.service_name == "s3"
    finally:
        await c.close()


async def test_a_second_session_reads_no_model_again(
        json_reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    await _open_s3(monkeypatch)  # the first session of this process may read (or have read)
    json_reads.clear()
    for _ in range(3):  # a store per request: each its own session and client
        await _open_s3(monkeypatch)
    assert json_reads == [], f"sessions after the first read botocore's data again: {json_reads}"


async def test_another_data_path_gets_its_own_models(
        json_reads: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A user's AWS_DATA_PATH (extra or patched models) is honoured, not masked by the
    models this process loaded from botocore's own data."""
    import botocore

    src = Path(botocore.__file__).parent / "data" / "sts"
    version = sorted(p.name for p in src.iterdir() if p.is_dir())[-1]
    (tmp_path / "sts" / version).mkdir(parents=True)
    model = (src / version / "service-2.json.gz")
    if not model.exists():
        model = src / version / "service-2.json"
    (tmp_path / "sts" / version / model.name).write_bytes(model.read_bytes())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    from skyd.clouds.aws.session import Clients

    c = Clients()
    try:
        await c.client("sts", "us-east-1")  # this process's default path: warm
    finally:
        await c.close()
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    json_reads.clear()
    c = Clients()
    try:
        await c.client("sts", "us-east-1")
    finally:
        await c.close()
    assert any(r.startswith(str(tmp_path)) for r in json_reads), json_reads
