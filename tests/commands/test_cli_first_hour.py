"""What a new user meets in the first hour (issue 42): commands that answer without torch, errors that suggest the fix,
positional paths, `list` and `runs`, one headline and an aligned table, files in one place, no silent wrong answers.

Each command runs as a user runs it (``python -m genEval.cli`` in a fresh working folder) unless the behaviour is a
function's; the run directories come from toy components (tests/support/toys.py), so nothing here trains a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from genEval import evaluate
from genEval.cli import _arguments, _overrides_for_hydra
from genEval.commands.checks import check_run
from genEval.commands.compose import nearest
from genEval.commands.preflight import prepare
from genEval.commands.registry import COMMANDS, CONF_DIR, config_options
from genEval.commands.serve import Progress
from genEval.data.standard import DigitsData
from genEval.runs.index import index_runs
from genEval.runs.recording import RunOutput
from genEval.scores.text import headline, score_table
from genEval.search.execution_settings import GPU_DRIVER_FILES, refuse_cuda_without_driver
from genEval.validation import SettingError
from tests.support.assets import ROOT
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator


def geneval(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def loads_torch(*args: str, cwd: Path) -> tuple[bool, str, str]:
    """Run ``geneval <args>`` in a fresh interpreter; (whether torch got imported, stdout, stderr)."""
    code = (
        "import sys, genEval.cli\n"
        "try:\n"
        f"    genEval.cli.main({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert "TORCH" in out.stdout, out.stderr[-2000:]
    return "TORCH True" in out.stdout, out.stdout, out.stderr


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    """A finished run directory with images (20 held-out digits at 8 px, a linear toy judged by an oracle that
    accepts every image, 2 steps)."""
    out = tmp_path_factory.mktemp("toy") / "runs" / "toy"
    evaluate(
        classifier=LinearClassifier(seed=0, in_features=64, num_classes=10),
        data=DigitsData(split="test", image_size=8, limit=20),
        generator=SigmoidGenerator(),
        oracle=AcceptAllOracle(),
        search={"budget": 2, "step_size": 0.2},
        seed=0,
        output=RunOutput(out, save_images=True, progress=False),
    )
    return out


# ------------------------------------------------------------------------------------------- answers at once
@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("compare", "--help"),
        ("compar",),
        ("batch_size=0",),
        ("data.limt=5",),
        ("search.budget=abc",),
        ("report", "runs/nope"),
        ("score", "nope"),
        ("list", "classifiers"),
        ("compare", "classifiers=[digits_cnn]"),
        ("worker", "home=svc", "heartbeat_s=100"),  # the worker node (conf/worker) checks itself before the stack
        ("serve", "home=svc", "exit_when_idle=true"),
    ],
)
def test_help_typos_and_refusals_answer_without_importing_torch(args, tmp_path):
    torch_loaded, out, err = loads_torch(*args, cwd=tmp_path)
    assert not torch_loaded, f"geneval {' '.join(args)} imported torch\n{out}\n{err}"
    assert out.strip() != "TORCH False" or err.strip()  # it answered something
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (("report", "runs/nope"), "geneval report: error: run or comparison directory 'runs/nope' does not exist; "),
        (("export", "runs/nope"), "geneval export: error: run directory 'runs/nope' does not exist; pass the"),
        (("verify", "snap"), "geneval verify: error: snapshot directory 'snap' does not exist; pass a snapshot"),
        (("score", "snap"), "geneval score: error: snapshot directory 'snap' does not exist; pass a snapshot"),
    ],
)
def test_a_folder_that_is_not_there_is_refused_naming_it(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        prepare(COMMANDS[args[0]], _arguments(COMMANDS[args[0]], list(args[1:])))
    assert info.value.code == 2 and capsys.readouterr().err.startswith(message)


def test_cuda_on_a_machine_without_a_gpu_driver_is_refused_without_torch(tmp_path):
    there = tmp_path / "nvidiactl"
    there.touch()
    refuse_cuda_without_driver("cuda", driver_files=(str(there),))  # a driver: torch decides later
    refuse_cuda_without_driver("cpu", driver_files=())
    if sys.platform.startswith("linux"):
        with pytest.raises(
            SettingError, match=r"device must be a device this machine has, got 'cuda:1'; e.g. device=cpu"
        ):
            refuse_cuda_without_driver("cuda:1", driver_files=(str(tmp_path / "none"),))
    if not any(os.path.exists(p) for p in GPU_DRIVER_FILES) and sys.platform.startswith("linux"):
        torch_loaded, _, err = loads_torch("device=cuda", cwd=tmp_path)
        assert not torch_loaded and "no CUDA device is available" in err, err


def test_a_reader_that_closes_the_pipe_gets_no_traceback(tmp_path):
    """``geneval list classifiers | head -1``: the reader is gone before geneval writes (the read end closed first)."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "genEval.cli", "list", "classifiers"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    os.close(write)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr


