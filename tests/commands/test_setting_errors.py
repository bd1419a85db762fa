"""Errors that name their key: every config value that fails a type or range check names the key, the value and
a valid example, and every error raised while building a component reaches the user as one paragraph with exit
status 2 and no traceback (genEval.commands, genEval.commands.settings)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from genEval.cli import CONF_DIR
from genEval.commands import REGISTRY, SUMMARIES, BuildError, build, error_message
from genEval.interfaces import SettingError
from tests.support.assets import ROOT
from tests.support.cli import one_error_paragraph


def geneval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        ("search.budget=abc", "search.budget must be a whole number >= 0, got 'abc'; e.g. search.budget=50"),
        ("seed=-5", "seed must be a whole number >= 0 or null, got -5; e.g. seed=0"),
    ],
)
def test_the_interface_lines_name_the_key_the_value_and_an_example(override, expected, tmp_path):
    r = geneval(override, f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2, r.stderr
    assert expected in one_error_paragraph(r.stderr)
    assert not (tmp_path / "run.json").exists()  # refused before anything ran


def _run(overrides: list[str], capsys) -> tuple[int, str]:
    """The main job on ``overrides`` in this process: (exit status, stderr)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(SystemExit) as exit_:
        REGISTRY["evaluate"][1](cfg)
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "override, expected",
    [
        ("data.limit=abc", "data.limit must be a whole number or null, got 'abc'; e.g. data.limit=100"),
        ("classifier.epochs=abc", "classifier.epochs must be a whole number or null, got 'abc'"),
        ("oracle.members.0.classifier.seed=x", "oracle.members.0.classifier.seed must be a whole number, got 'x'"),
        ("search.step_size=fast", "search.step_size must be a number >= 0, got 'fast'; e.g. search.step_size=0.001"),
        ("batch_size=0", "batch_size must be a whole number >= 1 or null, got 0; e.g. batch_size=64"),
        ("n_boot=many", "n_boot must be a whole number >= 1, got 'many'; e.g. n_boot=1000"),
        ("precision=fp8", "precision must be one of fp32, bf16, fp16, got 'fp8'; e.g. precision=bf16"),
        ("interval=exact", "interval must be one of wilson, clopper-pearson, got 'exact'"),
        ("output.log_interval=-1", "output.log_interval must be a number of seconds >= 0, got -1; e.g. output.log_in"),
        ("scoring.n_boot=x", "scoring.n_boot must be a whole number >= 1, got 'x'; e.g. scoring.n_boot=1000"),
        ("execution.num_workers=-1", "execution.num_workers must be a whole number >= 0, got -1"),
        ("scoring.oracle_warn_accuracy=101", "scoring.oracle_warn_accuracy must be a number in [0, 100] or null"),
        ("compile=abc", "compile must be true or false, got 'abc'; e.g. compile=true"),
        ("device=gpu", "device must be auto, cpu, cuda or cuda:N, got 'gpu'; e.g. device=auto"),
        ("+data.colour=1", "data.colour is not a setting of genEval.data.DigitsData; it takes: split, image_size"),
        ("data=imagefolder", "data.root must be given (it has no default), got '???'; e.g. data.root="),
    ],
)
def test_bad_values_name_their_key_before_anything_is_built(override, expected, capsys, monkeypatch):
    import genEval.commands.base as commands  # build() and the instantiate it calls

    built = []
    monkeypatch.setattr(commands, "instantiate", lambda *a, **k: built.append(a) or pytest.fail("built"), raising=True)
    status, err = _run([override], capsys)
    assert status == 2
    assert expected in one_error_paragraph(err), err
    assert built == []


@pytest.mark.parametrize(
    "node, expected",
    [
        ({"limit": -3}, "data.limit must be a whole number >= 1 (number of samples) or null (all), got -3; e.g."),
        ({"test_fraction": 2}, "data.test_fraction must be a number strictly between 0 and 1, got 2; e.g."),
        ({"split": "val"}, "data.split must be train or test, got 'val'; e.g. data.split=test"),
        ({"channels": 2}, "data.channels must be 1 (grayscale), 3 (RGB) or null (keep the source's), got 2; e.g."),
        ({"limit": 5, "subset": "any"}, "data.subset must be random (a seeded class-balanced draw) or first"),
    ],
)
def test_a_components_range_check_is_shown_under_its_config_key(node, expected):
    cfg = OmegaConf.create({"data": {"_target_": "genEval.data.DigitsData", **node}})
    with pytest.raises(SettingError) as err:
        build(cfg.data, "data")
    assert str(err.value).startswith(expected)


