"""genEval as a service: submit a classifier, get a fresh dynamic evaluation, see it on a leaderboard.

The paper's Appendix N leaderboards, run the way Dynabench and RobustBench users know: a lab runs
``geneval serve`` once, people submit classifiers over HTTP, workers evaluate every submission with
``genEval.evaluate`` (fresh, recorded seeds; a normal run directory each), and a server-rendered page ranks
the models of each benchmark with 95% intervals and paired-bootstrap "significantly better" marks.

Modules (one job each):

* :mod:`~genEval.service.db` - the database (SQLAlchemy; SQLite or PostgreSQL): tokens, benchmarks,
  uploads, jobs, workers, and the atomic job claim. The database is the only state the server and the
  workers share.
* :mod:`~genEval.service.auth` - API tokens (random, stored as sha256) and roles.
* :mod:`~genEval.service.benchmarks` - benchmark presets (conf/benchmark/*.yaml): config hash = version,
  the per-benchmark override allowlist.
* :mod:`~genEval.service.models` - submitted models: upload sniffing (safetensors / TorchScript; pickles
  refused) and the classifier config a submission becomes.
* :mod:`~genEval.service.execute` - one job's repetitions through ``genEval.evaluate`` (in a worker's
  child process).
* :mod:`~genEval.service.worker` - the worker loop: claim, heartbeat, progress, cancel, re-queue.
* :mod:`~genEval.service.leaderboard` - standings per benchmark version (genEval.comparisons.aggregate underneath).
* :mod:`~genEval.service.core` - the facade: the one object the routes and pages call (database, home,
  benchmarks); it answers with records (:mod:`~genEval.service.records`: plain views and statuses, no database
  library) or refusals (:mod:`~genEval.service.refusals`, each with its HTTP status).
* :mod:`~genEval.service.routes` - one ``APIRouter`` per resource (jobs, models, benchmarks, leaderboard, tokens,
  workers), answering with the pydantic models of :mod:`~genEval.service.responses`;
  :mod:`~genEval.service.pages` - the HTML pages.
* :mod:`~genEval.service.api` - the FastAPI application (JSON API, OpenAPI docs at ``/docs`` and the schema at
  ``/openapi.json``, the leaderboard pages) put together from those.

The web framework and the database library are the ``[service]`` extra (``pip install "geneval-fmr[service]"``):
``records``, ``refusals``, ``auth``, ``errors``, ``limits``, ``benchmarks``, ``models``, ``execute`` and ``client``
import without it (``geneval submit`` and the job builder use them); the rest need it.
"""

from __future__ import annotations
