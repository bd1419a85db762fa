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
from typing import Any

import torch

from genEval.runs.rundir import (
    IMAGES,
    RESULTS,
    RUN,
    SAMPLES,
    EvalResult,
    RunWriter,
    SampleRecord,
    Shard,
    identity_differences,
    iter_tensor_parts,
    read_results,
    read_run_identity,
    read_unique_records,
    save_grid,
)
from genEval.runs.summary import summarize

log = logging.getLogger(__name__)


def find_shard_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Expand ``paths``: a shard's run directory stays; any other directory (a multirun directory, a torchrun
    output directory) is searched for run directories of sharded runs."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if (p / RUN).is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(q.parent for q in p.rglob(RUN) if read_run_identity(q.parent)["shard"]["count"] > 1)
            if not found:
                raise FileNotFoundError(f"no sharded run (a {RUN} of a run with shard.count > 1) under '{p}'.")
            out += found
        else:
            raise FileNotFoundError(f"shard directory '{p}' does not exist.")
    return out


def _common_identity(identity: dict) -> dict:
    """The part of a shard's identity every shard of one evaluation shares."""
    sources = identity["sources"]
    return {
        **identity,
        "shard": {"count": identity["shard"]["count"]},
        "sources": {k: sources[k] for k in ("data", "n_total", "selection") if k in sources},
    }


def check_shards(dirs: Sequence[Path]) -> tuple[list[dict], int]:
    """Identities of ``dirs`` ordered by shard index, after checking that they form one complete evaluation."""
    if not dirs:
        raise ValueError("geneval merge needs the shard run directories (or a multirun directory holding them).")
    identities = [read_run_identity(d) for d in dirs]
    unfinished = [str(d) for d in dirs if not (d / "results.json").is_file()]
    if unfinished:
        raise ValueError(f"shards not finished (no results.json): {unfinished}. Rerun them (they resume) first.")
    first = _common_identity(identities[0])
    for d, ident in zip(dirs[1:], identities[1:]):
        diff = identity_differences(first, _common_identity(ident))
        if diff:
            raise ValueError(
                f"'{d}' is not a shard of the same evaluation as '{dirs[0]}'; differing keys: "
                f"{'; '.join(diff[:10])}. Merge only shards of one config, seed, data and generator."
            )
    count = identities[0]["shard"]["count"]
    by_index: dict[int, list[Path]] = {}
    for d, ident in zip(dirs, identities):
        by_index.setdefault(ident["shard"]["index"], []).append(d)
    twice = {i: [str(p) for p in ds] for i, ds in by_index.items() if len(ds) > 1}
    if twice:
        raise ValueError(f"shard(s) given more than once: {twice}. Pass each shard once.")
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        raise ValueError(
            f"shard(s) {missing} of {count} are missing; run them (shard.index=I shard.count={count}) and merge again."
        )
    order = sorted(range(len(dirs)), key=lambda k: identities[k]["shard"]["index"])
    return [identities[k] for k in order], count


