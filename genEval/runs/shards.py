"""Merging the shards of one evaluation into the run directory an unsharded evaluation would have written.

A sharded evaluation (``shard.index=i shard.count=n``, one run directory per shard) is exact: every sample's
random draws depend on ``(seed, source id)`` only, so each shard computes the very records the unsharded run
would have. :func:`merge_runs` checks that the shards belong together (same config, seed, components, data,
shard count; every shard present once; every source present once), concatenates their records in data-set
order, copies their tensor parts, and scores the result with the driver's own :func:`genEval.runs.summary.summarize`
-- so scores, intervals and the per-class table equal those of the unsharded run. Sources a shard skipped as
unreadable (``data.skip_unreadable``) count as present and are listed once in the merged ``skipped``.
``compare``, ``export``, ``fit-mask`` and ``report`` read the merged directory like any other run.

A Hydra multirun over the shards (``geneval -m shard.count=N 'shard.index=range(N)' ...``) merges itself at its end
(:func:`merge_sweep`, called by the ``MergeShards`` callback of ``conf/config.yaml``) into ``<sweep dir>/merged``, and
:func:`resolve_run_dir` lets every command that reads a run take the sweep directory for that merged run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from genEval.runs.identity import RunSources, Shard
from genEval.runs.parts import IMAGES, iter_tensor_parts
from genEval.runs.reader import RESULTS, RUN, SAMPLES, RunDir, read_unique_records
from genEval.runs.results import EvalResult
from genEval.runs.summary import summarize
from genEval.runs.writer import RunWriter, save_grid
from genEval.scores.outcomes import SampleRecord

log = logging.getLogger(__name__)


def _sharded(root: Path) -> list[RunDir]:
    """The run directories of sharded runs (``shard.count > 1``) under ``root``."""
    return [r for q in sorted(root.rglob(RUN)) if (r := RunDir(q.parent)).identity.shard.count > 1]


def find_shard_dirs(paths: Sequence[str | Path | RunDir]) -> list[RunDir]:
    """Expand ``paths``: a shard's run directory stays; any other directory (a multirun directory, a torchrun
    output directory) is searched for run directories of sharded runs."""
    out: list[RunDir] = []
    for raw in paths:
        run = RunDir.of(raw)
        if (run.path / RUN).is_file():
            out.append(run)
        elif run.path.is_dir():
            found = _sharded(run.path)
            if not found:
                raise FileNotFoundError(f"no sharded run (a {RUN} of a run with shard.count > 1) under '{run}'.")
            out += found
        else:
            raise FileNotFoundError(f"shard directory '{run}' does not exist.")
    return out


def check_shards(runs: Sequence[RunDir]) -> list[RunDir]:
    """``runs`` ordered by shard index, after checking that they form one complete evaluation."""
    if not runs:
        raise ValueError("geneval merge needs the shard run directories (or a multirun directory holding them).")
    unfinished = [str(r) for r in runs if not r.finished]
    if unfinished:
        raise ValueError(f"shards not finished (no results.json): {unfinished}. Rerun them (they resume) first.")
    first = runs[0].identity.of_evaluation()
    for run in runs[1:]:
        diff = first.differences(run.identity.of_evaluation())
        if diff:
            raise ValueError(
                f"'{run}' is not a shard of the same evaluation as '{runs[0]}'; differing keys: "
                f"{'; '.join(diff[:10])}. Merge only shards of one config, seed, data and generator."
            )
    count = runs[0].identity.shard.count
    by_index: dict[int, list[RunDir]] = {}
    for run in runs:
        by_index.setdefault(run.identity.shard.index, []).append(run)
    twice = {i: [str(r) for r in rs] for i, rs in by_index.items() if len(rs) > 1}
    if twice:
        raise ValueError(f"shard(s) given more than once: {twice}. Pass each shard once.")
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        raise ValueError(
            f"shard(s) {missing} of {count} are missing; run them (shard.index=I shard.count={count}) and merge again."
        )
    return sorted(runs, key=lambda r: r.identity.shard.index)


def merge_runs(paths: Sequence[str | Path | RunDir], out_dir: str | Path) -> EvalResult:
    """Merge the shard run directories found in ``paths`` into the run directory ``out_dir``."""
    runs = check_shards(find_shard_dirs(paths))
    first = runs[0].identity
    count, n_total = first.shard.count, first.sources.n_total
    per_shard = [_shard_records(run, n_total) for run in runs]
    unread = [r.results.skipped for r in runs]  # data.skip_unreadable: the sources each shard could not read
    skipped = [s or [] for s in unread]
    _check_sources(runs, per_shard, n_total, skipped)
    results = runs[0].results
    config = results.config
    ident = replace(first, shard=Shard(), sources=_merged_sources(runs, per_shard))
    writer = RunWriter.open(
        out_dir,
        ident,
        save_latents=config.save_latents,
        save_images=config.save_images,
        generator=ident.components["generator"],
    )
    try:
        if writer.done and not writer.finished_before:
            raise ValueError(f"'{out_dir}' holds part of an earlier merge; remove it and merge again.")
        records = []
        for run, recs in zip(runs, per_shard):
            renumber = {p: writer.adopt_part(run.path, p) for p in sorted({r.part for r in recs if r.part >= 0})}
            records += [replace(r, part=renumber.get(r.part, -1)) for r in recs]
        records.sort(key=lambda r: r.index)
        writer.add_records(records)
        timings = {
            "total_s": sum(r.results.timings.get("total_s", 0.0) for r in runs),
            "loop_s": sum(r.results.timings.get("loop_s", 0.0) for r in runs),
            "shards": count,
        }
        result = summarize(
            records,
            results.class_names,
            config=replace(config, values={**config.values, "merged_from": [str(r) for r in runs]}),
            identity=ident,
            seed_drawn=results.seed_drawn,
            device=results.environment.get("device", "cpu"),
            run_dir=str(writer.dir),
            timings=timings,
            details={
                "skipped": None
                if all(s is None for s in unread)
                else sorted((x for s in skipped for x in s), key=_pos),
                "ood_data": results.extra.get("ood_data"),  # every shard scored the same OOD images
            },
        )
        if config.save_images:
            _grid(writer.dir, records, config.grid_size)
        writer.finish(records, result.to_dict())
    except BaseException:
        writer.close()
        raise
    log.info("merged %d shards (%d samples) into %s", count, len(records), writer.dir)
    return result


def _shard_records(run: RunDir, n_total: int) -> list[SampleRecord]:
    """A shard's records, one per source (a duplicate with the same content is dropped with a warning; a different
    one, a record of another shard's source or a line that is no record is refused, naming file and line)."""
    path = run.path / SAMPLES
    positions = run.identity.shard.positions(n_total)
    return read_unique_records(path, path.read_text(encoding="utf-8"), dict.fromkeys(positions))


