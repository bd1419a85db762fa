"""The driver: sources, seeding, checks, progress, writing and resuming (the loop itself is in ``perturb.py``).

``evaluate(classifier=..., data=..., generator=..., oracle=...)`` runs the paper's dynamic evaluation
(Sec. 3) over a dataset and returns an :class:`~genEval.runs.rundir.EvalResult`; with ``output_dir`` it also
writes the run directory described in :mod:`genEval.runs.rundir`. The CLI (``geneval``) calls this same
function, so notebook and command line give identical results for identical inputs and seeds.

Scale-out and crash safety (all exact, not approximate):

* Every random draw of a sample is seeded from ``(run seed, source id)`` (:func:`sample_seed`), never from
  its batch, so ``batch_size`` and sharding change no decision.
* ``shard=Shard(i, n)`` evaluates the sources at positions ``i, i+n, i+2n, ...`` of the data set (whole
  source images; with ``data.limit`` the positions of the class-balanced order, so every shard is balanced
  too). ``genEval.runs.shards`` combines the shards into the run an unsharded evaluation would have written.
* A rerun on a directory holding an unfinished run of the same identity resumes it: recorded samples are
  not recomputed, and the final files equal those of an uninterrupted run.
* A source that cannot be decoded (:class:`~genEval.interfaces.UnreadableSource`) stops the run with that error,
  unless the data set has ``skip_unreadable`` set: then it is logged, left out of the samples and listed (position,
  source id, path, reason) under ``skipped`` in the results. Whether a file decodes depends on its bytes only, so
  the same sources are skipped whatever the batch size, the shard or the number of resumes (a resume reads the
  skipped files again and lists them again; ``data.skip_unreadable`` may be switched on to resume a run that
  stopped at a corrupt file).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from genEval.data.base import SubsetData
from genEval.interfaces import Classifier, Generator, ImageDataset, Oracle, UnreadableSource, check_images
from genEval.runs.rundir import (
    RUN,
    EvalResult,
    RunWriter,
    SampleRecord,
    Shard,
    read_results,
    read_run_identity,
    save_grid,
)
from genEval.runs.summary import summarize
from genEval.scores.intervals import INTERVALS
from genEval.search.batching import auto_batch_size, is_out_of_memory, too_large
from genEval.search.execution import EXECUTION_FIELDS, Execution, accelerate
from genEval.search.perturb import Outcome, Sample, SearchConfig, perturb
from genEval.style_mask import (
    AutoMask,
    NoMask,
    SparseMask,
    StyleMask,
    fit_mask_from_run,
    plot_style_mask,
    split_for_auto,
)

log = logging.getLogger(__name__)

#: Settings that change how fast a run goes, never what it finds: they may differ when a run is resumed.
EXECUTION_KEYS = (
    *(k for k in EXECUTION_FIELDS if k not in ("precision", "role_precision")),  # precision may flip a near-tie
    "progress",
    "log_interval",
    "hydra",
    "grid_size",
    "shard",
    "execution",
    "assets",  # where asset files were found: their bytes are checked by sha256, so the place changes nothing
    "data.skip_unreadable",
)


def sample_seed(seed: int, source_id: str) -> int:
    """The seed of every random draw of one sample: a function of the run seed and the source id only."""
    key = int.from_bytes(hashlib.sha256(source_id.encode()).digest()[:8], "little")
    return int(np.random.SeedSequence([int(seed), key]).generate_state(1)[0])


def _component_id(obj: Any) -> str:
    return str(getattr(obj, "name", None) or type(obj).__name__)


def _describe(obj: Any) -> str:
    """One line for the log: the component's settings, not its whole module tree."""
    if isinstance(obj, torch.nn.Module):
        return f"{type(obj).__name__}({obj.extra_repr()}) [{_component_id(obj)}]"
    return repr(obj)


def _source_ids(data: ImageDataset, positions: Sequence[int]) -> list[str] | None:
    """Source ids without reading images, when the data set can tell them (``source_id(i)``)."""
    get = getattr(data, "source_id", None)
    return [get(i) for i in positions] if callable(get) else None


