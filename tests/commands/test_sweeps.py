"""Self-merging sweeps (issue 20): a multirun over shards merges itself into ``<sweep dir>/merged`` (the Hydra callback
of conf/config.yaml), and export, report, compare, fit-mask and audit take the sweep directory for that merged run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from genEval import evaluate
from genEval.commands import CONF_DIR
from genEval.commands.compare import run_compare
from genEval.commands.mask import run_fit_mask
from genEval.commands.merge import MergeShards
from genEval.commands.report import run_report
from genEval.commands.snapshot import run_export
from genEval.runs import Shard
from genEval.runs.recording import RunOutput
from genEval.runs.shards import merge_sweep, resolve_run_dir
from genEval.scores.run_scores import Scoring
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

SEARCH = SearchConfig(budget=8, step_size=0.3)


def _run(out: Path, shard: Shard | None = None, seed: int = 5) -> Path:
    evaluate(
        LinearClassifier(seed=0),
        toy_data(60),
        SigmoidGenerator(),
        ModelOracle(LinearClassifier(seed=1)),
        SEARCH,
        seed=seed,
        shard=shard or Shard(),
        output=RunOutput(out, save_latents=True, save_images=True, progress=False),
        scoring=Scoring(n_boot=10),
    )
    return out


def _sweep(root: Path, seed: int = 5, jobs: tuple[int, ...] = (0, 1)) -> Path:
    """What `geneval -m shard.count=2 'shard.index=range(2)' hydra.sweep.dir=<root>` leaves: <job>/shard-I-of-2."""
    for i in jobs:
        _run(root / str(i + 2 * (seed - 5)) / f"shard-{i}-of-2", Shard(i, 2), seed)
    return root


def _end_of_multirun(sweep: Path) -> None:
    MergeShards().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))


def _cfg(name: str, *overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def _scores(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())["scores"]


@pytest.fixture(scope="module")
def merged_sweep(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sweeps")
    sweep = _sweep(root / "sweep")
    _end_of_multirun(sweep)
    return sweep, _run(root / "single")


def test_the_end_of_a_multirun_merges_its_shards_into_the_sweep(merged_sweep, capsys):
    sweep, single = merged_sweep
    assert (sweep / "merged" / "results.json").is_file()
    assert _scores(sweep / "merged") == _scores(single)  # the unsharded evaluation's scores
    assert (sweep / "merged" / "images").is_dir() and (sweep / "merged" / "latents").is_dir()
    again = sweep.parent / "again"
    shutil.copytree(sweep, again)
    shutil.rmtree(again / "merged")
    _end_of_multirun(again)
    out = capsys.readouterr().out
    assert "\n  SA " in out and f"merged the shards of {again} into {again / 'merged'}" in out


def test_commands_take_the_sweep_directory_for_its_merged_run(merged_sweep, tmp_path, capsys):
    sweep, _ = merged_sweep
    merged = sweep / "merged"
    assert resolve_run_dir(sweep) == merged and resolve_run_dir(merged) == merged
    assert resolve_run_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere"  # the caller's own error follows
    assert run_export(_cfg("export", f"run={sweep}", f"out={tmp_path}/snap")) == f"{tmp_path}/snap"
    assert json.loads((tmp_path / "snap" / "manifest.json").read_text())["sources"][0]["run_dir"] == str(merged)
    assert run_report(_cfg("report", f"input={sweep}", f"out={tmp_path}/r.html")) == f"{tmp_path}/r.html"
    assert (
        run_fit_mask(_cfg("fit_mask", f"run={sweep}", f"out={tmp_path}/m.safetensors")) == f"{tmp_path}/m.safetensors"
    )
    out_dir = run_compare(_cfg("compare", f"runs=[{sweep}]", f"out_dir={tmp_path}/cmp", "report=false"))
    board = json.loads((Path(out_dir) / "comparison.json").read_text())
    assert board["runs"] == {"linear0": [str(merged)]}  # the merged run, not the shards as well
    capsys.readouterr()


def test_a_sweep_without_merged_run_or_with_several_says_what_to_do(tmp_path):
    sweep = _sweep(tmp_path / "sweep")
    with pytest.raises(FileNotFoundError, match=r"holds 2 shard run\(s\) but no merged run; merge them first: "):
        resolve_run_dir(sweep)
    _sweep(sweep, seed=6)  # a second evaluation (another seed) in the same sweep directory
    merged = merge_sweep(sweep)
    assert [out.name for out, _ in merged] == ["merged-0", "merged-1"]
    assert [r.seed for _, r in merged] == [5, 6]
    with pytest.raises(ValueError, match=r"is a sweep of 2 evaluations, merged into merged-0, merged-1; pass one"):
        resolve_run_dir(sweep)


def test_a_multirun_without_shards_is_left_alone_and_missing_shards_exit_2(tmp_path, capsys):
    plain = tmp_path / "plain"
    _run(plain / "0")
    _end_of_multirun(plain)
    assert sorted(p.name for p in plain.iterdir()) == ["0"]
    broken = _sweep(tmp_path / "broken", jobs=(0,))  # shard 1 of 2 failed
    with pytest.raises(SystemExit) as info:
        _end_of_multirun(broken)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"geneval: error: the shards under {broken} were not merged: shard(s) [1] of 2 are missing")
    assert err.strip().endswith(f"geneval merge runs={broken} out={broken / 'merged'}")
    assert not (broken / "merged").exists()


def test_geneval_multirun_over_shards_ends_with_the_merged_run(tmp_path, digits_cache):
    """The interface line: `geneval -m shard.count=2 'shard.index=range(2)' seed=5 hydra.sweep.dir=<dir>`."""
    sweep = tmp_path / "sweep"
    r = subprocess.run(
        [sys.executable, "-m", "genEval.cli", "-m", "shard.count=2", "shard.index=range(2)", "seed=5"]
        + ["data.limit=20", "search.budget=2", "progress=false", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "GENEVAL_CACHE": str(digits_cache)},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((sweep / "merged" / "results.json").read_text())
    assert res["scores"]["sa"]["n"] == 20 and res["seed"] == 5
    assert sorted(Path(p).name for p in res["config"]["merged_from"]) == ["shard-0-of-2", "shard-1-of-2"]
    assert f"merged the shards of {sweep} into {sweep / 'merged'}" in r.stdout
