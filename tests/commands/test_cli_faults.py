"""Errors that help: a truncated or corrupt checkpoint (safetensors, .th, .pt2) names the file and the reason, a model
file that is neither TorchScript nor torch.export says why, a full disk names the run directory and says the run is
resumable, an unwritable run directory is named, each as one `geneval: error:` paragraph with no traceback; and a
`data.limit` above the data set's size warns once, naming both numbers, in the log and in results.json."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import save_file

from genEval import evaluate
from genEval.checkpoints import load_checkpoint
from genEval.classifiers import torchscript_classifier
from genEval.commands import CONF_DIR, REGISTRY
from genEval.data.standard import DigitsData
from genEval.search.execution import Execution
from genEval.service.models import UploadRefused, sniff_upload
from tests.support.assets import ROOT
from tests.support.cli import one_error_paragraph
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)[:, :4])


def _cut(path: Path) -> Path:
    """The first half of ``path``, as an interrupted download leaves it."""
    cut = path.with_name("cut-" + path.name)
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return cut


@pytest.fixture
def damaged(tmp_path) -> dict[str, Path]:
    sd = Tiny().state_dict()
    save_file(sd, tmp_path / "w.safetensors")
    torch.save(sd, tmp_path / "w.th")
    torch.save(sd, tmp_path / "legacy.th", _use_new_zipfile_serialization=False)
    torch.export.save(torch.export.export(Tiny().eval(), (torch.rand(2, 4),)), tmp_path / "m.pt2")
    torch.jit.save(torch.jit.script(Tiny()), tmp_path / "m.pt")
    with zipfile.ZipFile(tmp_path / "m.pt") as src, zipfile.ZipFile(tmp_path / "fake.pt", "w") as out:
        for name in src.namelist():  # the TorchScript layout (code/, constants.pkl) with nothing loadable in it
            out.writestr(name, b"garbage" if name.endswith("constants.pkl") else src.read(name))
    return {
        "safetensors": _cut(tmp_path / "w.safetensors"),
        "th": _cut(tmp_path / "w.th"),
        "legacy": _cut(tmp_path / "legacy.th"),
        "pt2": _cut(tmp_path / "m.pt2"),
        "torchscript": _cut(tmp_path / "m.pt"),
        "fake": tmp_path / "fake.pt",
    }


@pytest.mark.parametrize("kind", ["safetensors", "th", "legacy"])
def test_a_truncated_checkpoint_names_the_file_and_the_reason(damaged, kind):
    with pytest.raises(ValueError) as err:
        load_checkpoint(damaged[kind], what="test checkpoint")
    text = str(err.value)
    assert f"test checkpoint '{damaged[kind]}'" in text and "truncated or corrupt" in text
    assert "pickled Python objects" not in text  # the reason is the damage, not a pickle
    reason = text.split("(", 1)[1].split(")", 1)[0]
    assert reason.strip() and reason != "None", text


@pytest.mark.parametrize("kind", ["pt2", "torchscript"])
def test_a_truncated_model_file_names_the_file_and_the_reason(damaged, kind):
    with pytest.raises(ValueError, match=rf"'{damaged[kind]}' is an incomplete zip archive .*truncated or corrupt"):
        torchscript_classifier(damaged[kind], num_classes=3)
    with pytest.raises(UploadRefused, match="incomplete zip archive"):
        sniff_upload(damaged[kind])


def test_a_file_that_is_neither_torchscript_nor_exported_is_refused_with_the_reason(damaged):
    with pytest.raises(ValueError, match=r"is not a loadable TorchScript archive \(\w.+\)") as cli:
        torchscript_classifier(damaged["fake"], num_classes=3)
    assert "()" not in str(cli.value)
    with pytest.raises(UploadRefused, match=r"is not a loadable TorchScript archive \(\w.+\)") as upload:
        sniff_upload(damaged["fake"])
    assert not str(upload.value).rstrip().endswith(":")


def test_the_cli_says_it_in_one_paragraph(damaged, tmp_path, capsys):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[  # CIFAR data, so the cheap checks pass and the checkpoint is what fails
                "data=cifar10_jpg",
                "classifier=cifar_resnet20",
                f"classifier.checkpoint={damaged['th']}",
                "device=cpu",
            ],
        )
    with pytest.raises(SystemExit) as exit_:
        REGISTRY["evaluate"][1](cfg)
    assert exit_.value.code == 2
    line = one_error_paragraph(capsys.readouterr().err)
    assert f"while building classifier: CIFAR ResNet-20 checkpoint '{damaged['th']}' cannot be read (" in line
    assert "truncated or corrupt" in line


def _toy_run(data: DigitsData, out: Path, batch_size: int | None = None):
    """A one-step evaluation of ``data`` (8x8 digits) by linear toys, written to ``out``."""
    return evaluate(
        classifier=LinearClassifier(seed=0, in_features=64, num_classes=10),
        data=data,
        generator=SigmoidGenerator(),
        oracle=ModelOracle(LinearClassifier(seed=1, in_features=64, num_classes=10)),
        search={"budget": 1, "step_size": 0.1},
        seed=0,
        execution=Execution(batch_size=batch_size),
        output=out,
    )


def test_a_limit_above_the_data_sets_size_warns_once_naming_both_numbers(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        data = DigitsData(split="test", image_size=8, limit=100_000)
        data.with_seed(1).with_seed(2)  # later draws reuse the pool: no second warning
    n = len(data)
    warned = [r.getMessage() for r in caplog.records if "data.limit" in r.getMessage()]
    assert warned == [
        f"data.limit=100000 is more than the {n} samples of digits:test: all {n} are used. Lower "
        "data.limit (or point data at a larger data set) to run the number you meant."
    ]
    res = _toy_run(DigitsData(split="test", image_size=8, limit=9), tmp_path / "ok")
    assert not any("data.limit" in w for w in res.warnings)  # a limit below the size says nothing
    big = DigitsData(split="test", image_size=8, limit=100_000, indices="0:12")  # a pool of 12 sources
    res = _toy_run(big, tmp_path / "run")
    stored = json.loads((tmp_path / "run" / "results.json").read_text())["warnings"]
    assert [w for w in stored if "data.limit" in w] == [
        "data.limit=100000 is more than the 12 samples of digits:test: all 12 are used. Lower data.limit (or point "
        "data at a larger data set) to run the number you meant."
    ]
    assert res.scores.n == 12


# ------------------------------------------------------------------------------- a full or read-only disk
def test_a_full_disk_mid_run_names_the_run_directory_and_the_run_resumes(tmp_path, monkeypatch):
    import errno

    import genEval.runs.writer as writer

    real, calls = os.fsync, {"n": 0}

    def fsync_until_full(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > 6:  # run.json, the lock and a few flushes fit; then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    small = DigitsData(split="test", image_size=8, limit=30)
    monkeypatch.setattr(writer.os, "fsync", fsync_until_full)
    with pytest.raises(OSError) as full:
        _toy_run(small, tmp_path / "run", batch_size=4)
    monkeypatch.setattr(writer.os, "fsync", real)
    text = str(full.value)
    assert text.startswith(f"no space left on the device of run directory '{tmp_path / 'run'}' (No space left on")
    assert "The run is resumable" in text and "rerun the same command" in text
    assert not (tmp_path / "run" / "run.lock").exists()
    kept = len((tmp_path / "run" / "samples.partial.jsonl").read_text().splitlines())
    resumed = _toy_run(small, tmp_path / "run", batch_size=4)
    assert resumed.scores.n == 30 and resumed.timings["samples_computed"] == 30 - kept
    assert resumed.scores.to_dict() == _toy_run(small, tmp_path / "fresh", batch_size=4).scores.to_dict()


def _mount_cmd() -> list[str]:
    """A private mount namespace in which this test may mount a small tmpfs (root, or a user namespace)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*cmd, "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private namespace here: {probe.stderr.decode()[:200]}")
    return cmd


