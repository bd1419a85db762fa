"""The genEval service's server: everything that needs the ``[service]`` extra (FastAPI, uvicorn, SQLAlchemy).

The stack-free domain is the package above (:mod:`genEval.service`: benchmarks, submitted models, the job runner,
records, refusals, auth, errors, limits and the client), which imports without the extra; this package is the server
around it, cut into vertical slices. Each slice owns its table and store (its SQL, over the one session factory of
:mod:`.session`), its ``APIRouter`` and its answers (views of the records, :mod:`.views`):

* :mod:`.tokens` - API tokens; ``/api/tokens``.
* :mod:`.benchmarks` - the registered benchmark versions, what this server offers (:mod:`.benchmarks.catalog`);
  ``/api/benchmarks``, ``/api/classifiers``.
* :mod:`.uploads` - model files, checked in a sandbox before they are kept; ``/api/uploads``.
* :mod:`.jobs` - submissions and the queue workers claim from; ``/api/jobs``.
* :mod:`.standings` - one leaderboard row per finished job, computed by the worker, read and paged by the database;
  ``/api/leaderboard/{benchmark}`` (the HTML pages: :mod:`.pages`).
* :mod:`.workers` - who evaluates; ``/api/workers``, ``/api/health``.

Around them: :mod:`.database` (the session factory with every store), :mod:`.facade` (:class:`~.facade.Service`,
the composition the routes reach through :mod:`.deps`), :mod:`.app` (the FastAPI application), :mod:`.worker` (the
worker loop) and :mod:`.supervisor` (the server's own upkeep), :mod:`.outages` (living through a database restart)
and :mod:`.slow_clients` (read timeouts).
"""