def evaluate(
    classifier: Classifier,
    data: ImageDataset,
    generator: Generator,
    oracle: Oracle,
    search: SearchConfig | dict | None = None,
    *,
    seed: int | None = None,
    execution: Execution | None = None,
    output_dir: str | Path | None = None,
    mask: torch.Tensor | StyleMask | NoMask | SparseMask | AutoMask | None = None,
    mask_id: str | None = None,
    progress: bool | None = None,
    log_interval: float = 30.0,
    interval: str = "wilson",
    n_boot: int = 1000,
    grid_size: int = 8,
    gap_warn_points: float = 10.0,
    save_latents: bool = False,
    save_images: bool = False,
    shard: Shard | None = None,
    reference: str | None = None,
    config: dict[str, Any] | None = None,
) -> EvalResult:
    """Evaluate ``classifier`` on ``data`` by oracle-vetted latent perturbation (paper Algorithm 1).

    ``seed=None`` draws a fresh seed (a dynamic benchmark: new samples every run) and records it (a resumed
    run keeps the seed it started with); the same seed gives identical scores however the work is batched
    or sharded. ``execution``: device, batch size (None: chosen from the memory one search step needs), DataLoader
    workers, precision (fp32 | bf16 | fp16, all or per role), channels_last, compile
    (:class:`~genEval.search.execution.Execution`); recorded in results under ``execution``.
    ``progress=None`` shows a bar on a terminal, else a log line every ``log_interval`` seconds.
    ``gap_warn_points``: warn when accuracy on reconstructions (RA) is this many points below SA.
    ``mask``: a 0/1 tensor broadcastable to one latent, a fitted :class:`StyleMask`, or a ``mask`` config
    object (:class:`NoMask`, :class:`SparseMask`, :class:`AutoMask`; paper 3.2.1).
    ``save_latents`` / ``save_images``: stream E(x) and the final latent / the uint8 original and perturbed
    image of every sample to the run directory (for ``fit-mask`` / ``export``).
    ``shard``: evaluate only part of the sources (see :class:`Shard`); ``reference``: the class the oracle
    must keep seeing, the true ``label`` or its own verdict on the clean image (``clean_prediction``); None takes the
    oracle's ``reference`` attribute (``oracle.reference=`` in the CLI), else ``label``.
    """
    if isinstance(mask, AutoMask):
        return _evaluate_with_auto_mask(
            mask,
            classifier,
            data,
            generator,
            oracle,
            search,
            seed=seed,
            output_dir=output_dir,
            execution=execution,
            progress=progress,
            log_interval=log_interval,
            interval=interval,
            n_boot=n_boot,
            grid_size=grid_size,
            gap_warn_points=gap_warn_points,
            save_latents=save_latents,
            save_images=save_images,
            shard=shard,
            reference=reference,
            config=config,
        )
    mask, mask_id = _resolve_mask(mask, mask_id, generator, data)
    reference = reference or getattr(oracle, "reference", None) or "label"
    t_start = time.perf_counter()
    search = SearchConfig.coerce(search)
    shard, execution = shard or Shard(), Execution.coerce(execution)
    batch_size = execution.batch_size
    if interval not in INTERVALS:
        raise ValueError(f"unknown interval {interval!r}; choose one of {', '.join(INTERVALS)}.")
    dev = execution.torch_device()
    seed_drawn = seed is None
    if seed is None:
        seed = _recorded_seed(output_dir) or secrets.randbits(31)
    seed = int(seed)
    if callable(getattr(data, "with_seed", None)):
        data = data.with_seed(seed)  # data.subset=random: the sources are drawn from the run's seed
    class_names = list(data.class_names)
    if len(data) == 0:
        raise ValueError(
            f"dataset {getattr(data, 'name', data)!r} is empty; point data at a folder with images or raise data.limit."
        )
    positions = shard.positions(len(data))
    components = {
        "classifier": _component_id(classifier),
        "generator": _component_id(generator),
        "oracle": _component_id(oracle),
        "data": _component_id(data),
        "mask": "none" if mask is None else (mask_id or f"tensor{tuple(mask.shape)}"),
    }
    run_config = (
        config
        if config is not None
        else {
            "search": asdict(search),
            "interval": interval,
            "n_boot": n_boot,
            "gap_warn_points": gap_warn_points,
            "save_latents": save_latents,
            "save_images": save_images,
            "reference": reference,
            "precision": execution.precision,
            "role_precision": dict(execution.role_precision),
        }
    )
    identity = _identity(run_config, components, seed, data, positions, shard)
    for m in (classifier, generator, oracle):
        if isinstance(m, torch.nn.Module):
            m.to(dev).eval().requires_grad_(False)
    oracle.prepare(class_names)  # in the oracle's own precision (a CLIP head is encoded once, and cached)
    classifier, generator, oracle, kernel_settings = accelerate(classifier, generator, oracle, execution, dev)
    skip = skips_unreadable(data)
    first = _first_readable(data, positions, skip)
    _check_classifier(classifier, data, first, len(class_names), dev)  # before anything is written
    first_x, first_y, _ = data[first]
    auto = None
    if batch_size is None:
        auto = auto_batch_size(first_x, first_y, classifier, generator, dev)
        batch_size = auto.batch_size
    log.info(
        "genEval seed=%d device=%s n=%d %s search=%s\n classifier: %s\n generator: %s\n oracle: %s",
        seed,
        dev,
        len(positions),
        shard.name,
        search,
        *(_describe(m) for m in (classifier, generator, oracle)),
    )
    writer = None
    if output_dir is not None:
        writer = RunWriter.open(
            Path(output_dir),
            identity,
            save_latents=save_latents,
            save_images=save_images,
            generator=components["generator"],
            flush_every=batch_size,
            source_ids=_source_ids(data, positions),  # a resume refuses records of other sources
        )
    try:
        done = {r.index for r in writer.done} if writer else set()
        todo = [i for i in positions if i not in done]
        grid: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        shapes: dict[str, list[int]] = {}
        local: list[SampleRecord] = []
        bar = _Progress(len(positions), len(done), shard, progress, log_interval)
        skipped: list[dict] = []

        def on_unreadable(position: int, err: UnreadableSource) -> None:
            if not skip:
                raise err
            log.warning("skipped unreadable source %s: %s", err.source_id, err.reason)
            skipped.append({"position": position, "source_id": err.source_id, "path": err.path, "reason": err.reason})
            bar.skip()

        t_loop = time.perf_counter()
        samples = _samples(data, todo, seed, batch_size, execution.num_workers, dev, class_names, on_unreadable)
        try:
            for out in perturb(
                samples,
                classifier,
                generator,
                oracle,
                search,
                batch_size=batch_size,
                mask=mask,
                device=dev,
                reference=reference,
                compile={"mode": execution.compile_mode} if kernel_settings["compile"] else False,
            ):
                record = _record(out)
                shapes = shapes or {"original": list(out.original.shape), "perturbed": list(out.image.shape)}
                if writer is not None:
                    writer.add(record, out)
                else:
                    local.append(record)
                if out.validated and grid_size > 0:
                    item = (-out.index, out.original, out.image)
                    (heapq.heappush if len(grid) < grid_size else heapq.heappushpop)(grid, item)
                bar.update(out)
        except (RuntimeError, MemoryError) as err:
            if is_out_of_memory(err):
                raise too_large(batch_size, first_x, first_y, classifier, generator, dev, err) from err
            raise
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        loop_s = time.perf_counter() - t_loop
        bar.close()
        if writer is not None:
            writer.flush()
        records = sorted(writer.done if writer else local, key=lambda r: r.index)
        result = summarize(
            records,
            class_names,
            seed=seed,
            seed_drawn=seed_drawn,
            interval=interval,
            n_boot=n_boot,
            gap_warn_points=gap_warn_points,
            components=components,
            config=run_config,
            device=str(dev),
            run_dir=None if writer is None else str(writer.dir),
            timings={
                "total_s": time.perf_counter() - t_start,
                "loop_s": loop_s,
                "per_sample_s": loop_s / max(1, len(todo)),
                "samples_computed": len(todo),
            },
            shard=shard,
            identity=identity,
            kernels=kernel_settings,
            execution=execution.to_dict(),
            batch={"batch_size": batch_size, "auto": None if auto is None else auto.to_dict()},
            image_shapes=shapes or _previous_shapes(writer),
            skipped=sorted(skipped, key=lambda d: d["position"]) if skip else None,
        )
        if writer is not None:
            if grid:
                grid.sort(key=lambda g: -g[0])
                save_grid(
                    writer.dir / "grid.png",
                    torch.stack([g[1] for g in grid]),
                    torch.stack([g[2] for g in grid]),
                    nrow=grid_size,
                )
            writer.finish(records, result.to_dict())
    except BaseException:
        if writer is not None:
            writer.close()  # what was flushed stays (samples.partial.jsonl); a rerun resumes it
        raise
    for w in result.warnings:
        log.warning(w)
    return result


