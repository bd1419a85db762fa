"""The sparse style mask (paper Sec. 3.2.1, App. I): known-answer recovery, storage, errors, end to end."""

from __future__ import annotations

import inspect
import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from genEval import evaluate
from genEval.masks.fit import _split_groups
from genEval.masks.regularisation import _l1_penalty_kwargs
from genEval.runs import RunDir, read_results, read_samples
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.perturb import SearchConfig
from genEval.style_mask import (
    MIN_SAMPLES,
    AutoMask,
    SparseMask,
    StyleMask,
    fit_mask_from_run,
    fit_style_mask,
    plot_style_mask,
    split_for_auto,
)
from tests.support.assets import ROOT
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

SHAPE = (4, 4, 4)
N = 200
TOY_SEARCH = SearchConfig(budget=8, step_size=0.3)


@pytest.fixture(scope="module")
def synthetic():
    """200 samples; 'final' equals 'start' except 5 chosen dims shifted by +1.5 (the style dims)."""
    g = torch.Generator().manual_seed(0)
    start = torch.randn(N, *SHAPE, generator=g)
    final = start.clone()
    dims = torch.randperm(int(np.prod(SHAPE)), generator=g)[:5].sort().values
    final.view(N, -1)[:, dims] += 1.5
    truth = torch.zeros(int(np.prod(SHAPE)), dtype=torch.bool)
    truth[dims] = True
    return start, final, truth.view(SHAPE)


@pytest.fixture(scope="module")
def fitted(synthetic):
    start, final, _ = synthetic
    return fit_style_mask(start, final, generator="taef2", dataset="toyset", C=0.05, seed=3)


# ---- known answers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("solver", ["saga", "liblinear"])
def test_recovers_exactly_the_shifted_dims(synthetic, solver):
    start, final, truth = synthetic
    m = fit_style_mask(start, final, generator="taef2", dataset="toyset", C=0.05, solver=solver)
    assert m.mask.dtype == torch.bool and tuple(m.mask.shape) == SHAPE
    assert torch.equal(m.mask, truth)
    assert (m.coef[truth] > 0).all() and (m.coef[~truth] == 0).all()  # final (label 1) is shifted up
    assert m.sparsity == pytest.approx(100 * 59 / 64)
    assert m.heldout_accuracy > 85 and m.train_accuracy > 85  # Bayes accuracy here is about 95%
    assert (m.n_samples, m.n_train, m.n_test) == (N, 160, 40)
    assert m.solver == solver and m.C == 0.05 and m.search_path == () and m.converged


def test_fit_does_not_depend_on_the_scale_of_each_latent_dim(synthetic, fitted):
    """Standardisation: style dims a thousand times smaller than the rest are still the ones found.

    Unstandardised, L1 would charge the small dims ~1e5 times more per unit of evidence than the large noise
    dims, so it would keep a noise dim (or nothing) instead; standardised, the fit is the one on unit scales.
    """
    start, final, truth = synthetic
    scale = torch.where(truth, 1e-3, 1e2)  # style dims tiny, every other dim large
    m = fit_style_mask(start * scale, final * scale, generator="taef2", dataset="toyset", C=0.05, seed=3)
    assert torch.equal(m.mask, truth)
    assert torch.allclose(m.coef, fitted.coef, atol=1e-3)  # the same standardised weights as unscaled
    assert m.heldout_accuracy == fitted.heldout_accuracy


def test_target_sparsity_search_recovers_the_subset_and_records_the_path(synthetic):
    start, final, truth = synthetic
    m = fit_style_mask(start, final, generator="g", dataset="d", C=None, target_sparsity=0.92)
    assert torch.equal(m.mask, truth)
    assert m.sparsity >= 92 and len(m.search_path) > 13  # the grid plus bisection steps
    assert any(p["C"] == m.C and p["n_selected"] == 5 for p in m.search_path)
    # the chosen C is the least regularised one tried that is sparse enough and keeps a dim
    passing = [p["C"] for p in m.search_path if p["sparsity"] >= 92 and p["n_selected"] >= 1]
    assert m.C == max(passing)


