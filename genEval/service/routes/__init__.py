"""The HTTP API by resource: one :class:`fastapi.APIRouter` per module, each calling only the service facade
(:class:`genEval.service.core.Service`, injected by :mod:`~genEval.service.routes.deps` with the caller's token).

* :mod:`~.jobs` - ``/api/jobs``: submit, follow, cancel, re-queue, list; a done job's results.json and snapshot.
* :mod:`~.models` - ``/api/classifiers`` and ``/api/uploads``: what a submission may name, model files.
* :mod:`~.benchmarks` - ``/api/benchmarks``.
* :mod:`~.leaderboard` - ``/api/leaderboard/{benchmark}``.
* :mod:`~.tokens` - ``/api/tokens`` (admin).
* :mod:`~.workers` - ``/api/workers`` and ``/api/health``.

Answers are the pydantic models of :mod:`genEval.service.responses`; the HTML pages are
:mod:`genEval.service.pages`.
"""

from __future__ import annotations

from genEval.service.routes import benchmarks, jobs, leaderboard, models, tokens, workers

#: Every API router, in the order the OpenAPI docs list them.
ROUTERS = (benchmarks.router, leaderboard.router, models.router, jobs.router, tokens.router, workers.router)