def _previous_shapes(writer: RunWriter | None) -> dict | None:
    """Image shapes of a run whose samples were all computed by an earlier attempt (from its results)."""
    if writer is None or not (writer.dir / "results.json").is_file():
        return None
    return read_results(writer.dir).get("image_shapes")


def _resolve_mask(
    mask: Any, mask_id: str | None, generator: Generator, data: ImageDataset
) -> tuple[torch.Tensor | None, str | None]:
    if mask is None or isinstance(mask, NoMask):
        return None, None
    if isinstance(mask, SparseMask):
        loaded = mask.load(generator, data)
        return loaded.as_tensor(), mask_id or f"{mask.path}#{loaded.sha256[:16]}"
    if isinstance(mask, StyleMask):
        return mask.as_tensor(), mask_id or f"mask#{mask.sha256[:16]}"
    return mask, mask_id


def _recorded_seed(output_dir: str | Path | None) -> int | None:
    """A run started without a seed keeps the seed it drew when it is resumed."""
    if output_dir is None or not (Path(output_dir) / RUN).is_file():
        return None
    return read_run_identity(output_dir).get("seed")


def skips_unreadable(data: ImageDataset) -> bool:
    """Whether ``data`` (or the data set a :class:`SubsetData` part is taken from) skips unreadable sources."""
    while isinstance(data, SubsetData):
        data = data.data
    return getattr(data, "skip_unreadable", False) is True