def test_target_score_search_picks_the_sparsest_fit_reaching_the_score(synthetic):
    start, final, _ = synthetic
    m = fit_style_mask(start, final, generator="g", dataset="d", C=None, target_score=85)
    assert m.heldout_accuracy >= 85
    passing = [p for p in m.search_path if p["heldout_accuracy"] >= 85]
    assert m.C == min(p["C"] for p in passing)
    assert m.n_selected <= min(p["n_selected"] for p in passing if p["C"] >= m.C)


def test_fit_emits_no_warnings(synthetic):
    start, final, _ = synthetic
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for solver in ("saga", "liblinear"):
            fit_style_mask(start, final, generator="g", dataset="d", C=0.05, solver=solver)
        fit_style_mask(start, final, generator="g", dataset="d", C=None, target_sparsity=0.9)


def test_sklearn_version_fence_spells_pure_l1_for_each_version():
    assert _l1_penalty_kwargs("1.9.1") == {"l1_ratio": 1.0}
    assert _l1_penalty_kwargs("1.8.0") == {"l1_ratio": 1.0}
    assert _l1_penalty_kwargs("1.7.2") == {"penalty": "l1"}


def test_only_changed_and_validated_select_the_samples(synthetic):
    start, final, truth = synthetic
    extra = torch.randn(50, *SHAPE, generator=torch.Generator().manual_seed(9))
    s, f = torch.cat([start, extra]), torch.cat([final, extra])  # 50 samples the search never moved
    assert fit_style_mask(s, f, generator="g", dataset="d", C=0.05).n_samples == N
    assert fit_style_mask(s, f, generator="g", dataset="d", C=0.05, only_changed=False).n_samples == N + 50
    validated = torch.ones(N + 50, dtype=torch.bool)
    validated[:30] = False
    assert fit_style_mask(s, f, generator="g", dataset="d", C=0.05, validated=validated).n_samples == N - 30


def test_split_keeps_each_source_sample_on_one_side():
    groups = np.repeat(np.arange(50), 3)  # three latents per source image
    tr, te = _split_groups(groups, 0.2, seed=1)
    assert set(groups[tr]).isdisjoint(groups[te]) and len(set(groups[te])) == 10
    assert sorted(np.concatenate([tr, te]).tolist()) == list(range(150))
    assert np.array_equal(_split_groups(groups, 0.2, seed=1)[1], te)


def test_split_needs_two_source_images():
    with pytest.raises(ValueError, match="all 12 samples come from one source image.*raise data.limit"):
        _split_groups(np.array(["img0"] * 12), 0.2, seed=0)
    tr, te = _split_groups(np.array(["a", "b"] * 6), 0.01, seed=0)  # one group held out, one kept
    assert len(tr) == len(te) == 6


def test_source_ids_group_the_split(synthetic):
    start, final, _ = synthetic
    ids = [f"img{i // 2}" for i in range(N)]  # pairs of samples share a source image
    m = fit_style_mask(start, final, generator="g", dataset="d", C=0.05, source_ids=ids)
    assert m.n_test == 40 and m.n_train == 160  # 20 of 100 source images, two samples each


# ---- storage -----------------------------------------------------------------------------------------------
def test_save_load_round_trip_is_identical(fitted, tmp_path):
    p = fitted.save(tmp_path / "sub" / "mask.safetensors")
    assert [x.name for x in p.parent.iterdir()] == ["mask.safetensors"]  # no temp file left behind
    back = StyleMask.load(p)
    assert torch.equal(back.mask, fitted.mask) and torch.equal(back.coef, fitted.coef)
    assert back.metadata() == fitted.metadata() and back.sha256 == fitted.sha256
    assert back.latent_shape == SHAPE and back.generator == "taef2" and back.dataset == "toyset"
    from safetensors import safe_open

    with safe_open(str(p), framework="pt") as fh:
        assert fh.get_tensor("mask").dtype == torch.uint8 and fh.get_tensor("coef").dtype == torch.float32
        meta = fh.metadata()
    assert meta["format"] == "geneval-style-mask"
    assert json.loads(meta["heldout_accuracy"]) == fitted.heldout_accuracy
    t = back.as_tensor()
    assert t.dtype == torch.float32 and set(t.unique().tolist()) <= {0.0, 1.0}
    assert t.sum() == fitted.n_selected
    assert "selected=5/64" in repr(back) and "taef2" in repr(back)


