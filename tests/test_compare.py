"""compare / aggregate on toy components: layout, numbers equal to the runs, ranks, stability, CLI."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch
from toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

from genEval.commands.compare import run_compare
from genEval.compare import Comparison, aggregate, compare, derive_seeds
from genEval.perturb import SearchConfig
from genEval.stats import METRICS

MODELS = ("lin0", "lin1", "lin2")
SEARCH = SearchConfig(budget=5, step_size=0.05, update="sign", start_noise=0.1)
N_BOOT = 150


def toy_roles(n: int = 24):
    """8x8 grey images labelled by the oracle itself, so its start check passes and SA varies by model."""
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    oracle_model = LinearClassifier(64, 3, seed=7)
    with torch.no_grad():
        y = oracle_model(x).argmax(1).tolist()
    return ListDataset(x, y, ["a", "b", "c"]), SigmoidGenerator(), ModelOracle(oracle_model)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    data, gen, oracle = toy_roles()
    calls = {m: 0 for m in MODELS}

    def factory(seed: int, name: str):
        def build():
            calls[name] += 1
            return LinearClassifier(64, 3, seed=seed)

        return build

    comp = compare(
        {m: factory(i, m) for i, m in enumerate(MODELS)},
        data,
        gen,
        oracle,
        SEARCH,
        repetitions=2,
        seeds=[11, 12],
        out_dir=out,
        progress=False,
        n_boot=N_BOOT,
        batch_size=12,
        report=False,
    )
    return comp, out, calls


def results(out: Path, model: str, rep: int) -> dict:
    return json.loads((out / "runs" / model / f"rep{rep}" / "results.json").read_text())


def test_directory_layout_and_recorded_seeds(made):
    comp, out, calls = made
    assert calls == {m: 1 for m in MODELS}  # each factory builds its model once for all repetitions
    for m in MODELS:
        for r in (0, 1):
            d = out / "runs" / m / f"rep{r}"
            assert (d / "results.json").is_file() and (d / "samples.jsonl").is_file()
            assert not (d / "images").exists()  # save_images was not asked for
            res = results(out, m, r)
            assert res["seed"] == [11, 12][r]  # the same seed for every model within a repetition
            assert res["config"]["comparison"] == {
                "model": m,
                "repetition": r,
                "seed": [11, 12][r],
                "repetitions": 2,
                "models": list(MODELS),
            }
        assert (out / "models" / f"{m}.json").is_file()
    for f in ("leaderboard.csv", "leaderboard.md", "comparison.json"):
        assert (out / f).is_file()
    assert comp.settings["repetition_seeds"] == [11, 12] and comp.seeds == {m: [11, 12] for m in MODELS}
    assert comp.out_dir == str(out)


def test_leaderboard_numbers_equal_the_runs(made):
    comp, out, _ = made
    for row in comp.leaderboard:
        for m in METRICS:
            per = [results(out, row["model"], r)["scores"][m]["value"] for r in (0, 1)]
            assert row[m]["per_rep"] == per
            if None not in per:
                assert row[m]["value"] == pytest.approx(sum(per) / 2, abs=1e-9)
                assert row[m]["low"] <= row[m]["value"] + 1e-9 and row[m]["value"] - 1e-9 <= row[m]["high"]
        assert row["n"] == 24 and row["repetitions"] == 2


def test_single_repetition_uses_the_runs_own_intervals(made):
    _, out, _ = made
    one = aggregate({m: [out / "runs" / m / "rep0"] for m in MODELS}, n_boot=N_BOOT)
    for row in one.leaderboard:
        scores = results(out, row["model"], 0)["scores"]
        for m in METRICS:
            assert (row[m]["value"], row[m]["low"], row[m]["high"]) == (
                scores[m]["value"],
                scores[m]["low"],
                scores[m]["high"],
            )
    assert (
        one.stability["tau_reps_mean"] is None and "at least 2 repetitions" in one.stability["tau_reps_note"]
    )


def test_ranks_rank_diff_and_stability(made):
    comp, _, _ = made
    rows = comp.leaderboard
    fmr = [r["fmr"]["value"] for r in rows]
    assert fmr == sorted(fmr, reverse=True)  # sorted by FMR rank
    for r in rows:
        better_fmr = sum(o["fmr"]["value"] > r["fmr"]["value"] for o in rows)
        better_sa = sum(o["sa"]["value"] > r["sa"]["value"] for o in rows)
        assert (r["rank_fmr"], r["rank_sa"]) == (better_fmr + 1, better_sa + 1)
        assert r["rank_diff"] == r["rank_sa"] - r["rank_fmr"]
    s = comp.stability
    assert len(s["tau_reps"]) == 1 and s["tau_reps"][0]["reps"] == [0, 1]
    for t in [s["tau_reps_mean"], s["tau_reps_min"], s["tau_fmr_sa"]]:
        assert t is None or -1.0 <= t <= 1.0
    for f in s["flips"]:  # a flagged flip really changes order between repetitions
        a, b = comp.row(f["a"])["fmr"]["per_rep"], comp.row(f["b"])["fmr"]["per_rep"]
        assert any(a[r] > b[r] for r in f["a_higher"]) and any(a[r] < b[r] for r in f["b_higher"])
    assert s["stable"] == (not s["flips"])
    assert s["identical_repetitions"] is False  # start noise makes repetitions differ


def test_identical_repetitions_are_flagged(made, tmp_path):
    _, out, _ = made
    for i in (0, 1):
        shutil.copytree(out / "runs" / "lin0" / "rep0", tmp_path / f"copy{i}")
    same = aggregate({"lin0": [tmp_path / "copy0", tmp_path / "copy1"]}, n_boot=20)
    assert same.stability["identical_repetitions"] and same.stability["tau_reps_mean"] is None
    assert any("rank stability is trivially perfect" in w for w in same.warnings)


def test_pairwise_differences_are_paired_and_consistent(made):
    comp, _, _ = made
    assert len(comp.differences) == 3 * 5  # 3 pairs x (SA, VR, PA, FMR, chance-corrected FMR)
    for d in comp.differences:
        assert d["paired"] and d["n_sources"] == 24
        if d["value"] is not None and d["metric"] in ("sa", "pa", "fmr"):
            assert d["value"] == pytest.approx(
                comp.row(d["a"])[d["metric"]]["value"] - comp.row(d["b"])[d["metric"]]["value"], abs=1e-9
            )


def test_effective_robustness_block(made):
    comp, _, _ = made
    er = comp.effective_robustness
    assert er["space"] == "logit" and er["min_r2"] == 0.8 and er["n_baselines"] == 3
    assert er["baseline_models"] == list(MODELS) or sorted(er["baseline_models"]) == sorted(MODELS)
    for r in comp.leaderboard:
        assert (r["er"] is None) == (not er["trusted"])


def test_files_hold_numbers_and_round_trip(made):
    comp, out, _ = made
    with open(out / "leaderboard.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["model"] for r in rows] == comp.models
    for r, row in zip(rows, comp.leaderboard):
        assert float(r["sa"]) == pytest.approx(row["sa"]["value"]) and int(r["rank_fmr"]) == row["rank_fmr"]
    model = json.loads((out / "models" / "lin0.json").read_text())
    assert isinstance(model["sa"]["value"], float) and isinstance(model["rank_fmr"], int)
    assert {c["name"] for c in model["per_class"]} <= {"a", "b", "c"}
    assert Comparison.load(out).to_dict() == comp.to_dict()
    md = (out / "leaderboard.md").read_text()
    assert "| rank | model | FMR |" in md and "Kendall tau" in md and "logit" in md


def test_aggregate_from_existing_directories_gives_the_same_leaderboard(made, tmp_path):
    comp, out, _ = made
    again = aggregate([out / "runs"], n_boot=N_BOOT, out_dir=tmp_path, report=False)
    assert again.leaderboard == comp.leaderboard
    assert again.differences == comp.differences and again.stability == comp.stability
    assert (tmp_path / "leaderboard.csv").read_text() == (out / "leaderboard.csv").read_text()


def test_compare_and_aggregate_errors(made, tmp_path):
    comp, out, _ = made
    data, gen, oracle = toy_roles(6)
    clf = {"ok": LinearClassifier(64, 3)}
    with pytest.raises(ValueError, match=r"model names \['bad name'\] are not usable as directory names"):
        compare({"bad name": LinearClassifier(64, 3)}, data, gen, oracle, out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"got 1 seeds for 2 repetitions"):
        compare(clf, data, gen, oracle, repetitions=2, seeds=[1], out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"repetitions must be an integer >= 1, got 0"):
        compare(clf, data, gen, oracle, repetitions=0, out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"baselines \['nope'\] are not among the classifiers \(ok\)"):
        compare(clf, data, gen, oracle, baselines=["nope"], out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"compare sets seed itself"):
        compare(clf, data, gen, oracle, out_dir=tmp_path, seed=3)
    with pytest.raises(ValueError, match=r"baselines \['x'\] are not among the compared models"):
        aggregate([out / "runs"], baselines=["x"], n_boot=10)
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        aggregate([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no finished run \(results.json\) under"):
        aggregate([tmp_path / "empty"])
    with pytest.raises(ValueError, match=r"run directories given more than once"):
        aggregate([out / "runs" / "lin0" / "rep0", out / "runs" / "lin0" / "rep0"])
    shutil.copytree(out / "runs" / "lin0" / "rep0", tmp_path / "copy")
    with pytest.raises(ValueError, match=r"model 'lin0' has more than one run for repetition\(s\) \[0\]"):
        aggregate([out / "runs" / "lin0" / "rep0", tmp_path / "copy"])


def test_derive_seeds():
    assert derive_seeds(5, 3) == derive_seeds(5, 3) and len(set(derive_seeds(5, 3))) == 3
    assert all(0 <= s < 2**31 for s in derive_seeds(None, 4))


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="compare", overrides=overrides)


def test_compare_config_composes_with_the_three_digits_classifiers():
    from hydra.utils import get_method

    from genEval.commands import classifier_nodes

    cfg = _compose([])
    nodes = classifier_nodes(cfg, "classifiers")
    assert list(nodes) == ["digits_cnn", "digits_mlp", "digits_wide_cnn"]
    for node in nodes.values():
        assert callable(get_method(node._target_))
    assert cfg.repetitions == 3 and cfg.er_min_r2 == 0.8 and cfg.data.limit == 100 and cfg.runs is None
    assert cfg.generator._target_ and cfg.oracle._target_ and cfg.search.budget == 50
    assert cfg.search.start_noise == 0.05  # repetitions must differ (see conf/compare.yaml)


def test_cli_aggregates_runs_and_reports_user_errors(made, tmp_path, capsys):
    _, out, _ = made
    cfg = _compose([f"runs=[{out / 'runs'}]", f"out_dir={tmp_path / 'agg'}", f"n_boot={N_BOOT}"])
    assert run_compare(cfg) == str(tmp_path / "agg")
    printed = capsys.readouterr().out
    assert "genEval compare  3 models x 2 repetitions" in printed and "lin0" in printed
    assert (tmp_path / "agg" / "report.html").is_file()

    with pytest.raises(SystemExit) as exc:
        run_compare(_compose([f"runs=[{tmp_path / 'nowhere'}]", f"out_dir={tmp_path / 'x'}"]))
    assert exc.value.code == 2
    assert "geneval compare: error: run directory" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        run_compare(_compose(["classifiers={a: not_a_config}", f"out_dir={tmp_path / 'y'}"]))
    err = capsys.readouterr().err
    assert "unknown classifier config 'not_a_config' in classifiers; available:" in err and "digits_cnn" in err


def test_classifier_entries_accept_conf_classifier_names():
    from genEval.commands import classifier_nodes

    cfg = _compose(["classifiers={r20: cifar_resnet20, cnn: digits_cnn}"])
    nodes = classifier_nodes(cfg, "classifiers")
    assert list(nodes) == ["r20", "cnn"]
    assert nodes["r20"]._target_ == "genEval.classifiers.cifar_resnet" and nodes["r20"].depth == 20
    as_list = classifier_nodes(_compose(["classifiers=[cifar_resnet20,cifar_resnet32]"]), "classifiers")
    assert list(as_list) == ["cifar_resnet20", "cifar_resnet32"] and as_list["cifar_resnet32"].depth == 32
    assert nodes["r20"].checkpoint.endswith("weights/cifar10-resnet/resnet20-12fca82f.th")  # ${assets}
