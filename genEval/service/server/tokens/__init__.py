"""Tokens: the ``tokens`` table and its store (:mod:`.store`), ``/api/tokens`` (:mod:`.routes`)."""
