"""Issue 44's measurements: label-free ranking on the digits zoo, selective prediction and calibration of the CIFAR-10
ResNets (clean against perturbed, with an OOD set of digits), and the reuse budget of the digits service benchmark.

    python -m benchmarks.confidence_reuse zoo --limit 200 --budget 10 --seed 0        # geneval compare, sensitivity
    python -m benchmarks.confidence_reuse cifar --limit 300 --budget 5 --seed 0       # three geneval runs, ood_data
    python -m benchmarks.confidence_reuse service --models 5                         # digits_settled, 5 submissions
    python -m benchmarks.confidence_reuse bounds                                     # the thesis's worked numbers

``zoo`` runs ``geneval compare label_free.sensitivity=true`` on the digits intervention zoo and prints each
model's label-free measures, their rho / tau_w against PA and FMR_v, and the sensitivity protocol. ``cifar`` writes
the first ``--ood`` scikit-learn digits as an image folder and runs ``geneval data=cifar10_jpg ... ood_data=<it>``
for ResNet-20, -32 and -56, each judged by a ResNet that is not itself (ResNet-56 for 20 and 32, ResNet-32 for 56).
``service`` serves the settled digits benchmark on 127.0.0.1:8000, submits ``--models`` digits CNNs trained with
different interventions over HTTP, runs the queue (every round) with ``geneval worker exit_when_idle=true``, and
prints ``curl 127.0.0.1:8000/api/benchmarks``'s ``reuse_budget`` and the leaderboard's budget line.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/confidence_reuse.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]


def geneval(args: list[str]) -> float:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "genEval.cli", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------------ zoo
def zoo(a: argparse.Namespace) -> None:
    from genEval.comparisons.leaderboard import Comparison

    out = Path(a.out) / "zoo"
    args = ["compare", f"data.limit={a.limit}", f"search.budget={a.budget}", f"seed={a.seed}", "repetitions=1",
            "label_free.sensitivity=true", f"out_dir={out}", "report=false"]  # fmt: skip
    seconds = geneval(args)
    comp = Comparison.load(out)
    print(f"geneval {' '.join(args)}   ({seconds:.0f} s)")
    print("| model | PA | FMR_v | SoftmaxCorr | MaxPred | SoftGap | ATC-MC | agreement w/ oracle |")
    print("|---|---|---|---|---|---|---|---|")
    num = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in comp.leaderboard:
        vals = [num(getattr(r, k)) for k in ("softmax_corr", "max_pred", "soft_gap", "atc_mc", "oracle_agreement")]
        print(f"| {r.model} | {r['pa'].fmt()} | {r['fmr_validated'].fmt()} | " + " | ".join(vals) + " |")
    lf = comp.label_free
    sig = lambda v: "-" if v is None else f"{v:+.3f}"  # noqa: E731
    print("\n| measure | rho vs PA | tau_w vs PA | rho vs FMR_v | tau_w vs FMR_v |\n|---|---|---|---|---|")
    for name, t in lf.measures.items():
        pa, fv = t["pa"], t["fmr_validated"]
        print(f"| {name} | {sig(pa['rho'])} | {sig(pa['tau_w'])} | {sig(fv['rho'])} | {sig(fv['tau_w'])} |")
    for truth in ("pa", "fmr_validated"):
        print(f"\nsensitivity against {truth} (rho / tau_w, mean of 3 seeded runs)")
        first = next(iter(lf.sensitivity.values()))[truth]
        head = [f"{float(f):.0%} sources" for f in first["subsample"]] + [
            f"{float(f):.0%} models" for f in first["kept_models"]
        ]
        print("| measure | " + " | ".join(head) + " |\n|---|" + "---|" * len(head))
        for name, t in lf.sensitivity.items():
            s = t[truth]
            cells = [
                f"{sig(v['rho'])} / {sig(v['tau_w'])}"
                for part in ("subsample", "kept_models")
                for v in s[part].values()
            ]
            print(f"| {name} | " + " | ".join(cells) + " |")


# ------------------------------------------------------------------------------------------ cifar
def write_digits_folder(root: Path, n: int) -> Path:
    """The first ``n`` scikit-learn digits as ``<root>/<digit>/<i>.png`` (8x8 grey, 0..16 scaled to 0..255)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    d = load_digits()
    for i, (img, y) in enumerate(zip(d.images[:n], d.target[:n])):
        folder = root / str(int(y))
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((img * 255 / 16).round().astype(np.uint8)).save(folder / f"{i:04d}.png")
    return root


