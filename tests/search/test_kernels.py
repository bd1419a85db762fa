"""Precision, channels_last and compile as settings (issue 12): bf16 agrees with fp32, settings are recorded,
and what cannot work here falls back with one warning line."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from genEval import evaluate
from genEval.search.execution import Execution, accelerate
from genEval.search.perturb import SearchConfig
from tests.support.toys import AcceptAllOracle, LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

CFG = SearchConfig(budget=8, step_size=0.3, start_noise=0.1)
DECISIONS = ("start_ok", "validated", "accepted_steps", "rejected_at", "first_fooled", "final_pred")


def test_bf16_and_fp32_agree_on_the_decisions_of_a_small_run(tmp_path):
    """Stated tolerance: at least 95% of the samples take identical decisions (start check, every accepted or
    rejected step, first fooled step, final prediction) and PA differs by at most 2 points. Measured on this
    toy run: 295 of 300 identical, PA equal (10.28)."""
    data = toy_data(300, seed=2)
    runs = {
        p: evaluate(
            LinearClassifier(seed=0),
            data,
            SigmoidGenerator(),
            ModelOracle(LinearClassifier(seed=1)),
            CFG,
            seed=0,
            execution=Execution(batch_size=64, precision=p),
            output=tmp_path / p,
        )
        for p in ("fp32", "bf16")
    }
    a, b = runs["fp32"].samples, runs["bf16"].samples
    same = sum(all(getattr(u, k) == getattr(v, k) for k in DECISIONS) for u, v in zip(a, b))
    assert same >= 0.95 * len(a)
    assert 0 < runs["fp32"].scores.n_validated < len(a)  # mixed outcomes, so agreement means something
    assert abs(runs["fp32"].scores.pa.value - runs["bf16"].scores.pa.value) <= 2.0
    recorded = json.loads((tmp_path / "bf16" / "results.json").read_text())
    assert recorded["kernels"]["classifier"] == {"precision": "bf16", "mode": "weights"}
    assert recorded["kernels"]["generator"]["precision"] == "fp32 (no weights)"  # a sigmoid: nothing to convert
    assert recorded["identity"]["config"]["precision"] == "bf16"  # part of what a run is: no resume across it


def test_bf16_actually_runs_the_roles_in_bf16():
    seen = []

    class Spy(LinearClassifier):
        def forward(self, x):
            out = super().forward(x)
            seen.append(out.dtype)
            return out

    spy = Spy(seed=0)
    clf, gen, orc, eff = accelerate(
        spy, SigmoidGenerator(), AcceptAllOracle(), Execution(precision="bf16"), torch.device("cpu")
    )
    logits = clf(torch.rand(4, 3, 2, 2))
    assert seen == [torch.bfloat16] and logits.dtype == torch.float32  # bf16 inside, fp32 handed back
    assert {p.dtype for p in spy.parameters()} == {torch.bfloat16}  # the weights themselves, not autocast
    assert gen.decode(torch.zeros(1, 3, 2, 2)).dtype == torch.float32
    assert eff["classifier"] == {"precision": "bf16", "mode": "weights"}


def test_compile_on_cpu_falls_back_to_eager_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING):
        r = evaluate(
            LinearClassifier(seed=0),
            toy_data(12),
            SigmoidGenerator(),
            AcceptAllOracle(),
            SearchConfig(budget=2),
            seed=0,
            execution=Execution(compile=True),
        )
    lines = [rec for rec in caplog.records if "compile=true ignored" in rec.getMessage()]
    assert len(lines) == 1 and "CUDA" in lines[0].getMessage()
    assert r.extra["kernels"]["compile"] is False and r.extra["execution"]["compile"] is True  # asked, not taken


def test_fp16_on_a_generator_not_known_to_be_safe_warns_naming_bf16(caplog):
    with caplog.at_level(logging.WARNING):
        accelerate(
            LinearClassifier(seed=0),
            SigmoidGenerator(),
            AcceptAllOracle(),
            Execution(role_precision={"generator": "fp16"}),
            torch.device("cpu"),
        )
    assert any("overflow in fp16" in r.getMessage() and "precision=bf16" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"precision": "fp8"}, r"precision must be one of fp32, bf16, fp16, got 'fp8'; e.g. precision=bf16"),
        ({"role_precision": {"decoder": "bf16"}}, r"role_precision must be a mapping of classifier, generator, oracle"),
        ({"role_precision": {"oracle": "int8"}}, r"role_precision.oracle must be one of fp32, bf16, fp16 or null"),
        ({"compile": "yes"}, r"compile must be true or false, got 'yes'"),
        ({"batch_size": 0}, r"batch_size must be a whole number >= 1 or null, got 0"),
        ({"num_workers": -1}, r"num_workers must be a whole number >= 0"),
        ({"compile_mode": "fast"}, r"compile_mode must be one of default, reduce-overhead"),
        ({"memory_format": "nhwc"}, r"memory_format must be one of auto, channels_last, contiguous, got 'nhwc'"),
        ({"compile_scope": "blocks"}, r"compile_scope must be one of full, regional, got 'blocks'"),
        ({"tf32": "off"}, r"tf32 must be true or false, got 'off'"),
    ],
)
def test_bad_execution_settings_are_refused_naming_the_key(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Execution(**kw)


def test_precision_is_a_top_level_key_of_the_main_job_and_lands_in_results(tmp_path, digits_cache):
    from tests.support.cli import geneval

    r = geneval("seed=0", "data.limit=10", "search.budget=1", "precision=bf16", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["config"]["execution"]["precision"] == "bf16"  # recorded once, in its node (issue 45)
    assert {role: res["kernels"][role]["precision"] for role in ("classifier", "generator", "oracle")} == {
        "classifier": "bf16",
        "generator": "bf16",
        "oracle": "bf16",
    }


def test_the_old_channels_last_switch_is_read_as_memory_format_with_a_note():
    with pytest.warns(FutureWarning, match="channels_last is deprecated: write memory_format=channels_last"):
        assert Execution.coerce({"channels_last": True}).memory_format == "channels_last"
    with pytest.warns(FutureWarning, match="memory_format=contiguous"):
        assert Execution.coerce({"channels_last": False, "compile": True}).memory_format == "contiguous"
    assert Execution.coerce({"channels_last": None}).memory_format == "auto"  # the config's default: no note
    with pytest.raises(ValueError, match=r"channels_last must be true or false \(deprecated: use memory_format\)"):
        Execution.coerce({"channels_last": "yes"})


@pytest.fixture
def tf32_flags():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(
    "execution,tf32",
    [(Execution(), True), (Execution(tf32=False), False), (Execution(precision="bf16"), False)],
)
def test_tf32_follows_the_setting_for_fp32_roles_on_cuda(tf32_flags, execution, tf32):
    """On a CUDA device (the flags are process-wide, so a CPU can set them): fp32 roles get TF32 unless tf32=false
    asks for strict fp32; with no fp32 role there is nothing for TF32 to do."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not tf32
    *_, eff = accelerate(LinearClassifier(), SigmoidGenerator(), AcceptAllOracle(), execution, torch.device("cuda"))
    assert eff["tf32"] is tf32
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    assert eff["memory_format"] == "contiguous"  # auto: channels_last only where the step is compiled on CUDA
