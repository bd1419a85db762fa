"""Issue 43's interface lines, as written, at small sizes (the digits zoo trains eight models on first use: slow)."""

from __future__ import annotations

import json

import pytest

from tests.support.assets import asset
from tests.support.cli import geneval

SMALL = ["data.limit=10", "repetitions=1", "search.budget=1", "seed=0", "n_boot=50"]


@pytest.mark.slow
def test_multi_id_shift_and_ablation_lines(digits_cache, tmp_path):
    env = {"GENEVAL_CACHE": str(digits_cache)}
    r = geneval("compare", "id_data=[digits,digits_train]", "er.scale=probit", *SMALL, f"out_dir={tmp_path / 'a'}",
                env_extra=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((tmp_path / "a" / "comparison.json").read_text())
    assert d["multi_id"]["id_sets"] == ["digits", "digits_train"] and d["multi_id"]["space"] == "probit"
    assert d["effective_robustness"]["space"] == "probit" and "multi-ID effective robustness over 2" in r.stdout
    assert (tmp_path / "a" / "id_sets" / "erm_s0.json").is_file() and 'id="multi-id"' in (
        tmp_path / "a" / "report.html"
    ).read_text()
    r = geneval("compare", "shift=corruptions", "corruptions.names=[contrast,gaussian_noise]", *SMALL,
                f"out_dir={tmp_path / 'b'}", env_extra=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((tmp_path / "b" / "comparison.json").read_text())
    assert d["fixed_shift"]["corruptions"] == ["contrast", "gaussian_noise"] and len(d["fixed_shift"]["rows"]) == 8
    assert "## Fixed shift beside FMR_v" in (tmp_path / "b" / "leaderboard.md").read_text()
    r = geneval("compare", "ablate={search.budget:[1,2]}", *SMALL[:2], "seed=0", "n_boot=50",
                f"out_dir={tmp_path / 'c'}", env_extra=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert d["kind"] == "ablation" and d["key"] == "search.budget" and d["generators"] == ["budget-1", "budget-2"]
    assert (tmp_path / "c" / "settings" / "budget-2" / "report.html").is_file()
    r = geneval("compare", "id_data=[digits,digits_train]", "baselines=[erm_s0,erm_s1]", *SMALL,
                f"out_dir={tmp_path / 'd'}", env_extra=env)  # fmt: skip
    assert r.returncode == 2 and "needs at least 4 baselines, but 2 are named" in r.stderr


@pytest.mark.slow
def test_cifar_fixed_shift_line(tmp_path):
    asset("cifar10/test-jpg")
    r = geneval("compare", "data=cifar10_jpg", "shift=corruptions", "corruptions.severities=[3]", *SMALL,
                f"out_dir={tmp_path}")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((tmp_path / "comparison.json").read_text())
    assert [row["model"] for row in d["fixed_shift"]["rows"]] == [row["model"] for row in d["leaderboard"]]
    assert d["fixed_shift"]["severities"] == [3] and d["fixed_shift"]["tau"]["value"] is not None
