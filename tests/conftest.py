"""Shared fixtures: the real offline assets in ../shared/assets (tests skip when absent)."""

from __future__ import annotations

import os

import pytest
import torch

from tests.support.assets import ASSETS

if ASSETS.is_dir():  # `asset:<path>` names in configs are found here (genEval/assets.py), in subprocesses too
    os.environ.setdefault("GENEVAL_ASSETS", str(ASSETS))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test session shares one throwaway cache; the user's ~/.cache is never touched."""
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path_factory.getbasetemp() / "geneval-cache"))


@pytest.fixture(scope="session")
def digits_cache(tmp_path_factory):
    """Train (once per session) and cache the offline default's digits models, so command-line tests that
    start `geneval` in a subprocess (same GENEVAL_CACHE) measure the run, not the training."""
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR, build

    cache = tmp_path_factory.getbasetemp() / "geneval-cache"
    mp = pytest.MonkeyPatch()
    mp.setenv("GENEVAL_CACHE", str(cache))
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("config")
        for role in ("classifier", "generator", "oracle"):
            build(cfg[role], role)
    finally:
        mp.undo()
    return cache