def merge_runs(paths: Sequence[str | Path], out_dir: str | Path) -> EvalResult:
    """Merge the shard run directories found in ``paths`` into the run directory ``out_dir``."""
    dirs = find_shard_dirs(paths)
    identities, count = check_shards(dirs)
    dirs = sorted(dirs, key=lambda d: read_run_identity(d)["shard"]["index"])
    results = [read_results(d) for d in dirs]
    n_total = identities[0]["sources"]["n_total"]
    per_shard = [_shard_records(d, Shard(i, count), n_total) for i, d in enumerate(dirs)]
    unread = [r.skipped for r in results]  # data.skip_unreadable: the sources each shard could not read
    skipped = [s or [] for s in unread]
    _check_sources(dirs, per_shard, count, n_total, skipped)
    config = results[0].config
    ident = {
        **identities[0],
        "shard": {"index": 0, "count": 1},
        "sources": _merged_sources(identities, per_shard, n_total),
    }
    writer = RunWriter.open(
        out_dir,
        ident,
        save_latents=config.save_latents,
        save_images=config.save_images,
        generator=ident["components"]["generator"],
    )
    try:
        if writer.done and not writer.finished_before:
            raise ValueError(f"'{out_dir}' holds part of an earlier merge; remove it and merge again.")
        records = []
        for d, recs in zip(dirs, per_shard):
            renumber = {p: writer.adopt_part(d, p) for p in sorted({r.part for r in recs if r.part >= 0})}
            records += [replace(r, part=renumber.get(r.part, -1)) for r in recs]
        records.sort(key=lambda r: r.index)
        writer.add_records(records)
        timings = {
            "total_s": sum(r.timings.get("total_s", 0.0) for r in results),
            "loop_s": sum(r.timings.get("loop_s", 0.0) for r in results),
            "shards": count,
        }
        result = summarize(
            records,
            results[0].class_names,
            config.scoring,
            identity=ident,
            seed_drawn=results[0].seed_drawn,
            config={**config.to_dict(), "merged_from": [str(d) for d in dirs]},
            device=results[0].environment.get("device", "cpu"),
            run_dir=str(writer.dir),
            timings=timings,
            details={
                "skipped": None if all(s is None for s in unread) else sorted((x for s in skipped for x in s), key=_pos)
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


def _shard_records(d: Path, shard: Shard, n_total: int) -> list[SampleRecord]:
    """A shard's records, one per source (a duplicate with the same content is dropped with a warning; a different
    one, a record of another shard's source or a line that is no record is refused, naming file and line)."""
    path = d / SAMPLES
    return read_unique_records(path, path.read_text(encoding="utf-8"), dict.fromkeys(shard.positions(n_total)))


def _pos(skip: dict) -> int:
    return int(skip["position"])


def _check_sources(
    dirs: list[Path], per_shard: list[list[SampleRecord]], count: int, n_total: int, skipped: list[list[dict]]
) -> None:
    seen: dict[str, Path] = {}
    for i, (d, recs, unread) in enumerate(zip(dirs, per_shard, skipped)):
        dup = [r.source_id for r in recs if r.source_id in seen]
        if dup:
            raise ValueError(
                f"source(s) {dup[:5]} appear in both '{seen[dup[0]]}' and '{d}'; each source must be "
                "evaluated by one shard."
            )
        seen.update((r.source_id, d) for r in recs)
        want = set(Shard(i, count).positions(n_total))
        got = {r.index for r in recs} | {_pos(s) for s in unread}  # a skipped source was read and left out
        if got != want:
            raise ValueError(
                f"'{d}' (shard {i} of {count}) holds {len(got)} sources but should hold {len(want)}: "
                f"missing positions {sorted(want - got)[:10]}, unexpected {sorted(got - want)[:10]}."
            )


def _merged_sources(identities: list[dict], per_shard: list[list[SampleRecord]], n_total: int) -> dict[str, Any]:
    """The ``sources`` identity of the unsharded run: all sources, hashed in data-set order."""
    sources = {"data": identities[0]["sources"]["data"], "n_total": n_total, "n": n_total}
    if "selection" in identities[0]["sources"]:  # how the sources were chosen (e.g. a data.limit above the size)
        sources["selection"] = identities[0]["sources"]["selection"]
    if all("sha256" in i["sources"] for i in identities):
        ids = [r.source_id for r in sorted((r for recs in per_shard for r in recs), key=lambda r: r.index)]
        sources["sha256"] = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return sources


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


def shard_groups(dirs: Sequence[Path]) -> list[list[Path]]:
    """Shard run directories grouped by evaluation (config, seed, components, data, shard count), in the order
    their first shard appears."""
    groups: dict[str, list[Path]] = {}
    for d in dirs:
        key = json.dumps(_common_identity(read_run_identity(d)), sort_keys=True, default=str)
        groups.setdefault(key, []).append(d)
    return list(groups.values())


def merge_sweep(sweep_dir: str | Path) -> list[tuple[Path, EvalResult]]:
    """Merge the shards a multirun wrote under ``sweep_dir`` into ``<sweep_dir>/merged``.

    Returns ``(merged directory, result)`` per evaluation found; empty when the sweep holds no sharded run (a
    multirun over other settings). A sweep over several evaluations (e.g. ``seed=1,2`` x shards) gets one merged
    run each, ``merged-0``, ``merged-1``, ... in the order of their first shard. Raises as :func:`merge_runs` when
    a shard is missing, unfinished or of another evaluation.
    """
    sweep = Path(sweep_dir).expanduser()
    dirs = sorted(q.parent for q in sweep.rglob(RUN) if read_run_identity(q.parent)["shard"]["count"] > 1)
    if not dirs:
        return []
    groups = shard_groups(dirs)
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
    shards = [q.parent for q in p.rglob(RUN) if read_run_identity(q.parent)["shard"]["count"] > 1]
    if shards:
        raise FileNotFoundError(
            f"'{p}' holds {len(shards)} shard run(s) but no merged run; merge them first: "
            f"geneval merge runs={p} out={p / MERGED}"
        )
    return p
