"""The command line: composition of every config, teaching errors, and the main job end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_method

from genEval.cli import CONF_DIR
from tests.support.assets import ROOT
from tests.support.cli import geneval

GROUPS = ["data", "classifier", "generator", "oracle", "search", "mask", "experiment"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _targets(node) -> list[str]:
    """Every ``_target_`` in a (plain) config tree."""
    if isinstance(node, dict):
        return ([node["_target_"]] if "_target_" in node else []) + [t for v in node.values() for t in _targets(v)]
    if isinstance(node, list):
        return [t for v in node for t in _targets(v)]
    return []


@pytest.mark.parametrize("group,name", [(g, n) for g in GROUPS for n in options(g)])
def test_every_config_option_composes_and_its_targets_exist(group, name):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"{group}={name}"])
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(cfg if group == "experiment" else cfg[group], resolve=False)
    for target in _targets(node):
        assert callable(get_method(target)), target
        mod = target.rsplit(".", 1)[0].split(".")[0]
        assert mod in ("genEval", "generators", "oracles"), f"{target} is not this project's code"


def test_backends_resolve_to_this_repository():
    import generators
    import oracles

    for pkg in (generators, oracles):
        assert Path(pkg.__file__).resolve().parent.parent == ROOT


def test_unknown_option_lists_the_available_ones():
    r = geneval("classifier=nope")
    assert r.returncode != 0
    assert "Could not find 'classifier/nope'" in r.stderr
    assert "Available options" in r.stderr and "cifar_resnet20" in r.stderr


@pytest.mark.parametrize(
    "override,msg",
    [
        ("search.budget=-1", "search.budget must be a whole number >= 0, got -1"),
        ("search.step_size=-0.5", "search.step_size must be a number >= 0, got -0.5"),
        ("search.update=lbfgs", "unknown search.update='lbfgs'; choose one of adam, sgd, sign"),
    ],
)
def test_bad_search_settings_exit_2_with_the_message(override, msg, tmp_path):
    r = geneval(override, f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr
    assert not (tmp_path / "results.json").exists()


def test_missing_dataset_path_is_named(tmp_path):
    r = geneval("data=imagefolder", f"data.root={tmp_path}/nowhere", f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 2
    assert f"{tmp_path}/nowhere" in r.stderr


def test_unknown_command():
    r = geneval("evaluat")
    assert r.returncode == 2 and "unknown command 'evaluat'" in r.stderr


def test_main_job_end_to_end_on_the_offline_default(tmp_path):
    """`geneval` with no role overrides: digits, trained-on-first-use models, a summary and a run directory."""
    run = tmp_path / "run"
    # the first run trains the digits models (about 5 minutes on 2 quiet cores): a generous limit for busy machines;
    # whether it trains depends on whether an earlier test of the session did (they share GENEVAL_CACHE)
    trains = not list((Path(os.environ["GENEVAL_CACHE"]) / "digits_vq").glob("*/last.ckpt"))
    r = geneval("seed=0", "data.limit=60", "search.budget=5", f"hydra.run.dir={run}", timeout=2400)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((run / "results.json").read_text())
    fmr_v = res["scores"]["fmr_validated"]
    # one headline (the ranking score, its interval, the counts), the table, where the files went, what to run next
    assert r.stdout.startswith(f"digits_cnn on digits: FMR_v {fmr_v['value']:.2f} [{fmr_v['low']:.2f}, ")
    for label in ("SA", "RA", "VR", "PA", "FMR", "FMR_v"):
        assert any(line.split()[:1] == [label] for line in r.stdout.splitlines()), label
    assert f"files: {run}/" in r.stdout and "report.html" in r.stdout and "next:" in r.stdout
    assert "[20" not in r.stdout.splitlines()[0]  # no Hydra log prefix on stdout: logs go to stderr
    if trains:
        assert "VQ epoch 8/8" in r.stderr  # the first run says what it trains, epoch by epoch
    assert res["seed"] == 0 and res["scores"]["n"] == 60
    assert res["config"]["search"]["budget"] == 5 and res["config"]["data"]["limit"] == 60
    assert res["components"]["generator"].startswith("vq:digits")
    assert len((run / "samples.jsonl").read_text().splitlines()) == 60
    assert (run / ".hydra" / "config.yaml").exists() and (run / "grid.png").exists() and (run / "report.html").exists()
    # the same seed gives the same scores
    r2 = geneval("seed=0", "data.limit=60", "search.budget=5", f"hydra.run.dir={tmp_path / 'again'}")
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert json.loads((tmp_path / "again" / "results.json").read_text())["scores"] == res["scores"]


def test_readme_gives_two_self_contained_commands_and_ci_runs_them_as_written():
    """Issue 30: each command installs what it needs on a fresh machine (the test command the test extra, which holds
    pytest), and CI runs README's commands read from README, not copies of them."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]
    assert blocks[0] == "pip install -e . && geneval"
    assert blocks[1] == 'pip install -e ".[test]" && python -m pytest'
    extract = [sys.executable, str(ROOT / ".ci" / "readme_command.py")]
    for n, expected in ((1, blocks[0]), (2, blocks[1])):
        out = subprocess.run([*extract, str(n)], capture_output=True, text=True, check=True).stdout.strip()
        assert out == expected
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_command.py 1" in ci and "readme_command.py 2" in ci
    assert 'eval "$install_and_run"' in ci and 'eval "$install_and_test"' in ci
    commands = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert not any(ln.startswith(("python -m pytest", "pip install -e")) for ln in commands[: commands.index(
        'eval "$install_and_test"')]), "CI runs its own copy of a README command"  # fmt: skip
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^test = \[[^\]]*\"pytest", pyproject, re.M), "the test extra must carry pytest"
