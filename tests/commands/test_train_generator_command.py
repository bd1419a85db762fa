"""``geneval train-generator``: trains through the configured trainer, and its checkpoint loads as
``generator=trained_vq``; bad input exits 2 without writing a checkpoint. The engine names no backend."""

from __future__ import annotations

import ast
import contextlib
import io
import re

import pytest
import torch
from hydra import compose, initialize_config_dir

from genEval.commands import CONF_DIR, build
from genEval.commands.train import run_train_generator
from genEval.data.standard import DigitsData
from tests.support.assets import ROOT
from tests.support.cli import geneval  # python -m genEval.cli in a subprocess

TINY = ["data.limit=40", "epochs=1", "batch_size=20", "n_embed=16", "embed_dim=8", "progress=false"]


def compose_cfg(name: str, *overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=list(overrides))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny training run through the command: (out_dir, report, what it printed)."""
    out = tmp_path_factory.mktemp("vq")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        report = run_train_generator(compose_cfg("train_generator", f"out_dir={out}", *TINY))
    return out, report, printed.getvalue()


def test_train_generator_writes_a_checkpoint(trained):
    out, report, _ = trained
    ckpt = out / "last.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert report.checkpoint == str(ckpt) and state["epoch"] == report.epochs == 1
    assert state["data"] == "digits:train" and state["config"]["n_embed"] == 16 and state["config"]["embed_dim"] == 8
    assert sorted(p.name for p in out.iterdir()) == ["last.ckpt"]


def test_the_printed_recipe_and_the_configs_comment_load_the_checkpoint(trained):
    out, _, printed = trained
    assert re.search(r"held-out PSNR \d+\.\d\d dB", printed)
    recipe = printed.split("use it with: geneval ")[1].split()
    assert recipe == ["generator=trained_vq", f"generator.checkpoint_path={out}/last.ckpt"]
    comment = next(
        line
        for line in (CONF_DIR / "train_generator.yaml").read_text().splitlines()
        if line.startswith("#") and "generator.checkpoint" in line
    )
    documented = [w.replace("<out_dir>", str(out)) for w in comment.split("geneval ")[1].split() if "=" in w]
    for overrides in (recipe, documented):
        g = build(compose_cfg("config", *overrides).generator, "generator")
        x = torch.stack([DigitsData("test", limit=2)[i][0] for i in range(2)])
        assert g.name.startswith("vq:digits:") and g.encode(x).shape == (2, 8, 8, 8)
        assert g.decode(g.encode(x)).shape == x.shape


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["epochs=-1"], "geneval train-generator: error: epochs=-1 must be >= 0."),
        (["loss=huber"], "geneval train-generator: error: loss='huber' is not a reconstruction loss"),
        (["lr=0"], "geneval train-generator: error: lr=0 must be a positive learning rate"),
        (["data.limit=1"], "geneval train-generator: error: dataset 'digits:train' has 1 images: too few"),
        (["data.image_size=15"], "geneval train-generator: error: training images are 15x15 but ddconfig.ch_mult"),
    ],
)
def test_train_generator_bad_input_exits_2_and_writes_no_checkpoint(tmp_path, capsys, overrides, message):
    with pytest.raises(SystemExit) as info:
        run_train_generator(compose_cfg("train_generator", f"out_dir={tmp_path}/out", *TINY, *overrides))
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(message)
    assert not (tmp_path / "out" / "last.ckpt").exists()


def test_train_generator_needs_an_output_directory_outside_hydra(capsys):
    with pytest.raises(SystemExit) as info:
        run_train_generator(compose_cfg("train_generator", *TINY))
    assert info.value.code == 2
    assert "geneval train-generator: error: geneval train-generator needs out_dir=..." in capsys.readouterr().err


def test_train_generator_through_the_cli_exits_2_with_one_line(tmp_path):
    r = geneval("train-generator", "epochs=-1", f"out_dir={tmp_path}/o", timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip() == "geneval train-generator: error: epochs=-1 must be >= 0."
    assert not (tmp_path / "o").exists()


def test_the_trainer_arrives_through_config_and_the_engine_names_no_backend():
    assert compose_cfg("train_generator").trainer["_target_"] == "generators.small_vq.train_vq_generator"
    for name in ("digits_vq", "trained_vq"):
        target = compose_cfg("config", f"generator={name}").generator["_target_"]
        assert target.startswith("generators.small_vq."), target
    offenders = []
    for path in sorted((ROOT / "genEval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            backends = [n for n in names if n.split(".")[0] in ("generators", "oracles")]
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in backends]
    assert not offenders, offenders
