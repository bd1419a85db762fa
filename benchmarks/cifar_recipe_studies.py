"""The CIFAR-10 recipe studies reported in the closing notes (all offline, real shared assets).

    python -m benchmarks.cifar_recipe_studies --out runs/studies --n 100 [--only mask snapshots compare]
    python -m benchmarks.cifar_recipe_studies --only tf32 --device cuda --n 1000 --out runs/tf32   # issue 34
    python -m benchmarks.cifar_recipe_studies --only tf32 --device cpu --smoke --out /tmp/tf32     # the plumbing

* mask: dense vs sparse-style-mask search at the same budget (paper 3.2.1 / App. I). The mask is fitted on
  a disjoint set of images (round-robin items n..2n-1), then the first n images are searched densely and
  with the mask in the same process (wall times comparable), with the paper's sparsity as target.
* snapshots: one snapshot per shared ResNet (20/32/56) with the others as the oracle zoo, exported as
  ImageFolder, and the 3 x 3 transfer matrix (paper Table 6).
* start_noise: the start-noise scale in search steps (std = start_noise x step per latent dim) for 0 and 1
  steps and 42 steps (the old default, 0.05 x TAEF2's latent std = 0.042): scores with seed 0, and how many
  per-sample decisions (validated, first fooled step, final prediction) change when only the seed (the
  noise) changes, on the same sources.
* compare: the three ResNets compared with R repetitions under the recipe (TAEF2, ResNet-32+56 zoo):
  leaderboard, Kendall tau, effective-robustness fit. (ResNet-32/56 are oracle members: their PA is 100 by
  construction, which the leaderboard flags.)
* tf32 (issue 34): the default precision's two readings on CUDA, TF32 matmuls and convolutions (``tf32=true``, what
  fp32 runs get) against strict fp32 (``tf32=false``: ``torch.backends.cuda.matmul.allow_tf32`` and
  ``torch.backends.cudnn.allow_tf32`` off), with the protocol of issue 26's bf16 study: the recipe (ResNet-20 under
  test, the ResNet-32 + ResNet-56 zoo, TAEF2 at 64 px), 1,000 class-balanced sources, budget 50, seed 0; the share of
  sources whose decisions differ (validated, fooled; and any step decision) and the PA difference with its paired
  bootstrap interval. TF32 exists only on NVIDIA GPUs (Ampere and newer): on a CPU the study refuses, except
  ``--smoke`` (20 sources, budget 2), which runs both settings to check the plumbing; both are strict fp32 there, so
  it must find no difference.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/cifar_recipe_studies.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.harness import results
from generators.taef2 import TAEF2Generator
from genEval import evaluate
from genEval.classifiers.loaders import cifar_resnet
from genEval.data.base import SubsetData
from genEval.data.folders import ImageFolderData
from genEval.data.standard import CIFAR10_CLASSES
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from oracles.classifier import ClassifierOracle
from oracles.zoo import ZooOracle

ROOT = Path(__file__).resolve().parents[1]
A = Path(os.environ.get("GENEVAL_ASSETS") or ROOT.parent / "shared" / "assets")  # the GPU machine: a carried copy
BUDGET, STEP = 50, 0.001  # the paper preset (Adam); --budget / --step change them
CKPT = {20: "resnet20-12fca82f.th", 32: "resnet32-d509ac18.th", 56: "resnet56-4bfd9763.th"}


def search() -> SearchConfig:
    return SearchConfig(budget=BUDGET, step_size=STEP)


def resnet(d):
    return cifar_resnet(d, A / "weights" / "cifar10-resnet" / CKPT[d])


def zoo(depths):
    return ZooOracle([ClassifierOracle(resnet(d)) for d in depths])


def taef2():
    w = A / "weights" / "taef2"
    return TAEF2Generator(w / "taef2_encoder.pth", w / "taef2_decoder.pth", image_size=64)


def data(limit, subset_seed=None):
    return ImageFolderData(
        A / "cifar10" / "test-jpg",
        class_names=list(CIFAR10_CLASSES),
        limit=limit,
        name="cifar10_jpg:test-jpg",
        subset_seed=subset_seed,
    )


def line(r):
    s = r.scores
    return (
        f"SA {s.sa.fmt()} | RA {s.ra.fmt()} | VR {s.vr.fmt()} | PA {s.pa.fmt()} | FMR {s.fmr.fmt()} | "
        f"rejected {s.n_rejected}/{s.n} ({s.n_rejected / s.n:.2f}/sample) | loop {r.timings['loop_s']:.0f}s"
    )


def study_mask(out: Path, n: int, seed: int) -> dict:
    from genEval.style_mask import FixedMask, fit_mask_from_run, plot_style_mask

    full = data(2 * n)
    fit_set, eval_set = SubsetData(full, range(n, 2 * n), "fit"), SubsetData(full, range(n), "eval")
    clf, gen, orc = resnet(20), taef2(), zoo([32, 56])
    kw = dict(seed=seed, execution=Execution(batch_size=50))
    evaluate(
        clf, fit_set, gen, orc, search(), output=RunOutput(out / "mask_fit", save_latents=True, progress=False), **kw
    )
    masks = {}
    for name, fit_kw in {"C=1": {"C": 1.0}, "paper-sparsity": {"C": None, "target_sparsity": 0.9845}}.items():
        t0 = time.perf_counter()
        try:
            m = fit_mask_from_run(out / "mask_fit", **fit_kw)
        except ValueError as err:
            print(f"mask {name}: {err}", flush=True)
            continue
        masks[name] = m
        print(
            f"mask {name}: sparsity {m.sparsity:.2f}% held-out {m.heldout_accuracy:.1f}% train "
            f"{m.train_accuracy:.1f}% C={m.C:.4g} n={m.n_samples} ({time.perf_counter() - t0:.1f}s)",
            flush=True,
        )
    m = masks["paper-sparsity"]
    m.save(out / "style_mask.safetensors")
    plot_style_mask(m, out / "style_mask.png")
    dense = evaluate(clf, eval_set, gen, orc, search(), output=RunOutput(out / "dense", progress=False), **kw)
    print("dense :", line(dense), flush=True)
    fixed = FixedMask(m.as_tensor(), m.sha256[:16])
    masked = evaluate(
        clf, eval_set, gen, orc, search(), output=RunOutput(out / "masked", progress=False), mask=fixed, **kw
    )
    print("masked:", line(masked), flush=True)
    return {
        "dense": dense.to_dict(),
        "masked": masked.to_dict(),
        "masks": {k: {"sparsity": v.sparsity, "heldout": v.heldout_accuracy, "C": v.C} for k, v in masks.items()},
    }


def study_snapshots(out: Path, n: int, seed: int) -> None:
    from genEval.search.execution import resolve_device
    from genEval.snapshots.export import export_snapshot
    from genEval.snapshots.scoring import format_transfer, transfer_matrix

    snaps = {}
    for d in (20, 32, 56):
        others = [o for o in (20, 32, 56) if o != d]
        r = evaluate(
            resnet(d),
            data(n),
            taef2(),
            zoo(others),
            search(),
            seed=seed,
            execution=Execution(batch_size=50),
            output=RunOutput(out / f"run_resnet{d}", save_images=True, progress=False),
        )
        print(f"resnet{d} (oracle resnet{others[0]}+{others[1]}):", line(r), flush=True)
        snaps[f"resnet{d}"] = export_snapshot(out / f"run_resnet{d}", out / f"snapshot_resnet{d}", overwrite=True)
    rows = transfer_matrix(
        snaps,
        {f"resnet{d}": resnet(d) for d in (20, 32, 56)},
        out_csv=out / "transfer.csv",
        device=resolve_device("auto"),
    )
    print(format_transfer(rows), flush=True)


def study_start_noise(out: Path, n: int, seed: int, levels=(0.0, 1.0, 42.0)) -> list[dict]:
    from dataclasses import replace

    from genEval.runs.reader import read_samples

    keys = ("validated", "first_fooled", "final_pred")
    rows = []
    for level in levels:
        runs = {}
        for s in (seed, seed + 1):  # same sources (subset_seed fixed), different start noise
            d = out / f"noise{level:g}_seed{s}"
            r = evaluate(
                resnet(20),
                data(n, subset_seed=seed),
                taef2(),
                zoo([32, 56]),
                replace(search(), start_noise=level),
                seed=s,
                execution=Execution(batch_size=50),
                output=RunOutput(d, progress=False),
            )
            runs[s] = (r, {x.source_id: x for x in read_samples(d)})
        r0, a = runs[seed]
        b = runs[seed + 1][1]
        changed = sum(any(getattr(a[k], f) != getattr(b[k], f) for f in keys) for k in a)
        moved = [x.latent_dist for x in a.values() if x.validated]
        row = {
            "start_noise_steps": level,
            "std_per_dim": level * STEP,
            "line": line(r0),
            "decisions_changed_by_seed": f"{changed}/{len(a)}",
            "mean_latent_dist_validated": sum(moved) / max(len(moved), 1),
        }
        print(row, flush=True)
        rows.append(row)
    return rows


def study_compare(out: Path, n: int, seed: int, reps: int) -> None:
    from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign

    models = {f"resnet{d}": (lambda d=d: resnet(d)) for d in (20, 32, 56)}
    plan = EvaluationPlan(search(), progress=False, execution=Execution(batch_size=50))
    # allow_self_judging: the recorded study shows the oracle members' PA of 100 on purpose
    design = Design(models, out, repetitions=reps, seeds=seed, allow_self_judging=True)
    comp = run_campaign(plan, design, Setup(data(n), taef2(), zoo([32, 56])))
    print(comp.summary(), flush=True)
    print(comp.markdown(), flush=True)


#: What a sample's search decided, as issue 26's bf16 study compared it: validated, and fooled (validated with a
#: final prediction other than the label). ``STEP_DECISIONS``: every decision of the search, step by step.
STEP_DECISIONS = ("start_ok", "validated", "accepted_steps", "rejected_at", "first_fooled", "final_pred")


def decisions_differ(a, b) -> tuple[bool, bool]:
    """(validated or fooled differ, any step decision differs) for two records of one source."""
    fooled = lambda s: s.validated and s.final_pred != s.label  # noqa: E731
    return (a.validated, fooled(a)) != (b.validated, fooled(b)), any(
        getattr(a, k) != getattr(b, k) for k in STEP_DECISIONS
    )


def compare_runs(a, b, names: tuple[str, str], n_boot: int = 1000) -> dict:
    """Two runs of the same sources (EvalResults): how many sources' decisions differ, and PA(a) - PA(b) with its
    paired bootstrap interval over the sources (genEval.scores.rankings.metric_differences)."""
    from genEval.scores.outcomes import Outcomes
    from genEval.scores.rankings import metric_differences

    by_id = {s.source_id: s for s in b.samples}
    if set(by_id) != {s.source_id for s in a.samples}:
        raise ValueError(f"{names[0]} and {names[1]} did not search the same sources; compare runs of one data set.")
    diffs = [decisions_differ(s, by_id[s.source_id]) for s in a.samples]
    pa = metric_differences([Outcomes.from_records(a.samples)], [Outcomes.from_records(b.samples)],
                            len(CIFAR10_CLASSES), ("pa",), names=names, n_boot=n_boot)["pa"]  # fmt: skip
    return {"n": len(diffs), "validated_or_fooled": sum(d[0] for d in diffs), "any_decision": sum(d[1] for d in diffs),
            "pa_difference": pa.to_dict()}  # fmt: skip


def study_tf32(out: Path, n: int, seed: int, device: str, smoke: bool) -> dict:
    import torch

    from genEval.scores.intervals import format_estimate

    if not device.startswith("cuda") and not smoke:
        raise SystemExit(
            f"the TF32 study needs a CUDA device: TF32 exists only on NVIDIA GPUs (Ampere and newer), so on {device} "
            "both runs would be strict fp32. Run it with --device cuda, or with --smoke to check the plumbing."
        )
    from dataclasses import replace

    cfg = replace(search(), budget=2) if smoke else search()
    runs = {}
    for name, tf32 in (("tf32", True), ("strict-fp32", False)):
        execution = Execution(device=device, batch_size=min(n, 500), tf32=tf32)
        r = evaluate(resnet(20), data(n), taef2(), zoo([32, 56]), cfg, seed=seed, execution=execution,
                     output=RunOutput(out / name, progress=False))  # fmt: skip
        kernels = r.extra["kernels"]
        print(f"{name}: {line(r)} | {n / r.timings['loop_s']:.0f} img/s | tf32 took effect: {kernels['tf32']}",
              flush=True)  # fmt: skip
        runs[name] = r
    res = compare_runs(runs["tf32"], runs["strict-fp32"], ("tf32", "strict-fp32"))
    pa = res["pa_difference"]
    print(f"decisions differing (validated or fooled): {res['validated_or_fooled']}/{res['n']}; any step decision: "
          f"{res['any_decision']}/{res['n']}; PA(tf32) - PA(strict fp32) = {format_estimate(pa, with_reason=True)}",
          flush=True)  # fmt: skip
    res["device"] = torch.cuda.get_device_name() if device.startswith("cuda") else device
    res["runs"] = {k: {"scores": v.scores.to_dict(), "loop_s": v.timings["loop_s"]} for k, v in runs.items()}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/studies")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=int, default=50)
    ap.add_argument("--step", type=float, default=0.001)
    ap.add_argument("--only", nargs="*", default=["mask", "snapshots", "compare"])
    ap.add_argument("--device", default="cpu", help="tf32: cuda (the study) or cpu (--smoke only)")
    ap.add_argument("--smoke", action="store_true", help="tf32: 20 sources, budget 2, to check the plumbing")
    args = ap.parse_args()
    if args.smoke:
        args.n = min(args.n, 20)
    out = Path(args.out)
    global BUDGET, STEP
    BUDGET, STEP = args.budget, args.step
    if "mask" in args.only:
        res = study_mask(out / "mask", args.n, args.seed)
        (out / "mask" / "study.json").write_text(json.dumps(res, indent=2, default=str))
    if "snapshots" in args.only:
        study_snapshots(out / "snapshots", args.n, args.seed)
    if "start_noise" in args.only:
        res = study_start_noise(out / "start_noise", args.n, args.seed)
        (out / "start_noise" / "study.json").write_text(json.dumps(res, indent=2, default=str))
    if "compare" in args.only:
        study_compare(out / "compare", args.n, args.seed, args.reps)
    if "tf32" in args.only:
        res = study_tf32(out / "tf32", args.n, args.seed, args.device, args.smoke)
        (out / "tf32" / "study.json").write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
