"""Fixtures for the snapshot tests (a pytest plugin: test modules name it in ``pytest_plugins``).

Module-scoped: each test module makes the toy run once and exports it once in each format.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.snapshots import expected_content, export_both, make_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def run_data(run_dir) -> dict:
    return expected_content(run_dir)


@pytest.fixture(scope="module")
def snaps(run_dir, tmp_path_factory) -> tuple[Path, Path]:
    return export_both(run_dir, tmp_path_factory.mktemp("snaps"))


@pytest.fixture(scope="module")
def snap_if(snaps) -> Path:
    """Imagefolder snapshot of the toy run, with latents."""
    return snaps[0]


@pytest.fixture(scope="module")
def snap_wds(snaps) -> Path:
    """WebDataset snapshot of the toy run in shards of 10 (10, 10, 7 samples)."""
    return snaps[1]
