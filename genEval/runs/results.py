"""What a finished run is, as data: :class:`EvalResult` (``results.json``), with its configuration typed.

``genEval.evaluate`` returns an :class:`EvalResult`, the run directory stores it as ``results.json``
(:meth:`EvalResult.to_dict`), and :attr:`genEval.runs.reader.RunDir.results` gives the same object back
(:meth:`EvalResult.from_dict`): readers use its fields (``result.config.search.budget``,
``result.config.comparison.model``, ``result.scores.sa``, ``result.identity.seed``), never chains of
``dict.get``. The per-sample records are :class:`~genEval.scores.outcomes.SampleRecord` (``samples.jsonl``).

Versions: results.json carries :data:`SCHEMA_VERSION`. A file of an older schema (version 1, written before run
directories had an identity and streamed tensor parts) or of a newer genEval is refused with a message naming
its version; a file without ``schema_version`` (written by hand) is read with defaults for what it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from genEval.runs.identity import RunIdentity, Shard
from genEval.runs.settings import SearchConfig
from genEval.scores.confidence import RunConfidence
from genEval.scores.definitions import LEADERBOARD_SCORES, SCORES
from genEval.scores.outcomes import SampleRecord
from genEval.scores.run_scores import Scores, Scoring

SCHEMA_VERSION = 2
#: The oldest results.json schema this genEval reads.
OLDEST_SCHEMA = 2


def check_schema(version: Any, where: str) -> None:
    """Refuse a results.json of a schema this genEval does not read, naming its version (None: hand-written, read)."""
    if version is None:
        return
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(
            f"{where} has results.json schema version {version!r}, newer than this genEval reads (up to "
            f"{SCHEMA_VERSION}); upgrade genEval (pip install -U geneval-fmr) to read it."
        )
    if version < OLDEST_SCHEMA:
        raise ValueError(
            f"{where} has results.json schema version {version}, written by an older genEval (before run "
            f"directories had run.json and tensor parts); this genEval reads versions {OLDEST_SCHEMA} to "
            f"{SCHEMA_VERSION}. Rerun the evaluation to get a run directory it reads."
        )


@dataclass(frozen=True)
class ComparisonRecord:
    """What a comparison recorded about one of its runs (results.json ``config.comparison``): the ``model`` and
    ``repetition``, the repetition's ``seed``, all ``models`` and the number of ``repetitions``, the ``data_seed``
    the sources were drawn with (None: not re-drawn), the comparison's ``mask``, the ER ``baselines``, in a
    generator ablation the ``generator`` and all ``generators``, and the ``sequential`` stop rule it ran with
    (:class:`~genEval.comparisons.settings.StopRule` as a dict; None before settled comparisons)."""

    model: str | None = None
    repetition: int | None = None
    seed: int | None = None
    repetitions: int | None = None
    models: tuple[str, ...] = ()
    data_seed: int | None = None
    mask: Mapping[str, Any] | None = None
    baselines: tuple[str, ...] = ()
    generator: str | None = None
    generators: tuple[str, ...] = ()
    sequential: Mapping[str, Any] | None = None
    self_judged: tuple[str, ...] = ()
    ablation_key: str | None = None  # an ablation of any setting (docs/comparing.md): its key and its value label
    ablation_value: str | None = None
    ablation_values: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComparisonRecord:
        get = d.get
        return cls(
            model=None if get("model") is None else str(get("model")),
            repetition=get("repetition"),
            seed=get("seed"),
            repetitions=get("repetitions"),
            models=tuple(str(m) for m in get("models") or ()),
            data_seed=get("data_seed"),
            mask=get("mask"),
            baselines=tuple(str(b) for b in get("baselines") or ()),
            generator=get("generator"),
            generators=tuple(str(g) for g in get("generators") or ()),
            sequential=get("sequential"),
            self_judged=tuple(str(m) for m in get("self_judged") or ()),
            ablation_key=get("ablation_key"),
            ablation_value=get("ablation_value"),
            ablation_values=tuple(str(v) for v in get("ablation_values") or ()),
        )


@dataclass(frozen=True)
class RunConfig:
    """The configuration a run recorded (results.json ``config``): ``values`` as recorded (the resolved command
    config, or the notebook's settings), and typed what readers use: the ``search`` settings (None when the run
    recorded none), the ``scoring`` (interval, bootstrap, warning thresholds), what was saved, the oracle's
    ``reference`` (``label`` | ``clean_prediction``; None when not recorded), and the ``comparison`` record (None
    outside one). :meth:`of` gives the configuration of a run being made, typed from the objects it runs with."""

    values: Mapping[str, Any] = field(default_factory=dict)
    search: SearchConfig | None = None
    scoring: Scoring = field(default_factory=Scoring)
    save_latents: bool = False
    save_images: bool = False
    grid_size: int = 8
    reference: str | None = None
    comparison: ComparisonRecord | None = None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> RunConfig:
        values = dict(values or {})
        comparison = values.get("comparison")
        # the scoring and output bundles as nodes (conf/scoring, conf/output), or at the top level (older runs)
        scoring, output = (
            values.get(k) if isinstance(values.get(k), Mapping) else values for k in ("scoring", "output")
        )
        return cls(
            values=values,
            search=SearchConfig.recorded(values.get("search")),
            scoring=Scoring.coerce(scoring),
            save_latents=bool(output.get("save_latents", False)),
            save_images=bool(output.get("save_images", False)),
            grid_size=int(output.get("grid_size", 8)),
            reference=values.get("reference") or (values.get("oracle") or {}).get("reference"),
            comparison=None if comparison is None else ComparisonRecord.from_dict(comparison),
        )

    @classmethod
    def of(cls, values: Mapping[str, Any], search: SearchConfig | None, scoring: Scoring) -> RunConfig:
        """The configuration of a run being made: ``values`` is what it records; its search and scoring are the
        objects it runs with (not read back from ``values``)."""
        return replace(cls.from_dict(values), search=search, scoring=scoring)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)

    @property
    def budget(self) -> int | None:
        """The search budget (None when the run recorded no search settings)."""
        return None if self.search is None else self.search.budget


@dataclass(frozen=True)
class EvalResult:
    """The result of one evaluation: what ``genEval.evaluate`` returns, the CLI writes and ``read_results`` reads.

    ``config`` is a :class:`RunConfig` (a mapping given here is read as one). ``extra`` holds the rest of
    results.json (``shard``, ``identity``, ``kernels``, ``execution``, ``batch``, ``image_shapes``, ``skipped``, an
    ``oracle_audit``...); the ones readers use have properties.
    """

    scores: Scores
    per_class: list[dict]
    seed: int
    seed_drawn: bool
    components: dict[str, str]
    class_names: list[str]
    config: RunConfig
    versions: dict[str, str]
    environment: dict[str, Any]
    timings: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    run_dir: str | None = None
    samples: list[SampleRecord] = field(default_factory=list, repr=False)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.config, RunConfig):
            object.__setattr__(self, "config", RunConfig.from_dict(self.config))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of everything but the per-sample records (those go to samples.jsonl)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "scores": self.scores.to_dict(),
            "per_class": self.per_class,
            "seed": self.seed,
            "seed_drawn": self.seed_drawn,
            "components": self.components,
            "class_names": self.class_names,
            "config": self.config.to_dict(),
            "versions": self.versions,
            "environment": self.environment,
            "timings": self.timings,
            "warnings": self.warnings,
            "run_dir": self.run_dir,
            **self.extra,
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], samples: Sequence[SampleRecord] = (), where: str = "this run"
    ) -> EvalResult:
        """Inverse of :meth:`to_dict` (``from_dict(r.to_dict()).to_dict() == r.to_dict()``); refuses another
        schema version (:func:`check_schema`), reads a hand-written file with defaults for what it lacks."""
        check_schema(d.get("schema_version"), where)
        known = {f for f in cls.__dataclass_fields__ if f not in ("samples", "extra")}
        class_names = list(d.get("class_names") or [])
        return cls(
            scores=Scores.from_dict(d.get("scores") or {}, num_classes=len(class_names)),
            per_class=list(d.get("per_class") or []),
            seed=d.get("seed"),
            seed_drawn=bool(d.get("seed_drawn", False)),
            components=dict(d.get("components") or {}),
            class_names=class_names,
            config=RunConfig.from_dict(d.get("config")),
            versions=dict(d.get("versions") or {}),
            environment=dict(d.get("environment") or {}),
            timings=dict(d.get("timings") or {}),
            warnings=list(d.get("warnings") or []),
            run_dir=d.get("run_dir"),
            samples=list(samples),
            extra={k: v for k, v in d.items() if k not in known and k != "schema_version"},
        )

    # ---- what readers use from ``extra``
    @property
    def image_shapes(self) -> dict[str, list[int]] | None:
        """``{"original": [C, H, W], "perturbed": [C, H, W]}``: the data's and the generator's image sizes."""
        return self.extra.get("image_shapes")

    @property
    def skipped(self) -> list[dict] | None:
        """Sources left out as unreadable (``data.skip_unreadable``), or None when the run did not skip."""
        return self.extra.get("skipped")

    @property
    def shard(self) -> Shard:
        """The part of the data set the run evaluated (the whole when not sharded)."""
        return Shard.from_dict(self.extra.get("shard"))

    @property
    def identity(self) -> RunIdentity | None:
        """The run's identity as results.json recorded it (None in a hand-written or older results.json)."""
        recorded = self.extra.get("identity")
        return None if recorded is None else RunIdentity.from_dict(recorded, where="results.json")

    @property
    def oracle_audit(self) -> dict[str, Any] | None:
        """A person's audit of the oracle stored with the run (:mod:`genEval.reports.audit`), None when not audited."""
        return self.extra.get("oracle_audit")

    @property
    def confidence(self) -> RunConfidence:
        """The run's selective prediction, calibration and -MSP detection scores (results.json ``confidence``,
        :mod:`genEval.scores.confidence`); "not recorded" for a run written before confidence was recorded."""
        return RunConfidence.from_dict(self.extra.get("confidence"))

    def with_extra(self, key: str, value: Any) -> EvalResult:
        """This result with the results.json entry ``key`` set to ``value`` (a later step's, e.g. an oracle audit)."""
        return replace(self, extra={**self.extra, key: value})

    @property
    def metrics(self) -> dict[str, float | None]:
        """Point values in percent of the scores shown in leaderboards (``sa``, ``sa_validated``, ``ra``,
        ``vr``, ``vr_conditional``, ``pa``, ``fmr``, ``fmr_validated``, ``fmr_chance_corrected``, the oracle's
        accuracies, ``unchanged_share``)."""
        return {k: e.value for k, e in self.scores.estimates.items() if k in LEADERBOARD_SCORES}

    def summary(self) -> str:
        """The one-screen summary printed at the end of a run: every score of
        :data:`~genEval.scores.definitions.SCORES` that has a ``summary`` note, in their order."""
        s, shard = self.scores, self.shard
        lines = [
            f"genEval  seed={self.seed}{' (drawn)' if self.seed_drawn else ''}  n={s.n}  classes={s.num_classes}"
            + (f"  shard {shard.index}/{shard.count}" if shard.count > 1 else ""),
            f"  classifier: {self.components.get('classifier')}",
            f"  generator:  {self.components.get('generator')}",
            f"  oracle:     {self.components.get('oracle')}",
            *image_size_line(self.image_shapes),
            "  score (95% CI)",
            *(_score_line(s, score.key, score.label, score.summary) for score in SCORES if score.summary is not None),
        ]
        if s.fmr.value is not None and s.fmr.value > 100:
            lines.append(
                "  note: FMR > 100 is possible: PA is measured over the validated samples only (the images "
                "the oracle vouched for, often the easier ones) while SA is over all samples; FMR_v compares "
                "the same population."
            )
        if "confidence" in self.extra:
            lines += [
                "  confidence (selective prediction, calibration, -MSP detection; 95% CI)",
                *self.confidence.lines(),
            ]
        if "total_s" in self.timings:
            lines.append(f"  time {self.timings['total_s']:.1f}s")
        lines += [f"  WARNING: {w}" for w in self.warnings]
        if self.run_dir:
            lines.append(f"  run directory: {self.run_dir}")
        return "\n".join(lines)


def _score_line(scores: Scores, key: str, label: str, note: str) -> str:
    """``  SA   70.00 [..]   (7/10)``: a score's label, estimate and summary note (``{k}``, ``{n}``, the counts)."""
    est = scores.estimates.get(key)
    if est is None:
        return f"  {label:<4} not recorded"
    counts = {k: v for k, v in vars(scores).items() if k != "estimates"}
    text = note.format(**{**counts, "k": est.k, "n": est.n})
    return f"  {label:<4} {est.fmt()}" + (f"   ({text})" if text else "")


def image_size_line(shapes: dict | None, resized_only: bool = False) -> list[str]:
    """The sizes the run worked at: the data's images and the generator's (its ``image_size`` may resize them);
    ``resized_only``: nothing when the two agree."""
    if not shapes or "original" not in shapes or "perturbed" not in shapes:
        return []
    data, gen = ("x".join(str(v) for v in shapes[k][-2:]) for k in ("original", "perturbed"))
    if data == gen:
        return [] if resized_only else [f"  image size: {data} px (data and generator)"]
    return [f"  image size: data {data} px, searched and scored at {gen} px (generator.image_size)"]