def test_import_genEval_is_cheap_and_genEval_evaluate_still_works():
    code = "import sys, genEval; print('torch' in sys.modules); print(genEval.evaluate.__module__, genEval.Oracle)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    first, second = out.stdout.splitlines()[:2]
    assert first == "False", out.stderr
    assert second.startswith("genEval.search.driver <class 'genEval.interfaces.Oracle'>")


# ------------------------------------------------------------------------------------------- errors that teach
def test_a_mistyped_key_gets_the_nearest_key_and_never_the_plus_advice(tmp_path):
    r = geneval("data.limt=5", cwd=tmp_path)
    assert r.returncode == 2
    assert "geneval: error: data.limt is not a setting of geneval; did you mean data.limit?" in r.stderr
    assert "+data.limt" not in r.stderr and "append" not in r.stderr
    r = geneval("compare", "search.budgt=3", cwd=tmp_path)
    assert r.returncode == 2 and "did you mean search.budget?" in r.stderr and "geneval compare: error:" in r.stderr


def test_a_mistyped_command_or_preset_gets_the_nearest_names(tmp_path):
    r = geneval("compar", cwd=tmp_path)
    assert r.returncode == 2 and "unknown command 'compar'; did you mean compare?" in r.stderr
    r = geneval("classifier=digits_cn", cwd=tmp_path)
    assert r.returncode == 2
    assert "Could not find 'classifier/digits_cn'" in r.stderr and "did you mean digits_cnn?" in r.stderr
    assert "Available options in 'classifier': " + ", ".join(config_options("classifier")) in r.stderr


def test_nearest_names_the_best_matches_only():
    assert nearest("data.limt", ["data.limit", "data.split", "data.subset"]) == ["data.limit"]
    assert nearest("zzz", ["data.limit"]) == []
    assert nearest("resnet", ["cifar_resnet20", "digits_cnn"]) == ["cifar_resnet20"]  # contained, not close


def test_dashed_settings_are_read_as_overrides_with_a_note(tmp_path, capsys):
    assert _arguments(COMMANDS["evaluate"], ["--data.limit=5", "--cfg=job", "seed=1"]) == [
        "data.limit=5",
        "--cfg=job",  # Hydra's own flag stays one
        "seed=1",
    ]
    assert "geneval: note: read --data.limit=5 as data.limit=5" in capsys.readouterr().err
    r = geneval("--search.budget=abc", cwd=tmp_path)
    assert r.returncode == 2
    assert "note: read --search.budget=abc as search.budget=abc" in r.stderr
    assert "search.budget must be a whole number >= 0, got 'abc'" in r.stderr
    assert "usage:" not in r.stderr


def test_a_first_bare_argument_is_the_commands_path():
    assert _arguments(COMMANDS["report"], ["runs/cifar", "out=r.html"]) == ["input='runs/cifar'", "out=r.html"]
    assert _arguments(COMMANDS["score"], ["runs/a b/snap"]) == ["snapshot='runs/a b/snap'"]
    assert _arguments(COMMANDS["list"], ["classifiers", "--filter", "res"]) == ["what='classifiers'", "filter='res'"]
    assert {name: c.path for name, c in COMMANDS.items() if name in ("report", "export", "verify", "score")} == {
        "report": "input",
        "export": "run",
        "verify": "snapshot",
        "score": "snapshot",
    }


def test_compare_with_out_dir_runs_in_it():
    """`geneval compare out_dir=X`: Hydra's run directory (its log, .hydra/) is X, unless hydra.run.dir is given."""
    spec = COMMANDS["compare"]
    assert "hydra.run.dir='runs/c'" in _overrides_for_hydra(spec, ["out_dir=runs/c"], "runs/c")
    given = _overrides_for_hydra(spec, ["out_dir=runs/c", "hydra.run.dir=elsewhere"], "runs/c")
    assert [o for o in given if o.startswith("hydra.run.dir")] == ["hydra.run.dir=elsewhere"]
    assert "hydra/job_logging=geneval" in given


