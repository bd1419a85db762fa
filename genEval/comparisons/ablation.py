"""Ablation: the same models, sources and seeds ranked under several values of one setting (paper Table 3 for the
generator; docs/comparing.md for any key: ``geneval compare 'ablate={search.budget:[10,50]}'``).

The paper re-ranks its Table 2 interventions under five generators (ADM, Improved DDPM, Efficient-VDVAE,
StyleGAN-XL, VQGAN) and finds the rankings unchanged; its reviewers' main objection is the converse risk, an
intervention trained with a generator like the test's looking robust because of the generator. An ablation answers
both with one command: ``geneval compare generators=[...]`` runs the comparison once per generator
(:func:`genEval.campaigns.run.run_campaign`, ``Design(ablate="generator")``) with the **same repetition seeds**
(so the same source images per repetition, re-drawn by :func:`genEval.campaigns.draws.data_for_seed`, and the same start
noise), into ``<out_dir>/generators/<generator>/``, and :func:`build_ablation` puts the per-generator leaderboards
together:

* the rank agreement of every pair of generators: Kendall tau-b between their rankings by ``rank_by``
  (:func:`genEval.scores.rankings.kendall_tau`) with a percentile interval from the bootstrap over source images
  (:func:`genEval.scores.intervals.model_draws`: one resample of the shared sources drives every model under every
  generator, so the two rankings of a draw are paired);
* per model its rank and score under each generator, whether its rank depends on the generator (the point ranks
  differ), and the share of bootstrap resamples in which its rank is not the same under every generator.

:func:`write_ablation` writes ``comparison.json`` (every generator's comparison and the agreement),
``leaderboard.csv`` (the leaderboard columns of every generator's rows, with ``generator`` last) and
``leaderboard.md``; each generator's own folder holds its usual comparison files.

Any setting (docs/comparing.md): a campaign runs the same under each value of ``Design.ablate`` (the search budget
or step size, the oracle, its prompt templates, the generator), each value a :class:`~genEval.campaigns.plan.Setup`,
into ``<out_dir>/settings/<label>/``; the ablation is the same :class:`GeneratorAblation` with ``key`` naming the
setting and ``generators`` holding the value labels. ``compare generators=[...]`` is its case ``key="generator"``
(files under ``generators/``). This module only reads and writes finished ablations; running them is
:mod:`genEval.campaigns.run`'s job.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from pathlib import Path

import numpy as np

from genEval.comparisons.aggregate import build_comparison
from genEval.comparisons.leaderboard import Comparison, score_label, write_comparison
from genEval.comparisons.loading import load_runs
from genEval.comparisons.ranking import rank_draws, rank_reason
from genEval.comparisons.settings import ComparisonSettings
from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from genEval.runs.reader import RunDir, find_run_dirs
from genEval.runs.results import ComparisonRecord
from genEval.scores.intervals import MIN_BOOTSTRAP_SOURCES, few_sources, model_draws, percentile
from genEval.scores.rankings import kendall_tau, rank

log = logging.getLogger(__name__)

ABLATION_KIND = "generator_ablation"
#: The kind of an ablation of any other setting (comparison.json ``kind``).
SETTING_ABLATION_KIND = "ablation"


@dataclass(frozen=True)
class RankAgreement:
    """Kendall tau-b between the rankings of the models under generators ``a`` and ``b`` (by the ablation's
    ``rank_by``), with the ``level`` percentile interval of tau over ``n_defined`` bootstrap resamples of the
    source images; None (with ``reason``) where it is undefined."""

    a: str
    b: str
    tau: float | None
    low: float | None
    high: float | None
    n_models: int
    n_boot: int
    n_defined: int
    level: float
    method: str
    reason: str = ""

    def fmt(self) -> str:
        if self.tau is None:
            return f"undefined ({self.reason})"
        if self.low is None:
            return f"{self.tau:.3f} (no interval: {self.reason})"
        return f"{self.tau:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class ModelRanks:
    """One model across generators: its rank and ranking score under each, whether its rank depends on the
    generator (the ranks differ), and ``share_changed``, the share of bootstrap resamples of the sources in which
    its rank is not the same under every generator (None without an interval)."""

    model: str
    ranks: dict[str, int | None]
    values: dict[str, float | None]
    depends: bool
    share_changed: float | None = None


@dataclass(frozen=True)
class GeneratorAblation:
    """The models ranked under each generator (``comparisons``, one :class:`Comparison` per generator, same
    seeds), the rank agreement of every pair of generators and each model's ranks across them. ``key``: the
    setting varied (``generator``, or any config key such as ``search.budget``); ``generators`` then lists the
    labels of its values (``budget=10``, ...)."""

    generators: list[str]
    comparisons: dict[str, Comparison]
    agreement: list[RankAgreement]
    models: list[ModelRanks]
    rank_by: str
    rank_reason: str
    n_boot: int
    level: float
    repetition_seeds: list[int | None]
    warnings: list[str] = field(default_factory=list)
    out_dir: str | None = None
    key: str = "generator"

    @property
    def dependent(self) -> list[str]:
        """The models whose rank depends on the generator (the ablated setting)."""
        return [m.model for m in self.models if m.depends]

    @property
    def values(self) -> list[str]:
        """The labels of the ablated setting's values (the generators in a generator ablation)."""
        return self.generators

    @property
    def what(self) -> str:
        """How one value is named in text: ``generator``, or ``<key> value``."""
        return "generator" if self.key == "generator" else f"{self.key} value"

    @property
    def kind(self) -> str:
        return ABLATION_KIND if self.key == "generator" else SETTING_ABLATION_KIND

    def to_dict(self) -> dict:
        return {
            "schema_version": 1,
            "kind": self.kind,
            "key": self.key,
            "generators": self.generators,
            "rank_by": self.rank_by,
            "rank_reason": self.rank_reason,
            "agreement": [asdict(a) for a in self.agreement],
            "models": [asdict(m) for m in self.models],
            "dependent": self.dependent,
            "n_boot": self.n_boot,
            "level": self.level,
            "repetition_seeds": self.repetition_seeds,
            "warnings": self.warnings,
            "out_dir": self.out_dir,
            "comparisons": {g: c.to_dict() for g, c in self.comparisons.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> GeneratorAblation:
        return cls(
            generators=list(d["generators"]),
            comparisons={g: Comparison.from_dict(c) for g, c in d["comparisons"].items()},
            agreement=[RankAgreement(**a) for a in d["agreement"]],
            models=[ModelRanks(**m) for m in d["models"]],
            rank_by=d["rank_by"],
            rank_reason=d.get("rank_reason", ""),
            n_boot=int(d["n_boot"]),
            level=float(d["level"]),
            repetition_seeds=list(d.get("repetition_seeds") or []),
            warnings=list(d.get("warnings") or []),
            out_dir=d.get("out_dir"),
            key=str(d.get("key") or "generator"),
        )

    # ---------------------------------------------------------------------------------- text renderings
    def notes(self) -> list[str]:
        label = score_label(self.rank_by)
        out = [f"ranked by {label} under each {self.what}: {self.rank_reason}"]
        out += [f"rank agreement {a.a} vs {a.b}: Kendall tau {a.fmt()}" for a in self.agreement]
        dep = [m for m in self.models if m.depends]
        if dep:
            out += [
                f"{m.model}: rank depends on the {self.key} ("
                + ", ".join(f"{g} {_rank(m.ranks.get(g))}" for g in self.generators)
                + ")"
                for m in dep
            ]
        else:
            out.append(f"every model keeps its rank under every {self.what}")
        return out + [f"WARNING: {w}" for w in self.warnings]

    def summary(self) -> str:
        """What ``geneval compare generators=[...]`` prints: the ranks side by side, the agreement, then each
        generator's leaderboard."""
        label = score_label(self.rank_by)
        width = max(8, *(len(g) for g in self.generators))
        head = f"{'model':<20} " + " ".join(f"{g[:width]:>{width}}" for g in self.generators) + "  depends"
        lines = [
            f"genEval {self.key} ablation  {len(self.models)} models x {len(self.generators)} {self.what}s "
            f"(same sources and seeds; repetition seeds {self.repetition_seeds})",
            f"rank by {label} (value) under each {self.what}:",
            head,
            "-" * len(head),
        ]
        for m in self.models:
            cells = [f"{_rank(m.ranks.get(g))} ({_num(m.values.get(g), 1, '-')})" for g in self.generators]
            lines.append(
                f"{m.model[:20]:<20} "
                + " ".join(f"{c:>{width}}" for c in cells)
                + f"  {'yes' if m.depends else 'no'}"
                + (f" ({100 * m.share_changed:.0f}% of resamples)" if m.share_changed is not None else "")
            )
        lines += ["", *self.notes()]
        for g in self.generators:
            lines += ["", f"=== {self.what} {g} ===", self.comparisons[g].summary()]
        if self.out_dir:
            lines += ["", f"ablation directory: {self.out_dir} (leaderboard.md, comparison.json, report.html)"]
        return "\n".join(lines)

    def markdown(self) -> str:
        label = score_label(self.rank_by)
        gens = self.generators
        lines = [
            f"# genEval {self.key} ablation",
            "",
            f"{len(self.models)} models under {len(gens)} {self.what}s with the same source images and seeds "
            f"(repetition seeds {self.repetition_seeds}). Ranked by {label} (rank_by={self.rank_by}): "
            f"{self.rank_reason}.",
            "",
            f"## Ranks by {self.what}",
            "",
            "| model | " + " | ".join(gens) + f" | rank depends on the {self.key} |",
            "|---|" + "---|" * len(gens) + "---|",
        ]
        for m in self.models:
            cells = [f"{_rank(m.ranks.get(g))} ({_num(m.values.get(g), 2, '-')})" for g in gens]
            share = f" ({100 * m.share_changed:.0f}% of resamples)" if m.share_changed is not None else ""
            lines.append(f"| {m.model} | " + " | ".join(cells) + f" | {'yes' if m.depends else 'no'}{share} |")
        lines += [
            "",
            f"## Rank agreement (Kendall tau-b between {label} rankings, {100 * self.level:g}% bootstrap interval)",
            "",
            f"| {self.what} a | {self.what} b | tau | models | method |",
            "|---|---|---|---|---|",
        ]
        for a in self.agreement:
            lines.append(f"| {a.a} | {a.b} | {a.fmt()} | {a.n_models} | {a.method} |")
        lines += ["", "## Notes", "", *[f"- {n}" for n in self.notes()], ""]
        for g in gens:
            md = self.comparisons[g].markdown().replace("# genEval leaderboard", f"## Leaderboard under {g}", 1)
            lines += [md.replace("\n## ", "\n### "), ""]
        return "\n".join(lines)

    def csv(self) -> str:
        """Every generator's ``leaderboard.csv`` rows (the same columns, in leaderboard order), ``generator`` last."""
        out = io.StringIO()
        writer = None
        for g in self.generators:
            rows = list(csv.DictReader(io.StringIO(self.comparisons[g].csv())))
            for row in rows:
                row[self.key] = g
                if writer is None:
                    writer = csv.DictWriter(out, fieldnames=list(row), lineterminator="\n")
                    writer.writeheader()
                writer.writerow(row)
        return out.getvalue()


def _rank(v: int | None) -> str:
    return "-" if v is None else str(v)


def _num(v: float | None, digits: int, missing: str) -> str:
    return missing if v is None else f"{v:.{digits}f}"


def load_comparison(path: str | Path) -> Comparison | GeneratorAblation:
    """A ``comparison.json`` (or the directory holding it): a :class:`Comparison`, or a :class:`GeneratorAblation`
    when it was written by an ablation (of the generator or of any setting)."""
    p = Path(path)
    p = p / "comparison.json" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"no comparison.json at '{p}'; make one with `geneval compare`.")
    d = json.loads(p.read_text(encoding="utf-8"))
    ablation = d.get("kind") in (ABLATION_KIND, SETTING_ABLATION_KIND)
    return GeneratorAblation.from_dict(d) if ablation else Comparison.from_dict(d)


# ------------------------------------------------------------------------------------------ agreement
def _check_same_models(runs: Mapping[str, Mapping[str, list[RunDir]]]) -> list[str]:
    gens = list(runs)
    models = list(runs[gens[0]])
    for g in gens[1:]:
        if set(runs[g]) != set(models):
            raise ValueError(
                f"generator {g} has models {sorted(runs[g])} but {gens[0]} has {sorted(models)}; a generator "
                "ablation ranks the same models under every generator."
            )
    return models


def _agreement(
    a: str,
    b: str,
    pa: np.ndarray,
    pb: np.ndarray,
    da: np.ndarray,
    db: np.ndarray,
    n_sources: int,
    level: float,
    what: str = "generator",
) -> RankAgreement:
    """Kendall tau between point values ``pa``/``pb`` (M,) and its distribution over draws ``da``/``db`` (B, M)."""
    ok = np.isfinite(pa) & np.isfinite(pb)
    n_boot = len(da)
    common = dict(n_models=int(ok.sum()), n_boot=n_boot, level=level)
    tau = kendall_tau(pa[ok], pb[ok]) if ok.sum() >= 2 else None
    if tau is None:
        return RankAgreement(
            a, b, None, None, None, n_defined=0, method="", reason="fewer than 2 models ranked, or all tied", **common
        )
    if n_sources < MIN_BOOTSTRAP_SOURCES:
        return RankAgreement(a, b, tau, None, None, n_defined=0, method="", reason=few_sources(n_sources), **common)
    taus = []
    for x, y in zip(da, db):
        keep = np.isfinite(x) & np.isfinite(y)
        t = kendall_tau(x[keep], y[keep]) if keep.sum() >= 2 else None
        if t is not None:
            taus.append(t)
    lo, hi = percentile(np.asarray(taus, dtype=float), level) if taus else (None, None)
    return RankAgreement(
        a,
        b,
        tau,
        lo,
        hi,
        n_defined=len(taus),
        method=f"bootstrap({n_boot}) over {n_sources} source images shared by every {what}",
        reason="" if taus else "tau is undefined in every resample",
        **common,
    )


def build_ablation(
    runs: Mapping[str, Mapping[str, list[RunDir]]],
    settings: ComparisonSettings | None = None,
    *,
    comparisons: Mapping[str, Comparison] | None = None,
    key: str = "generator",
) -> GeneratorAblation:
    """Aggregate loaded runs (generator -> model -> repetitions) into a :class:`GeneratorAblation`; no I/O.
    ``settings``: how every generator's runs are aggregated (:class:`ComparisonSettings`). ``comparisons``: the
    per-generator comparisons when already built (else built here). ``key``: the setting the runs differ in
    (default the generator; the runs' keys are then its value labels)."""
    settings = ComparisonSettings.coerce(settings)
    rank_by, n_boot, seed, level = settings.rank_by, settings.n_boot, settings.seed, settings.level
    if len(runs) < 2:
        raise ValueError(f"an ablation of {key} needs at least 2 values, got {list(runs)}.")
    gens = list(runs)
    models = _check_same_models(runs)
    comps = dict(comparisons or {})
    for g in gens:
        if g not in comps:
            comps[g] = build_comparison(runs[g], settings)
    num_classes = int(next(iter(runs[gens[0]].values()))[0].results.scores.num_classes)
    keys = ("sa", "pa", "fmr", *((rank_by,) if rank_by not in ("sa", "pa", "fmr", "er") else ()))
    _, draws, n_sources = model_draws(
        [[r.outcomes for r in runs[g][m]] for g in gens for m in models], num_classes, keys, n_boot, seed
    )
    m_count = len(models)
    point, boot = {}, {}
    for i, g in enumerate(gens):
        comp = comps[g]
        er = comp.effective_robustness.select([comp.models.index(m) for m in models])
        point[g] = np.array([np.nan if (v := _value(comp, m, rank_by)) is None else v for m in models], dtype=float)
        boot[g] = rank_draws(rank_by, keys, draws[:, i * m_count : (i + 1) * m_count], er)
    agreement = [
        _agreement(
            a, b, point[a], point[b], boot[a], boot[b], n_sources, level, "generator" if key == "generator" else "value"
        )
        for a, b in combinations(gens, 2)
    ]
    changed = _rank_changes(boot, gens) if n_sources >= MIN_BOOTSTRAP_SOURCES and len(draws) else None
    per_model = []
    for j, m in enumerate(models):
        ranks = {g: comps[g].row(m).rank for g in gens}
        per_model.append(
            ModelRanks(
                m,
                ranks,
                {g: _value(comps[g], m, rank_by) for g in gens},
                len(set(ranks.values())) > 1,
                None if changed is None else float(changed[j]),
            )
        )
    first = comps[gens[0]]
    per_model.sort(key=lambda r: (np.mean([v for v in r.ranks.values() if v is not None] or [np.inf]), r.model))
    warnings = [f"{g}: {w}" for g in gens for w in comps[g].warnings]
    return GeneratorAblation(
        generators=gens,
        comparisons=comps,
        agreement=agreement,
        models=per_model,
        rank_by=rank_by,
        rank_reason=rank_reason(rank_by),
        n_boot=n_boot,
        level=level,
        repetition_seeds=list(settings.repetition_seeds or first.settings.repetition_seeds),
        warnings=warnings,
        key=key,
    )


def _value(comp: Comparison, model: str, rank_by: str) -> float | None:
    row = comp.row(model)
    return row.er if rank_by == "er" else row[rank_by].value


def _rank_changes(boot: Mapping[str, np.ndarray], gens: Sequence[str]) -> np.ndarray:
    """Per model, the share of draws in which its competition rank is not the same under every generator."""
    n_draws, n_models = boot[gens[0]].shape
    differs = np.zeros(n_models)
    for i in range(n_draws):
        ranks = np.array([[np.nan if r is None else r for r in rank(list(boot[g][i]))] for g in gens], dtype=float)
        both_undefined = np.isnan(ranks) & np.isnan(ranks[0])
        differs += np.any((ranks != ranks[0]) & ~both_undefined, axis=0)
    return differs / max(n_draws, 1)


# ------------------------------------------------------------------------------------------ files
def write_ablation(ab: GeneratorAblation, out_dir: str | Path) -> GeneratorAblation:
    """Write ``comparison.json``, ``leaderboard.csv`` and ``leaderboard.md`` of the ablation into ``out_dir``
    (atomically); each generator's comparison files go to ``<out_dir>/generators/<generator>/`` unless they are
    already written elsewhere. Returns the ablation with ``out_dir`` set."""
    out = ensure_writable_dir(out_dir)
    sub = "generators" if ab.key == "generator" else "settings"
    comps = {g: c if c.out_dir else write_comparison(c, out / sub / g) for g, c in ab.comparisons.items()}
    ab = replace(ab, comparisons=comps, out_dir=str(out))
    atomic_write_json(out / "comparison.json", ab.to_dict())
    atomic_write_bytes(out / "leaderboard.csv", ab.csv().encode())
    atomic_write_bytes(out / "leaderboard.md", ab.markdown().encode())
    return ab


def runs_by_generator(run_dirs: Sequence[str | Path]) -> dict[str | None, list[Path]]:
    """Run directories grouped by the generator a generator ablation recorded for them (``config.comparison.
    generator``), or the value of the setting an ablation of any key recorded (``ablation_value``); runs without
    one are grouped under None. Folders are searched for runs."""
    grouped: dict[str | None, list[Path]] = {}
    for p in find_run_dirs(list(run_dirs)):
        rec = RunDir(p).results.config.comparison
        label = None if rec is None else (rec.ablation_value or rec.generator)
        grouped.setdefault(label, []).append(p)
    if len(grouped) > 1 and None in grouped:
        log.info("generator ablation: %d run(s) without a recorded generator left out", len(grouped[None]))
        del grouped[None]
    return grouped


def aggregate_ablation(
    run_dirs: Mapping[str, Sequence[str | Path]],
    settings: ComparisonSettings | None = None,
    *,
    out_dir: str | Path | None = None,
) -> GeneratorAblation:
    """A :class:`GeneratorAblation` from finished runs: generator -> its run directories (or folders holding
    them). With ``out_dir`` its files are written there (per-generator comparisons in ``generators/<name>/``)."""
    runs = {str(g): load_runs([str(d) for d in dirs]) for g, dirs in run_dirs.items()}
    keys = {
        (RunDir(d).results.config.comparison or ComparisonRecord()).ablation_key
        for dirs in run_dirs.values()
        for d in find_run_dirs([str(x) for x in dirs])[:1]
    }
    key = next(iter(keys)) if len(keys) == 1 and None not in keys else "generator"
    ab = build_ablation(runs, ComparisonSettings.coerce(settings), key=key)
    return ab if out_dir is None else write_ablation(ab, out_dir)
