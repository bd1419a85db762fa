"""The TF32 study (``python -m benchmarks.cifar_recipe_studies --only tf32``, issue 34): how it counts differing
decisions and the PA difference, that it refuses a CPU, and (slow, real assets) that its CPU smoke run finds no
difference (both settings are strict fp32 on a CPU). The study's numbers need a GPU and go to benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

from genEval.scores.outcomes import SampleRecord
from tests.support.assets import ROOT

ASSETS = ROOT.parent / "shared" / "assets"


@pytest.fixture(scope="module")
def studies():
    """The CIFAR recipe studies, :mod:`benchmarks.cifar_recipe_studies`."""
    return importlib.import_module("benchmarks.cifar_recipe_studies")


def record(i: int, validated: bool, correct: bool, rejected_at: int = -1) -> SampleRecord:
    label = i % 10
    return SampleRecord.from_dict({
        "source_id": f"s{i}", "index": i, "label": label, "clean_pred": label, "recon_pred": label, "start_ok": True,
        "validated": validated, "accepted_steps": 3 if validated else 0, "rejected_at": rejected_at,
        "first_fooled": -1 if correct else 2, "final_pred": label if correct else (label + 1) % 10,
        "oracle_clean_pred": label, "oracle_start_pred": label, "oracle_score": 0.9, "latent_dist": 1.0,
        "image_dist": 1.0, "image_linf": 0.1,
    })  # fmt: skip


def run(records):
    return SimpleNamespace(samples=records)


def test_differing_decisions_and_the_pa_difference_of_two_runs(studies):
    """Run a: 8 of 10 validated, 4 of them still correct (PA 50). Run b: source 4 stays correct (PA 62.5) and
    source 9, not validated in either, is rejected at another step: one source differs in validated-or-fooled,
    two in some step decision."""
    a = [record(i, validated=i < 8, correct=i < 4) for i in range(10)]
    b = [record(i, validated=i < 8, correct=i < 5, rejected_at=7 if i == 9 else -1) for i in range(10)]
    res = studies.compare_runs(run(a), run(b), ("tf32", "strict-fp32"), n_boot=200)
    assert (res["n"], res["validated_or_fooled"], res["any_decision"]) == (10, 1, 2)
    pa = res["pa_difference"]
    assert pa["value"] == pytest.approx(50 - 62.5) and pa["paired"]
    assert pa["low"] <= pa["value"] <= pa["high"]
    same = studies.compare_runs(run(a), run(list(a)), ("x", "y"), n_boot=50)
    assert (same["validated_or_fooled"], same["any_decision"], same["pa_difference"]["value"]) == (0, 0, 0)
    with pytest.raises(ValueError, match="did not search the same sources"):
        studies.compare_runs(run(a), run(b[:9]), ("tf32", "strict-fp32"))


def test_the_study_refuses_a_cpu_without_smoke(studies, tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA device: TF32 exists only on NVIDIA GPUs.*--smoke"):
        studies.study_tf32(tmp_path, 10, 0, "cpu", smoke=False)


@pytest.mark.slow
@pytest.mark.weights
@pytest.mark.skipif(not (ASSETS / "weights" / "taef2").is_dir(), reason="needs ../shared/assets")
def test_the_cpu_smoke_runs_both_settings_and_finds_no_difference(studies, tmp_path):
    res = studies.study_tf32(tmp_path, 10, 0, "cpu", smoke=True)
    assert res["n"] == 10 and res["validated_or_fooled"] == res["any_decision"] == 0
    assert res["pa_difference"]["value"] in (0.0, None)
    assert set(res["runs"]) == {"tf32", "strict-fp32"}
