"""Standings: the ``standings`` table (:mod:`.store`), how a finished job's row is computed (:mod:`.compute`, in the
worker), how the rows are read and paged (:mod:`.board`) and ``GET /api/leaderboard/{benchmark}`` (:mod:`.routes`);
the HTML leaderboard is :mod:`genEval.service.server.pages`."""
