"""The driver: batching, seeding, checks, progress, writing (the loop itself is in ``perturb.py``).

``evaluate(classifier=..., data=..., generator=..., oracle=...)`` runs the paper's dynamic evaluation
(Sec. 3) over a dataset and returns an :class:`~genEval.rundir.EvalResult`; with ``output_dir`` it also
writes the run directory described in :mod:`genEval.rundir`. The CLI (``geneval``) calls this same
function, so notebook and command line give identical results for identical inputs and seeds.
"""

from __future__ import annotations

import logging
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genEval.data import SubsetData
from genEval.fileio import atomic_write_json, ensure_writable_dir
from genEval.interfaces import Classifier, Generator, ImageDataset, Oracle, check_images
from genEval.perturb import SearchConfig, perturb
from genEval.rundir import (
    EvalResult,
    SampleRecord,
    SampleWriter,
    environment,
    package_versions,
    save_grid,
    save_image_file,
    save_latent_file,
    to_uint8,
)
from genEval.stats import Outcomes, compute_scores, per_class_table
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


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else must be a valid torch device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N.") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asked for CUDA but none is available; use device=cpu or auto.")
    return dev


def batch_seed(seed: int, index: int) -> int:
    """Independent, reproducible seed for batch ``index`` of a run seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _collate(items: list[tuple[torch.Tensor, int, str]]):
    xs, ys, ids = zip(*items)
    return torch.stack(xs), torch.as_tensor(ys, dtype=torch.long), list(ids)


def _describe(obj: Any) -> str:
    """One line for the log: the component's settings, not its whole module tree."""
    if isinstance(obj, torch.nn.Module):
        return f"{type(obj).__name__}({obj.extra_repr()}) [{_component_id(obj)}]"
    return repr(obj)


def _component_id(obj: Any) -> str:
    return str(getattr(obj, "name", None) or type(obj).__name__)


