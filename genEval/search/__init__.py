"""The search (paper Sec. 3.2, Algorithm 1): ``driver`` runs it over a data set (:func:`genEval.search.driver.evaluate`:
sources, seeding, checks, batching, progress, writing and resuming), ``perturb`` is the loop itself, ``batching``
chooses the batch size and ``kernels`` the precision, memory layout and compilation the loop runs with."""