def _first_readable(data: ImageDataset, positions: Sequence[int], skip: bool) -> int:
    """The first position whose source can be read (the first position when not skipping: its error stops the
    run before anything is written)."""
    if not skip:
        return positions[0]
    for position in positions:
        try:
            data[position]
            return position
        except UnreadableSource:
            continue
    raise ValueError(
        f"none of the {len(positions)} sources of {_component_id(data)} can be read (data.skip_unreadable=true "
        "skipped every one); check data.root and data.extensions."
    )


def _without(config: dict, keys: Sequence[str]) -> dict:
    """``config`` without ``keys``; a dotted key (``data.skip_unreadable``) removes a nested entry."""
    out = {k: v for k, v in config.items() if k not in keys}
    for key in keys:
        head, _, rest = key.partition(".")
        if rest and isinstance(out.get(head), dict):
            out[head] = _without(out[head], [rest])
    return out


def _identity(
    config: dict, components: dict, seed: int, data: ImageDataset, positions: list[int], shard: Shard
) -> dict[str, Any]:
    """What a run is: config minus execution settings, components, seed, the sources, the shard."""
    ids = _source_ids(data, positions)
    sources = {"data": _component_id(data), "n_total": len(data), "n": len(positions)}
    how = getattr(data, "subset_info", None)  # how the sources were chosen (random subset: its seed)
    if callable(how) and how() is not None:
        sources["selection"] = how()
    if ids is not None:
        sources["sha256"] = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    return {
        "config": _without(config, EXECUTION_KEYS),
        "components": components,
        "seed": seed,
        "sources": sources,
        "shard": {"index": shard.index, "count": shard.count},
    }


