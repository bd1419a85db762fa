"""genEval as a service: submit a classifier, get a fresh dynamic evaluation, see it on a leaderboard.

The paper's Appendix N leaderboards, run the way Dynabench and RobustBench users know: a lab runs
``geneval serve`` once, people submit classifiers over HTTP, workers evaluate every submission with
``genEval.evaluate`` (fresh, recorded seeds; a normal run directory each), and a server-rendered page ranks
the models of each benchmark with 95% intervals and paired-bootstrap "significantly better" marks.

Two packages by import regime:

* this one, the stack-free domain, which imports without the ``[service]`` extra (``geneval submit`` and the job
  runner use it): :mod:`~genEval.service.benchmarks` (presets: config hash = version, the override allowlist),
  :mod:`~genEval.service.models` (submitted models: upload sniffing, the classifier config a submission becomes),
  :mod:`~genEval.service.execute` (one job's repetitions through ``genEval.evaluate``, in a worker's child process),
  :mod:`~genEval.service.records` (plain records and statuses), :mod:`~genEval.service.refusals` (what the service
  refuses, each with its HTTP status), :mod:`~genEval.service.auth` (tokens and roles),
  :mod:`~genEval.service.errors` (what a submitter may read of a failure), :mod:`~genEval.service.limits` (body
  limits, rate limits), :mod:`~genEval.service.worker_settings` (how a worker runs jobs: ``conf/worker``) and
  :mod:`~genEval.service.client` (the HTTP client);
* :mod:`genEval.service.server`, the server (FastAPI, uvicorn, SQLAlchemy: the ``[service]`` extra), in vertical
  slices (tokens, benchmarks, uploads, jobs, standings, workers), each with its store, its router and its answers,
  plus the worker loop.

The web framework and the database library are the ``[service]`` extra (``pip install "geneval-fmr[service]"``);
``tests/test_layers.py`` holds the rule: every module in a package named ``server`` may need it, no other module
may, directly or through what it imports.
"""

from __future__ import annotations
