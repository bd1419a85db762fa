"""Jobs: the ``jobs`` table (:mod:`.rows`), its store for submitters and admins (:mod:`.store`) and the queue workers
claim from (:mod:`.queue`), what a submission goes through (:mod:`.desk`), a finished job's files (:mod:`.files`)
and ``/api/jobs`` (:mod:`.routes`)."""
