"""``geneval fit-mask``: the command fits, writes and explains a mask; bad input exits 2 and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from genEval import evaluate
from genEval.commands import CONF_DIR
from genEval.commands.mask import run_fit_mask
from genEval.runs import RunDir
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.perturb import SearchConfig
from genEval.style_mask import SparseMask, StyleMask
from tests.support.cli import geneval  # python -m genEval.cli in a subprocess
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

TOY_SEARCH = SearchConfig(budget=8, step_size=0.3)


def fit_mask_cfg(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("fit_mask", overrides=list(overrides))


def _toy_run(run_dir: Path, n: int = 120, save_latents: bool = True) -> Path:
    clf = LinearClassifier(seed=0)
    evaluate(
        clf,
        toy_data(n),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        output=RunOutput(run_dir, save_latents=save_latents, progress=False),
        scoring=Scoring(n_boot=10),
    )
    return run_dir


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    return _toy_run(tmp_path_factory.mktemp("fit-mask-run"))


def test_fit_mask_writes_the_mask_and_its_plot_and_says_how_to_use_it(toy_run, tmp_path, capsys):
    out = run_fit_mask(fit_mask_cfg(f"run={toy_run}", "C=null", "target_sparsity=0.5", f"out={tmp_path}/m.safetensors"))
    printed = capsys.readouterr().out
    assert out == f"{tmp_path}/m.safetensors"
    m = StyleMask.load(out)
    assert m.generator == "sigmoid" and m.dataset == "toy" and m.source == str(toy_run) and m.sparsity >= 50
    assert (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    assert f"mask written to {out}" in printed and f"held-out accuracy {m.heldout_accuracy:.1f}%" in printed
    usage = printed.split("use it with: ")[1].strip()
    assert usage == f"geneval mask=sparse mask.path={out}"

    # the printed recipe works: mask.path from it, read by the mask group's SparseMask, obeyed by the search
    clf = LinearClassifier(seed=0)
    evaluate(
        clf,
        toy_data(40),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        mask=SparseMask(usage.split("mask.path=")[1]),
        output=RunOutput(tmp_path / "masked", save_latents=True, progress=False),
        scoring=Scoring(n_boot=10),
    )
    lat = RunDir(tmp_path / "masked").tensors("latents")
    assert (lat["final"] - lat["start"]).abs()[:, ~m.mask].max() == 0


def test_fit_mask_default_output_lies_in_the_run(tmp_path):
    run = _toy_run(tmp_path / "run")
    out = run_fit_mask(fit_mask_cfg(f"run={run}", "solver=liblinear"))
    assert out == str(run / "style_mask.safetensors")
    assert StyleMask.load(out).solver == "liblinear" and (run / "style_mask.png").is_file()


@pytest.mark.parametrize(
    "overrides,message",
    [
        ([], "geneval fit-mask: error: geneval fit-mask needs run=...; e.g. geneval fit-mask run=<directory"),
        (["run={tmp}/nowhere"], "geneval fit-mask: error: run directory '{tmp}/nowhere' does not exist"),
        (["run={tmp}/nolat"], "geneval fit-mask: error: run '{tmp}/nolat' has no latents (latents/part-*.safetensors)"),
        (["run={run}", "C=-1"], "geneval fit-mask: error: C must be a positive finite number"),
        (["run={run}", "solver=lbfgs"], "geneval fit-mask: error: unknown solver 'lbfgs'; choose one of saga"),
        (["run={run}", "C=null"], "geneval fit-mask: error: C=None searches C and needs exactly one target"),
    ],
)
def test_fit_mask_bad_input_exits_2_and_writes_nothing(toy_run, tmp_path, capsys, overrides, message):
    _toy_run(tmp_path / "nolat", n=12, save_latents=False)
    before = sorted(p.name for p in toy_run.iterdir())
    fmt = {"tmp": tmp_path, "run": toy_run}
    with pytest.raises(SystemExit) as info:
        run_fit_mask(fit_mask_cfg(*(o.format(**fmt) for o in overrides)))
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(message.format(**fmt))
    assert sorted(p.name for p in toy_run.iterdir()) == before  # no mask, no plot, no temp file


def test_fit_mask_through_the_cli_exits_2_with_one_line(tmp_path):
    r = geneval("fit-mask", f"run={tmp_path}/nowhere", timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"geneval fit-mask: error: run directory '{tmp_path}/nowhere' does not exist; "
        "pass the directory of a finished geneval run."
    )
    assert not list(tmp_path.iterdir())


def test_fit_mask_config_defaults_are_the_library_defaults():
    import inspect

    from genEval.commands.mask import FIT_KEYS
    from genEval.style_mask import fit_style_mask

    cfg = fit_mask_cfg()
    params = inspect.signature(fit_style_mask).parameters
    assert set(FIT_KEYS) <= set(params) and set(FIT_KEYS) <= set(cfg)
    assert {k: cfg[k] for k in FIT_KEYS} == {k: params[k].default for k in FIT_KEYS}
