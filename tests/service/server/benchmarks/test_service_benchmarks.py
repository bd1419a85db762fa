"""Service benchmarks on real data (issue 29): conf/benchmark/cifar10.yaml (the shared CIFAR-10 JPEGs, TAEF2 at 64 px,
the CIFAR ResNet zoo as the judge) and imagenet.yaml (the server's ImageNet folder, CLIP ViT-B/32); several benchmarks
served at once, each with its own leaderboard and version; the judge's members refused as submissions; and a
submitted ResNet-20 (a torch.export program) scored by a worker with the SA that
`geneval data=cifar10_jpg classifier=cifar_resnet20` gets on the same sources and seed."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from fastapi.testclient import TestClient
from hydra import compose, initialize_config_dir

import genEval.commands.evaluate as evaluate_command
from genEval.classifiers.architectures import CifarResNet
from genEval.classifiers.base import load_weights
from genEval.commands import CONF_DIR
from genEval.commands.evaluate import run_evaluate
from genEval.commands.serve import build_components, job_runner, load_benchmarks, registered_classifiers
from genEval.search.execution import Execution
from genEval.service.benchmarks import Benchmark
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service, Settings
from genEval.service.server.worker import Worker
from tests.support.assets import asset
from tests.support.service import worker_settings

SUBSET = 10  # sources of the small copy of the cifar10 benchmark


@pytest.fixture(scope="module")
def benches():
    for rel in ("cifar10/test-jpg", "weights/taef2", "weights/cifar10-resnet"):
        asset(rel)
    return load_benchmarks(["digits_smoke", "cifar10"])


@pytest.fixture(scope="module")
def registered():
    return registered_classifiers(None)


def _service(home, benchmarks: dict, registered: dict) -> Service:
    return Service(Database(sqlite_url(home / "geneval.db")), Settings(home=home, n_boot=100), benchmarks, registered)


def test_several_benchmarks_each_with_its_own_leaderboard_and_version(tmp_path, benches, registered):
    svc = _service(tmp_path, benches, registered)
    client = TestClient(create_app(svc))
    listed = {b["name"]: b for b in client.get("/api/benchmarks").json()}
    assert set(listed) == {"digits_smoke", "cifar10"}
    assert listed["cifar10"]["version"] != listed["digits_smoke"]["version"]
    cifar = listed["cifar10"]["config"]
    assert cifar["data"]["root"] == "asset:cifar10/test-jpg" and cifar["data"]["subset"] == "first"
    assert (
        cifar["generator"]["_target_"] == "generators.taef2.TAEF2Generator" and cifar["generator"]["image_size"] == 64
    )
    assert [m["classifier"]["depth"] for m in cifar["oracle"]["members"]] == [32, 56]
    assert "classifier" not in cifar  # the data preset's matching classifier gives way to the submission
    for name in listed:
        assert client.get(f"/leaderboard/{name}").status_code == 200
        assert client.get(f"/api/leaderboard/{name}").json()["version"] == listed[name]["version"]
    svc.db.close()


def test_the_imagenet_benchmark_takes_the_servers_folder_or_is_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"benchmark imagenet needs the server setting imagenet_root \(its data.root\)"
    ):
        load_benchmarks(["imagenet"])
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / "val" / wnid).mkdir(parents=True)
    bench = load_benchmarks(["imagenet"], {"imagenet_root": str(tmp_path / "val")})["imagenet"]
    assert bench.config["data"]["root"] == str(tmp_path / "val")
    assert (
        bench.config["oracle"]["_target_"] == "oracles.clip.CLIPOracle"
        and bench.config["oracle"]["model_name"] == "ViT-B-32"
    )
    assert bench.config["generator"]["_target_"] == "generators.taef2.TAEF2Generator"
    with pytest.raises(FileNotFoundError, match="benchmark imagenet: image folder root not found"):
        load_benchmarks(["imagenet"], {"imagenet_root": str(tmp_path / "nowhere")})


def test_the_judges_members_and_models_of_other_classes_are_refused(benches, registered):
    config = copy.deepcopy(benches["cifar10"].config)
    config["classifier"] = registered["cifar_resnet32"]
    with pytest.raises(ValueError, match=r"the submitted model is part of this benchmark's oracle \(zoo\(all\)"):
        build_components(config)
    config["classifier"] = registered["digits_cnn"]
    with pytest.raises(ValueError, match=r"digits_classifier was trained on the 10 digit classes .* model.name=cifar"):
        build_components(config)


def _resnet20_pt2(path) -> bytes:
    """The shared ResNet-20 as a torch.export program (taking ImageNet-normalised 32-px images, any batch size)."""
    net = CifarResNet(20)
    load_weights(net, asset("weights/cifar10-resnet/resnet20-12fca82f.th"), "ResNet-20")
    batch = {"x": {0: torch.export.Dim("batch", min=1, max=1024)}}
    torch.export.save(torch.export.export(net.eval(), (torch.rand(2, 3, 32, 32),), dynamic_shapes=batch), str(path))
    return path.read_bytes()


@pytest.mark.slow  # a worker process, two CIFAR evaluations and a torch.export: about a minute on 2 CPU cores
def test_a_submitted_resnet20_gets_the_sa_of_the_command_line(tmp_path, benches, registered, monkeypatch):
    full = benches["cifar10"]
    small = copy.deepcopy(full.config)
    small["data"]["limit"], small["search"]["budget"], small["batch_size"] = SUBSET, 1, SUBSET
    bench = Benchmark.from_config("cifar10", {**small, "benchmark": {"title": full.title, "repetitions": 1}})
    home = tmp_path / "svc"
    home.mkdir()
    svc = _service(home, {"cifar10": bench}, registered)
    client = TestClient(create_app(svc))
    auth = {"Authorization": f"Bearer {svc.db.tokens.create('alice', 'submitter')[0]}"}
    model = _resnet20_pt2(tmp_path / "resnet20.pt2")
    up = client.post("/api/uploads", files={"file": ("resnet20.pt2", model, "application/octet-stream")}, headers=auth)
    assert up.status_code == 201 and up.json()["kind"] == "torch.export", up.text
    body = {
        "benchmark": "cifar10",
        "name": "r20",
        "model": {"kind": "torchscript", "num_classes": 10, "upload": up.json()["id"]},
    }
    job = client.post("/api/jobs", json=body, headers=auth)
    assert job.status_code == 201, job.text
    worker = Worker(
        svc.db, home, job_runner(Execution(device="cpu")), worker_settings(poll_s=0.1, exit_when_idle=True, n_boot=100)
    )
    assert worker.run() == 1
    done = svc.db.jobs.get(job.json()["id"])
    assert done.status == "done", done.error
    (row,) = client.get("/api/leaderboard/cifar10").json()["rows"]
    # the command line on the same sources (the fixed first images of every class) and seed
    run_dir = tmp_path / "cli"
    monkeypatch.setattr(evaluate_command, "hydra_output_dir", lambda: run_dir)
    overrides = ["data=cifar10_jpg", "classifier=cifar_resnet20", f"data.limit={SUBSET}", "data.subset=first"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, "search.budget=1", f"seed={done.seeds[0]}", "n_boot=100"])
    run_evaluate(cfg)
    cli = json.loads((run_dir / "results.json").read_text())["scores"]["sa"]
    assert row["name"] == "r20" and cli["n"] == SUBSET
    assert row["scores"]["sa"]["value"] == pytest.approx(cli["value"])
    svc.db.close()