def _rewrite(path: Path, *, meta_update=None, flip_mask=False) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as fh:
        meta = dict(fh.metadata())
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    meta.update(meta_update or {})
    if flip_mask:
        tensors["mask"].view(-1)[0] ^= 1
    save_file(tensors, str(path), metadata=meta)


@pytest.mark.parametrize(
    "tamper",
    [
        {"meta_update": {"heldout_accuracy": "99.0"}},
        {"flip_mask": True},
        {"meta_update": {"generator": json.dumps("vqgan")}},
    ],
)
def test_tampered_file_is_detected(fitted, tmp_path, tamper):
    p = fitted.save(tmp_path / "mask.safetensors")
    _rewrite(p, **tamper)
    with pytest.raises(ValueError, match="hash mismatch.*modified or corrupted"):
        StyleMask.load(p)


def test_load_errors_teach(tmp_path):
    with pytest.raises(FileNotFoundError, match="no style mask file.*geneval fit-mask"):
        StyleMask.load(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        StyleMask.load(junk)
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(other))
    with pytest.raises(ValueError, match="is not a genEval style mask"):
        StyleMask.load(other)


def test_check_compatible(fitted, caplog):
    fitted.check_compatible("taef2", (4, 4, 4))
    fitted.check_compatible("taef2", torch.Size([4, 4, 4]))
    with pytest.raises(
        ValueError,
        match=r"mask was fitted for generator 'taef2' with latent shape "
        r"\(4, 4, 4\), but this run uses generator 'vqgan' with latent "
        r"shape \(4, 4, 4\).*Refit with geneval fit-mask",
    ):
        fitted.check_compatible("vqgan", (4, 4, 4))
    with pytest.raises(
        ValueError,
        match=r"latent shape \(4, 4, 4\), but this run uses generator 'taef2' "
        r"with latent shape \(32, 8, 8\)",
    ):
        fitted.check_compatible("taef2", (32, 8, 8))
    with caplog.at_level(logging.WARNING, logger="genEval.masks"):
        fitted.check_compatible("taef2", (4, 4, 4), dataset="cifar10")
    assert "fitted on data set 'toyset' but this run uses 'cifar10'" in caplog.text


