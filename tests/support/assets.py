"""The checkout and the real offline assets in ../shared/assets (``$GENEVAL_ASSETS``): tests skip when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The checkout's root (the folder holding genEval/, conf/, docs/ and tests/).
ROOT = Path(__file__).resolve().parents[2]
ASSETS = Path(os.environ.get("GENEVAL_ASSETS", ROOT.parent / "shared" / "assets"))


def asset(rel: str) -> Path:
    """Path of a shared asset, or skip the test with a reason when it is not there."""
    p = ASSETS / rel
    if not p.exists():
        pytest.skip(f"shared asset {p} not present (outside contributors do not have ../shared/assets)")
    return p
