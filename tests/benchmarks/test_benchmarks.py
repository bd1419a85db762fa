"""The throughput benchmark (``python -m benchmarks.throughput``, issue 12): the scripted oracle its refill comparison
rests on, that comparison's fairness (both ways do the same work), the device peak table, and (slow) the CPU
smoke run's printed table. Speed itself is never asserted: the numbers go to benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib
import json
import statistics
import subprocess
import sys

import pytest
import torch

from tests.support.assets import ROOT
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator


@pytest.fixture(scope="module")
def tp():
    """The throughput study, :mod:`benchmarks.throughput`."""
    return importlib.import_module("benchmarks.throughput")


def _decisions(oracle, labels: list[int], calls: int) -> list[list[bool]]:
    x = torch.zeros(len(labels), 3, 2, 2)
    return [oracle.judge(x, torch.tensor(labels)).accept.tolist() for _ in range(calls)]


def _rejection_step(seq: list[bool]) -> int:
    """Call 0 judges the clean image, call 1 the start (t = 0), call c the step t = c - 1."""
    return seq.index(False) - 1


def test_scripted_oracle_rejects_once_at_a_geometric_step_whatever_the_batch(tp):
    p = 0.8
    make = lambda: tp.ScriptedOracle(AcceptAllOracle(), oracle_classes=1000, accept_prob=p, seed=3)  # noqa: E731
    alone = [d[0] for d in _decisions(make(), [7], 60)]
    mixed = [d[1] for d in _decisions(make(), [8, 7, 9], 60)]
    assert alone == mixed  # a sample's verdicts do not depend on who shares its batch
    r = _rejection_step(alone)
    assert r >= 1 and alone[: r + 1] == [True] * (r + 1) and alone[r + 1] is False
    every = _decisions(make(), list(range(1000)), 60)
    steps = [_rejection_step([d[i] for d in every]) for i in range(1000)]
    # Geometric(1 - p) on {1, 2, ...}: mean 1/(1-p) = 5 (sd 4.5, se 0.14), P(r = 1) = 1 - p = 0.2 (se 0.013)
    assert abs(statistics.fmean(steps) - 5) < 0.6
    assert abs(steps.count(1) / 1000 - 0.2) < 0.05
    always = tp.ScriptedOracle(AcceptAllOracle(), oracle_classes=1000, accept_prob=1.0)
    assert all(all(d) for d in _decisions(always, [1, 2, 3], 100))


def test_chunked_and_refilled_searches_do_the_same_work(tp):
    budget, batch = 4, 3
    sources = tp.make_sources(10, size=2)
    roles = (LinearClassifier(in_features=12, num_classes=1000), SigmoidGenerator(), None)
    script = lambda: tp.ScriptedOracle(AcceptAllOracle(), 1000, accept_prob=0.8, seed=5)  # noqa: E731
    cpu = torch.device("cpu")
    chunked = tp.run_chunked(sources, roles, script(), budget, batch, cpu)
    refilled = tp.run_search(sources, roles, script(), budget, batch, cpu)
    stops = lambda outs: {o.source_id: (o.accepted_steps, o.rejected_at) for o in outs}  # noqa: E731
    assert len(chunked) == len(refilled) == 10
    assert stops(chunked) == stops(refilled)
    reject_at = script().reject_at
    for o in refilled:  # every sample stopped where its script says: rejected at r, or out of budget
        r = int(reject_at[o.label])
        assert (o.accepted_steps, o.rejected_at) == ((r - 1, r) if r <= budget else (budget, -1))
    kinds = {o.rejected_at > 0 for o in refilled}
    assert kinds == {True, False}, "the script should reject some samples and let others run the budget"
    assert {tp.steps_taken(o, budget) for o in refilled} <= set(range(1, budget + 1))


def test_known_device_peaks(tp):
    assert tp.peak_for_name("NVIDIA H100 PCIe") == 756.5  # the data sheet's 1,513 with sparsity, halved
    assert tp.peak_for_name("NVIDIA H100 80GB HBM3") == 989.5
    assert tp.peak_for_name("NVIDIA H200") == 989.5
    assert tp.peak_for_name("NVIDIA A100-SXM4-80GB") == 312
    assert tp.peak_for_name("NVIDIA GeForce RTX 4090") is None


def test_refill_builds_on_the_setting_listed_before_it(tp):
    assert tp.refill_base(["fp32", "bf16", "bf16-cl", "compile", "refill"]) == "compile"
    assert tp.refill_base(["fp32", "refill", "bf16"]) == "fp32"
    assert tp.refill_base(["refill"]) == "fp32"


def _markdown_table(lines: list[str], first_header_cell: str, must_have: str) -> list[dict[str, str]]:
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header_cell} ") and must_have in ln)
    cells = lambda ln: [c.strip() for c in ln.strip().strip("|").split("|")]  # noqa: E731
    header, rows = cells(lines[start]), []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(header, cells(ln))))
    return rows


@pytest.mark.slow
def test_cpu_smoke_run_prints_the_throughput_table(tmp_path):
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.throughput", "--device", "cpu", "--smoke", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    rows = _markdown_table(lines, "generator", "samples/s")
    assert [(r["generator"], r["setting"], r["batch"]) for r in rows] == [("taesd", "fp32", b) for b in "12"]
    # ms/step is a difference of two timed runs, (T(1 + k) - T(1)) / k, floored at 0: on a loaded CPU a tiny smoke
    # step can time at 0, so only its sign is checked (no timed assertion)
    assert all(float(r["samples/s"]) > 0 and float(r["ms/step"]) >= 0 for r in rows)
    assert all(r["% of FLOP limit"] == "" for r in rows)  # no peak is known for a CPU
    refill = _markdown_table(lines, "generator", "refill samples/s")
    assert [r["batch"] for r in refill] == ["1", "2"] and all(r["same work"] == "yes" for r in refill)
    assert float(_markdown_table(lines, "generator", "naive samples/s")[0]["speed-up"]) > 0
    phases = [r["phase"] for r in _markdown_table(lines, "generator", "phase")]
    assert phases[:4] == ["decode forward", "classifier forward", "backward (classifier + decoder)", "oracle forward"]
    data = json.loads(out.read_text())
    result = data["results"][0]
    assert result["flops"]["total"] == pytest.approx(sum(v for k, v in result["flops"].items() if k != "total"))
    for row in result["rows"]:  # smoke times the whole budget (k = B - 1, T(1 + k) = T(B)), so samples/s = batch / T(B)
        assert row["samples_per_s"] == pytest.approx(row["batch"] / row["timed_s"])
