"""Campaigns: the code that runs comparisons (paper Tables 1-3, App. N) and ablations (Table 3).

``plan`` holds what a campaign runs (:class:`EvaluationPlan`: what every run gets; :class:`Design`: which runs;
:class:`Setup`: the components); ``run`` is the one entry point (:func:`run_campaign`: fixed, settled and ablation
designs); ``repetitions`` evaluates every model on shared, re-drawn sources; ``rounds`` runs ``stop=settled`` in
rounds; ``executors`` says where the evaluations run. Reading finished runs is :mod:`genEval.comparisons`' job.

The names below are loaded on first use (``lazy_loader``), so that the command layer reads ``executors`` (its error
type) without loading the engine."""

import lazy_loader

__getattr__, __dir__, _lazy = lazy_loader.attach(
    __name__,
    submod_attrs={"plan": ["Design", "EvaluationPlan", "Setup"], "run": ["run_campaign"]},
)
__all__ = ["Design", "EvaluationPlan", "Setup", "run_campaign"]
