"""The written plug-in contract (issue 28): every optional hook the engine reads is declared in genEval.interfaces.HOOKS
with its default and read in one place (interfaces.hook); a score added to scores.definitions.SCORES reaches the run
summary, the report, the leaderboard and the service with no other edit."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from genEval.interfaces import HOOKS, component_id, hook
from tests.support.assets import ROOT

#: The engine: everything of genEval but the one hook reader and the engine's own backends (classifiers, data), which
#: are plug-ins themselves.
ENGINE = sorted(
    p
    for p in (ROOT / "genEval").rglob("*.py")
    if p.name != "interfaces.py" and p.relative_to(ROOT / "genEval").parts[0] not in ("classifiers", "data")
)
#: Attributes the engine may probe directly because they are not part of a plug-in's contract (dunders, the
#: protocol of Python itself, are allowed too), each with its reason.
NOT_HOOKS = {
    "item": "fileio: NumPy and torch scalars written to JSON",
    "reason": "assets: the reason of a urllib error",
    "resolve": "masks: a mask config resolves itself (the mask group's own protocol, genEval.masks.configs)",
    "forward": "service.models: an uploaded file must hold a module",
    "cause": "campaigns.executors: the task's own exception inside Ray's RayTaskError",
}


def _calls(name: str) -> list[tuple[Path, int, ast.Call]]:
    found = []
    for path in ENGINE:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
                found.append((path, node.lineno, node))
    return found


def _literal(call: ast.Call, i: int) -> str | None:
    arg = call.args[i] if len(call.args) > i else None
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def test_the_engine_reads_optional_attributes_of_plugins_only_through_hook():
    """A ``getattr(obj, "<name>", default)`` / ``hasattr(obj, "<name>")`` in the engine is an undeclared hook: a
    plug-in author learns of it only by reading the engine. Declare it in HOOKS and read it with ``hook()``."""
    probes = []
    for fn in ("getattr", "hasattr"):
        for path, line, call in _calls(fn):
            name = _literal(call, 1)
            owner = ast.unparse(call.args[0])
            if name is None or owner in ("self", "cls") or name.startswith("__") or name in NOT_HOOKS:
                continue
            where = f"{path.relative_to(ROOT)}:{line} {fn}({owner}, {name!r})"
            probes.append(where + (" reads a declared hook directly" if name in HOOKS else " is not in HOOKS"))
    assert not probes, "read optional attributes with genEval.interfaces.hook(obj, name):\n" + "\n".join(probes)


def test_every_hook_the_engine_reads_is_declared_and_every_declared_hook_is_read():
    read = {}
    for path, line, call in _calls("hook"):
        name = _literal(call, 1)
        assert name is not None, f"{path.relative_to(ROOT)}:{line}: hook() takes the hook's name as a literal"
        assert name in HOOKS, f"{path.relative_to(ROOT)}:{line}: {name!r} is not declared in genEval.interfaces.HOOKS"
        read.setdefault(name, f"{path.relative_to(ROOT)}:{line}")
    unread = sorted(set(HOOKS) - set(read) - {"name"})  # name: read by interfaces.component_id
    assert not unread, f"declared hooks no engine module reads (remove them or read them): {unread}"
    for h in HOOKS.values():
        assert h.roles and h.meaning and set(h.roles) <= {"classifier", "generator", "oracle", "data", "mask"}, h
        assert f"``{h.name}``" in sys.modules["genEval.interfaces"].__doc__, f"{h.name} is missing from the table"


def test_hook_gives_the_attribute_or_the_declared_default():
    class Plain:
        pass

    class Quantising:
        name = "vq"
        fp16_safe = True

        def decoded_latents(self, z):
            return z

    assert hook(Plain(), "decoded_latents") is None and hook(Plain(), "fp16_safe") is False
    assert hook(Plain(), "precision_mode") == "weights" and component_id(Plain()) == "Plain"
    assert callable(hook(Quantising(), "decoded_latents")) and hook(Quantising(), "fp16_safe") is True
    assert component_id(Quantising()) == "vq"
    with pytest.raises(KeyError, match=r"'shiny' is not a hook of genEval.interfaces.HOOKS; declare it there"):
        hook(Plain(), "shiny")


# A score added to SCORES (the one place scores are defined), nowhere else: the share of searches that ended on a
# rejection. The subprocess loads genEval.scores.definitions with it appended, then runs, reports and ranks.
NEW_SCORE = (
    '    Score("rejected_share", "REJ", "rejected", "n", undefined=(("n", "no samples"),), '
    'summary="{k}/{n} searches ended on a rejection"),\n'
)
SCRIPT = textwrap.dedent(
    """
    import json, sys, types
    from pathlib import Path

    root, out, new = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    sys.path[:0] = [str(root), str(root / "tests")]  # this checkout's genEval, and the toys
    path = root / "genEval" / "scores" / "definitions.py"
    src = path.read_text()
    end = "\\n)\\nSCORE = {s.key: s for s in SCORES}"
    assert src.count(end) == 1
    src = src.replace(end, "\\n" + new.rstrip("\\n") + end)
    import genEval.scores
    module = types.ModuleType("genEval.scores.definitions")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(src, str(path), "exec"), module.__dict__)

    from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data
    from genEval import evaluate
    from genEval.comparisons.aggregate import aggregate
    from genEval.reports.report import write_report
    from genEval.comparisons.settings import ComparisonSettings
    from genEval.runs import read_results
    from genEval.runs.recording import RunOutput
    from genEval.scores.run_scores import Scoring
    from genEval.search.perturb import SearchConfig
    from genEval.service.server.pages import _row
    from genEval.service.records import StandingInfo
    from genEval.service.server.standings import compute

    runs = {}
    for name, seed in (("lin0", 0), ("lin1", 1)):
        oracle = ModelOracle(LinearClassifier(seed=2))
        run = evaluate(LinearClassifier(seed=seed), toy_data(24), SigmoidGenerator(), oracle,
                       SearchConfig(budget=4, step_size=0.3), seed=3, output=RunOutput(dir=out / name, progress=False),
                       scoring=Scoring(n_boot=20))
        runs[name] = [out / name]
    comp = aggregate(runs, ComparisonSettings(n_boot=20), out_dir=out / "comparison")
    standing = compute.aggregate(runs, n_boot=20).models["lin0"]
    row = StandingInfo("job", "b", "v", standing, None, [])
    report = write_report(comp).read_text()
    print(json.dumps({
        "summary": run.summary(),
        "results": "rejected_share" in json.loads((out / "lin1" / "results.json").read_text())["scores"],
        "read_back": read_results(out / "lin1").scores.rejected_share.value,
        "metrics": "rejected_share" in run.metrics,
        "leaderboard_md": (out / "comparison" / "leaderboard.md").read_text(),
        "leaderboard_csv": (out / "comparison" / "leaderboard.csv").read_text().splitlines()[0],
        "report_has_column": "<th>REJ</th>" in report,
        "service_columns": list(compute.COLUMNS),
        "service_label": compute.LABELS.get("rejected_share"),
        "service_stored": standing.scores["rejected_share"].to_dict(),
        "service_page_cell": _row(1, row)["cells"].get("rejected_share"),
        "differences": sorted({d.metric for d in comp.differences}),
    }))
    """
)


def test_a_new_score_in_SCORES_reaches_the_summary_the_report_the_leaderboard_and_the_service(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(tmp_path), NEW_SCORE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert "  REJ  " in got["summary"] and "searches ended on a rejection)" in got["summary"]  # the run summary
    assert got["results"] and got["metrics"] and got["read_back"] is not None  # results.json, read back typed
    assert "| REJ |" in got["leaderboard_md"] and "rejected_share" in got["leaderboard_csv"]  # the leaderboard
    assert got["report_has_column"]  # the report's leaderboard table
    assert "rejected_share" in got["service_columns"] and got["service_label"] == "REJ"  # the service's columns
    assert set(got["service_stored"]) == {"value", "low", "high"}  # stored with the standing
    assert got["service_page_cell"]["value"] != "–" or got["service_stored"]["value"] is None  # and shown on the page
    assert "rejected_share" in got["differences"]  # compared (Score.compared defaults to True)
