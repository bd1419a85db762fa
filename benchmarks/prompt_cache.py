"""First and second start of the CLIP oracle of ``data=imagenet`` (issue 20): a measurement, not a test.

``conf/oracle/clip_imagenet.yaml`` (the default oracle of ``data=imagenet``) builds its zero-shot head from open_clip's
1,000 ImageNet class names x 80 templates. Each start below runs in a fresh process (as a new ``geneval`` run, a shard
or a service job would) and times what the oracle costs before the first image: building the model and
``prepare(class_names)``. The first start encodes every prompt and writes the class-embedding matrix to the prompt
cache; the second reads it. Both share one temporary ``GENEVAL_CACHE``.

No CLIP weights can be downloaded here, so the model is open_clip's architecture with random weights
(``pretrained=None``): the text encoder costs the same per prompt whatever its weights, and the cache key then uses
the sha256 of the text tower's parameters (a real run keys by the pretrained tag, which costs nothing), so the second
start here pays that hash on top of what a real one would. ``--classes`` takes the first N ImageNet classes to keep the
first start affordable on a CPU (80,000 prompts through ViT-B-32's text tower take hours on 2 cores).

    python -m benchmarks.prompt_cache --model ViT-B-32 --classes 1000 --device cuda   # the full head, on a GPU
    python -m benchmarks.prompt_cache --model ViT-B-32 --classes 25                    # 2,000 prompts on a CPU
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/prompt_cache.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]


def one_start(model: str, classes: int, templates: str, device: str, threads: int) -> dict:
    """Build the oracle and prepare it (in the child process); seconds for each part."""
    import torch
    from open_clip import IMAGENET_CLASSNAMES

    from oracles.clip import CLIPOracle

    torch.set_num_threads(threads)
    torch.manual_seed(0)  # the same random weights in every process, as a pretrained tag would give
    t0 = time.perf_counter()
    oracle = CLIPOracle(model_name=model, pretrained=None, templates=templates).to(device)
    t1 = time.perf_counter()
    oracle.prepare(list(IMAGENET_CLASSNAMES[:classes]))
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "prepare_s": t2 - t1, "prompts": classes * len(oracle.templates)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="measure", choices=["measure", "child"])
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--classes", type=int, default=25)
    ap.add_argument("--templates", default="openai")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    args = ["--model", a.model, "--classes", str(a.classes), "--templates", a.templates, "--device", a.device]
    args += ["--threads", str(a.threads)]
    if a.mode == "child":
        print(json.dumps(one_start(a.model, a.classes, a.templates, a.device, a.threads)))
        return
    what = f"{a.model}, random weights, {a.classes} ImageNet classes, templates={a.templates}, {a.device}"
    print(f"CLIP oracle start ({what})")
    print("| start | prompt cache | build (s) | prepare (s) | total (s) |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GENEVAL_CACHE": cache, "PYTHONPATH": str(ROOT)}
        for label in ("first", "second"):
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.prompt_cache", "child", *args],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=env,
            )
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-3000:])
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            state = "empty: encodes and writes" if label == "first" else "filled: reads"
            total = r["build_s"] + r["prepare_s"]
            print(f"| {label} | {state} | {r['build_s']:.1f} | {r['prepare_s']:.1f} | {total:.1f} |", flush=True)
        print(f"{r['prompts']} prompts")


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