def _check_classifier(
    classifier: Classifier, data: ImageDataset, position: int, num_classes: int, dev: torch.device
) -> None:
    x = data[position][0][None].to(dev)
    with torch.no_grad():
        out_dim = classifier(x).shape[-1]
    if out_dim != num_classes:
        fix = (  # no class list or head size makes a 10-way model read ImageNet: it takes an ImageNet classifier
            "Test an ImageNet classifier, e.g. classifier=resnet50_imagenet or classifier=timm "
            "classifier.name=resnet50.a1_in1k"
            if num_classes == 1000
            else "Set classifier.num_classes or data.class_names to match"
        )
        raise ValueError(
            f"classifier returned {out_dim} logits but the dataset has {num_classes} classes "
            f"({_component_id(data)}). {fix}."
        )


class _Sources(torch.utils.data.Dataset):
    """``data`` at ``positions``: item ``k`` is ``(image, label, source id, position)``, or, for a source that
    cannot be decoded, ``(position, UnreadableSource)``, so that the main process decides what it means (stop or
    skip) even when a DataLoader worker read it."""

    def __init__(self, data: ImageDataset, positions: Sequence[int]) -> None:
        self.data, self.positions = data, list(positions)

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int):
        position = self.positions[k]
        try:
            x, y, sid = self.data[position]
        except UnreadableSource as err:
            return position, err
        return x, y, sid, position


def _collate(items: list[tuple]):
    """A batch of the readable items (stacked images, labels, ids, positions) and the unreadable ones."""
    bad = [it for it in items if len(it) == 2]
    good = [it for it in items if len(it) == 4]
    if not good:
        return None, None, [], [], bad
    xs, ys, ids, positions = zip(*good)
    return torch.stack(xs), torch.as_tensor(ys, dtype=torch.long), list(ids), list(positions), bad


def _samples(
    data: ImageDataset,
    positions: list[int],
    seed: int,
    batch_size: int,
    num_workers: int,
    dev: torch.device,
    class_names: list[str],
    on_unreadable: Callable[[int, UnreadableSource], None],
) -> Iterator[Sample]:
    """The sources to search, read by a DataLoader (workers, pinned memory on CUDA), checked, seeded; each source
    that cannot be read goes to ``on_unreadable(position, error)`` (which raises it, or records the skip)."""
    loader = torch.utils.data.DataLoader(
        _Sources(data, positions),
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        collate_fn=_collate,
        pin_memory=dev.type == "cuda",
    )
    for x, y, ids, where, bad in loader:
        for position, err in bad:
            on_unreadable(position, err)
        if not ids:
            continue
        check_images(x, f"data {_component_id(data)} (samples {ids[0]}..{ids[-1]})")
        bad = (y < 0) | (y >= len(class_names))
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise ValueError(
                f"label {int(y[i])} of sample {ids[i]} is outside the class list "
                f"(0..{len(class_names) - 1}: {class_names}). Fix data.class_names."
            )
        for i, sid in enumerate(ids):
            yield Sample(x[i], int(y[i]), sid, seed=sample_seed(seed, sid), index=where[i])


def _record(out: Outcome) -> SampleRecord:
    return SampleRecord(
        source_id=out.source_id,
        index=out.index,
        label=out.label,
        reference=out.reference,
        clean_pred=out.clean_pred,
        recon_pred=out.recon_pred,
        start_ok=out.start_ok,
        validated=out.validated,
        accepted_steps=out.accepted_steps,
        rejected_at=out.rejected_at,
        first_fooled=out.first_fooled,
        final_pred=out.final_pred,
        oracle_clean_pred=out.oracle_clean_pred,
        oracle_start_pred=out.oracle_start_pred,
        oracle_score=out.oracle_score,
        latent_dist=out.latent_dist,
        image_dist=out.image_dist,
        image_linf=out.image_linf,
    )


