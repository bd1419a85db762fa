"""Benchmarks: the registered versions (:mod:`.store`), what this server offers (:mod:`.catalog`: presets and
classifier configs) and ``/api/benchmarks``, ``/api/classifiers`` (:mod:`.routes`)."""
