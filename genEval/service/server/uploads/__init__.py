"""Uploads: the ``uploads`` table (:mod:`.store`), what an upload goes through before it is kept (:mod:`.desk`:
quota, a sandboxed check, storage by sha256) and ``POST /api/uploads`` (:mod:`.routes`)."""
