"""What the service accepts as a model and as a benchmark: upload sniffing, model configs, presets."""

from __future__ import annotations

import pickle
import struct
import zipfile

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.service.benchmarks import Benchmark, OverrideRefused
from genEval.service.models import ModelRefused, UploadRefused, classifier_config, safe_filename, sniff_upload


def _tiny() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 10))


def test_safetensors_and_torchscript_are_recognised(tmp_path):
    save_file(_tiny().state_dict(), tmp_path / "w.safetensors")
    torch.jit.save(torch.jit.script(_tiny()), tmp_path / "net.pt")
    assert sniff_upload(tmp_path / "w.safetensors") == "safetensors"
    assert sniff_upload(tmp_path / "net.pt") == "torchscript"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: torch.save(_tiny().state_dict(), p), "torch.save archive"),  # zip holding data.pkl
        (lambda p: torch.save(_tiny().state_dict(), p, _use_new_zipfile_serialization=False), "pickle"),
        (lambda p: p.write_bytes(pickle.dumps({"w": [1, 2, 3]})), "pickle"),
        (lambda p: p.write_bytes(b"just some text, not a model"), "neither safetensors nor TorchScript"),
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: zipfile.ZipFile(p, "w").writestr("readme.txt", "hi"), "not a TorchScript model"),
        (lambda p: p.write_bytes(struct.pack("<Q", 10_000) + b'{"a": 1}'), "header length"),
        (lambda p: p.write_bytes(struct.pack("<Q", 8) + b"{not js}"), "not JSON"),
        (
            lambda p: p.write_bytes(
                struct.pack("<Q", 60) + b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'.ljust(60) + b"\0" * 4
            ),
            "invalid safetensors",
        ),
    ],
)
def test_pickles_and_unknown_files_are_refused(tmp_path, make, message):
    path = tmp_path / "upload.bin"
    make(path)
    with pytest.raises(UploadRefused, match=message):
        sniff_upload(path)


def test_pickle_refusal_says_what_to_send_instead(tmp_path):
    (tmp_path / "m.pkl").write_bytes(pickle.dumps(_tiny()))
    with pytest.raises(UploadRefused, match=r"safetensors.torch.save_file.*torch.jit.save"):
        sniff_upload(tmp_path / "m.pkl")


@pytest.mark.parametrize(
    "raw, safe",
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("my model (v2).safetensors", "my_model__v2_.safetensors"),
        (".hidden", "hidden"),
        ("", "upload"),
        (None, "upload"),
        ("/", "upload"),
    ],
)
def test_file_names_are_sanitised(raw, safe):
    assert safe_filename(raw) == safe


def test_classifier_configs_come_from_a_fixed_table():
    registered = {"digits_cnn": {"_target_": "genEval.classifiers.digits_classifier", "arch": "cnn"}}
    config = classifier_config({"kind": "config", "name": "digits_cnn"}, registered, None, None)
    assert config == registered["digits_cnn"]
    ts = classifier_config(
        {"kind": "torchscript", "num_classes": 10, "mean": [0.5], "std": [0.5]},
        registered,
        "torchscript",
        "uploads/abc.pt",
    )
    assert ts == {
        "_target_": "genEval.classifiers.torchscript_classifier",
        "path": "uploads/abc.pt",
        "num_classes": 10,
        "input_size": None,
        "mean": [0.5],
        "std": [0.5],
    }
    tv = classifier_config(
        {"kind": "torchvision", "name": "resnet18", "num_classes": 10},
        registered,
        "safetensors",
        "uploads/abc.safetensors",
    )
    assert tv["_target_"] == "genEval.classifiers.torchvision_classifier" and tv["weights"] is None
    assert tv["checkpoint"] == "uploads/abc.safetensors" and tv["allow_pickle"] is False


