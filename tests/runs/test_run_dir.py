"""The run directory typed end to end (issue 36, item 2) and records typed strictly on read (issue 37, item 5).

One handle, :class:`~genEval.runs.RunDir`, reads a run (identity, results, samples, tensor parts); comparisons,
snapshots, the audit, mask fitting and the merge of shards take it; nothing outside ``genEval/runs/`` subscripts
the identity's dict; a record with a field of the wrong type is refused naming the file, the line and the field.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from genEval import evaluate
from genEval.comparisons.loading import load_runs
from genEval.masks import fit_mask_from_run
from genEval.reports.audit import build_audit, run_id
from genEval.runs import RunConfig, RunDir, RunIdentity, SampleRecord, Shard
from genEval.runs.results import EvalResult
from genEval.runs.shards import merge_runs
from genEval.runs.summary import summarize
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.snapshots.export import export_snapshot
from genEval.snapshots.reader import load_snapshot
from tests.support.assets import ROOT
from tests.support.hand_runs import write_hand_runs
from tests.support.toys import (
    AcceptAllOracle,
    LinearClassifier,
    SigmoidGenerator,
    interrupted_run,
    linear_roles,
    toy_data,
)

SEARCH = SearchConfig(budget=4, step_size=0.3)
roles = linear_roles


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, EvalResult]:
    d = tmp_path_factory.mktemp("rundir") / "run"
    out = dict(output=d, scoring=Scoring(n_boot=50), execution=Execution(batch_size=8))
    res = evaluate(data=toy_data(16), search=SEARCH, seed=11, **out, **roles())  # no tensors: the cheap reads
    return d, res


def test_the_interface_line_of_the_issue(run):
    d, res = run
    line = f"from genEval.runs import RunDir; r = RunDir({str(d)!r}); print(r.identity.seed, r.results.scores.fmr)"
    out = subprocess.run([sys.executable, "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seed, fmr = out.stdout.split(" ", 1)
    assert int(seed) == 11 and fmr.strip() == str(res.scores.fmr)


def test_a_run_dir_reads_every_part_typed_and_once(run, monkeypatch):
    d, res = run
    r = RunDir(str(d))
    assert r.path == d and r == RunDir(d) and str(r) == str(d) and r.finished
    assert isinstance(r.identity, RunIdentity) and r.identity.seed == 11 and r.identity.shard == Shard(0, 1)
    assert r.identity.components == res.components and r.identity.sources.n_total == r.identity.sources.n == 16
    assert r.results.to_dict() == json.loads((d / "results.json").read_text())
    assert (
        r.samples == res.samples
        and len(r.outcomes) == 16
        and r.outcomes.labels.tolist() == [s.label for s in res.samples]
    )
    assert r.results.identity == r.identity and r.results.shard == Shard()  # results.json recorded it too
    assert r.results.config.search == SEARCH and r.results.config.budget == 4  # a SearchConfig, not a mapping
    from genEval.runs import reader

    monkeypatch.setattr(reader, "read_samples", lambda *_: pytest.fail("samples.jsonl read twice"))
    assert r.samples is r.samples  # cached: a finished run is read once
    assert not r.has("images") and RunDir.of(r) is r and RunDir.of(d) == r
    with pytest.raises(FileNotFoundError, match=r"saved no images .*save_images=true"):
        r.tensors("images")


def test_the_identity_reads_back_as_written_and_names_its_differences(run):
    d, _ = run
    stored = json.loads((d / "run.json").read_text())["identity"]
    ident = RunIdentity.from_dict(stored)
    assert ident.to_dict() == stored  # so the audit's run id (a hash of run.json's identity) is unchanged
    other = replace(ident, seed=12, config={**ident.config, "search": {**ident.config["search"], "budget": 5}})
    assert ident.differences(other) == ["config.search.budget: 4 -> 5", "seed: 11 -> 12"]
    shard = replace(ident, shard=Shard(1, 3), sources=replace(ident.sources, n=5, sha256="x"))
    assert shard.of_evaluation() == replace(ident, shard=Shard(0, 3)).of_evaluation()  # what all shards share
    assert shard.source_positions() == dict.fromkeys([1, 4, 7, 10, 13])
    with pytest.raises(ValueError, match=r"run.json holds no run identity"):
        RunIdentity.from_dict({"config": {}})


def test_an_old_run_directory_still_reads(tmp_path):
    """Run directories from before run.json and typed identities (results.json and samples.jsonl, written by hand
    here) read as before; their identity is what results.json recorded, else a clear error."""
    runs = write_hand_runs(tmp_path)
    r = RunDir(runs / "A" / "rep0")
    assert r.results.seed == 100 and r.results.config.budget == 3 and len(r.samples) == 8
    assert r.results.config.search == SearchConfig(budget=3) and r.results.identity is None
    with pytest.raises(FileNotFoundError, match=r"has no run.json and its results.json records no identity"):
        r.identity  # noqa: B018
    loaded = load_runs([runs])
    assert {m: [str(x) for x in reps] for m, reps in loaded.items()} == {
        m: [str(runs / m / f"rep{i}") for i in (0, 1)] for m in "ABC"
    }
    assert all(type(x) is RunDir for reps in loaded.values() for x in reps)


def test_summarize_takes_the_budget_from_the_search_it_ran_not_from_the_recorded_dict(run):
    d, _ = run
    r = RunDir(d)
    nothing = [replace(s, validated=False, accepted_steps=0) for s in r.samples]
    recorded = {"search": {"budget": 50}}  # what a config may say; the run searched with budget 0
    kw = dict(identity=r.identity, seed_drawn=False, device="cpu", run_dir=None, timings={})
    res = summarize(nothing, ["0", "1", "2"], config=RunConfig.of(recorded, SearchConfig(budget=0), Scoring()), **kw)
    assert "search.budget is 0" in res.scores.pa.reason and res.config.budget == 0
    res = summarize(nothing, ["0", "1", "2"], config=RunConfig.of(recorded, SearchConfig(budget=50), Scoring()), **kw)
    assert "budget is 0" not in res.scores.pa.reason


def test_snapshots_audit_masks_and_shards_take_a_run_dir(tmp_path):
    data = toy_data(12)
    out = dict(save_images=True, save_latents=True, progress=False)
    kw = dict(search=SearchConfig(budget=2, step_size=0.1), seed=3, scoring=Scoring(n_boot=20))
    roles_ = dict(classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=AcceptAllOracle())
    from genEval.runs.recording import RunOutput

    for i in range(2):
        evaluate(data=data, shard=Shard(i, 2), output=RunOutput(tmp_path / f"s{i}", **out), **kw, **roles_)
    merged = merge_runs([RunDir(tmp_path / "s0"), RunDir(tmp_path / "s1")], tmp_path / "merged")
    whole = evaluate(data=data, output=RunOutput(tmp_path / "whole", **out), **kw, **roles_)
    assert merged.scores.to_dict() == whole.scores.to_dict()
    run = RunDir(tmp_path / "merged")
    assert run.identity.shard == Shard() and run.identity.sources == RunDir(tmp_path / "whole").identity.sources
    snap = load_snapshot(export_snapshot(run, tmp_path / "snap"))
    assert len(snap) == sum(s.validated for s in run.samples) > 0
    assert build_audit(run, n=3, seed=0).run_id == run_id(tmp_path / "merged")
    assert fit_mask_from_run(run, C=100.0).generator == "sigmoid"


def test_the_ad_hoc_views_of_a_loaded_run_are_gone():
    from genEval.comparisons import loading
    from genEval.reports import audit
    from genEval.snapshots import export as snapshots

    assert loading.LoadedRun is RunDir  # the old name, kept for code written against it
    assert not hasattr(snapshots, "_Run") and not hasattr(snapshots, "_read_run")
    assert "read_run_identity" not in vars(audit) and "read_samples" not in vars(audit)


# ---------------------------------------------------------------------------------- no dict identity outside runs/
def _identity_subscripts(path: Path) -> list[str]:
    """``line: subscript`` for every subscript of ``path`` that reaches into a run identity's dict (a name holding
    ``identity``), results.json's leftovers (``.extra[...]``) or a shard's dict (``[...]["shard"]``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Subscript):
            continue
        target, key = node.value, node.slice
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        if "identit" in name or name == "extra" or (isinstance(key, ast.Constant) and key.value == "shard"):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_identity_subscript_outside_runs(tmp_path):
    """Only genEval/runs/ reads run.json and results.json as dicts; everything else uses RunDir and RunIdentity."""
    runs = ROOT / "genEval" / "runs"
    files = [p for pkg in ("genEval", "generators", "oracles") for p in sorted((ROOT / pkg).rglob("*.py"))]
    offenders = [
        f"{p.relative_to(ROOT)}:{hit}" for p in files if runs not in p.parents for hit in _identity_subscripts(p)
    ]
    assert offenders == [], "read the run through genEval.runs.RunDir instead:\n" + "\n".join(offenders)
    probe = tmp_path / "probe.py"  # the scan finds what it looks for
    probe.write_text('x = identity["seed"]\ny = res.extra["kernels"]\nz = d["shard"]["index"]\nw = ok["seed"]\n')
    assert _identity_subscripts(probe) == ["1: identity['seed']", "2: res.extra['kernels']", "3: d['shard']"]


