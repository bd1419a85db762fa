"""What users install: the wheel carries every config, template and package the commands need.

A wheel without ``genEval/conf`` installs but cannot start (Hydra finds no primary config); this builds the real
wheel from the checkout (``pip wheel --no-deps``) and compares its file list with the tree. CI also installs it
into a fresh virtual environment outside the checkout and runs the commands (``.ci/run``).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from genEval.commands import CONF_DIR
from tests.support.assets import ROOT


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")  # keep build/ out of the checkout
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=build,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{proc.stderr[-3000:]}")
    (whl,) = out.glob("*.whl")
    assert whl.name.startswith("geneval_fmr-"), whl.name  # the distribution name (pyproject.toml explains it)
    return set(zipfile.ZipFile(whl).namelist())


def test_the_configs_live_in_the_package_and_conf_points_at_them():
    assert CONF_DIR == ROOT / "genEval" / "conf" and (CONF_DIR / "config.yaml").is_file()
    assert (ROOT / "conf").resolve() == CONF_DIR.resolve()  # conf/ at the top, where users look


def test_the_wheel_holds_every_config_template_and_module(wheel_files):
    tree = {
        p.relative_to(ROOT).as_posix()
        for pattern in ("genEval/conf/**/*.yaml", "genEval/**/templates/*", "genEval/**/*.py", "*/*.py")
        for p in ROOT.glob(pattern)
        if "__pycache__" not in p.parts and p.parts[len(ROOT.parts)] in ("genEval", "generators", "oracles")
    }
    assert len([f for f in tree if f.endswith(".yaml")]) > 50
    missing = sorted(tree - wheel_files)
    assert not missing, f"the wheel lacks {len(missing)} files, e.g. {missing[:10]}"
    assert not [f for f in wheel_files if f.startswith(("tests/", "benchmarks/", "conf/"))]