@pytest.mark.parametrize(
    "spec, upload_kind, key, message",
    [
        ({"kind": "config", "name": "nope"}, None, "name", "registered: digits_cnn"),
        ({"kind": "config", "name": "digits_cnn", "num_classes": 3}, None, "num_classes", "does not apply"),
        ({"kind": "config", "name": "digits_cnn"}, "safetensors", "upload", "takes no upload"),
        ({"kind": "timm", "name": "resnet18"}, None, "upload", "needs an uploaded safetensors"),
        ({"kind": "timm", "name": "resnet18"}, "torchscript", "upload", "use kind torchscript"),
        ({"kind": "timm", "name": "resnet_nonexistent"}, "safetensors", "name", "unknown timm model"),
        ({"kind": "torchvision", "name": "resnet_nope"}, "safetensors", "name", "unknown torchvision model"),
        ({"kind": "torchscript"}, "torchscript", "num_classes", "needs num_classes"),
        ({"kind": "torchscript", "num_classes": 10, "name": "x"}, "torchscript", "name", "does not apply"),
    ],
)
def test_bad_model_descriptions_name_the_field(spec, upload_kind, key, message):
    registered = {"digits_cnn": {"_target_": "genEval.classifiers.digits_classifier"}}
    with pytest.raises(ModelRefused, match=message) as err:
        classifier_config(spec, registered, upload_kind, "uploads/x" if upload_kind else None)
    assert err.value.key == key


def test_registered_classifiers_are_the_complete_configs():
    names = set(registered_classifiers(None))
    assert {"digits_cnn", "digits_mlp", "digits_wide_cnn"} <= names
    assert not names & {"timm", "torchvision", "torchscript", "module"}  # those need values (???)


def _preset(**changes) -> dict:
    cfg = {
        "data": {"_target_": "D", "limit": 20},
        "generator": {"_target_": "G"},
        "oracle": {"_target_": "O"},
        "search": {"budget": 5},
        "mask": {"_target_": "M"},
        "batch_size": 64,
        "benchmark": {"title": "t", "repetitions": 2, "overrides": {"batch_size": {"min": 1, "max": 256}}},
    }
    cfg.update(changes)
    return cfg


def test_benchmark_version_tracks_the_measurement_not_the_allowlist():
    base = Benchmark.from_config("b", _preset())
    assert Benchmark.from_config("b", _preset(batch_size=8)).version == base.version  # allowlisted key
    assert Benchmark.from_config("b", _preset(search={"budget": 6})).version != base.version
    assert Benchmark.from_config("b", _preset(data={"_target_": "D", "limit": 21})).version != base.version
    reps = _preset()
    reps["benchmark"] = {**reps["benchmark"], "repetitions": 3}
    assert Benchmark.from_config("b", reps).version != base.version
    assert len(base.version) == 16 and int(base.version, 16) >= 0


def test_overrides_only_from_the_allowlist():
    bench = Benchmark.from_config("b", _preset())
    config, clean = bench.apply_overrides({"batch_size": 8})
    assert config["batch_size"] == 8 and clean == {"batch_size": 8} and bench.config["batch_size"] == 64
    for bad, key, message in [
        ({"search.budget": 1}, "search.budget", "not allowed"),
        ({"_target_": "os.system"}, "_target_", "not allowed"),
        ({"+hydra.run.dir": "/"}, "+hydra.run.dir", "not allowed"),
        ({"batch_size": 0}, "batch_size", r"within \[1, 256\]"),
        ({"batch_size": "8"}, "batch_size", "must be a int"),
        ({"batch_size": True}, "batch_size", "must be a int"),
    ]:
        with pytest.raises(OverrideRefused, match=message) as err:
            bench.apply_overrides(bad)
        assert err.value.key == key


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"mask": None}, "lacks the role"),
        ({"hydra": {}}, "unknown top-level keys"),
        ({"benchmark": {"overrides": {"data._target_": {}}}}, "never _target_"),
        ({"benchmark": {"overrides": {"search": {}}}}, "plain value"),
        ({"benchmark": {"overrides": {"nope": {}}}}, "not in the preset"),
        ({"benchmark": {"repetitions": 0}}, "repetitions"),
    ],
)
def test_bad_presets_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        Benchmark.from_config("b", _preset(**changes))


def test_shipped_presets_compose():
    benches = load_benchmarks()
    assert {"digits", "digits_smoke"} <= set(benches)
    smoke, full = benches["digits_smoke"], benches["digits"]
    assert smoke.config["data"]["limit"] == 20 and smoke.config["search"]["budget"] == 5
    assert smoke.version != full.version
    assert "batch_size" in smoke.overrides
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmarks(["nope"])