def test_build_checks_types_and_keys_for_every_command():
    """``build`` itself refuses a wrong type or an unknown key (commands other than the main job rely on it)."""
    node = {"_target_": "genEval.data.DigitsData", "limit": "abc"}
    with pytest.raises(SettingError, match=r"^held_out\.limit must be a whole number or null, got 'abc'; e\.g\."):
        build(OmegaConf.create({"held_out": node}).held_out, "held_out")
    node = {"_target_": "genEval.data.DigitsData", "limt": 5}
    with pytest.raises(
        ValueError, match=r"^data\.limt is not a setting of genEval\.data\.DigitsData.*Did you mean data\.limit"
    ):
        build(OmegaConf.create({"data": node}).data, "data")


def test_a_nested_components_range_check_names_the_nested_key():
    member = {
        "_target_": "oracles.classifier.ClassifierOracle",
        "classifier": {"_target_": "genEval.classifiers.cifar_resnet"},
    }
    cfg = OmegaConf.create({"oracle": {"_target_": "oracles.zoo.ZooOracle", "members": [member, member]}})
    cfg.oracle.members[1].classifier.depth = 19
    with pytest.raises(SettingError, match=r"^oracle\.members\.1\.classifier\.depth must be 6n\+2 .*got 19; e\.g\."):
        build(cfg.oracle, "oracle")


# ---------------------------------------------------------------------------- errors while building
class HubUnreachable(RuntimeError):
    """Stands in for the CLIP oracle's "model hub unreachable" error (not a user-error type on purpose)."""


def unreachable_oracle(name: str = "ViT-B-32") -> None:
    try:
        raise ConnectionError("[Errno 101] Network is unreachable")
    except ConnectionError as low:
        raise HubUnreachable(
            f"cannot download the CLIP weights for {name}: the model hub is unreachable.\n"
            "Pass the local file with oracle.pretrained=/path/to/open_clip_model.safetensors."
        ) from low


def broken_component() -> None:
    raise KeyError("state_dict")


@pytest.mark.parametrize(
    "target, expected",
    [
        (
            f"{__name__}.unreachable_oracle",
            "while building oracle: HubUnreachable: cannot download the CLIP weights for ViT-B-32: the model hub is "
            "unreachable. Pass the local file with oracle.pretrained=/path/to/open_clip_model.safetensors.",
        ),
        (f"{__name__}.broken_component", "while building oracle: KeyError: state_dict"),
        (
            "oracles.nowhere.Oracle",
            "while building oracle: Error loading 'oracles.nowhere.Oracle': ModuleNotFoundError(\"No module named",
        ),
    ],
)
def test_any_error_while_building_is_one_paragraph_naming_the_role(target, expected):
    cfg = OmegaConf.create({"oracle": {"_target_": target}})
    with pytest.raises(BuildError) as err:
        build(cfg.oracle, "oracle")
    assert str(err.value).startswith(expected), str(err.value)
    assert "\n" not in str(err.value)
    assert "HYDRA_FULL_ERROR" not in str(err.value)


def test_the_wrapper_looks_through_hydras_wrapper_and_prints_one_paragraph(capsys, monkeypatch):
    """An error that reaches the command wrapper still wrapped (e.g. instantiate called outside ``build``)."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    from genEval.commands import command

    def fn(cfg):
        try:
            unreachable_oracle()
        except HubUnreachable as err:
            raise InstantiationException(
                "Error in call to target 'oracles.clip.CLIPOracle':\nfull_key: oracle"
            ) from err

    run = command("test-wrapper", "config", "a command for this test")(fn)
    REGISTRY.pop("test-wrapper"), SUMMARIES.pop("test-wrapper")
    with pytest.raises(SystemExit) as exit_:
        run(OmegaConf.create({}))
    assert exit_.value.code == 2
    line = one_error_paragraph(capsys.readouterr().err, "geneval test-wrapper")
    assert line.endswith("Pass the local file with oracle.pretrained=/path/to/open_clip_model.safetensors.")
    assert "HubUnreachable: cannot download the CLIP weights" in line


def test_error_message_adds_the_type_only_where_the_message_does_not_explain_itself():
    assert error_message(ValueError("data.limit must be ...")) == "data.limit must be ..."
    assert error_message(FileNotFoundError("no such file: 'x'")) == "no such file: 'x'"
    assert error_message(AssertionError()) == "AssertionError"
    assert error_message(KeyError("w")) == "KeyError: w"


def test_a_traceback_is_there_when_asked_for(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "genEval.cli", "seed=-5", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HYDRA_FULL_ERROR": "1"},
    )
    assert r.returncode != 0 and "Traceback" in r.stderr and "SettingError" in r.stderr


def test_is_whole_accepts_integral_numbers_only():
    """The one whole-number check behind counts, sizes and seeds: YAML may give 100.0, NumPy an int64."""
    import numpy as np

    from genEval.interfaces import is_whole

    assert [is_whole(v, 1) for v in (1, 100.0, np.int64(3))] == [True, True, True]
    assert not any(is_whole(v, 1) for v in (True, "5", 0, 1.5, None, np.float64(0.5)))
    assert is_whole(-2) and not is_whole(-2, 0)
