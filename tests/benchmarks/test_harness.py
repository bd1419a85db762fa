"""The harness pieces that let a study stay off the command layer and off ``sys.path``: presets composed as the
command composes them (same versions), and a child process that runs another checkout's library with this checkout's
harness (``benchmarks/harness/{presets,checkout}.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import checkout, presets
from genEval.commands.serve import load_benchmarks, registered_classifiers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["digits_smoke", "digits_settled"])
def test_a_preset_composed_by_the_harness_is_the_commands_benchmark(name):
    ours, theirs = presets.benchmark(name), load_benchmarks([name])[name]
    assert (ours.version, ours.spec()) == (theirs.version, theirs.spec())


def test_a_registered_classifier_is_the_commands_config():
    assert presets.classifier_config("digits_cnn") == registered_classifiers(None)["digits_cnn"]


def test_a_preset_that_needs_a_server_setting_is_refused_naming_it():
    with pytest.raises(ValueError, match="benchmark imagenet needs server settings.*benchmarks=\\[imagenet\\]"):
        presets.benchmark("imagenet")


def _fake_checkout(root: Path) -> Path:
    for package in ("genEval", "oracles", "tests", "benchmarks"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"WHO = 'the other {package}'\n")
    return root


def test_another_checkouts_library_runs_under_this_checkouts_harness(tmp_path):
    other = _fake_checkout(tmp_path / "other")
    path = checkout.pythonpath(other)
    probe = "import genEval, oracles, benchmarks.harness as h; print(genEval.WHO, '|', oracles.WHO, '|', h.__file__)"
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-P", "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lib, oracles, harness = (s.strip() for s in done.stdout.split("|"))
    assert (lib, oracles) == ("the other genEval", "the other oracles")  # not this checkout's, though cwd is ROOT
    assert Path(harness).resolve() == ROOT / "benchmarks" / "harness" / "__init__.py"  # never the other's
    assert sorted(p.name for p in Path(path.split(os.pathsep)[0]).iterdir()) == ["genEval", "oracles"]
    assert checkout.pythonpath(ROOT) == str(ROOT)


def test_a_folder_without_a_library_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=f"--code {tmp_path} holds no genEval/ package"):
        checkout.pythonpath(tmp_path)
    assert checkout.module_command("benchmarks.x", "--out", "y") == [
        sys.executable,
        "-P",
        "-m",
        "benchmarks.x",
        "--out",
        "y",
    ]
