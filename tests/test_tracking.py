"""MLflow tracking (issue 29, genEval/commands/tracking.py): runs land in a real local MLflow store, read back with
MLflow's own client, holding the scores results.json holds; a comparison is a parent run with a child per model and
repetition; an unreachable tracker stops the command before anything is built (or is skipped when not required);
without MLflow, tracking=mlflow names the extra to install."""

from __future__ import annotations

import json
import sys

import pytest
from hydra import compose, initialize_config_dir
from service_support import free_port

import genEval.commands.evaluate as evaluate_command
from genEval.commands import CONF_DIR
from genEval.commands.compare import run_compare
from genEval.commands.evaluate import run_evaluate
from genEval.commands.tracking import flat_params, open_tracking, score_metrics

mlflow = pytest.importorskip("mlflow", reason='pip install "geneval-fmr[mlflow]" (the test extra has it)')

SMALL = ["data.limit=6", "search.budget=1", "seed=0", "n_boot=50"]


def _compose(config: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config, overrides=overrides)


def _client(uri: str):
    return mlflow.MlflowClient(tracking_uri=uri)


def _runs(uri: str) -> list:
    client = _client(uri)
    experiment = client.get_experiment_by_name("geneval")
    return client.search_runs([experiment.experiment_id])


def _assert_scores_logged(run, results: dict) -> None:
    metrics = run.data.metrics
    defined = 0
    for key, entry in results["scores"].items():
        if not isinstance(entry, dict):
            assert metrics[key] == entry  # a count
            continue
        for suffix, field in (("", "value"), ("_low", "low"), ("_high", "high")):
            if entry[field] is None:
                assert key + suffix not in metrics
            else:
                assert metrics[key + suffix] == pytest.approx(entry[field]), key + suffix
                defined += 1
    assert defined >= 20 and "sa" in metrics and "fmr_high" in metrics


def test_what_is_logged():
    params = flat_params({"data": {"limit": 6, "class_names": ["a", "b"]}, "seed": None, "x": "y" * 7000})
    assert params["data.limit"] == "6" and params["data.class_names"] == '["a", "b"]' and params["seed"] == "null"
    assert len(params["x"]) == 6000 and params["x"].endswith("...")
    scores = {
        "sa": {"value": 80.0, "low": 60.0, "high": 90.0},
        "pa": {"value": None, "low": None, "high": None},
        "n": 6,
    }
    assert score_metrics(scores) == {"sa": 80.0, "sa_low": 60.0, "sa_high": 90.0, "n": 6.0}


def test_a_run_lands_in_the_local_file_store_with_the_scores_of_results_json(tmp_path, monkeypatch, digits_cache):
    """`geneval ... tracking=mlflow` with the default store: ./mlruns in the working directory."""
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    monkeypatch.setattr(evaluate_command, "hydra_output_dir", lambda: run_dir)
    run_evaluate(_compose("config", [*SMALL, "tracking=mlflow"]))
    results = json.loads((run_dir / "results.json").read_text())
    assert (tmp_path / "mlruns").is_dir()
    (run,) = _runs((tmp_path / "mlruns").as_uri())
    assert run.info.status == "FINISHED" and run.info.run_name == "digits_classifier on DigitsData"
    _assert_scores_logged(run, results)
    assert run.data.params["data.limit"] == "6" and run.data.params["search.budget"] == "1"
    assert run.data.params["classifier._target_"] == "genEval.classifiers.digits_classifier"
    assert run.data.tags["run_dir"] == str(run_dir.resolve()) and run.data.tags["seed"] == "0"
    artifacts = [a.path for a in _client((tmp_path / "mlruns").as_uri()).list_artifacts(run.info.run_id)]
    assert "results.json" in artifacts


def test_a_comparison_is_a_parent_run_with_a_child_per_model_and_repetition(tmp_path, monkeypatch, digits_cache):
    monkeypatch.chdir(tmp_path)
    uri = (tmp_path / "store").as_uri()
    out = tmp_path / "cmp"
    models = "classifiers={a: digits_cnn, b: {_target_: genEval.classifiers.digits_classifier, seed: 3, epochs: 2}}"
    cfg = _compose(
        "compare",
        [*SMALL, models, "repetitions=2", f"out_dir={out}", "tracking=mlflow", f"tracking.uri={uri}"],
    )
    run_compare(cfg)
    runs = _runs(uri)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.data.tags["rank_by"] == "fmr_validated" and parent.data.tags["run_dir"] == str(out.resolve())
    assert sorted(r.info.run_name for r in children) == ["a/rep0", "a/rep1", "b/rep0", "b/rep1"]
    client = _client(uri)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"leaderboard.json", "leaderboard.csv", "comparison.json", "report.html"} <= artifacts
    table = json.loads(open(client.download_artifacts(parent.info.run_id, "leaderboard.json", str(tmp_path))).read())
    assert sorted(table["data"][i][table["columns"].index("model")] for i in range(2)) == ["a", "b"]
    for child in children:
        model, rep = child.data.tags["model"], child.data.tags["repetition"]
        results = json.loads((out / "runs" / model / f"rep{rep}" / "results.json").read_text())
        _assert_scores_logged(child, results)
        assert child.data.tags["rank_by"] == "fmr_validated" and child.data.tags["rank"] in ("1", "2")


def test_an_unreachable_tracker_stops_before_anything_is_built(tmp_path, monkeypatch, capsys, caplog):
    def build(*args, **kwargs):
        raise AssertionError("a component was built although the tracker cannot be reached")

    monkeypatch.setattr(evaluate_command, "build", build)
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(SystemExit) as stop:
        run_evaluate(_compose("config", [*SMALL, "tracking=mlflow", f"tracking.uri={uri}"]))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"geneval: error: the MLflow tracker tracking.uri={uri} cannot be used (ConnectError" in err
    assert "or set tracking.required=false to run without tracking" in err
    caplog.set_level("WARNING", logger="genEval.commands.tracking")
    skipped = _compose("config", [*SMALL, "tracking=mlflow", f"tracking.uri={uri}", "tracking.required=false"])
    assert open_tracking(skipped) is None and "this run is not tracked" in caplog.text


def test_without_mlflow_tracking_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` raises ImportError
    with pytest.raises(SystemExit):
        run_evaluate(_compose("config", [*SMALL, "tracking=mlflow"]))
    err = capsys.readouterr().err
    assert 'tracking=mlflow needs MLflow, an optional extra of genEval: pip install "geneval-fmr[mlflow]"' in err
