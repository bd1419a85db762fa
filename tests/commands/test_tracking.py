"""MLflow tracking (issue 29, genEval/commands/tracking.py): runs land in a real local MLflow store, read back with
MLflow's own client, holding the scores results.json holds; with no tracking.uri that store is MLflow's own default,
where `mlflow ui` and MlflowClient() in the same folder look, and a real `mlflow ui` serves the run (issue 37); a
comparison is a parent run with a child per model and repetition; an unreachable tracker stops the command before
anything is built (or is skipped when not required); without MLflow, tracking=mlflow names the extra to install."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hydra import compose, initialize_config_dir

import genEval.commands.evaluate as evaluate_command
from genEval.commands import CONF_DIR
from genEval.commands.compare import run_compare
from genEval.commands.evaluate import run_evaluate
from genEval.commands.tracking import flat_params, open_tracking, score_metrics
from tests.support.assets import ROOT
from tests.support.service import free_port

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


@pytest.fixture
def fresh_shell(monkeypatch):
    """MLflow as a new shell sees it: no tracking URI set, the file store not allowed."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_with_no_uri_a_run_lands_where_mlflow_looks(tmp_path, fresh_shell, digits_cache):
    """`geneval ... tracking=mlflow` with no tracking.uri: MLflow's default store, sqlite:///mlflow.db in the working
    folder, where MlflowClient() (and `mlflow ui`) started there look (issue 37: it was ./mlruns, which MLflow 3
    refuses to open)."""
    fresh_shell.chdir(tmp_path)
    run_dir = tmp_path / "run"
    fresh_shell.setattr(evaluate_command, "hydra_output_dir", lambda: run_dir)
    run_evaluate(_compose("config", [*SMALL, "tracking=mlflow"]))
    fresh_shell.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # what the run set for itself, a later shell has not
    results = json.loads((run_dir / "results.json").read_text())
    assert (tmp_path / "mlflow.db").is_file()
    client = mlflow.MlflowClient()  # no URI: MLflow's own default, as the user's
    (run,) = client.search_runs([client.get_experiment_by_name("geneval").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "digits_classifier on DigitsData"
    _assert_scores_logged(run, results)
    assert run.data.params["data.limit"] == "6" and run.data.params["search.budget"] == "1"
    assert run.data.params["classifier._target_"] == "genEval.classifiers.digits_classifier"
    assert run.data.tags["run_dir"] == str(run_dir.resolve()) and run.data.tags["seed"] == "0"
    assert "results.json" in [a.path for a in client.list_artifacts(run.info.run_id)]


def test_a_file_store_is_used_with_a_warning_naming_the_migration(tmp_path, fresh_shell, caplog):
    """A folder whose ./mlruns holds MLflow 2 runs: MLflow's default there is still that file store, which MLflow 3
    keeps in maintenance mode; the run goes there (as `mlflow ui` would read it) and the log says how to move on."""
    fresh_shell.chdir(tmp_path)
    fresh_shell.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _client((tmp_path / "mlruns").as_uri()).create_experiment("old")
    fresh_shell.delenv("MLFLOW_ALLOW_FILE_STORE")
    caplog.set_level("WARNING", logger="genEval.commands.tracking")
    tracker = open_tracking(_compose("config", ["tracking=mlflow"]))
    assert tracker.uri == (tmp_path / "mlruns").as_uri()
    assert tracker.client.get_experiment_by_name("old") is not None
    store = tmp_path / "mlruns"
    assert f"tracking in MLflow's file store {store}, which MLflow 3 keeps in maintenance mode" in caplog.text
    assert f"`mlflow migrate-filestore --source {store} --target sqlite:///mlflow.db`" in caplog.text


def _geneval(cwd: Path, env: dict) -> dict:
    """`geneval data.limit=20 tracking=mlflow` (tiny settings) in ``cwd``: its results.json."""
    run_dir = cwd / "run"
    command = [sys.executable, "-m", "genEval.cli", "data.limit=20", "tracking=mlflow", *SMALL[1:]]
    done = subprocess.run(
        [*command, f"hydra.run.dir={run_dir}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run_dir / "results.json").read_text())


def _serve(cwd: Path, port: int) -> subprocess.Popen:
    """`mlflow ui` on 127.0.0.1:``port`` in ``cwd`` with its defaults (the store ./mlflow.db), in a process group of
    its own (its workers stop with it); returns once it answers /health."""
    mlflow_cli = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or shutil.which("mlflow")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job workers: a lighter server
    log = open(cwd / "mlflow-ui.log", "w")
    server = subprocess.Popen(
        [mlflow_cli, "ui", "--host", "127.0.0.1", "--port", str(port)],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.5)
    _stop(server)
    raise AssertionError(f"mlflow ui did not start: {(cwd / 'mlflow-ui.log').read_text()[-3000:]}")


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.mark.slow
def test_mlflow_ui_in_the_folder_lists_the_run_and_a_tracking_server_takes_runs(tmp_path, digits_cache):
    """The interface of issue 37, with real processes: `geneval data.limit=20 tracking=mlflow && mlflow ui` in one
    folder, and then a run sent to that server by MLFLOW_TRACKING_URI from another folder. Both runs, with the FMR of
    their results.json, come back through the server's REST API."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(PYTHONPATH=str(ROOT), GENEVAL_CACHE=str(digits_cache))
    local = _geneval(home, env)
    port = free_port()
    server = _serve(home, port)
    try:
        uri = f"http://127.0.0.1:{port}"
        remote = _geneval(elsewhere, {**env, "MLFLOW_TRACKING_URI": uri})
        api = httpx.Client(base_url=f"{uri}/api/2.0/mlflow", timeout=30)
        experiment = api.get("/experiments/get-by-name", params={"experiment_name": "geneval"}).json()["experiment"]
        runs = api.post("/runs/search", json={"experiment_ids": [experiment["experiment_id"]]}).json()["runs"]
        by_dir = {next(t["value"] for t in r["data"]["tags"] if t["key"] == "run_dir"): r for r in runs}
        assert sorted(by_dir) == sorted(str(d / "run") for d in (elsewhere, home))
        for folder, results in ((home, local), (elsewhere, remote)):
            run = by_dir[str(folder / "run")]
            metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
            assert run["info"]["status"] == "FINISHED" and metrics["n"] == 20
            assert metrics["fmr"] == pytest.approx(results["scores"]["fmr"]["value"])
        run_id = by_dir[str(elsewhere / "run")]["info"]["run_id"]
        files = api.get("/artifacts/list", params={"run_id": run_id}).json()["files"]
        assert "results.json" in [f["path"] for f in files]  # in the experiment's artifact root, home/mlruns/<id>
        assert not (elsewhere / "mlflow.db").exists()
    finally:
        _stop(server)


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
