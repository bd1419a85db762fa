"""The driver: reproducibility, run directory, and the errors for bad input."""

from __future__ import annotations

import json

import pytest
import torch

from genEval import evaluate
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.toys import (
    LinearClassifier,
    ListDataset,
    ModelOracle,
    SigmoidGenerator,
    interrupted_run,
    same_records,
    toy_data,
)

CFG = SearchConfig(budget=8, step_size=0.3, start_noise=0.1)


def roles(oracle_seed=1):
    return dict(
        classifier=LinearClassifier(seed=0),
        generator=SigmoidGenerator(),
        oracle=ModelOracle(LinearClassifier(seed=oracle_seed)),
    )


def test_same_seed_same_results_and_run_directory(tmp_path):
    a = evaluate(
        data=toy_data(50), search=CFG, seed=7, execution=Execution(batch_size=16), output=tmp_path / "a", **roles()
    )
    b = evaluate(
        data=toy_data(50), search=CFG, seed=7, execution=Execution(batch_size=16), output=tmp_path / "b", **roles()
    )
    ja, jb = (json.loads((tmp_path / d / "results.json").read_text()) for d in "ab")
    assert ja["scores"] == jb["scores"] and ja["seed"] == 7 and ja["seed_drawn"] is False
    assert ja["schema_version"] == 2 and torch.__version__.startswith(ja["versions"]["torch"])
    lines = (tmp_path / "a" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 50 and json.loads(lines[0])["source_id"] == "toy/0000"
    assert not (tmp_path / "a" / "samples.partial.jsonl").exists()
    assert (tmp_path / "a" / "grid.png").stat().st_size > 0
    assert a.metrics == b.metrics
    # the counts in the JSON agree with the per-sample records
    recs = [json.loads(line) for line in lines]
    assert ja["scores"]["n_validated"] == sum(r["validated"] for r in recs)
    assert ja["scores"]["sa"]["k"] == sum(r["clean_pred"] == r["label"] for r in recs)


def test_no_seed_draws_a_fresh_one_and_records_it():
    runs = [evaluate(data=toy_data(20), search=CFG, **roles()) for _ in range(2)]
    assert all(r.seed_drawn for r in runs)
    assert runs[0].seed != runs[1].seed
    again = evaluate(data=toy_data(20), search=CFG, seed=runs[0].seed, **roles())
    assert again.metrics == runs[0].metrics


def test_batch_size_does_not_change_the_scores_without_noise():
    cfg = SearchConfig(budget=8, step_size=0.3, start_noise=0)
    a = evaluate(data=toy_data(30), search=cfg, seed=1, execution=Execution(batch_size=30), **roles())
    b = evaluate(data=toy_data(30), search=cfg, seed=1, execution=Execution(batch_size=7), **roles())
    assert a.metrics == b.metrics


def test_oracle_equal_to_model_gives_pa_100_and_budget_zero_leaves_pa_undefined():
    clf = LinearClassifier(seed=0)
    r = evaluate(clf, toy_data(40), SigmoidGenerator(), ModelOracle(clf), CFG, seed=0)
    assert r.scores.pa.value == 100.0 and r.scores.n_validated > 0
    r0 = evaluate(data=toy_data(40), search=SearchConfig(budget=0), seed=0, **roles())
    assert r0.scores.n_validated == 0 and r0.scores.pa.value is None and r0.scores.fmr.value is None
    assert "PA   undefined" in r0.summary()


def test_classifier_with_wrong_number_of_outputs(tmp_path):
    with pytest.raises(ValueError, match=r"classifier returned 3 logits but the dataset has 4 classes"):
        evaluate(data=toy_data(8, classes=4), search=CFG, seed=0, output=tmp_path, **roles())
    assert not (tmp_path / "results.json").exists() and not list(tmp_path.glob("samples*"))


def test_images_outside_unit_range():
    d = toy_data(8)
    d.x = d.x * 2 - 0.5
    with pytest.raises(ValueError, match=r"images must lie in \[0, 1\] but range over \[-0.4\d*, 1.4\d*\]"):
        evaluate(data=d, search=CFG, seed=0, **roles())


def test_label_outside_class_list():
    d = ListDataset(torch.rand(4, 3, 2, 2), [0, 1, 5, 2], ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"label 5 of sample toy/0002 is outside the class list \(0..2"):
        evaluate(data=d, search=CFG, seed=0, **roles())


def test_empty_dataset():
    with pytest.raises(ValueError, match="dataset 'toy' is empty"):
        evaluate(data=ListDataset(torch.rand(0, 3, 2, 2), [], ["a"]), search=CFG, **roles())


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match=r"output directory '.*file/run' is not writable.*output="):
        evaluate(data=toy_data(4), search=CFG, output=blocker / "run", **roles())


def test_interrupted_run_leaves_no_complete_looking_results_and_a_rerun_resumes_it(tmp_path):
    d = toy_data(40)
    interrupted_run(d, 25, search=CFG, seed=0, execution=Execution(batch_size=10), output=tmp_path / "run", **roles())
    assert not (tmp_path / "run" / "results.json").exists()
    assert not (tmp_path / "run" / "samples.jsonl").exists()
    assert not (tmp_path / "run" / "run.lock").exists()  # the lock is released on the error
    partial = (tmp_path / "run" / "samples.partial.jsonl").read_text().splitlines()
    assert 0 < len(partial) < 40  # the samples finished before the error are kept, clearly named as partial
    resumed = evaluate(
        data=d, search=CFG, seed=0, execution=Execution(batch_size=10), output=tmp_path / "run", **roles()
    )
    assert resumed.timings["samples_computed"] == 40 - len(partial)
    evaluate(data=d, search=CFG, seed=0, execution=Execution(batch_size=10), output=tmp_path / "fresh", **roles())
    same_records(tmp_path / "run", tmp_path / "fresh")  # floats up to the noise of other batch neighbours
    assert (
        json.loads((tmp_path / "run" / "results.json").read_text())["scores"]
        == json.loads((tmp_path / "fresh" / "results.json").read_text())["scores"]
    )


def test_saved_latents_round_trip(tmp_path):
    from genEval.runs import RunDir

    r = evaluate(
        data=toy_data(12),
        search=CFG,
        seed=3,
        execution=Execution(batch_size=5),
        output=RunOutput(tmp_path, save_latents=True),
        **roles(),
    )
    lat = RunDir(tmp_path).tensors("latents")
    assert lat["start"].shape == lat["final"].shape == (12, 3, 2, 2)
    assert lat["source_ids"] == [f"toy/{i:04d}" for i in range(12)]
    assert lat["generator"] == "sigmoid"
    assert int(lat["validated"].sum()) == r.scores.n_validated
    moved = (lat["final"] - lat["start"]).flatten(1).norm(dim=1)
    assert bool((moved[lat["validated"]] > 0).all())


def test_saved_images_round_trip(tmp_path):
    from genEval.runs import RunDir

    r = evaluate(
        data=toy_data(12),
        search=CFG,
        seed=3,
        execution=Execution(batch_size=5),
        output=RunOutput(tmp_path, save_images=True),
        **roles(),
    )
    im = RunDir(tmp_path).tensors("images")
    assert im["original"].dtype == torch.uint8 and im["original"].shape == (12, 3, 2, 2)
    assert torch.equal(im["original"], toy_data(12).x.mul(255).round().to(torch.uint8))
    assert im["labels"].tolist() == toy_data(12).y and int(im["validated"].sum()) == r.scores.n_validated
