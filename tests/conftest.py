"""Shared fixtures: the real offline assets in ../shared/assets (tests skip when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(os.environ.get("GENEVAL_ASSETS", ROOT.parent / "shared" / "assets"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test session shares one throwaway cache; the user's ~/.cache is never touched."""
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path_factory.getbasetemp() / "geneval-cache"))


def asset(rel: str) -> Path:
    """Path of a shared asset, or skip the test with a reason when it is not there."""
    p = ASSETS / rel
    if not p.exists():
        pytest.skip(f"shared asset {p} not present (outside contributors do not have ../shared/assets)")
    return p