def test_plot_is_a_png(fitted, tmp_path):
    from PIL import Image

    p = plot_style_mask(fitted, tmp_path / "mask.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(p) as img:
        img.verify()
    assert [x.name for x in tmp_path.iterdir()] == ["mask.png"]


# ---- bad input ---------------------------------------------------------------------------------------------
def test_bad_input_errors_teach(synthetic):
    start, final, _ = synthetic
    kw = {"generator": "g", "dataset": "d"}
    with pytest.raises(
        ValueError,
        match=r"start latents have shape \(200, 4, 4, 4\) but final latents "
        r"\(200, 64\)",
    ):
        fit_style_mask(start, final.view(N, -1), **kw)
    with pytest.raises(ValueError, match=f"at least {MIN_SAMPLES} changed samples are needed, got 6 .*data.limit"):
        fit_style_mask(start[:6], final[:6], **kw)
    with pytest.raises(ValueError, match="no latent changed.*search.budget=0.*rejected every first step"):
        fit_style_mask(start, start.clone(), **kw)
    with pytest.raises(ValueError, match="unknown solver 'lbfgs'; choose one of saga, liblinear"):
        fit_style_mask(start, final, solver="lbfgs", **kw)
    with pytest.raises(ValueError, match="set C=None .* to search C"):
        fit_style_mask(start, final, C=1.0, target_sparsity=0.98, **kw)
    with pytest.raises(ValueError, match="needs exactly one target"):
        fit_style_mask(start, final, C=None, **kw)
    with pytest.raises(ValueError, match=r"target_sparsity is a fraction .* got 98"):
        fit_style_mask(start, final, C=None, target_sparsity=98, **kw)
    with pytest.raises(ValueError, match=r"target_score is a held-out accuracy in percent .* got 0.78"):
        fit_style_mask(start, final, C=None, target_score=0.78, **kw)
    with pytest.raises(ValueError, match="C must be a positive finite number"):
        fit_style_mask(start, final, C=0, **kw)
    with pytest.raises(ValueError, match="every weight is zero: no style dims selected. .*Raise C"):
        fit_style_mask(start, final, C=1e-4, **kw)
    with pytest.raises(ValueError, match="reaches target_sparsity=0.99 .*64 dims, so at most 0 may stay"):
        fit_style_mask(start, final, C=None, target_sparsity=0.99, **kw)
    with pytest.raises(ValueError, match=r"reaches target_score=99.9% .*the best was .*Lower target_score"):
        fit_style_mask(start, final, C=None, target_score=99.9, **kw)
    with pytest.raises(ValueError, match="test_fraction must lie in"):
        fit_style_mask(start, final, test_fraction=1.0, **kw)
    with pytest.raises(ValueError, match="NaN or inf"):
        fit_style_mask(start, final * float("nan"), **kw)


# ---- from a run directory, and back into the loop ----------------------------------------------------------
@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """A finished run of the toy components with save_latents=True (the oracle is the classifier itself)."""
    run_dir = tmp_path_factory.mktemp("run")
    clf = LinearClassifier(seed=0)
    result = evaluate(
        clf,
        toy_data(120),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        output=RunOutput(run_dir, save_latents=True, progress=False),
        scoring=Scoring(n_boot=20),
    )
    assert result.scores.n_validated >= MIN_SAMPLES
    return run_dir, result


def test_fit_mask_from_run_and_masked_search_leaves_unselected_dims_untouched(toy_run, tmp_path):
    run_dir, result = toy_run
    m = fit_mask_from_run(run_dir, C=None, target_sparsity=0.5)
    assert m.generator == "sigmoid" and m.dataset == "toy" and m.latent_shape == (3, 2, 2)
    assert m.n_samples == result.scores.n_validated and m.source == str(run_dir)
    assert 1 <= m.n_selected <= 6
    m.check_compatible(result.components["generator"], (3, 2, 2))

    clf = LinearClassifier(seed=0)
    masked = evaluate(
        clf,
        toy_data(120),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        mask=m.as_tensor(),
        output=RunOutput(tmp_path / "masked", save_latents=True, progress=False),
        scoring=Scoring(n_boot=20),
    )
    lat = RunDir(tmp_path / "masked").tensors("latents")
    moved = (lat["final"] - lat["start"]).abs()
    assert masked.scores.n_validated > 0
    assert moved[:, ~m.mask].max() == 0  # the search never touched a non-style dim
    assert moved[lat["validated"]][:, m.mask].max() > 0  # but did move the style dims


def test_fit_mask_from_run_errors_teach(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fit_mask_from_run(tmp_path / "nowhere")
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "samples.partial.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="no results.json .*interrupted.*not a complete run"):
        fit_mask_from_run(tmp_path / "unfinished")
    clf = LinearClassifier(seed=0)
    evaluate(
        clf,
        toy_data(12),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        output=RunOutput(tmp_path / "nolat", progress=False),
        scoring=Scoring(n_boot=10),
    )
    with pytest.raises(FileNotFoundError, match="has no latents.*save_latents=true"):
        fit_mask_from_run(tmp_path / "nolat")
    few = evaluate(
        clf,
        toy_data(12),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        output=RunOutput(tmp_path / "few", save_latents=True, progress=False),
        scoring=Scoring(n_boot=10),
    )
    assert 0 < few.scores.n_validated < MIN_SAMPLES
    with pytest.raises(
        ValueError, match=f"at least {MIN_SAMPLES} changed samples are needed, got {few.scores.n_validated} \\(of 12"
    ):
        fit_mask_from_run(tmp_path / "few")
    evaluate(
        clf,
        toy_data(12),
        SigmoidGenerator(),
        ModelOracle(clf),
        SearchConfig(budget=0),
        seed=0,
        output=RunOutput(tmp_path / "budget0", save_latents=True, progress=False),
        scoring=Scoring(n_boot=10),
    )
    with pytest.raises(ValueError, match="no latent changed"):
        fit_mask_from_run(tmp_path / "budget0")


# ---- the mask group end to end: mask=sparse and mask=auto through genEval.evaluate ------------------------
def _moved(run_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    lat = RunDir(run_dir).tensors("latents")
    return (lat["final"] - lat["start"]).abs(), lat["validated"]


def test_mask_sparse_end_to_end_through_evaluate(toy_run, tmp_path):
    """mask=sparse: the stored mask is loaded, checked against the run's generator, recorded, and obeyed."""
    run_dir, _ = toy_run
    path = fit_mask_from_run(run_dir, C=None, target_sparsity=0.5).save(tmp_path / "mask.safetensors")
    m = StyleMask.load(path)
    clf = LinearClassifier(seed=0)
    result = evaluate(
        clf,
        toy_data(120),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        mask=SparseMask(str(path)),
        output=RunOutput(tmp_path / "run", save_latents=True, progress=False),
        scoring=Scoring(n_boot=20),
    )
    assert result.components["mask"] == f"{path}#{m.sha256[:16]}"
    assert read_results(tmp_path / "run").components["mask"] == result.components["mask"]
    moved, validated = _moved(tmp_path / "run")
    assert result.scores.n_validated > 0 and moved[:, ~m.mask].max() == 0 and moved[validated][:, m.mask].max() > 0

    class OtherGenerator(SigmoidGenerator):
        name = "other"

    with pytest.raises(ValueError, match="fitted for generator 'sigmoid' .* uses generator 'other'"):
        evaluate(
            clf,
            toy_data(12),
            OtherGenerator(),
            ModelOracle(clf),
            TOY_SEARCH,
            seed=0,
            mask=SparseMask(str(path)),
            output=RunOutput(progress=False),
            scoring=Scoring(n_boot=10),
        )


def test_mask_auto_end_to_end_through_evaluate(tmp_path):
    """mask=auto: a dense pass over the fit part fits the mask, and only the other samples are scored with it."""
    clf = LinearClassifier(seed=0)
    auto = AutoMask(fit_fraction=0.5, fit_budget=6, C=None, target_sparsity=0.5)
    result = evaluate(
        clf,
        toy_data(120),
        SigmoidGenerator(),
        ModelOracle(clf),
        TOY_SEARCH,
        seed=0,
        mask=auto,
        output=RunOutput(tmp_path, save_latents=True, progress=False),
        scoring=Scoring(n_boot=20),
    )
    m = StyleMask.load(tmp_path / "style_mask.safetensors")
    assert (tmp_path / "style_mask.png").read_bytes()[:4] == b"\x89PNG"
    assert m.generator == "sigmoid" and 1 <= m.n_selected <= 6 and m.sparsity >= 50
    assert result.components["mask"] == f"auto:{m.sha256[:16]}"
    fit_ids = {r.source_id for r in read_samples(tmp_path / "mask_fit")}
    scored_ids = {r.source_id for r in read_samples(tmp_path)}
    assert len(fit_ids) == len(scored_ids) == 60 == result.scores.n  # half fits, half is scored
    assert not fit_ids & scored_ids and len(fit_ids | scored_ids) == 120  # no scored image chose its own mask
    assert m.n_samples <= 60 and read_results(tmp_path / "mask_fit").config.budget == 6
    moved, validated = _moved(tmp_path)
    assert result.scores.n_validated > 0 and moved[:, ~m.mask].max() == 0 and moved[validated][:, m.mask].max() > 0
    dense, _ = _moved(tmp_path / "mask_fit")
    assert dense[:, ~m.mask].max() > 0  # the fit pass was not masked


# ---- mask=auto split and configs ---------------------------------------------------------------------------
def test_split_for_auto_is_deterministic_disjoint_and_covers():
    fit, ev = split_for_auto(100, 0.2, seed=5)
    assert len(fit) == 20 and len(ev) == 80 and sorted(fit + ev) == list(range(100))
    assert split_for_auto(100, 0.2, seed=5) == (fit, ev) and split_for_auto(100, 0.2, seed=6)[0] != fit
    assert split_for_auto(3, 0.01, seed=0)[0] != [] and split_for_auto(3, 0.99, seed=0)[1] != []
    labels = [0] * 50 + [1] * 30 + [2] * 20
    fit_s, ev_s = split_for_auto(100, 0.2, seed=5, labels=labels)
    assert [sum(labels[i] == c for i in fit_s) for c in range(3)] == [10, 6, 4]
    assert sorted(fit_s + ev_s) == list(range(100))
    with pytest.raises(ValueError, match="at least 2 samples"):
        split_for_auto(1, 0.2, seed=0)
    with pytest.raises(ValueError, match=r"mask.fit_fraction must lie in \(0, 1\)"):
        split_for_auto(10, 1.5, seed=0)
    with pytest.raises(ValueError, match="labels has 3 entries but n=10"):
        split_for_auto(10, 0.2, seed=0, labels=[0, 1, 2])


def test_mask_configs_instantiate_the_mask_settings():
    from hydra.utils import instantiate

    from genEval.style_mask import AutoMask, NoMask, SparseMask

    cfgs = {name: OmegaConf.load(ROOT / "conf" / "mask" / f"{name}.yaml") for name in ("none", "sparse", "auto")}
    assert isinstance(instantiate(cfgs["none"]), NoMask)
    assert OmegaConf.is_missing(cfgs["sparse"], "path")
    assert instantiate(cfgs["sparse"], path="m.safetensors") == SparseMask("m.safetensors")
    auto = instantiate(cfgs["auto"])
    assert isinstance(auto, AutoMask) and auto.fit_fraction == 0.2 and auto.fit_budget is None
    params = inspect.signature(fit_style_mask).parameters
    fit_keys = auto.fit_kwargs()
    assert set(fit_keys) <= set(params)
    assert all(params[k].default == v for k, v in fit_keys.items())  # config defaults = library defaults
    from genEval.commands import build

    cfgs["auto"].fit_fraction = 1.5
    with pytest.raises(ValueError, match=r"while building mask: mask.fit_fraction must lie in \(0, 1\)"):
        build(cfgs["auto"], "mask")


def _weak_shift(n: int, shift: float, seed: int = 0):
    """Latents whose final differs from the start by ``shift`` in three dims: a small run's faint signal."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(n, 4, 8, 8, generator=g)
    final = start + 0.001 * torch.randn(n, 4, 8, 8, generator=g)
    final[:, 0, 0, :3] += shift
    return start, final


def test_auto_C_is_C1_when_that_selects_dims(caplog):
    start, final = _weak_shift(30, 0.6)
    with caplog.at_level("WARNING", logger="genEval.masks"):
        auto = fit_style_mask(start, final, generator="g", dataset="d", solver="liblinear")  # C="auto", the default
    one = fit_style_mask(start, final, generator="g", dataset="d", solver="liblinear", C=1.0)
    assert auto.C == 1.0 and torch.equal(auto.mask, one.mask) and auto.n_selected > 0
    assert [p["C"] for p in auto.search_path] == [1.0] and "selects no latent dim" not in caplog.text


def test_auto_C_searches_when_C1_selects_nothing(caplog):
    """Issue 20: a 60-sample run whose C=1 fit keeps no dim gets the least regularised C with >= 98% zeros."""
    start, final = _weak_shift(60, 0.01)
    kw = {"generator": "g", "dataset": "d"}  # saga, the default
    with pytest.raises(ValueError, match="every weight is zero"):
        fit_style_mask(start, final, C=1.0, **kw)  # an explicit C=1 still means C=1
    with caplog.at_level("WARNING", logger="genEval.masks"):
        m = fit_style_mask(start, final, **kw)
    assert "C=1 selects no latent dim on 48 training samples" in caplog.text
    assert m.C > 1.0 and 1 <= m.n_selected <= int(0.02 * 256) and m.sparsity >= 98.0
    tried = {p["C"]: p["n_selected"] for p in m.search_path}
    assert tried[1.0] == 0 and tried[m.C] == m.n_selected
    assert not any(p["n_selected"] >= 1 and p["sparsity"] >= 98.0 and p["C"] > m.C for p in m.search_path)
    with pytest.raises(ValueError, match="C=auto was given together with a target"):
        fit_style_mask(start, final, C="auto", target_sparsity=0.9, **kw)
