"""Records cannot be counted twice (genEval/runs/faults.py): a resume and a merge keep one record per source of the
run; a duplicate with the same content is dropped with a warning, one with other content (two writers) is refused,
and so are a record of a source that is not in the run and a line that is not a record object, naming the file
and the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genEval import evaluate
from genEval.runs import Shard
from genEval.runs.shards import merge_runs
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator, interrupted_run, toy_data

CFG = SearchConfig(budget=6, step_size=0.3, start_noise=0.1)


def roles():
    return dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )


def _partial(run: Path, n: int = 10) -> tuple[ListDataset, Path]:
    """A run of ``n`` sources stopped at the 8th, leaving samples.partial.jsonl."""
    d = toy_data(n)
    interrupted_run(d, 7, search=CFG, seed=0, execution=Execution(batch_size=2), output=run, **roles())
    return d, run / "samples.partial.jsonl"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _resume(d: ListDataset, run: Path):
    return evaluate(data=d, search=CFG, seed=0, execution=Execution(batch_size=2), output=run, **roles())


def test_a_duplicated_record_is_dropped_with_a_warning_and_not_counted(tmp_path, caplog):
    d, partial = _partial(tmp_path / "run")
    lines = _lines(partial)
    lines.insert(2, lines[1])  # a batch written twice, in the middle of the file
    partial.write_text("\n".join(lines) + "\n")
    resumed = _resume(d, tmp_path / "run")
    assert "dropped 1 duplicate record(s) (lines 3 repeat earlier records" in caplog.text
    fresh = evaluate(
        data=d, search=CFG, seed=0, execution=Execution(batch_size=2), output=tmp_path / "fresh", **roles()
    )
    assert resumed.scores.n == 10  # not 11
    assert resumed.scores.to_dict() == fresh.scores.to_dict()
    assert len(_lines(tmp_path / "run" / "samples.jsonl")) == 10


def test_a_duplicate_with_other_content_is_refused_as_two_writers(tmp_path):
    d, partial = _partial(tmp_path / "run")
    lines = _lines(partial)
    other = json.loads(lines[0]) | {"final_pred": 1 - json.loads(lines[0])["final_pred"], "accepted_steps": 99}
    lines.insert(3, json.dumps(other))
    partial.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        ValueError,
        match=r"samples.partial.jsonl lines 1 and 4 are two different records of source "
        r"'toy/0000' \(they differ in accepted_steps, final_pred\): two processes wrote",
    ):
        _resume(d, tmp_path / "run")


@pytest.mark.parametrize(
    "line,match",
    [
        (
            {"source_id": "elsewhere/0003", "index": 3},
            r"line 2 is a record of source 'elsewhere/0003', but position 3 "
            r"of this run is source 'toy/0003'",
        ),
        (
            {"source_id": "toy/0042", "index": 42},
            r"line 2 is a record of source 'toy/0042' at position 42, which is "
            r"not in this run \(10 sources\)",
        ),
    ],
)
def test_a_record_of_a_source_not_in_the_run_is_refused(tmp_path, line, match):
    d, partial = _partial(tmp_path / "run")
    lines = _lines(partial)
    lines.insert(1, json.dumps(json.loads(lines[0]) | line))
    partial.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        _resume(d, tmp_path / "run")


@pytest.mark.parametrize("bad,what", [("[1, 2]", "a JSON list"), ("null", "null"), ('"x"', "a JSON string")])
def test_a_line_that_is_not_a_record_object_is_refused_naming_file_and_line(tmp_path, bad, what):
    d, partial = _partial(tmp_path / "run")
    lines = _lines(partial)
    lines.insert(2, bad)
    partial.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"samples.partial.jsonl line 3 is corrupt: not a sample record \({what} "):
        _resume(d, tmp_path / "run")


def _shards(tmp_path: Path) -> Path:
    data = toy_data(12)
    for i in range(2):
        evaluate(data=data, search=CFG, seed=5, shard=Shard(i, 2), output=tmp_path / "shards" / f"s{i}", **roles())
    evaluate(data=data, search=CFG, seed=5, output=tmp_path / "whole", **roles())
    return tmp_path / "shards" / "s1" / "samples.jsonl"


def test_merge_drops_a_duplicate_inside_a_shard_and_refuses_a_conflicting_one(tmp_path, caplog):
    samples = _shards(tmp_path)
    good = samples.read_text()
    lines = good.splitlines()
    samples.write_text("\n".join([*lines[:3], lines[2], *lines[3:]]) + "\n")
    merged = merge_runs([tmp_path / "shards"], tmp_path / "merged")
    assert merged.scores.n == 12  # not 13
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())["scores"]
    assert json.loads((tmp_path / "merged" / "results.json").read_text())["scores"] == whole
    assert "s1/samples.jsonl: dropped 1 duplicate record(s) (lines 4" in caplog.text

    changed = json.loads(lines[2]) | {"oracle_score": 0.123}
    samples.write_text("\n".join([*lines, json.dumps(changed)]) + "\n")
    with pytest.raises(ValueError, match=r"s1/samples.jsonl lines 3 and 7 are two different records"):
        merge_runs([tmp_path / "shards"], tmp_path / "merged-2")
    samples.write_text("\n".join([*lines, "null"]) + "\n")
    with pytest.raises(ValueError, match=r"s1/samples.jsonl line 7 is corrupt: not a sample record \(null"):
        merge_runs([tmp_path / "shards"], tmp_path / "merged-3")
    shard0 = json.loads((tmp_path / "shards" / "s0" / "samples.jsonl").read_text().splitlines()[0])
    samples.write_text("\n".join([*lines, json.dumps(shard0)]) + "\n")  # a record of the other shard's source
    with pytest.raises(
        ValueError,
        match=r"s1/samples.jsonl line 7 is a record of source 'toy/0000' at position 0, "
        r"which is not in this run",
    ):
        merge_runs([tmp_path / "shards"], tmp_path / "merged-4")