DIGITS = ("seed=0", "data.limit=40", "search.budget=4", "batch_size=2", "progress=false", "save_images=true")


def test_an_unwritable_run_directory_is_named_before_hydra_writes_there(tmp_path):
    cmd = _mount_cmd()
    disk = tmp_path / "disk"
    disk.mkdir()
    script = f"""
        mount -t tmpfs -o ro,size=64k tmpfs {disk}
        {sys.executable} -m genEval.cli {" ".join(DIGITS)} hydra.run.dir={disk}/run 2> {tmp_path}/ro.err
        echo $? > {tmp_path}/ro.rc
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*cmd, "sh", "-c", script], cwd=ROOT, env=env, timeout=600, check=True)
    err = (tmp_path / "ro.err").read_text()
    assert int((tmp_path / "ro.rc").read_text()) == 2, err
    line = one_error_paragraph(err)
    assert f"output directory '{disk}/run' is not writable (Read-only file system)" in line


@pytest.mark.slow
def test_a_full_disk_and_a_read_only_directory_are_one_paragraph_naming_the_directory(tmp_path, digits_cache):
    cmd = _mount_cmd()
    disk = tmp_path / "disk"
    disk.mkdir()
    geneval = f"{sys.executable} -m genEval.cli {' '.join(DIGITS)}"
    script = f"""
        set -u
        mount -t tmpfs -o ro,size=64k tmpfs {disk}
        {geneval} hydra.run.dir={disk}/run 2> {tmp_path}/ro.err; echo $? > {tmp_path}/ro.rc
        umount {disk}
        mount -t tmpfs -o size=96k tmpfs {disk}
        {geneval} hydra.run.dir={disk}/run 2> {tmp_path}/full.err; echo $? > {tmp_path}/full.rc
        cp {disk}/run/samples.partial.jsonl {tmp_path}/kept.jsonl 2>/dev/null
        mount -o remount,size=16m {disk}
        {geneval} hydra.run.dir={disk}/run 2> {tmp_path}/resumed.err; echo $? > {tmp_path}/resumed.rc
        cp {disk}/run/results.json {tmp_path}/results.json
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GENEVAL_CACHE": str(digits_cache)}
    subprocess.run([*cmd, "sh", "-c", script], cwd=ROOT, env=env, timeout=1500, check=True)

    def result(name: str) -> tuple[int, str]:
        return int((tmp_path / f"{name}.rc").read_text()), (tmp_path / f"{name}.err").read_text()

    rc, err = result("ro")
    assert rc == 2, err
    line = one_error_paragraph(err)
    assert f"output directory '{disk}/run' is not writable (Read-only file system)" in line

    rc, err = result("full")
    assert rc == 2, err
    line = one_error_paragraph(err)
    assert f"no space left on the device of run directory '{disk}/run'" in line
    assert "The run is resumable" in line and "rerun the same command" in line

    rc, err = result("resumed")
    assert rc == 0, err
    # whole lines only: the disk filled up in the middle of one, which the resume drops
    kept = (tmp_path / "kept.jsonl").read_text().count("\n") if (tmp_path / "kept.jsonl").exists() else 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["scores"]["n"] == 40 and results["timings"]["samples_computed"] == 40 - kept
