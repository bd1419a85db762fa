"""``geneval --help`` names every command with its one line, the most used overrides and the config groups;
``geneval <command> --help`` gives that command's purpose and its keys (issue 37 item 7; genEval/commands/helptext.py),
at once: before torch or any command module is imported (issue 42)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from genEval.cli import main
from genEval.commands import CONF_DIR, REGISTRY, SUMMARIES, command, config_options
from genEval.commands.helptext import COMMON_OVERRIDES
from tests.support.assets import ROOT


def help_of(capsys, monkeypatch, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main() sets sys.argv for Hydra
    with pytest.raises(SystemExit) as done:
        main(list(args))
    assert done.value.code in (0, None)
    return capsys.readouterr().out


def test_help_lists_every_command_with_one_line_the_common_overrides_and_the_groups(capsys, monkeypatch):
    out = help_of(capsys, monkeypatch, "--help")
    assert "powered by Hydra" not in out and "== Config ==" not in out  # not Hydra's default dump
    lines = out.splitlines()
    for name in REGISTRY:
        shown = "(none)" if name == "evaluate" else name
        row = [ln for ln in lines if ln.split()[:1] == [shown]]
        assert len(row) == 1 and row[0].rstrip().endswith(SUMMARIES[name]), f"{name} is not listed on one line"
    for override, what in COMMON_OVERRIDES:
        assert any(ln.strip().startswith(override) and ln.rstrip().endswith(what) for ln in lines), override
    for group in ("data", "classifier", "generator", "oracle", "mask", "experiment", "zoo"):
        assert f"{group}: {', '.join(config_options(group))}" in lines


def test_command_help_gives_its_purpose_groups_and_keys_with_their_comments(capsys, monkeypatch):
    out = help_of(capsys, monkeypatch, "compare", "--help")
    assert out.startswith(f"geneval compare: {SUMMARIES['compare']}\n")
    assert f"  zoo: {', '.join(config_options('zoo'))}" in out  # a group compare composes
    assert "== Keys (conf/compare.yaml) ==" in out
    assert "repetitions:" in out and "# geneval compare: evaluate several classifiers" in out  # keys and comments
    assert "hydra:" not in out  # Hydra's own settings stay out
    out = help_of(capsys, monkeypatch, "serve", "-h")
    assert "home: ${oc.env:GENEVAL_SERVICE_HOME" in out  # a literal $ in the yaml survives Hydra's template
    assert "zoo:" not in out and "  execution: default, gpu" in out  # only the groups serve composes


@pytest.mark.parametrize("override", [o for o, _ in COMMON_OVERRIDES])
def test_every_override_the_help_recommends_composes(override):
    overrides = override.split()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    for item in overrides:
        key, value = item.split("=", 1)
        if "." in key:  # a key: set as given (a group choice is checked by composing at all)
            node, leaf = cfg, key.split(".")
            for part in leaf[:-1]:
                node = node[part]
            assert str(node[leaf[-1]]) == value, item


@pytest.mark.parametrize("args", [["--help"], ["score", "-h"]])
def test_help_does_not_import_torch(args):
    code = (
        "import sys, genEval.cli\n"
        "try:\n"
        f"    genEval.cli.main({args!r})\n"
        "except SystemExit as done:\n"
        "    print('EXIT', done.code)\n"
        "print('TORCH', sorted(m for m in ('torch', 'torchvision', 'scipy', 'httpx') if m in sys.modules))\n"
    )
    root = ROOT
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert "EXIT 0" in out.stdout and "== Keys" in out.stdout or "== Commands ==" in out.stdout, out.stderr
    assert "TORCH []" in out.stdout, out.stdout[-500:]


def test_a_command_without_a_one_line_summary_is_refused():
    with pytest.raises(ValueError, match="needs a one-line summary"):
        command("nameless", "config", "")
    with pytest.raises(ValueError, match="needs a one-line summary"):
        command("wordy", "config", "first line\nsecond line")
