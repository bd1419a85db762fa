"""The local Ray cluster of the tests: it lives in :mod:`benchmarks.harness.ray_cluster` (``python -m
benchmarks.cluster`` measures on the same one); the tests import it from here (tests.support)."""

from __future__ import annotations

from benchmarks.harness.ray_cluster import COMPARE, SHARDS, TINY, RayCluster, kill_mid_run, local_ray_cluster, start

__all__ = ["COMPARE", "SHARDS", "TINY", "RayCluster", "kill_mid_run", "local_ray_cluster", "start"]