# ------------------------------------------------------------------------------------------- files in one place
def test_utility_commands_take_their_path_and_leave_no_outputs_folder(toy_run, tmp_path):
    r = geneval("report", str(toy_run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (toy_run / "report.html").is_file() and f"report written to {toy_run / 'report.html'}" in r.stdout
    r = geneval("export", str(toy_run), "overwrite=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    snapshot = toy_run / "snapshot"
    assert f"geneval verify {snapshot}" in r.stdout
    r = geneval("verify", str(snapshot), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for args in (("--help",), ("list", "oracles"), ("runs", str(toy_run.parent))):
        assert geneval(*args, cwd=tmp_path).returncode == 0
    assert not list(tmp_path.iterdir()), f"left behind: {list(tmp_path.iterdir())}"
    assert not (toy_run / ".hydra").exists()


def test_a_run_refused_before_it_starts_leaves_no_run_directory(tmp_path):
    run = tmp_path / "run"
    r = geneval("batch_size=0", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 2 and "batch_size must be a whole number >= 1" in r.stderr
    r = geneval("search.update=lbfgs", f"hydra.run.dir={run}", cwd=tmp_path)  # the search checks itself first too
    assert r.returncode == 2 and "unknown search.update='lbfgs'" in r.stderr
    one = tmp_path / "one-class" / "7"  # a folder of sevens, for a digits classifier (no weights needed)
    one.mkdir(parents=True)
    r = geneval("data=imagefolder", f"data.root={one.parent}", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 2
    assert "has one class folder (7)" in r.stderr and "allow_one_class=true" in r.stderr
    assert not run.exists() and not (tmp_path / "outputs").exists()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):  # allowed: the checks pass (nothing is built)
        cfg = compose("config", ["data=imagefolder", f"data.root={one.parent}", "allow_one_class=true"], True)
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator})


def test_runs_is_in_gitignore():
    assert "/runs/" in (ROOT / ".gitignore").read_text().split()  # the top folder only: genEval/runs/ is code


# ------------------------------------------------------------------------------------------- no silent wrong answers
def test_score_refuses_a_classifier_of_other_classes_before_building_it(toy_run, tmp_path):
    snapshot = toy_run / "snapshot-classes"
    assert geneval("export", str(toy_run), f"out={snapshot}", cwd=tmp_path).returncode == 0
    r = geneval("score", str(snapshot), "classifier=cifar_resnet20", cwd=tmp_path)
    assert r.returncode == 2, r.stdout
    assert "geneval score: error: classifier cifar_resnet20 was trained on the 10 CIFAR-10 classes" in r.stderr
    assert "holds images of the 10 classes [0, 1, 2" in r.stderr
    assert "classifier=digits_cnn" in r.stderr  # the presets that fit
    assert not list(toy_run.glob("*.score-*.json"))


def test_compare_of_one_model_is_refused_pointing_at_geneval(tmp_path):
    r = geneval("compare", "classifiers=[digits_cnn]", f"out_dir={tmp_path / 'cmp'}", cwd=tmp_path)
    assert r.returncode == 2
    assert "ranks two or more models; it was given one (digits_cnn)" in r.stderr
    assert "geneval classifier=digits_cnn" in r.stderr
    assert not (tmp_path / "cmp").exists() and not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------------------------------- list and runs
def test_list_names_each_preset_on_one_line_and_filters(tmp_path):
    r = geneval("list", "classifiers", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == config_options("classifier")
    digits_cnn = next(line for line in r.stdout.splitlines() if line.startswith("digits_cnn "))
    assert "a small CNN" in digits_cnn  # the first line of its config's comment
    r = geneval("list", "classifiers", "--filter", "RESNET", cwd=tmp_path)
    assert [line.split()[0] for line in r.stdout.splitlines()] == [n for n in names if "resnet" in n]
    r = geneval("list", "benchmarks", "--filter=digits_s*", cwd=tmp_path)
    assert r.stdout.split()[:1] == ["digits_settled"] and len(r.stdout.splitlines()) == 2
    assert "Digits smoke test (20 images, 5 steps)" in r.stdout  # a benchmark's title
    r = geneval("list", "clasifiers", cwd=tmp_path)
    assert r.returncode == 2 and "did you mean classifiers?" in r.stderr


def _hand_run(path: Path, fmr_v: tuple[float, float, float], mtime: float) -> Path:
    """A results.json written by hand: FMR_v (value, low, high) of 8 images, all validated, PA 5/8."""
    path.mkdir(parents=True)
    value, low, high = fmr_v
    scores = {
        "fmr_validated": {"value": value, "low": low, "high": high, "n": 8, "k": None, "reason": ""},
        "pa": {"value": 62.5, "low": 30.6, "high": 86.3, "n": 8, "k": 5, "reason": ""},
        "n": 8,
        "n_validated": 8,
    }
    results = {"scores": scores, "seed": 3, "components": {"classifier": "net:seed0", "data": "hand:test"}}
    (path / "results.json").write_text(json.dumps(results))
    os.utime(path / "results.json", (mtime, mtime))
    return path


def test_the_run_index_lists_runs_newest_first_with_their_headline(tmp_path):
    old = _hand_run(tmp_path / "runs" / "old", (62.5, 40.0, 80.0), 1_000_000)
    new = _hand_run(tmp_path / "runs" / "cmp" / "runs" / "b" / "rep0", (50.0, 25.0, 75.0), 2_000_000)
    (new.parent.parent / "c" / "rep0").mkdir(parents=True)
    (new.parent.parent / "c" / "rep0" / "run.json").write_text(json.dumps({"identity": {"seed": 4}}))
    (new.parent.parent / "c" / "rep0" / "samples.partial.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    hydra = old / ".hydra"
    hydra.mkdir()
    (hydra / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n      classifier: my_net\n      data: digits\n"
    )
    entries = index_runs(tmp_path / "runs")
    finished = [e for e in entries if e.finished]
    assert [e.path for e in finished] == [new, old]  # newest first
    assert finished[1].what == "my_net on digits"  # as the user named them (Hydra's choices)
    assert finished[0].what == "net:seed0 on hand:test"  # else the recorded components
    assert finished[1].headline == "FMR_v 62.50 [40.00, 80.00]  (8 images, 8 validated, PA 5/8)"
    (unfinished,) = [e for e in entries if not e.finished]
    assert unfinished.headline.startswith("unfinished: 3 samples recorded") and unfinished.seed == 4
    r = geneval("runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("3 run(s) under") and "the headline is FMR_v" in lines[0]
    assert lines.index(next(ln for ln in lines if str(new) in ln)) < lines.index(
        next(ln for ln in lines if str(old) in ln)
    )


# ------------------------------------------------------------------------------------------- headline and table
#: Scores of a 40-image digits run as results.json holds them (values rounded here to what the table shows).
SCORES = {
    "sa": {"value": 100.0, "low": 91.2378, "high": 100.0, "n": 40, "k": 40, "reason": ""},
    "ra": {"value": 95.0, "low": 83.4961, "high": 98.6179, "n": 40, "k": 38, "reason": ""},
    "vr": {"value": 92.5, "low": 80.1358, "high": 97.4164, "n": 40, "k": 37, "reason": ""},
    "pa": {"value": 70.2703, "low": 54.2169, "high": 82.5105, "n": 37, "k": 26, "reason": ""},
    "fmr_validated": {"value": 70.2703, "low": 55.2632, "high": 84.381, "n": 40, "k": None, "reason": ""},
    "n": 40,
    "n_validatable": 38,
    "n_validated": 37,
}


def test_the_headline_and_table_of_a_finished_run():
    assert headline(SCORES, "fmr_validated") == "FMR_v 70.27 [55.26, 84.38]  (40 images, 37 validated, PA 26/37)"
    table = score_table(SCORES)
    assert table[0].split() == ["score", "value", "95%", "interval", "counts"]
    rows = {row.split()[0]: row for row in table[1:]}
    assert rows["SA"].split() == ["SA", "100.00", "[91.24,", "100.00]", "40/40"]
    assert rows["VR"].endswith("   validated, 38 passed the start check")  # its note, counts filled in
    assert rows["VR"].split()[1:5] == ["92.50", "[80.14,", "97.42]", "37/40"]
    assert rows["FMR_v"].split()[1:4] == ["70.27", "[55.26,", "84.38]"]  # a bootstrap score: no counts
    value_ends = {row.index(" [") for row in table[1:] if " [" in row}
    assert len(value_ends) == 1, "\n".join(table)  # the values end in one column
    assert any(row.split() == ["FMR", "not", "recorded"] for row in table)  # absent from these scores


def test_an_undefined_score_says_why_in_its_row():
    scores = {
        "n": 4,
        "n_validated": 0,
        "pa": {"value": None, "reason": "no validated sample: search.budget is 0", "n": 0, "k": 0},
    }
    (pa,) = [row for row in score_table(scores) if row.split()[:1] == ["PA"]]
    assert pa.split()[1] == "undefined" and pa.endswith("no validated sample: search.budget is 0")
    assert headline(scores, "pa").startswith("PA undefined (no validated sample: search.budget is 0)")


def test_submit_progress_only_grows():
    progress = Progress()
    polls = [
        {"status": "queued"},
        {"status": "running", "images_done": 0, "images_total": 20},
        {"status": "running", "images_done": 20, "images_total": 20},
        {"status": "running", "images_done": 0, "images_total": 20},  # the next phase starts its count again
        {"status": "running", "images_done": 20, "images_total": 20},
        {"status": "done", "images_done": 20, "images_total": 20},
    ]
    lines = [line for poll in polls if (line := progress.line(poll)) is not None]
    assert lines == ["  queued", "  running: 0/20 images", "  running: 20/20 images", "  done"]


def test_the_demo_trains_on_one_cpu_thread_and_restores_torchs():
    from generators.small_vq import cpu_threads

    before = torch.get_num_threads()
    with cpu_threads(torch.device("cpu"), 1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads=0 must be a whole number >= 1"):
        with cpu_threads(torch.device("cpu"), 0):
            pass


def test_the_summary_names_the_classes_the_data_cover(tmp_path):
    """A folder of 2 of a classifier's 10 classes: the summary says so (and the scores are about those 2)."""
    from genEval.commands.evaluate import summary_lines
    from tests.support.toys import ListDataset

    x = torch.rand(8, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    data = ListDataset(x, [3, 5] * 4, [f"c{i}" for i in range(10)])
    result = evaluate(
        classifier=LinearClassifier(seed=0, in_features=4, num_classes=10),
        data=data,
        generator=SigmoidGenerator(),
        oracle=AcceptAllOracle(),
        search={"budget": 1},
        seed=0,
        output=RunOutput(tmp_path / "run", progress=False),
    )
    lines = summary_lines(result)
    assert (
        "  note: the data cover 2 of the classifier's 10 classes (c3, c5); the scores are about these classes only."
        in lines
    )
    assert lines[0].startswith("linear0 on toy: FMR_v ") or lines[0].startswith("linear0 on ")
    assert any(line.startswith("files: ") for line in lines) and "next:" in lines


def test_score_json_lands_beside_its_snapshot(toy_run, tmp_path):
    snapshot = toy_run / "snapshot-scored"
    assert geneval("export", str(toy_run), f"out={snapshot}", cwd=tmp_path).returncode == 0
    net = ("+classifier.module={_target_:torch.nn.Sequential,_args_:[{_target_:torch.nn.Flatten},"
           "{_target_:torch.nn.Linear,in_features:64,out_features:10}]}")  # fmt: skip
    r = geneval("score", str(snapshot), "classifier=module", "classifier.num_classes=10", "classifier.mean=[0.5]",
                "classifier.std=[0.5]", "classifier.name=flat", net, "device=cpu", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    written = toy_run / "snapshot-scored.score-module.json"
    assert f"written to {written}" in r.stdout and written.is_file()
    assert json.loads(written.read_text())["n"] == 20
    assert not list(tmp_path.iterdir())  # nothing in the working folder


def test_submit_ends_with_the_summary_geneval_prints():
    from genEval.commands.serve import job_summary

    job = {"id": "j1", "name": "my-cnn", "benchmark": "digits_smoke"}
    lines = job_summary(job, [{"seed": 7, "scores": SCORES, "warnings": ["oracle is weak"]}], "http://127.0.0.1:8000")
    assert lines[0] == (
        "my-cnn on digits_smoke, repetition 0 (seed 7): FMR_v 70.27 [55.26, 84.38]  (40 images, 37 validated, PA 26/37)"
    )
    assert lines[1:][: len(score_table(SCORES))] == score_table(SCORES)
    assert "  warning: oracle is weak" in lines and "job page: http://127.0.0.1:8000/jobs/j1" in lines


@pytest.mark.parametrize("given, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_command_line_makes_openmp_wait_passively_unless_told(given, expected, tmp_path):
    code = (
        "import os, genEval.cli\ngenEval.cli.main(['list', 'oracles'])\nprint('WAIT', os.environ['OMP_WAIT_POLICY'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {"PYTHONPATH": str(ROOT)}
    if given:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert f"WAIT {expected}" in out.stdout, out.stderr


def test_report_false_leaves_report_html_out(digits_cache, tmp_path):
    run = tmp_path / "run"
    r = geneval("seed=0", "data.limit=6", "search.budget=1", "report=false", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run / "results.json").is_file() and not (run / "report.html").exists()
    assert "  geneval report run   (report.html)" in r.stdout.splitlines()  # offered instead, relative to the cwd
