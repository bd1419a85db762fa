"""Bundles, not loose keywords (issue 28): a run directory reads back as the objects it was written from, one
per-sample record type, evaluate's settings in bundles, one comparison-settings object, masks that resolve
themselves."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from genEval import evaluate
from genEval.campaigns import Design, run_campaign
from genEval.comparisons.ablation import aggregate_ablation, build_ablation
from genEval.comparisons.aggregate import aggregate, build_comparison
from genEval.comparisons.settings import ComparisonSettings
from genEval.fileio import to_json
from genEval.interfaces import SettingError
from genEval.masks import FixedMask, NoMask, StyleMask, mask_config
from genEval.runs import EvalResult, RunConfig, SampleRecord, read_results, read_samples
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.search.perturb import Outcome, SearchConfig
from tests.support.assets import ROOT
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

SEARCH = SearchConfig(budget=4, step_size=0.3)


def roles() -> dict:
    return dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, EvalResult]:
    d = tmp_path_factory.mktemp("typed") / "run"
    res = evaluate(
        data=toy_data(20),
        search=SEARCH,
        seed=4,
        output=RunOutput(d, progress=False),
        scoring=Scoring(n_boot=50),
        **roles(),
    )
    return d, res


def test_read_results_gives_back_the_eval_result_the_run_wrote(run):
    d, res = run
    back = read_results(d)
    assert type(back) is EvalResult and isinstance(back.config, RunConfig)
    assert back.to_dict() == json.loads((d / "results.json").read_text())  # the round trip loses nothing
    assert back.to_dict() == json.loads(to_json(res.to_dict()))  # what evaluate returned, as JSON stores it
    assert back.scores.fmr == res.scores.fmr and back.scores.n == 20 and back.config.budget == 4
    assert back.config.scoring == Scoring(n_boot=50) and back.config.comparison is None
    assert back.image_shapes == res.image_shapes and back.summary() == res.summary()
    assert read_results(d, samples=True).samples == read_samples(d) == res.samples
    # the interface line of the issue
    line = f"from genEval.runs import read_results; r = read_results({str(d)!r}); print(type(r).__name__)"
    out = subprocess.run([sys.executable, "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "EvalResult", out.stderr


def test_one_per_sample_record_type(run):
    d, res = run
    records = read_samples(d)
    assert all(type(r) is SampleRecord for r in records)
    lines = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    assert lines == [r.to_dict() for r in records]  # samples.jsonl is the record, field for field
    out = Outcome(
        **{f.name: getattr(records[0], f.name) for f in fields(SampleRecord)},
        **{k: torch.zeros(1) for k in ("original", "image", "start_image", "latent", "start_latent")},
    )
    assert isinstance(out, SampleRecord) and out.record() == records[0]  # the loop's outcome is the record + tensors
    assert type(out.record()) is SampleRecord


def test_results_of_another_schema_version_are_refused_naming_it(run, tmp_path):
    d, _ = run
    data = json.loads((d / "results.json").read_text())
    for version, expect in ((1, r"schema version 1, written by an older genEval .* Rerun"), (9, r"version 9, newer")):
        (tmp_path / "results.json").write_text(json.dumps({**data, "schema_version": version}))
        with pytest.raises(ValueError, match=expect):
            read_results(tmp_path)
    old = {k: v for k, v in json.loads((d / "samples.jsonl").read_text().splitlines()[0]).items() if k != "image_linf"}
    with pytest.raises(ValueError, match=r"lack image_linf: they were written by an older genEval; rerun"):
        SampleRecord.from_dict(old)


def test_evaluate_takes_bundles_and_each_setting_has_one_spelling(run, tmp_path):
    _, res = run
    bundled = evaluate(
        data=toy_data(20),
        search=SEARCH,
        seed=4,
        execution=Execution(batch_size=7),
        output=RunOutput(tmp_path / "b", progress=False),
        scoring=Scoring(n_boot=50),
        **roles(),
    )
    decisions = [(r.source_id, r.validated, r.accepted_steps, r.final_pred) for r in res.samples]
    assert bundled.scores == res.scores  # batch size changes no decision
    assert [(r.source_id, r.validated, r.accepted_steps, r.final_pred) for r in bundled.samples] == decisions
    assert read_results(tmp_path / "b").config.scoring.n_boot == 50
    # the second spellings are gone: a bundle's field is not a keyword of evaluate (issue 36, item 3)
    for side_door in ("output_dir", "n_boot", "save_latents", "progress", "interval", "mask_id"):
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{side_door}'"):
            evaluate(data=toy_data(4), search=SEARCH, **{side_door: None}, **roles())
    with pytest.raises(SettingError, match=r"^interval must be one of wilson, clopper-pearson, got 'exact'"):
        evaluate(data=toy_data(4), search=SEARCH, scoring=Scoring(interval="exact"), **roles())
    with pytest.raises(SettingError, match=r"grid_size must be a whole number >= 0, got -1"):
        RunOutput(grid_size=-1)


def test_no_function_has_a_side_door_for_settings():
    """No ``**shorthand``, ``**given`` or ``**evaluate_kwargs``: every setting of evaluate, compare and the
    aggregations is a parameter or a field of its bundle, so it has one spelling."""
    import ast

    doors = []
    for path in sorted((ROOT / "genEval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.kwarg is not None:
                if node.args.kwarg.arg in ("shorthand", "given", "evaluate_kwargs", "compare_kwargs"):
                    doors.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}(**{node.args.kwarg.arg})")
    assert doors == []
    for fn in (evaluate, run_campaign, Design, aggregate, build_comparison, build_ablation, aggregate_ablation):
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{fn.__name__} takes **kwargs"


def test_evaluate_reads_like_the_method():
    """evaluate is about 40 lines and takes bundles, not two dozen loose keywords."""
    import ast

    from genEval.search import driver

    # read from the file, not the live function: another test may have wrapped or patched driver.evaluate
    path = Path(driver.__file__)
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "evaluate")
    first = fn.body[1] if isinstance(fn.body[0], ast.Expr) else fn.body[0]  # after the docstring
    body = [ln for ln in lines[first.lineno - 1 : fn.end_lineno] if ln.strip()]
    assert len(body) <= 45, f"evaluate's body is {len(body)} lines"
    assert len(fn.args.args) + len(fn.args.kwonlyargs) <= 14


def test_one_comparison_settings_object_for_every_aggregation():
    tail = {"baselines", "er_min_r2", "n_boot", "seed", "level", "repetition_seeds", "rank_by", "sequential"}
    tail |= {"er_scale", "er_floor"}  # issue 43: the axes and the accuracy floor of the ER fit
    tail |= {"label_free_sensitivity"}  # issue 44: the label-free measures' sensitivity protocol
    assert {f.name for f in fields(ComparisonSettings)} == tail
    for fn in (Design, aggregate, build_comparison, build_ablation, aggregate_ablation):
        params = set(inspect.signature(fn).parameters)
        assert "settings" in params and not params & tail, f"{fn.__name__} restates the aggregation keywords"
    s = ComparisonSettings.coerce({"baselines": ["a", "b"], "n_boot": 50})
    assert s.baselines == ("a", "b") and s.n_boot == 50 and s.rank_by == "fmr_validated"
    assert ComparisonSettings.coerce(s) is s and ComparisonSettings.coerce(None) == ComparisonSettings()
    assert ComparisonSettings.coerce({"level": 0.9}).level == 0.9
    with pytest.raises(ValueError, match=r"unknown rank_by='best'"):
        ComparisonSettings(rank_by="best")
    with pytest.raises(SettingError, match=r"n_boot must be a whole number >= 1, got 0"):
        ComparisonSettings(n_boot=0)
    with pytest.raises(SettingError, match=r"level must be a number in \(0, 1\), got 95"):
        ComparisonSettings(level=95)
    with pytest.raises(TypeError, match=r"unknown comparison setting\(s\) \['nboot'\]"):
        ComparisonSettings.coerce({"nboot": 3})
    with pytest.raises(SettingError, match=r"label_free.sensitivity must be true or false, got 'yes'"):
        ComparisonSettings(label_free_sensitivity="yes")


def test_a_mask_resolves_itself():
    data = toy_data(6)
    none = mask_config(None).resolve(SigmoidGenerator(), data)
    assert isinstance(mask_config(None), NoMask) and none.tensor is None and none.id == "none" and none.data is data
    fixed = mask_config(torch.ones(4))
    assert isinstance(fixed, FixedMask) and fixed.resolve(None, data).id == "tensor(4,)"
    assert mask_config(torch.ones(4), "mine").id == "mine"
    with pytest.raises(ValueError, match=r"mask must be None, a 0/1 tensor, a StyleMask or a mask config"):
        mask_config("sparse")
    assert StyleMask.__module__ == "genEval.masks.format"


def test_the_scoring_and_output_keys_are_defined_once_and_the_short_names_still_work():
    """conf/scoring and conf/output are nodes whose keys are their dataclass's fields (issue 45, item 1); the
    commands build them, and the short names users type (n_boot=, interval=, save_images=, device=, batch_size=,
    precision=) still work beside the nodes' own spellings (scoring.oracle_warn_accuracy=, output.grid_size=)."""
    from dataclasses import fields

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from genEval.commands import CONF_DIR, bundle, execution_bundle

    for group, cls in (("scoring", Scoring), ("output", RunOutput)):
        keys = set(OmegaConf.load(CONF_DIR / group / "default.yaml")) - {"defaults", "_target_"}
        assert keys == {f.name for f in fields(cls)} - {"dir"}, group
    restated = {
        p.name: sorted(set(OmegaConf.load(p)) & {f.name for c in (Scoring, RunOutput) for f in fields(c)})
        for p in CONF_DIR.glob("*.yaml")
    }
    assert {k: v for k, v in restated.items() if v} == {
        "compare.yaml": ["save_images"],  # a comparison keeps its images (for report.html)
        "train_generator.yaml": ["progress"],  # the trainer's own bar: it makes no run
    }
    typed = ["n_boot=7", "interval=clopper-pearson", "scoring.oracle_warn_accuracy=null", "save_images=true"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config", overrides=[*typed, "output.grid_size=0", "device=cpu", "batch_size=4", "precision=bf16"]
        )
        cmp = compose("compare", overrides=["n_boot=9"])
        score = compose("score", overrides=["interval=clopper-pearson"])
    assert bundle(cfg, "scoring") == Scoring(interval="clopper-pearson", n_boot=7, oracle_warn_accuracy=None)
    assert bundle(cfg, "output", dir="d") == RunOutput("d", save_images=True, grid_size=0)
    assert execution_bundle(cfg) == Execution(device="cpu", batch_size=4, precision="bf16")
    assert bundle(cmp, "scoring").n_boot == 9 and bundle(cmp, "output").save_images
    assert bundle(score, "scoring").interval == "clopper-pearson"
