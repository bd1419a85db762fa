"""Run directories: ``rundir`` writes and reads them (identity, lock, records, tensor parts, the result object),
``summary`` turns a run's records into its scores and ``results.json``, ``shards`` merges the shards of one
evaluation into the run an unsharded evaluation would have written."""
