"""Reading finished comparisons (paper Tables 1-3, App. N): ``loading`` reads finished runs; ``rows`` builds the
leaderboard rows; ``ranking`` says which score orders them; ``stability`` measures how stable the ranking is;
``settled`` judges its adjacent pairs (``stop=settled``); ``aggregate`` puts them together
(:func:`~genEval.comparisons.aggregate.aggregate`: run directories in, a
:class:`~genEval.comparisons.leaderboard.Comparison` out); ``ablation`` does the same for the runs of an ablation;
``leaderboard`` is the typed result and its files; ``settings`` says how runs are aggregated. Running the
evaluations behind a comparison is :mod:`genEval.campaigns`' job.

The names below are loaded on first use (``lazy_loader``), so that ``import genEval.comparisons.settings`` stays
as cheap as it was."""

import lazy_loader

__getattr__, __dir__, _lazy = lazy_loader.attach(
    __name__,
    submod_attrs={
        "ablation": ["GeneratorAblation", "aggregate_ablation", "build_ablation", "load_comparison", "write_ablation"],
        "aggregate": ["aggregate", "build_comparison"],
        "leaderboard": ["Comparison", "write_comparison"],
        "loading": ["load_runs"],
        "settings": ["ComparisonSettings", "StopRule"],
    },
)
__all__ = [
    "Comparison",
    "ComparisonSettings",
    "GeneratorAblation",
    "StopRule",
    "aggregate",
    "aggregate_ablation",
    "build_ablation",
    "build_comparison",
    "load_comparison",
    "load_runs",
    "write_ablation",
    "write_comparison",
]
