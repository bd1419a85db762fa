"""What the studies share: the roofline counting and device peaks (:mod:`.roofline`), the local Ray cluster
(:mod:`.ray_cluster`), what "the same run" means (:mod:`.run_equality`) and the results files (:mod:`.results`).
Imported as ``benchmarks.harness.<module>`` (run a study as ``python -m benchmarks.<study>`` from the checkout)."""