def _pos(skip: dict) -> int:
    return int(skip["position"])


def _check_sources(
    runs: list[RunDir], per_shard: list[list[SampleRecord]], n_total: int, skipped: list[list[dict]]
) -> None:
    seen: dict[str, RunDir] = {}
    for run, recs, unread in zip(runs, per_shard, skipped):
        dup = [r.source_id for r in recs if r.source_id in seen]
        if dup:
            raise ValueError(
                f"source(s) {dup[:5]} appear in both '{seen[dup[0]]}' and '{run}'; each source must be "
                "evaluated by one shard."
            )
        seen.update((r.source_id, run) for r in recs)
        shard = run.identity.shard
        want = set(shard.positions(n_total))
        got = {r.index for r in recs} | {_pos(s) for s in unread}  # a skipped source was read and left out
        if got != want:
            raise ValueError(
                f"'{run}' (shard {shard.index} of {shard.count}) holds {len(got)} sources but should hold "
                f"{len(want)}: missing positions {sorted(want - got)[:10]}, unexpected {sorted(got - want)[:10]}."
            )


def _merged_sources(runs: list[RunDir], per_shard: list[list[SampleRecord]]) -> RunSources:
    """The ``sources`` identity of the unsharded run: all sources, hashed in data-set order."""
    first = runs[0].identity.sources
    sha256 = None
    if all(r.identity.sources.sha256 is not None for r in runs):
        ids = [r.source_id for r in sorted((r for recs in per_shard for r in recs), key=lambda r: r.index)]
        sha256 = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    # how the sources were chosen (e.g. a data.limit above the size) is the same for every shard
    return RunSources(first.data, first.n_total, first.n_total, first.selection, sha256)


