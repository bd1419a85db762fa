"""Time one step of the search loop and its parts; report the engine's overhead over their sum.

One step of ``genEval.search.perturb.perturb`` (paper Algorithm 1) costs one decode with a graph, one classifier
forward + backward through classifier and decoder, and one oracle judgement. This script times those
three parts alone, then the loop itself (``(T(budget=B) - T(budget=0)) / B`` with an oracle that judges
but accepts everything, so the batch stays full), and prints ``overhead = loop step / sum of parts - 1``.

    python -m benchmarks.step_cost experiment=cifar10_taef2 --batch 16 --budget 5
    python -m benchmarks.step_cost --batch 64 --budget 10            # the offline digits default

Arguments starting with ``--`` are this script's; the rest are Hydra overrides of ``conf/config.yaml``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/step_cost.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.harness import results
from benchmarks.harness.roles import AcceptAll


def _timed_interleaved(fns: dict, repeats: int, sync) -> dict[str, float]:
    """Median seconds of each function; the functions take turns so load drift hits them all alike."""
    for fn in fns.values():
        fn()  # warm-up
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in ts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    args, overrides = ap.parse_known_args()

    from benchmarks.harness.presets import build, compose
    from genEval.search.execution import resolve_device
    from genEval.search.perturb import Sample, SearchConfig, perturb

    cfg = compose("config", overrides)
    dev = resolve_device(args.device)
    data = build(cfg.data)
    clf, gen, orc = (build(cfg[k]).to(dev).eval() for k in ("classifier", "generator", "oracle"))
    orc.prepare(list(data.class_names))
    items = [data[i] for i in range(min(args.batch, len(data)))]  # (image, label, source id)
    sources = [Sample(im, int(lb), sid, seed=i, index=i) for i, (im, lb, sid) in enumerate(items)]
    x = torch.stack([s.x for s in sources]).to(dev)
    y = torch.tensor([s.label for s in sources], device=dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    with torch.no_grad():
        z0 = gen.encode(x)

    def decode():
        return gen.decode(z0.detach().requires_grad_(True))

    def decode_and_grad():
        z = z0.detach().requires_grad_(True)
        torch.autograd.grad(F.cross_entropy(clf(gen.decode(z)), y, reduction="sum"), z)

    with torch.no_grad():
        x_dec = gen.decode(z0)

    def oracle():
        with torch.no_grad():
            orc.judge(x_dec, y)

    judge_all = AcceptAll(orc)
    search = SearchConfig.coerce({**dict(cfg.search), "budget": args.budget, "early_stop": False})

    def run(b: int) -> None:  # one batch of the sources through the loop (perturb yields their outcomes)
        cfg_b = SearchConfig(**{**search.__dict__, "budget": b})
        list(perturb(sources, clf, gen, judge_all, cfg_b, batch_size=len(sources), device=dev))

    t = _timed_interleaved(
        {
            "decode": decode,
            "decode_grad": decode_and_grad,
            "oracle": oracle,
            "loop_b": lambda: run(args.budget),
            "loop_0": lambda: run(0),
        },
        args.repeats,
        sync,
    )
    t_dec, t_orc = t["decode"], t["oracle"]
    t_grad = max(0.0, t["decode_grad"] - t_dec)
    parts = t_dec + t_grad + t_orc
    step = (t["loop_b"] - t["loop_0"]) / args.budget
    res = {
        "device": str(dev),
        "batch": len(x),
        "budget": args.budget,
        "overrides": overrides,
        "generator": getattr(gen, "name", type(gen).__name__),
        "image_size": list(x.shape[-2:]),
        "decode_s": t_dec,
        "classifier_fwd_bwd_s": t_grad,
        "oracle_s": t_orc,
        "sum_of_parts_s": parts,
        "loop_step_s": step,
        "overhead": step / parts - 1,
        "threads": torch.get_num_threads(),
    }
    print(f"| part | seconds / step (batch {len(x)}, {dev}) |\n|---|---|")
    labels = {
        "decode_s": "decode (with graph)",
        "classifier_fwd_bwd_s": "classifier fwd + bwd (through decoder)",
        "oracle_s": "oracle judge",
        "sum_of_parts_s": "sum of parts",
        "loop_step_s": "loop step (perturb)",
    }
    for k, label in labels.items():
        print(f"| {label} | {res[k]:.4f} |")
    print(f"| engine overhead over the sum of parts | {100 * res['overhead']:+.1f}% |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
