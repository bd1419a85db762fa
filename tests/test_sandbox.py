"""Hostile model files (issue 37): a TorchScript archive whose ``__setstate__`` never returns, a safetensors header
bomb, a check that fills the memory or reaches for the network. Each is stopped by its limit, in a child process
(genEval/sandbox.py), whether it arrives as a service upload or as the CLI's ``classifier=torchscript``."""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Tuple  # noqa: UP035 - TorchScript's own type annotations

import pytest
import torch

from genEval.checkpoints import MAX_SAFETENSORS_HEADER, MAX_SAFETENSORS_TENSORS, load_checkpoint
from genEval.checkpoints import check_model_file as plain_check
from genEval.classifiers import torchscript_classifier
from genEval.sandbox import CheckFailed, LimitExceeded, Limits, run_isolated
from genEval.service.models import UploadRefused, UploadUnsafe, sniff_upload


class Looping(torch.nn.Module):
    """A scripted module whose ``__setstate__`` (run by ``torch.jit.load``, holding the GIL) never returns."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> Tuple[int, bool]:  # noqa: UP006
        return (self.n, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[int, bool]) -> None:  # noqa: UP006
        self.training = state[1]
        n = state[0]
        while n >= 0:
            n = n + 1
        self.n = n


@pytest.fixture(scope="module")
def looping(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "looping.pt"
    torch.jit.save(torch.jit.script(Looping()), str(path))
    assert path.stat().st_size < 4096  # a couple of kilobytes freeze a process that loads it
    return path


def test_a_looping_torchscript_upload_is_refused_before_it_loads_and_a_loading_that_hangs_at_its_time_limit(looping):
    """Issue 41: the looping archive's ``__setstate__`` is refused before anything loads it (nothing of it runs, in no
    time); a loading that hangs all the same (here the plain probe, without the op checks) still stops at the time
    limit, naming it (issue 37)."""
    t0 = time.monotonic()
    with pytest.raises(UploadUnsafe, match=r"defines __torch__\.\S*Looping\.__setstate__") as refused:
        sniff_upload(looping, Limits(timeout_s=30))
    assert refused.value.status == 422 and time.monotonic() - t0 < 30
    with pytest.raises(LimitExceeded, match=r"time limit of 3 s .*\(setting check_timeout_s\)"):
        plain_check(looping, None, Limits(timeout_s=3))


def test_the_cli_checks_a_torchscript_model_file_in_a_child_process_too(looping):
    with pytest.raises(CheckFailed, match=r"model file 'looping.pt'|__setstate__") as refused:
        torchscript_classifier(looping, num_classes=10, check_timeout_s=60)
    assert refused.value.kind == "UnsafeModel"


def test_a_check_past_its_memory_limit_is_stopped_naming_it():
    with pytest.raises(LimitExceeded, match=r"memory limit of 1536 MiB .*\(setting check_memory_mb\)") as stopped:
        run_isolated("builtins:bytearray", 4 << 30, limits=Limits(60, 1536))
    assert stopped.value.limit == "memory"


def test_a_check_has_no_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        with pytest.raises(CheckFailed) as refused:
            run_isolated("socket:create_connection", ["127.0.0.1", server.getsockname()[1]], 5)
        assert refused.value.kind in ("PermissionError", "OSError", "ConnectionRefusedError")
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever connected


def test_a_check_answers_with_what_the_function_returned_and_its_errors():
    assert run_isolated("json:loads", "[1, 2]") == [1, 2]
    with pytest.raises(CheckFailed, match="Expecting value") as failed:
        run_isolated("json:loads", "not json")
    assert failed.value.kind == "JSONDecodeError"


def _header_file(path, header: bytes, data: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def test_a_safetensors_header_with_too_many_tensors_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """The header bomb, scaled down: MAX + 1 zero-size tensors (the attack's 1.15 M took 2.3 GB to accept), refused
    here, before the safetensors library (or a child process) ever sees it."""
    import safetensors.torch

    from genEval.service import models

    def never(*_args, **_kwargs):
        pytest.fail("the header bomb reached the safetensors library")

    monkeypatch.setattr(models, "check_model_file", never)
    monkeypatch.setattr(safetensors.torch, "load_file", never)
    entries = ",".join(
        f'"t{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(MAX_SAFETENSORS_TENSORS + 1)
    )
    bomb = _header_file(tmp_path / "bomb.safetensors", ("{" + entries + "}").encode())
    with pytest.raises(UploadRefused, match=f"more than {MAX_SAFETENSORS_TENSORS} tensors, the limit"):
        sniff_upload(bomb)
    with pytest.raises(ValueError, match=f"more than {MAX_SAFETENSORS_TENSORS} tensors"):
        load_checkpoint(bomb)  # the CLI's path to safetensors weights (timm/torchvision checkpoint=)
    monkeypatch.undo()
    fine = ",".join(f'"t{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(100))
    assert sniff_upload(_header_file(tmp_path / "ok.safetensors", ("{" + fine + "}").encode())) == "safetensors"


def test_a_safetensors_header_larger_than_the_limit_is_not_even_read(tmp_path, monkeypatch):
    size = MAX_SAFETENSORS_HEADER + 1
    big = _header_file(tmp_path / "big.safetensors", b"{" + b" " * (size - 2) + b"}")
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("the oversized header was parsed"))
    with pytest.raises(UploadRefused, match=f"header of {size} bytes; the limit is {MAX_SAFETENSORS_HEADER} bytes"):
        sniff_upload(big)