def _grid(run_dir: Path, records: list[SampleRecord], k: int) -> None:
    """``grid.png`` of the first ``k`` validated samples, as the driver draws it."""
    picked = [r for r in records if r.validated][:k]
    if not picked:
        return
    rows = {r.source_id: None for r in picked}
    for recs, tensors in iter_tensor_parts(run_dir, IMAGES, picked):
        for j, r in enumerate(recs):
            rows[r.source_id] = (tensors["original"][j], tensors["perturbed"][j])
    originals = torch.stack([rows[r.source_id][0] for r in picked]).float() / 255
    perturbed = torch.stack([rows[r.source_id][1] for r in picked]).float() / 255
    save_grid(run_dir / "grid.png", originals, perturbed, nrow=k)


#: Where a sweep's shards are merged: ``<sweep dir>/merged`` (``merged-<k>`` when one sweep holds several evaluations).
MERGED = "merged"


def shard_groups(runs: Sequence[RunDir]) -> list[list[RunDir]]:
    """Shard run directories grouped by evaluation (config, seed, components, data, shard count), in the order
    their first shard appears."""
    groups: dict[str, list[RunDir]] = {}
    for run in runs:
        key = json.dumps(run.identity.of_evaluation().to_dict(), sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def merge_sweep(sweep_dir: str | Path) -> list[tuple[Path, EvalResult]]:
    """Merge the shards a multirun wrote under ``sweep_dir`` into ``<sweep_dir>/merged``.

    Returns ``(merged directory, result)`` per evaluation found; empty when the sweep holds no sharded run (a
    multirun over other settings). A sweep over several evaluations (e.g. ``seed=1,2`` x shards) gets one merged
    run each, ``merged-0``, ``merged-1``, ... in the order of their first shard. Raises as :func:`merge_runs` when
    a shard is missing, unfinished or of another evaluation.
    """
    sweep = Path(sweep_dir).expanduser()
    runs = _sharded(sweep)
    if not runs:
        return []
    groups = shard_groups(runs)
    outs = [sweep / MERGED] if len(groups) == 1 else [sweep / f"{MERGED}-{k}" for k in range(len(groups))]
    return [(out, merge_runs(group, out)) for group, out in zip(groups, outs, strict=True)]


def _is_merged(d: Path) -> bool:
    return d.name == MERGED or d.name.startswith(f"{MERGED}-")


def resolve_run_dir(path: str | Path) -> Path:
    """``path`` when it is a run directory; the merged run when it is the directory of a sharded sweep.

    A sweep directory (``hydra.sweep.dir`` of ``geneval -m shard.count=N ...``) holds the shards and, once merged,
    ``merged/``: that run is what ``export``, ``report``, ``compare`` and ``fit-mask`` mean by the sweep. A sweep
    with shards but no merged run, or with several merged evaluations, gets an error that says what to do; any
    other path is returned unchanged (the caller reports what is wrong with it).
    """
    p = Path(path).expanduser()
    if (p / RESULTS).is_file() or not p.is_dir():
        return p
    merged = sorted(q for q in p.iterdir() if _is_merged(q) and (q / RESULTS).is_file())
    if len(merged) == 1:
        log.info("'%s' is a sweep directory: reading its merged run '%s'", p, merged[0])
        return merged[0]
    if len(merged) > 1:
        raise ValueError(
            f"'{p}' is a sweep of {len(merged)} evaluations, merged into {', '.join(q.name for q in merged)}; "
            f"pass one of them, e.g. {merged[0]}."
        )
    shards = _sharded(p)
    if shards:
        raise FileNotFoundError(
            f"'{p}' holds {len(shards)} shard run(s) but no merged run; merge them first: "
            f"geneval merge runs={p} out={p / MERGED}"
        )
    return p
