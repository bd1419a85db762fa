"""Runs in an experiment tracker: ``tracking=mlflow`` (conf/tracking/mlflow.yaml), off by default (docs/tracking.md).

Tracking is I/O driven by config, so it lives in the command layer and reads what the library wrote (``results.json``,
the comparison's files); the engine never imports it, nor MLflow. MLflow is an optional extra
(``pip install "geneval-fmr[mlflow]"``); every MLflow call goes through its own client (:class:`mlflow.MlflowClient`)
and is fenced in this file.

* ``geneval``: one MLflow run per evaluation (per shard when sharded). Parameters: the resolved configuration,
  flattened to dotted keys (``data.limit``, ``search.budget``); metrics: every score of ``results.json`` with its
  interval bounds (``sa``, ``sa_low``, ``sa_high``, ...) and the counts (``n``, ``n_validated``, ...); artifacts:
  ``results.json`` and ``report.html`` where written; tags: ``run_dir`` (the run directory) and the components.
* ``geneval compare``: one parent run (the comparison's configuration; the leaderboard as a table artifact
  ``leaderboard.json`` plus ``leaderboard.csv`` / ``.md``, ``comparison.json``, ``report.html``; the ranking score as
  the tag ``rank_by``) with one child run per model and repetition, logged as above (tags ``model``, ``repetition``,
  ``rank``).
* Where: ``tracking.uri`` (null: MLflow's own default, :func:`mlflow.get_tracking_uri`: ``MLFLOW_TRACKING_URI``, else
  ``sqlite:///mlflow.db`` in the working folder, the store that ``mlflow ui`` started in that folder opens;
  ``http://host:5000`` a tracking server; a plain path a file store there), ``tracking.experiment``. The tracker is
  reached before the run starts: one that cannot be reached stops the command with one line, or, with
  ``tracking.required=false``, is skipped with a warning.

MLflow 3 keeps the file store (``./mlruns``, MLflow 2's default, and still MLflow's own default in a folder whose
``./mlruns`` holds runs) in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``: a ``file:`` store sets it for this
process and warns how to move to a database (docs/tracking.md: ``mlflow ui`` and ``MlflowClient()`` refuse it).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from omegaconf import DictConfig

from genEval.commands import build
from genEval.commands.bundles import recorded
from genEval.fileio import ensure_writable_dir
from genEval.runs import read_results
from genEval.runs.results import ComparisonRecord

log = logging.getLogger(__name__)

INSTALL = 'pip install "geneval-fmr[mlflow]"'
#: MLflow's limits (mlflow.utils.validation): characters of a parameter value, entries per log_batch call.
MAX_PARAM_LENGTH = 6000
BATCH = 100
#: Files of a run directory / a comparison directory logged as artifacts when present.
RUN_ARTIFACTS = ("results.json", "report.html")
COMPARISON_ARTIFACTS = ("leaderboard.csv", "leaderboard.md", "comparison.json", "report.html")


class Track:
    """What a command logs into its tracked run (nothing when tracking is off): see :func:`tracked`."""

    def __init__(self, tracker: MLflowTracker | None = None, run_id: str | None = None) -> None:
        self.tracker, self.run_id = tracker, run_id

    def results(self, results: Mapping[str, Any], run_dir: str | Path | None) -> None:
        """One evaluation's results (``results.json``'s content) and its run directory."""
        if self.tracker is not None:
            self.tracker.log_results(self.run_id, results, run_dir)

    def comparison(self, out_dir: str | Path, rank_by: str) -> None:
        """A comparison directory: its leaderboard and files, and a child run per model and repetition."""
        if self.tracker is not None:
            self.tracker.log_comparison(self.run_id, out_dir, rank_by)


@contextlib.contextmanager
def tracked(cfg: DictConfig, name: str, command: str) -> Iterator[Track]:
    """``with tracked(cfg, name, "geneval") as track: ... track.results(results, run_dir)``: one tracked run around
    the block when ``cfg.tracking`` is set (FAILED if the block raises), else a :class:`Track` that logs nothing. The
    tracker is reached on entering, before the block runs (:func:`open_tracking`)."""
    tracker = open_tracking(cfg)
    if tracker is None:
        yield Track()
        return
    with tracker.run(name, run_config(cfg), {"command": command}) as run_id:
        yield Track(tracker, run_id)


def open_tracking(cfg: DictConfig) -> MLflowTracker | None:
    """The tracker of ``cfg.tracking`` connected and ready, or None when tracking is off (or skipped: unreachable
    under ``tracking.required=false``)."""
    node = cfg.get("tracking")
    if not isinstance(node, DictConfig):
        return None
    tracker = build(node, "tracking")
    return tracker if tracker.connect() else None


class MLflowTracker:
    """Logs runs to MLflow (the module docstring says what).

    Args:
        uri: MLflow tracking URI; None: MLflow's default (``MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
            working folder); a plain path is a file store there.
        experiment: the experiment's name (created when missing).
        run_name: the run's name; None: the run directory's name (a comparison: ``compare <its name>``).
        required: False: a tracker that cannot be reached is skipped with a warning instead of stopping the run.
        tags: extra tags on every run.
    """

    def __init__(
        self,
        uri: str | None = None,
        experiment: str = "geneval",
        run_name: str | None = None,
        required: bool = True,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import mlflow
        except ImportError as err:
            raise ImportError(
                f"tracking=mlflow needs MLflow, an optional extra of genEval: {INSTALL} (or leave tracking off)."
            ) from err
        self.mlflow = mlflow
        self.uri = _store_uri(uri, mlflow)
        self.experiment, self.run_name, self.required = str(experiment), run_name, bool(required)
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.client: Any = None
        self.experiment_id: str | None = None

    def __repr__(self) -> str:
        return f"MLflowTracker(uri={self.uri!r}, experiment={self.experiment!r}, required={self.required})"

    # --------------------------------------------------------------------------------------- connecting
    def connect(self) -> bool:
        """Reach the store and find (or create) the experiment. Unreachable: raise ``ConnectionError`` (one line
        naming the URI and the fixes), or, when not required, warn and return False."""
        try:
            self._probe()
            self.client = self.mlflow.MlflowClient(tracking_uri=self.uri)
            found = self.client.get_experiment_by_name(self.experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
        except Exception as err:  # noqa: BLE001 - MLflow, httpx and the OS raise many types; all mean "not now"
            reason = (str(err).splitlines() or [""])[0][:300]
            message = (
                f"the MLflow tracker tracking.uri={self.uri} cannot be used ({type(err).__name__}: {reason}); start "
                "the tracking server or fix tracking.uri, or set tracking.required=false to run without tracking"
            )
            if self.required:
                raise ConnectionError(message + ".") from err
            log.warning("%s; this run is not tracked.", message)
            return False
        log.info("tracking runs in MLflow: %s, experiment %r", self.uri, self.experiment)
        return True

    def _probe(self) -> None:
        """Fail fast: a tracking server answers ``/health`` within seconds (MLflow's own client retries for minutes);
        a local store's folder must be writable."""
        scheme = urlparse(self.uri).scheme
        if scheme in ("http", "https"):
            httpx.get(self.uri.rstrip("/") + "/health", timeout=5.0)
        elif scheme == "file":
            store = Path(urlparse(self.uri).path)
            log.warning(
                "tracking in MLflow's file store %s, which MLflow 3 keeps in maintenance mode: `mlflow ui` and "
                "MlflowClient() read it only with MLFLOW_ALLOW_FILE_STORE=true. `mlflow migrate-filestore --source %s "
                "--target sqlite:///mlflow.db` moves its runs into a database; then set tracking.uri=sqlite:///mlflow.db",
                store,
                store,
            )
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the file store is opt-in
            ensure_writable_dir(store)
        elif scheme == "sqlite":
            database = Path(self.uri.split(":///", 1)[-1])
            ensure_writable_dir(database.parent if database.parent != Path("") else Path.cwd())

    # --------------------------------------------------------------------------------------- runs
    @contextlib.contextmanager
    def run(
        self, name: str, config: Mapping[str, Any], tags: Mapping[str, Any] | None = None, parent: str | None = None
    ) -> Iterator[str]:
        """An MLflow run (its id) with ``config`` as parameters: FINISHED when the block ends, FAILED when it
        raises."""
        all_tags = {**self.tags, **{str(k): str(v) for k, v in (tags or {}).items()}}
        if parent is not None:
            all_tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=self.run_name or name, tags=all_tags)
        run_id = run.info.run_id
        self._log(run_id, params=flat_params(config))
        try:
            yield run_id
        except BaseException:
            self.client.set_terminated(run_id, status="FAILED")
            raise
        self.client.set_terminated(run_id, status="FINISHED")

    def log_results(
        self, run_id: str, results: Mapping[str, Any], run_dir: str | Path | None, tags: Mapping | None = None
    ) -> None:
        """A finished run into run ``run_id``: its scores as metrics, its files (when it wrote a run directory) as
        artifacts, its directory as the tag ``run_dir``."""
        tags = {
            "seed": results.get("seed"),
            **{f"component.{k}": v for k, v in (results.get("components") or {}).items()},
            **(tags or {}),
        }
        if run_dir is not None:
            run_dir = Path(run_dir).resolve()
            tags["run_dir"] = str(run_dir)
        self._log(run_id, metrics=score_metrics(results.get("scores") or {}), tags=tags)
        for name in RUN_ARTIFACTS if run_dir is not None else ():
            if (run_dir / name).is_file():
                self.client.log_artifact(run_id, str(run_dir / name))

    def log_comparison(self, parent: str, out_dir: str | Path, rank_by: str) -> None:
        """A finished comparison into the parent run: the leaderboard as a table, the comparison's files, the ranking
        score as a tag, and one child run per model and repetition."""
        out_dir = Path(out_dir).resolve()
        rows = _leaderboard(out_dir / "leaderboard.csv")
        self._log(parent, tags={"rank_by": rank_by, "run_dir": str(out_dir)})
        if rows:
            table = {col: [row.get(col) for row in rows] for col in rows[0]}
            self.client.log_table(parent, data=table, artifact_file="leaderboard.json")
        for name in COMPARISON_ARTIFACTS:
            if (out_dir / name).is_file():
                self.client.log_artifact(parent, str(out_dir / name))
        ranks = {row.get("model"): row.get("rank") for row in rows}
        for results_file in sorted(out_dir.glob("**/runs/*/rep*/results.json")):
            run_dir = results_file.parent
            result = read_results(run_dir)
            where = result.config.comparison or ComparisonRecord()
            model = where.model or run_dir.parent.name
            rep = where.repetition if where.repetition is not None else run_dir.name
            generator = run_dir.parents[2].name if run_dir.parents[2].parent.name == "generators" else None
            name = f"{model}/rep{rep}" + (f" ({generator})" if generator else "")
            tags = {"model": model, "repetition": rep, "rank": ranks.get(model, ""), "rank_by": rank_by}
            if generator:
                tags["generator"] = generator
            with self.run(name, result.config.to_dict(), tags=tags, parent=parent) as child:
                self.log_results(child, result.to_dict(), run_dir)

    def _log(
        self, run_id: str, params: Mapping[str, str] | None = None, metrics=None, tags: Mapping | None = None
    ) -> None:
        """Parameters, metrics (name -> value) and tags in batches of MLflow's size."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        entries = (
            [Param(k, v) for k, v in (params or {}).items()]
            + [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
            + [RunTag(str(k), str(v)) for k, v in (tags or {}).items() if v is not None]
        )
        for start in range(0, len(entries), BATCH):
            chunk = entries[start : start + BATCH]
            self.client.log_batch(
                run_id,
                params=[e for e in chunk if isinstance(e, Param)],
                metrics=[e for e in chunk if isinstance(e, Metric)],
                tags=[e for e in chunk if isinstance(e, RunTag)],
            )


# ------------------------------------------------------------------------------------------- what is logged
def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested configuration as MLflow parameters: dotted keys, JSON values (lists, booleans, null), at most
    MLflow's 6,000 characters each."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, f"{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[name] = text if len(text) <= MAX_PARAM_LENGTH else text[: MAX_PARAM_LENGTH - 3] + "..."
    return out


def score_metrics(scores: Mapping[str, Any]) -> dict[str, float]:
    """``results.json``'s ``scores`` as metrics: each score's value and interval bounds (``sa``, ``sa_low``,
    ``sa_high``; undefined ones left out) and the counts (``n``, ``n_validated``, ...)."""
    out: dict[str, float] = {}
    for key, entry in scores.items():
        if isinstance(entry, Mapping):
            for suffix, field in (("", "value"), ("_low", "low"), ("_high", "high")):
                if entry.get(field) is not None:
                    out[key + suffix] = float(entry[field])
        elif isinstance(entry, (int, float)) and not isinstance(entry, bool):
            out[key] = float(entry)
    return out


def _leaderboard(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _store_uri(uri: str | None, mlflow: Any) -> str:
    """``None`` -> MLflow's own default, where ``mlflow ui`` and ``MlflowClient()`` look (``MLFLOW_TRACKING_URI``, else
    ``sqlite:///<working folder>/mlflow.db``; ``./mlruns`` while that holds runs); a plain path -> a file store there;
    anything else unchanged."""
    if uri is None or str(uri).strip() == "":
        return mlflow.get_tracking_uri()
    text = str(uri)
    if "://" not in text and not text.startswith(("file:", "databricks")):
        return Path(text).expanduser().resolve().as_uri()
    return text


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """A command's resolved config without the tracker's settings and the report switch: what a run records (and
    its identity holds; where it is tracked and whether report.html is written change nothing it finds) and what is
    logged as parameters. The settings bundles are recorded as built (:func:`genEval.commands.bundles.recorded`: their
    ``to_dict()``, no import paths), their short spellings not twice."""
    return {k: v for k, v in recorded(cfg).items() if k not in ("tracking", "report")}