JUDGE = {20: 56, 32: 56, 56: 32}
WEIGHTS = {32: "resnet32-d509ac18.th", 56: "resnet56-4bfd9763.th"}


def cifar(a: argparse.Namespace) -> None:
    from genEval.runs import RunDir

    ood = write_digits_folder(Path(a.out) / "digits_ood", a.ood)
    print(f"ood_data: {a.ood} scikit-learn digits written to {ood}")
    print("| model (judge) | n clean / validated | AURRA clean | AURRA perturbed | RMS cal. err. clean | "
          "RMS cal. err. perturbed | -MSP AUROC perturbed vs clean | OOD AUPR (chance) | OOD AUROC | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for depth, judge in JUDGE.items():
        run = Path(a.out) / f"cifar_r{depth}"
        weights = f"asset:weights/cifar10-resnet/{WEIGHTS[judge]}"
        args = ["data=cifar10_jpg", f"classifier=cifar_resnet{depth}", "oracle=classifier",
                f"oracle.classifier.depth={judge}", f"oracle.classifier.checkpoint={weights}",
                f"data.limit={a.limit}", f"search.budget={a.budget}", f"seed={a.seed}", f"ood_data={ood}",
                "save_images=false", "save_latents=false", f"hydra.run.dir={run}"]  # fmt: skip
        seconds = geneval(args)
        c = RunDir(run).results.confidence
        print(
            f"| ResNet-{depth} (ResNet-{judge}) | {c.clean.n} / {c.perturbed.n} | {c.clean.aurra.fmt()} | "
            f"{c.perturbed.aurra.fmt()} | {c.clean.calibration_error.fmt()} | {c.perturbed.calibration_error.fmt()} | "
            f"{c.shift.auroc.fmt()} | {c.ood.aupr.fmt()} ({c.ood.chance_aupr:.1f}) | {c.ood.auroc.fmt()} | "
            f"{seconds:.0f} |"
        )


# ------------------------------------------------------------------------------------------ service
RECIPES = ("erm", "gaussian_noise", "pgd", "augmix", "augmix_noise", "erm")


def service(a: argparse.Namespace) -> None:
    import uvicorn

    from benchmarks.harness.presets import benchmark
    from genEval.service.server.app import create_app
    from genEval.service.server.database import Database, sqlite_url
    from genEval.service.server.facade import Service, Settings

    home = Path(a.out) / "service"
    home.mkdir(parents=True, exist_ok=True)
    db = Database(sqlite_url(home / "geneval.db"))
    if a.table_only:  # the budget of an earlier measurement's runs at other epsilons (no new submissions)
        return reuse_table(db, home)
    classifiers = {}
    for i, recipe in enumerate(RECIPES[: a.models]):  # the digits CNN under different interventions (and seeds)
        classifiers[f"digits_{recipe}_{i}"] = {"_target_": "genEval.classifiers.digits_intervention", "recipe": recipe,
                                               "arch": "cnn", "seed": i}  # fmt: skip
    benchmarks = {"digits_settled": benchmark("digits_settled")}
    svc = Service(db, Settings(home=home, default_benchmark="digits_settled", n_boot=200), benchmarks, classifiers)
    server = uvicorn.Server(uvicorn.Config(create_app(svc), host="127.0.0.1", port=a.port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.1)
    token = db.tokens.create("bench", "submitter")[0]
    t0 = time.perf_counter()
    for i, recipe in enumerate(RECIPES[: a.models]):
        body = {"benchmark": "digits_settled", "name": f"{recipe}_{i}",
                "model": {"kind": "config", "name": f"digits_{recipe}_{i}"}}  # fmt: skip
        req = urllib.request.Request(
            f"http://127.0.0.1:{a.port}/api/jobs", data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        urllib.request.urlopen(req).read()
    # the service's own worker, until the queue (every round it queues) is empty; no sandbox: the digits recipes
    # train their CNN into the shared cache on first use
    worker = [sys.executable, "-m", "genEval.cli", "worker", f"home={home}", "n_boot=200", "exit_when_idle=true"]
    subprocess.run([*worker, "isolation=none", "poll_s=0.2"], check=True)
    jobs = len(db.jobs.list(status="done"))
    print(f"{a.models} submissions, {jobs} jobs (rounds) in {time.perf_counter() - t0:.0f} s")
    shown = subprocess.run(["curl", "-s", f"127.0.0.1:{a.port}/api/benchmarks"], capture_output=True, text=True).stdout
    (bench,) = [b for b in json.loads(shown) if b["name"] == "digits_settled"]
    print(f"curl 127.0.0.1:{a.port}/api/benchmarks -> reuse_budget:")
    print(json.dumps(bench["reuse_budget"], indent=1))
    page = subprocess.run(["curl", "-s", f"127.0.0.1:{a.port}/leaderboard/digits_settled"], capture_output=True,
                          text=True).stdout  # fmt: skip
    line = page[page.index('id="reuse-budget"') :].split("</p>")[0]
    print("leaderboard:", line.split(">", 1)[1])
    board = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{a.port}/api/leaderboard/digits_settled").read())
    for r in board["rows"]:
        fmr_v = r["scores"]["fmr_validated"]["value"]
        print(f"  {r['rank']:>4} {r['name']:<18} rounds {r['repetitions']}  FMR_v {fmr_v:.2f}")
    server.should_exit = True
    reuse_table(db, home)


def reuse_table(db, home: Path) -> None:
    """The version's budget from the same runs at several epsilons (delta 0.05): the choice that matters most."""
    from genEval.runs.reader import RunDir
    from genEval.service.reuse import version_budget

    (version,) = {r.benchmark_version for r in db.jobs.list()}
    rows = [r for r in db.standings.rows("digits_settled", version) if r.ranked]
    models = {r.job_id: [RunDir(home / d) for d in r.run_dirs] for r in rows}
    print("\n| epsilon (points) | eta | independent | error | n | union | similarity | Naive Bayes | left |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in (0.02, 0.03, 0.05, 0.1, 0.2):
        b = version_budget(models, {"epsilon": eps, "delta": 0.05})
        print(f"| {100 * eps:g} | {b['eta']:.4f} | {b['eta_independent']:.4f} | {b['error_rate']:.4f} | "
              f"{b['n_sources']} | {b['union_bound']:,} | {b['similarity_bound']:,} | {b['naive_bayes_bound']:,} | "
              f"{b['submissions_left']:,} |")  # fmt: skip


def bounds(a: argparse.Namespace) -> None:
    """Miller 2022's worked numbers (n = 50,000, p = 0.244, eps = 0.01, delta = 0.05) and the gain by agreement."""
    from genEval.scores.reuse import independence_agreement, naive_bayes_models, similarity_bound_models
    from genEval.scores.reuse import union_bound_models as union

    n, p = 50_000, 0.244
    base = union(n, p, 0.01, 0.05)
    print(f"union bound: {base:,} models (n={n:,}, p={p}, eps=0.01, delta=0.05)")
    print("| eta | similarity bound | x union | Naive Bayes | x union |\n|---|---|---|---|---|")
    for eta in (round(independence_agreement(p, p), 4), 0.7, 0.8, 0.85, 0.9):
        t0 = time.perf_counter()
        s, nb = similarity_bound_models(n, p, eta, 0.01, 0.05), naive_bayes_models(n, p, eta, 0.01, 0.05)
        print(f"| {eta} | {s:,} | {s / base:.2f} | {nb:,} | {nb / base:.3g} |  ({time.perf_counter() - t0:.1f} s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("zoo", "cifar", "service", "bounds"))
    p.add_argument("--out", default=tempfile.mkdtemp(prefix="issue44_"))
    p.add_argument("--limit", type=int, default=200, help="sources per model")
    p.add_argument("--budget", type=int, default=10, help="search steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ood", type=int, default=500, help="digits in the OOD folder (cifar)")
    p.add_argument("--models", type=int, default=5, help="submissions (service)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--table-only", action="store_true", help="service: only the epsilon table of --out's runs")
    a = p.parse_args()
    {"zoo": zoo, "cifar": cifar, "service": service, "bounds": bounds}[a.what](a)


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
