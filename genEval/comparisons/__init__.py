"""Comparing robustness interventions (paper Tables 1-3, App. N): ``repetitions`` runs every model on shared,
re-drawn sources; ``loading`` reads finished runs; ``rows`` builds the leaderboard rows; ``stability`` measures
how stable the ranking is; ``aggregate`` puts them together (:func:`genEval.comparisons.aggregate.compare`);
``leaderboard`` is the typed result and its files."""
