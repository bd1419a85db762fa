"""Workers: the ``workers`` table (:mod:`.store`: who evaluates, seen when) and ``/api/workers``, ``/api/health``
(:mod:`.routes`). The worker loop itself is :mod:`genEval.service.server.worker`."""
