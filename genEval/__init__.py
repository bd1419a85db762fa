"""genEval: dynamic, foundation-model-oriented robustness evaluation (FMR, Zhang et al., ICLR 2024).

``import genEval`` is cheap: the contracts (``genEval.Classifier``, ...) and ``genEval.evaluate`` are loaded on first
use (PEP 562 module ``__getattr__``), so the command line can dispatch, answer ``--help`` and check settings before
torch is imported (docs/getting-started.md); a notebook writes ``genEval.evaluate(...)`` as before.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Classifier", "Generator", "Judgement", "Oracle", "evaluate", "__version__"]

#: The contracts, defined in genEval.interfaces (which imports torch).
_CONTRACTS = ("Classifier", "Generator", "Judgement", "Oracle")


def __getattr__(name: str) -> Any:  # lazy: keep `import genEval` cheap
    if name in _CONTRACTS:
        from genEval import interfaces

        return getattr(interfaces, name)
    if name == "evaluate":
        from genEval.search.driver import evaluate

        return evaluate
    raise AttributeError(f"module 'genEval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
