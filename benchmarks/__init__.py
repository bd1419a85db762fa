"""genEval's measurements (not tests): each study runs as ``python -m benchmarks.<study>`` from the checkout (or
``python benchmarks/<study>.py``); what they share is in :mod:`benchmarks.harness`. Results:
``benchmarks/RESULTS.md``."""