# ------------------------------------------------------------------------------------ records typed strictly
def _interrupted(tmp_path: Path, n: int = 10) -> tuple[Path, Path]:
    data = toy_data(n)
    kw = dict(search=SEARCH, seed=0, execution=Execution(batch_size=2), **roles())
    interrupted_run(data, 7, output=tmp_path / "run", **kw)
    return tmp_path / "run", tmp_path / "run" / "samples.partial.jsonl"


def _resume(run_dir: Path, n: int = 10) -> EvalResult:
    return evaluate(
        data=toy_data(n), search=SEARCH, seed=0, execution=Execution(batch_size=2), output=run_dir, **roles()
    )


@pytest.mark.parametrize(
    "field,value,expect",
    [
        (
            "label",
            "{label}",
            r"field 'label' of the record of source 'toy/0001' must be a whole number, got the "
            r"string \"\d\"",
        ),  # fmt: skip
        ("index", 1.0, r"field 'index' .* must be a whole number, got the number 1.0"),
        ("accepted_steps", True, r"field 'accepted_steps' .* must be a whole number, got the boolean true"),
        ("validated", 1, r"field 'validated' .* must be true or false, got the number 1"),
        ("oracle_score", "0.9", r"field 'oracle_score' .* must be a number, got the string \"0.9\""),
        ("source_id", 7, r"field 'source_id' of the record of source 7 must be a string, got the number 7"),
    ],
)
def test_a_partial_record_of_the_wrong_type_makes_resume_refuse_naming_file_line_and_field(
    tmp_path, field, value, expect
):
    """Issue 37 item 5: a record whose label is the string "3" was accepted on resume (SA dropped from 100 to 90)."""
    run_dir, partial = _interrupted(tmp_path)
    lines = partial.read_text().splitlines()
    rec = json.loads(lines[1])
    rec[field] = str(rec["label"]) if value == "{label}" else value
    lines[1] = json.dumps(rec)
    partial.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{partial} line 2: {expect}; .* written by another program"):
        _resume(run_dir)
    assert not (run_dir / "results.json").exists()


def test_a_finished_record_of_the_wrong_type_is_refused_on_read(run, tmp_path):
    d, _ = run
    lines = (d / "samples.jsonl").read_text().splitlines()
    bad = json.loads(lines[4]) | {"final_pred": 2.5}
    (tmp_path / "samples.jsonl").write_text("\n".join([*lines[:4], json.dumps(bad), *lines[5:]]) + "\n")
    with pytest.raises(ValueError, match=r"samples.jsonl line 5: field 'final_pred' .* got the number 2.5"):
        RunDir(tmp_path).samples  # noqa: B018
    good = json.loads(lines[0])
    assert SampleRecord.from_dict(good | {"oracle_score": 1}).oracle_score == 1.0  # a whole number is a number
    with pytest.raises(ValueError, match=r"^field 'label' of the record of source 'toy/0000' must be a whole"):
        SampleRecord.from_dict(good | {"label": None})
