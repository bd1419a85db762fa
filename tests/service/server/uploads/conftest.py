"""The uploads slice's shared fixture: the ``digits_smoke`` preset and the registered classifiers a service of
these tests offers."""

from __future__ import annotations

import pytest

from genEval.commands.serve import load_benchmarks, registered_classifiers


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(["digits_smoke"]), registered_classifiers(None)
