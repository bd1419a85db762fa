"""Benchmark results as data (:mod:`benchmarks.harness.results`, issue 45): the committed result files load and sit
where their fields say, numbers are numbers where the record spells one, a file round-trips, bad files are refused
with a message naming the fix, and ``docs/hooks.py`` finds a ``benchmarks/RESULTS.md`` that no longer matches them."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.harness import results as rs

ROOT = Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks_results", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tiny(**change) -> dict:
    d = {
        "schema": 1, "study": "toy", "date": "2026-12-02", "device": "cpu", "position": 1,
        "commands": ["python -m benchmarks.toy --n 2 \\\n    --fast"], "environment": {"machine": "Device: a toy."},
        "blocks": [
            {"notes": "## Toy (`benchmarks/toy.py`)"},
            {"code": "bash", "text": "# needs: nothing\npython -m benchmarks.toy --n 2 \\\n    --fast"},
            {"table": {"columns": ["n", "s", "note"], "rows": [[1, 0.5, "0.270"], [2, 1.25, ""]]}},
        ],
    }  # fmt: skip
    return d | change


def test_cells_are_numbers_only_where_the_record_spells_one():
    assert [rs.cell_value(t) for t in ("2.64", "128", "-3", "0.00746", "12.0")] == [2.64, 128, -3, 0.00746, 12.0]
    kept = ("0.270", "1,268", "007", "1e-05", "nan", "**not met**", "", "8.02 (compile)")
    assert [rs.cell_value(t) for t in kept] == list(kept)
    assert all(rs.cell_text(rs.cell_value(t)) == t for t in ("2.64", "0.270", "128", "0.1", "1,268"))
    assert rs.split_row("| a | b \\| c |  |") == ["a", "b \\| c", ""]


def test_a_result_renders_as_recorded_and_round_trips(tmp_path):
    r = rs.Result.from_dict(_tiny())
    assert r.markdown() == (
        "## Toy (`benchmarks/toy.py`)\n\n"
        "```bash\n# needs: nothing\npython -m benchmarks.toy --n 2 \\\n    --fast\n```\n\n"
        "| n | s | note |\n|---|---|---|\n| 1 | 0.5 | 0.270 |\n| 2 | 1.25 |  |"
    )
    path = rs.write(r, tmp_path)
    assert path == tmp_path / "toy" / "2026-12-02-cpu.json"
    assert rs.load(path, tmp_path) == r and json.loads(path.read_text()) == _tiny()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # atomic: no temporary file left beside it


@pytest.mark.parametrize(
    "change, message",
    [
        ({"date": "2 Dec 2026"}, "date '2 Dec 2026' is not YYYY-MM-DD"),
        ({"device": "NVIDIA H200"}, "device 'NVIDIA H200' is not a short name"),
        ({"schema": 2}, "results schema 2; this code reads schema 1"),
        ({"commands": ["python -m benchmarks.toy"]}, "are not its bash blocks'"),
        ({"blocks": [{"notes": "x", "table": {}}]}, "one of notes, code, table"),
        ({"blocks": [{"table": {"columns": ["a"], "rows": [[1, 2]]}}], "commands": []}, "row whose length"),
        ({"extra": 1}, "unknown keys \\['extra'\\]"),
    ],
)
def test_a_bad_result_is_refused_naming_the_fix(change, message):
    with pytest.raises(ValueError, match=message):
        rs.Result.from_dict(_tiny(**change))


def test_a_misplaced_file_or_a_shared_position_is_refused(tmp_path):
    rs.write(rs.Result.from_dict(_tiny()), tmp_path)
    moved = tmp_path / "toy" / "2026-12-01-cpu.json"
    shutil.move(tmp_path / "toy" / "2026-12-02-cpu.json", moved)
    with pytest.raises(ValueError, match="holds the result of toy/2026-12-02-cpu.json; move it there"):
        rs.load_all(tmp_path)
    moved.unlink()
    rs.write(rs.Result.from_dict(_tiny()), tmp_path)
    rs.write(rs.Result.from_dict(_tiny(study="other")), tmp_path)
    with pytest.raises(ValueError, match="share position 1"):
        rs.load_all(tmp_path)


def test_the_committed_results_load_in_page_order_with_their_numbers():
    results = rs.load_all()
    assert len(results) >= 21 and [r.position for r in results] == sorted({r.position for r in results})
    assert all((rs.RESULTS_DIR / r.path_name).is_file() for r in results)
    # the CPU smoke row of the throughput study, as recorded in RESULTS.md: numbers, not strings
    smoke = next(r for r in results if r.path_name == "throughput/2026-11-24-cpu.json")
    table = next(b["table"] for b in smoke.blocks if "table" in b and "samples/s" in b["table"]["columns"])
    row = dict(zip(table["columns"], table["rows"][0]))
    assert (row["generator"], row["batch"], row["samples/s"], row["ms/step"]) == ("taesd", 1, 2.64, 99)
    assert smoke.commands == ("python benchmarks/throughput.py --device cpu --smoke",)


def test_markdown_and_blocks_are_inverses_on_every_committed_result():
    """The parser that turned the prose page into these files reads each file's page text back to its blocks."""
    for r in rs.load_all():
        assert rs.blocks_from_markdown(r.markdown()) == list(r.blocks), r.path_name
    # a table whose text is not exactly what the renderer writes (an empty header cell) stays notes, with its text
    odd = "text\n\n| | a |\n|---|---|\n| x | 1 |"
    assert rs.blocks_from_markdown(odd) == [{"notes": odd}]


def test_a_printed_table_is_recorded_at_the_end_and_never_over_a_recorded_one(tmp_path, capsys, monkeypatch):
    rs.write(rs.Result.from_dict(_tiny(position=4)), tmp_path)
    printed = "## Smoke\n\n```bash\npython -m benchmarks.toy --smoke\n```\n\n"
    printed += "| batch | samples/s |\n|---|---|\n| 2 | 3.09 |\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(printed))
    args = ["--study", "toy", "--device", "cpu", "--date", "2026-12-03", "--env", "torch=2.14.1"]
    args += ["--root", str(tmp_path)]
    assert rs.main(args) == 0 and "recorded" in capsys.readouterr().out
    r = rs.load(tmp_path / "toy" / "2026-12-03-cpu.json", tmp_path)
    assert (r.position, r.commands, r.environment) == (5, ("python -m benchmarks.toy --smoke",), {"torch": "2.14.1"})
    assert r.blocks[-1] == {"table": {"columns": ["batch", "samples/s"], "rows": [[2, 3.09]]}}
    assert r.markdown() == printed.strip()
    with pytest.raises(FileExistsError, match="toy/2026-12-03-cpu.json is recorded already"):
        rs.record(printed, "toy", "cpu", "2026-12-03", {}, tmp_path)


def test_results_md_is_the_rendered_results_and_a_drift_is_found(tmp_path):
    hooks = _hooks()
    page = (rs.RESULTS_DIR.parent / "RESULTS.md").read_text()
    assert "benchmarks/RESULTS.md" not in hooks.stale() and f"\n{rs.page()}\n<!-- end generated -->" in page
    drifted = page.replace("| taesd | fp32 | 1 | 2.64 |", "| taesd | fp32 | 1 | 2.65 |", 1)
    assert drifted != page
    (tmp_path / "RESULTS.md").write_text(drifted)
    assert hooks.stale(tmp_path) == ["RESULTS.md"]
    assert hooks.write(tmp_path) == ["RESULTS.md"] and (tmp_path / "RESULTS.md").read_text() == page
