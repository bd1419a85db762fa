"""genEval's measurements (not tests): each study runs as ``python -m benchmarks.<study>`` from the checkout (or
``PYTHONPATH=. python -m benchmarks.<study>`` elsewhere); what they share is in :mod:`benchmarks.harness`. Results:
``benchmarks/RESULTS.md``."""
