"""genEval: dynamic, foundation-model-oriented robustness evaluation (FMR, Zhang et al., ICLR 2024)."""

from __future__ import annotations

__version__ = "0.1.0"

from genEval.interfaces import Classifier, Generator, Judgement, Oracle  # noqa: E402

__all__ = ["Classifier", "Generator", "Judgement", "Oracle", "evaluate", "__version__"]


def __getattr__(name: str):  # lazy: keep `import genEval` cheap
    if name == "evaluate":
        from genEval.search.driver import evaluate

        return evaluate
    raise AttributeError(name)
