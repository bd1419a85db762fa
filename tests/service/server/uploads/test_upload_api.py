"""Uploads through the HTTP API (FastAPI's TestClient): who may upload, which formats are refused, the size limit,
where an accepted file is kept, and that a job may use only its submitter's own upload of a suitable kind."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from safetensors.torch import save_file

from genEval.service.server.facade import MiB
from tests.support.service import bearer, smoke_service

LIMIT = 64 * 1024
JOB = {"benchmark": "digits_smoke", "name": "cnn", "model": {"kind": "config", "name": "digits_cnn"}}


@pytest.fixture
def svc(tmp_path, presets):  # the upload limit these tests reach (tests/service/server/conftest.py has `client`)
    service = smoke_service(tmp_path, presets, max_upload_mb=LIMIT / MiB)
    yield service
    service.db.close()


def _upload(client, headers, data: bytes, filename="model.bin"):
    return client.post("/api/uploads", files={"file": (filename, data, "application/octet-stream")}, headers=headers)


def _safetensors_bytes(tmp_path) -> bytes:
    save_file({"w": torch.zeros(4, 4)}, tmp_path / "w.safetensors")
    return (tmp_path / "w.safetensors").read_bytes()


def test_uploads(client, svc, tmp_path):
    h = bearer(svc.db)
    assert _upload(client, {}, b"x").status_code == 401
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    for data, text in [
        (pickle.dumps({"a": 1}), "pickle"),
        (buf.getvalue(), "torch.save archive"),
        (b"hello world, this is text", "neither safetensors nor TorchScript"),
    ]:
        r = _upload(client, h, data)
        assert r.status_code == 415 and text in r.json()["detail"], r.text
    r = _upload(client, h, b"\0" * (LIMIT + 1))
    assert r.status_code == 413 and str(LIMIT) in r.json()["detail"]
    ok = _upload(client, h, _safetensors_bytes(tmp_path), filename="../../../outside.safetensors")
    assert ok.status_code == 201, ok.text
    info = ok.json()
    assert info["kind"] == "safetensors" and info["filename"] == "outside.safetensors"
    assert (svc.home / "uploads" / f"{info['sha256']}.safetensors").is_file()
    assert not (tmp_path.parent / "outside.safetensors").exists()
    assert sorted(p.name for p in (svc.home / "uploads").iterdir()) == [f"{info['sha256']}.safetensors"]
    # the upload is the submitter's own, and must suit the kind
    body = {**JOB, "name": "ts", "model": {"kind": "torchscript", "num_classes": 10, "upload": info["id"]}}
    r = client.post("/api/jobs", json=body, headers=h)
    assert r.status_code == 422 and r.json()["key"] == "model.upload" and "use kind timm" in r.json()["detail"]
    body["model"] = {"kind": "torchvision", "name": "resnet18", "num_classes": 10, "upload": info["id"]}
    assert client.post("/api/jobs", json=body, headers=bearer(svc.db, name="mallory")).status_code == 422
    r = client.post("/api/jobs", json=body, headers=h)
    assert r.status_code == 201
    job = svc.db.jobs.get(r.json()["id"])
    assert job.upload_path == f"uploads/{info['sha256']}.safetensors"
    assert job.config["classifier"]["_target_"] == "genEval.classifiers.torchvision_classifier"