class _Progress:
    """A tqdm bar on a terminal; otherwise one log line every ``interval`` seconds (cluster logs). The rate (and
    the ETA from it) counts from the first finished sample, so a compiled step's start-up does not hide the
    throughput the run will keep."""

    def __init__(self, total: int, done: int, shard: Shard, show: bool | None, interval: float) -> None:
        self.total, self.done, self.shard, self.interval = total, done, shard, float(interval)
        self.validated = self.fooled = self.computed = 0
        self.t0 = self.last = time.perf_counter()
        self.first: tuple[float, int] | None = None  # (time, samples computed) at the first finished sample
        tty = sys.stderr.isatty() if show is None else bool(show)
        self.bar = tqdm(total=total, initial=done, desc="genEval", unit="img", disable=not tty, dynamic_ncols=True)
        self.log_lines = not tty

    def update(self, out: Outcome) -> None:
        self.done, self.computed = self.done + 1, self.computed + 1
        self.validated += out.validated
        self.fooled += out.validated and out.final_pred != out.label
        self.bar.update(1)
        self.bar.set_postfix(validated=self.validated, fooled=self.fooled, refresh=False)
        now = time.perf_counter()
        if self.first is None or now - self.first[0] < 0.05:  # the first finished batch (its samples stop together):
            self.first = (self.first[0] if self.first else now, self.computed)  # rates count from its end
        if self.log_lines and (now - self.last >= self.interval or self.done == self.total):
            self.last = now
            (t1, n1), steady = self.first, self.computed > self.first[1] and now - self.first[0] >= 1.0
            rate = (self.computed - n1) / (now - t1) if steady else self.computed / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            log.info(
                "%s: %d/%d images (%.1f%%), validated %d, fooled %d, %.2f img/s, ETA %s",
                self.shard.name,
                self.done,
                self.total,
                100 * self.done / max(1, self.total),
                self.validated,
                self.fooled,
                rate,
                time.strftime("%H:%M:%S", time.gmtime(eta)) if eta < 8.64e6 else "unknown",
            )

    def skip(self) -> None:
        """A source that was skipped (unreadable) counts as done."""
        self.done += 1
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _evaluate_with_auto_mask(
    auto: AutoMask,
    classifier,
    data,
    generator,
    oracle,
    search,
    *,
    seed: int | None,
    output_dir: str | Path | None,
    **evaluate_kwargs: Any,
) -> EvalResult:
    """``mask=auto``: fit a style mask on a dense pass over ``auto.fit_fraction`` of the data, score the rest.

    The fit samples are searched without a mask (budget ``auto.fit_budget`` or the search budget) into
    ``<output_dir>/mask_fit`` with their latents saved; :func:`fit_mask_from_run` fits the mask (saved as
    ``style_mask.safetensors`` with its plot ``style_mask.png``); the remaining samples are then scored with
    it, so no scored image helped choose its own mask (paper 3.2.1: fit per dataset and generator).
    """
    search = SearchConfig.coerce(search)
    seed = secrets.randbits(31) if seed is None else int(seed)
    fit_idx, eval_idx = split_for_auto(len(data), auto.fit_fraction, seed, getattr(data, "labels", None))
    base = Path(output_dir) if output_dir is not None else Path(tempfile.mkdtemp(prefix="geneval-mask-"))
    fit_search = replace(search, budget=search.budget if auto.fit_budget is None else int(auto.fit_budget))
    log.info("mask=auto: dense pass over %d fit samples, then %d scored with the mask", len(fit_idx), len(eval_idx))
    fit_kwargs = {k: v for k, v in evaluate_kwargs.items() if k not in ("config", "save_latents", "shard")}
    evaluate(
        classifier,
        SubsetData(data, fit_idx, "mask-fit"),
        generator,
        oracle,
        fit_search,
        seed=seed,
        output_dir=base / "mask_fit",
        save_latents=True,
        **fit_kwargs,
    )
    fitted = fit_mask_from_run(base / "mask_fit", dataset=getattr(data, "name", None), **auto.fit_kwargs())
    fitted.save(base / "style_mask.safetensors")
    plot_style_mask(fitted, base / "style_mask.png")
    return evaluate(
        classifier,
        SubsetData(data, eval_idx, "mask-scored"),
        generator,
        oracle,
        search,
        seed=seed,
        output_dir=output_dir,
        mask=fitted,
        mask_id=f"auto:{fitted.sha256[:16]}",
        **evaluate_kwargs,
    )
