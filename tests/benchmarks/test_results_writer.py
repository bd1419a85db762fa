"""Every study records its own result (issue 45, item 4): ``--results [ROOT]`` on any study's command line writes
``ROOT/<study>/<date>-<device>.json`` through :func:`benchmarks.harness.results.run`, once the study has finished,
with its command, seed, versions and device; a run that fails or would replace a recorded file writes nothing."""

from __future__ import annotations

import ast
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[2]
TODAY = datetime.datetime.now(datetime.timezone.utc).date().isoformat()


def _main_block(tree: ast.Module) -> str:
    blocks = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
    return ast.unparse(blocks[-1]) if blocks else ""


def test_every_study_with_a_main_records_through_the_harness():
    """A study run as a program (a ``__main__`` block) hands its ``main`` to ``results.run`` (the harness imported as
    ``results``); the modules without one are the scenario library and the old name's re-export."""
    studies = [p for p in sorted((ROOT / "benchmarks").glob("*.py")) if not p.name.startswith("_")]
    mains = {p.stem: _main_block(ast.parse(p.read_text())) for p in studies}
    assert {s for s, m in mains.items() if not m} == {"service_attack_scenarios", "service_attacks_41"}
    unwired = [s for s, m in mains.items() if m and "results.run(main, __file__)" not in m]
    assert not unwired, f"end these with `raise SystemExit(results.run(main, __file__))`: {unwired}"
    for study in mains:
        if mains[study]:
            assert "from benchmarks.harness import results" in (ROOT / "benchmarks" / f"{study}.py").read_text()


def test_the_results_option_is_taken_off_the_command_line():
    assert results.take_results_option(["--batch", "2", "--results", "/tmp/r", "x=1"]) == (
        Path("/tmp/r"),
        ["--batch", "2", "x=1"],
    )
    assert results.take_results_option(["--results", "--device", "cpu"]) == (results.RESULTS_DIR, ["--device", "cpu"])
    assert results.take_results_option(["--results=/tmp/q"]) == (Path("/tmp/q"), [])
    assert results.take_results_option(["--device", "cpu"]) == (None, ["--device", "cpu"])


def _toy_main(code: int | None = None):
    def main() -> int | None:
        print(f"args {sys.argv[1:]}\n\n| what | s |\n|---|---|\n| step | 0.25 |")
        return code

    return main


def test_a_finished_run_is_recorded_with_its_command_seed_and_device(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["toy_study"])
    assert (
        results.run(
            _toy_main(), "benchmarks/toy_study.py", ["--seed", "7", "--device", "cpu", "--results", str(tmp_path)]
        )
        == 0
    )
    got = json.loads((tmp_path / "toy_study" / f"{TODAY}-cpu.json").read_text())
    assert got["commands"] == ["python -m benchmarks.toy_study --seed 7 --device cpu"]
    assert got["environment"]["seed"] == "7" and got["environment"]["torch"] and got["environment"]["commit"]
    assert got["device"] == "cpu" and got["study"] == "toy_study" and got["position"] == 1
    assert got["blocks"][-1] == {"table": {"columns": ["what", "s"], "rows": [["step", 0.25]]}}
    assert (
        "args ['--seed', '7', '--device', 'cpu']" in got["blocks"][1]["notes"]
    )  # the study saw its arguments without --results
    assert results.load(tmp_path / "toy_study" / f"{TODAY}-cpu.json", tmp_path).study == "toy_study"


def test_a_failed_run_writes_nothing_and_a_recorded_file_is_never_replaced(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["toy_study"])
    assert results.run(_toy_main(3), "benchmarks/toy_study.py", ["--device", "cpu", "--results", str(tmp_path)]) == 3
    assert not list(tmp_path.rglob("*.json"))
    assert results.run(_toy_main(), "benchmarks/toy_study.py", ["--device", "cpu", "--results", str(tmp_path)]) == 0
    recorded = next(tmp_path.rglob("*.json"))
    before = recorded.read_bytes()

    def must_not_run() -> None:
        raise AssertionError("the study ran although its result file exists")

    assert results.run(must_not_run, "benchmarks/toy_study.py", ["--device", "cpu", "--results", str(tmp_path)]) == 2
    assert "is recorded already" in capsys.readouterr().err and recorded.read_bytes() == before
    assert results.run(_toy_main(), "benchmarks/toy_study.py", []) == 0  # without --results: nothing recorded
    assert list(tmp_path.rglob("*.json")) == [recorded]


def test_the_cheapest_study_writes_its_result_file(tmp_path):
    """step_cost's smallest setting (2 digits images, budget 1, one repeat) recorded into a temporary folder."""
    cmd = [sys.executable, "-m", "benchmarks.step_cost", "--batch", "2", "--budget", "1", "--repeats", "1"]
    done = subprocess.run([*cmd, "--device", "cpu", "--results", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = results.load(tmp_path / "step_cost" / f"{TODAY}-cpu.json", tmp_path)
    assert got.commands == ("python -m benchmarks.step_cost --batch 2 --budget 1 --repeats 1 --device cpu",)
    (table,) = [b["table"] for b in got.blocks if "table" in b]
    assert table["columns"] == ["part", "seconds / step (batch 2, cpu)"]
    assert [r[0] for r in table["rows"]][-1] == "engine overhead over the sum of parts"
    assert got.environment["seed"] == "the study's default" and got.environment["python"]


@pytest.mark.parametrize("device, name", [("cpu", "cpu"), ("CPU", "cpu")])
def test_a_device_gets_a_short_name(device, name):
    assert results.device_name(device) == name