def evaluate(
    classifier: Classifier,
    data: ImageDataset,
    generator: Generator,
    oracle: Oracle,
    search: SearchConfig | dict | None = None,
    *,
    seed: int | None = None,
    batch_size: int = 64,
    device: str = "auto",
    output_dir: str | Path | None = None,
    mask: torch.Tensor | StyleMask | NoMask | SparseMask | AutoMask | None = None,
    mask_id: str | None = None,
    progress: bool | None = None,
    interval: str = "wilson",
    n_boot: int = 1000,
    grid_size: int = 8,
    gap_warn_points: float = 10.0,
    num_workers: int = 0,
    save_latents: bool = False,
    save_images: bool = False,
    config: dict[str, Any] | None = None,
) -> EvalResult:
    """Evaluate ``classifier`` on ``data`` by oracle-vetted latent perturbation (paper Algorithm 1).

    ``seed=None`` draws a fresh seed (a dynamic benchmark: new samples every run) and records it;
    the same seed gives identical scores. ``progress=None`` shows a bar only on a terminal.
    ``gap_warn_points``: warn when accuracy on reconstructions (RA) is this many points below SA.
    ``save_latents``: also write ``latents.safetensors`` (start and final latents of every sample, in
    sample order, with the source ids) so a style mask can be fitted from the run (paper 3.2.1).
    ``mask``: a 0/1 tensor broadcastable to one latent, a fitted :class:`StyleMask`, or a ``mask`` config
    object (:class:`NoMask`, :class:`SparseMask`, :class:`AutoMask`; paper 3.2.1).
    ``save_images``: also write ``images.safetensors`` (original and final image of every sample as uint8,
    in sample order) so the run can be exported as a static benchmark snapshot (paper App. O).
    """
    if isinstance(mask, AutoMask):
        return _evaluate_with_auto_mask(
            mask, classifier, data, generator, oracle, search, seed=seed, output_dir=output_dir,
            batch_size=batch_size, device=device, progress=progress, interval=interval, n_boot=n_boot,
            grid_size=grid_size, gap_warn_points=gap_warn_points, num_workers=num_workers,
            save_latents=save_latents, save_images=save_images, config=config)
    if isinstance(mask, NoMask):
        mask = None
    elif isinstance(mask, SparseMask):
        loaded = mask.load(generator, data)
        mask, mask_id = loaded.as_tensor(), mask_id or f"{mask.path}#{loaded.sha256[:16]}"
    elif isinstance(mask, StyleMask):
        mask, mask_id = mask.as_tensor(), mask_id or f"mask#{mask.sha256[:16]}"
    t_start = time.perf_counter()
    search = SearchConfig.coerce(search)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    seed_drawn = seed is None
    seed = secrets.randbits(31) if seed is None else int(seed)
    dev = resolve_device(device)
    class_names = list(data.class_names)
    num_classes = len(class_names)
    if len(data) == 0:
        raise ValueError(f"dataset {getattr(data, 'name', data)!r} is empty; point data at a folder with images "
                         "or raise data.limit.")
    run_dir = ensure_writable_dir(output_dir) if output_dir is not None else None

    torch.manual_seed(seed)
    for m in (classifier, generator, oracle):
        if isinstance(m, torch.nn.Module):
            m.to(dev).eval()
    oracle.prepare(class_names)
    components = {"classifier": _component_id(classifier), "generator": _component_id(generator),
                  "oracle": _component_id(oracle), "data": _component_id(data),
                  "mask": "none" if mask is None else (mask_id or f"tensor{tuple(mask.shape)}")}
    log.info("genEval seed=%d device=%s n=%d search=%s\n classifier: %s\n generator: %s\n oracle: %s", seed, dev,
             len(data), search, *(_describe(m) for m in (classifier, generator, oracle)))

    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                         collate_fn=_collate)
    show = sys.stderr.isatty() if progress is None else progress
    from tqdm.auto import tqdm

    bar = tqdm(total=len(data), desc="genEval", unit="img", disable=not show, dynamic_ncols=True)
    writer: SampleWriter | None = None
    cols: dict[str, list] = {k: [] for k in ("label", "clean", "recon", "start_ok", "valid", "final", "rej", "id")}
    grid_orig: list[torch.Tensor] = []
    grid_pert: list[torch.Tensor] = []
    t_loop = 0.0
    all_records: list[SampleRecord] = []
    latents: dict[str, list[torch.Tensor]] = {"start": [], "final": []}
    images: dict[str, list[torch.Tensor]] = {"original": [], "perturbed": []}
    try:
        for bi, (x, y, ids) in enumerate(loader):
            check_images(x, f"data {components['data']} (samples {ids[0]}..{ids[-1]})")
            bad = (y < 0) | (y >= num_classes)
            if bool(bad.any()):
                i = int(bad.nonzero()[0])
                raise ValueError(f"label {int(y[i])} of sample {ids[i]} is outside the class list "
                                 f"(0..{num_classes - 1}: {class_names}). Fix data.class_names.")
            x, y = x.to(dev), y.to(dev)
            if bi == 0:
                with torch.no_grad():
                    out_dim = classifier(x[:1]).shape[-1]
                if out_dim != num_classes:
                    raise ValueError(
                        f"classifier returned {out_dim} logits but the dataset has {num_classes} classes "
                        f"({components['data']}). Set classifier num_classes or data.class_names to match.")
            rng = torch.Generator().manual_seed(batch_seed(seed, bi))
            t0 = time.perf_counter()
            out = perturb(x, y, classifier, generator, oracle, search, mask=mask, rng=rng, ids=ids)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t_loop += time.perf_counter() - t0
            yc = y.cpu()
            records = [SampleRecord(
                source_id=ids[i], label=int(yc[i]), clean_pred=int(out.clean_pred[i]),
                recon_pred=int(out.recon_pred[i]), start_ok=bool(out.start_ok[i]),
                validated=bool(out.validated[i]), accepted_steps=int(out.final_step[i]),
                rejected_at=int(out.rejected_at[i]), first_fooled=int(out.first_fooled[i]),
                final_pred=int(out.final_pred[i]), oracle_start_pred=int(out.oracle_start_pred[i]),
                oracle_score=float(out.oracle_score[i]), latent_dist=float(out.latent_dist[i]),
                image_dist=float(out.image_dist[i]), image_linf=float(out.image_linf[i]),
            ) for i in range(len(ids))]
            all_records += records
            if save_latents:
                latents["start"].append(out.start_latents.float())
                latents["final"].append(out.latents.float())
            if save_images:
                images["original"].append(to_uint8(x.cpu()))
                images["perturbed"].append(to_uint8(out.images))
            if run_dir is not None:
                writer = writer or SampleWriter(run_dir)
                writer.write(records)
            cols["label"] += yc.tolist()
            cols["clean"] += (out.clean_pred == yc).tolist()
            cols["recon"] += (out.recon_pred == yc).tolist()
            cols["start_ok"] += out.start_ok.tolist()
            cols["valid"] += out.validated.tolist()
            cols["final"] += (out.final_pred == yc).tolist()
            cols["rej"] += (out.rejected_at > 0).tolist()
            cols["id"] += ids
            need = grid_size - sum(len(g) for g in grid_orig)
            if need > 0:
                pick = out.validated.nonzero().flatten()[:need]
                grid_orig.append(x[pick.to(dev)].cpu())
                grid_pert.append(out.images[pick])
            bar.update(len(ids))
            bar.set_postfix(validated=sum(cols["valid"]), fooled=sum(v and not f for v, f in
                                                                     zip(cols["valid"], cols["final"])))
    except BaseException:
        if writer is not None:
            writer.abort()  # samples.partial.jsonl stays, named as incomplete; no results.json is written
        raise
    finally:
        bar.close()

    outcomes = Outcomes(ids=cols["id"], labels=cols["label"], clean=cols["clean"], recon=cols["recon"],
                        start_ok=cols["start_ok"], validated=cols["valid"], final=cols["final"], rejected=cols["rej"])
    scores = compute_scores(outcomes, num_classes, interval=interval, n_boot=n_boot, seed=seed)
    per_class = per_class_table(outcomes, class_names)
    warnings = []
    if scores.sa.value is not None and scores.ra.value is not None \
            and scores.sa.value - scores.ra.value > gap_warn_points:
        warnings.append(
            f"generator gap: the classifier loses {scores.sa.value - scores.ra.value:.1f} points on the "
            f"generator's reconstructions alone (SA {scores.sa.value:.1f} -> RA {scores.ra.value:.1f}); PA then "
            "measures the generator as much as the classifier's robustness. Use a generator that fits the data.")
    if scores.n_validatable < scores.n / 2:
        warnings.append(f"the oracle rejected {scores.n - scores.n_validatable}/{scores.n} reconstructions at "
                        "the start check; VR is low because the oracle or generator does not fit this data.")
    for w in warnings:
        log.warning(w)
    total = time.perf_counter() - t_start
    cfg_record = config if config is not None else {
        "search": asdict(search), "batch_size": batch_size, "device": str(dev), "interval": interval,
        "n_boot": n_boot, "mask": None if mask is None else list(mask.shape)}
    result = EvalResult(
        scores=scores, per_class=per_class, seed=seed, seed_drawn=seed_drawn, components=components,
        class_names=class_names, config=cfg_record, versions=package_versions(), environment=environment(str(dev)),
        timings={"total_s": total, "loop_s": t_loop, "per_sample_s": t_loop / max(1, scores.n)},
        warnings=warnings, run_dir=str(run_dir) if run_dir else None,
        samples=all_records,
    )
    if run_dir is not None:
        if grid_orig:
            save_grid(run_dir / "grid.png", torch.cat(grid_orig), torch.cat(grid_pert), nrow=grid_size)
        if save_latents and latents["start"]:
            save_latent_file(run_dir / "latents.safetensors", torch.cat(latents["start"]),
                             torch.cat(latents["final"]), torch.tensor(cols["valid"]), cols["id"],
                             components["generator"])
        if save_images and images["original"]:
            save_image_file(run_dir / "images.safetensors", images, torch.tensor(cols["valid"]), cols["id"],
                            torch.tensor(cols["label"]))
        if writer is not None:
            writer.finish()
        atomic_write_json(run_dir / "results.json", result.to_dict())  # written last: marks completion
    return result


def _evaluate_with_auto_mask(auto: AutoMask, classifier, data, generator, oracle, search, *, seed: int | None,
                             output_dir: str | Path | None, **evaluate_kwargs: Any) -> EvalResult:
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
    fit_kwargs = {k: v for k, v in evaluate_kwargs.items() if k not in ("config", "save_latents")}
    evaluate(classifier, SubsetData(data, fit_idx, "mask-fit"), generator, oracle, fit_search, seed=seed,
             output_dir=base / "mask_fit", save_latents=True, **fit_kwargs)
    fitted = fit_mask_from_run(base / "mask_fit", dataset=getattr(data, "name", None), **auto.fit_kwargs())
    fitted.save(base / "style_mask.safetensors")
    plot_style_mask(fitted, base / "style_mask.png")
    return evaluate(classifier, SubsetData(data, eval_idx, "mask-scored"), generator, oracle, search, seed=seed,
                    output_dir=output_dir, mask=fitted, mask_id=f"auto:{fitted.sha256[:16]}", **evaluate_kwargs)
