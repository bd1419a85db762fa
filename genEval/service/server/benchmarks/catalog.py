"""What one server offers: its benchmark presets (name -> the current :class:`~genEval.service.benchmarks.Benchmark`),
registered as versions when the server starts, the classifier configs a submission may name, and the default
leaderboard.

A settled preset whose version an admin renewed (its reuse budget spent: :meth:`Catalog.renew`, docs/scores.md) is
offered at its newest renewal: the registered versions that share the preset's ``base_version`` say which epoch that is,
so a restarted server offers the same version it offered before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from genEval.service.benchmarks import Benchmark
from genEval.service.models import KINDS
from genEval.service.refusals import NotFound, clip
from genEval.service.server.benchmarks.store import BenchmarkStore


@dataclass
class Catalog:
    """``benchmarks``: name -> current preset; ``classifiers``: config name -> resolved classifier config;
    ``default``: the benchmark of ``/`` (the first one when None)."""

    store: BenchmarkStore
    benchmarks: dict[str, Benchmark]
    classifiers: dict[str, dict]
    default: str | None = None

    def __post_init__(self) -> None:
        if not self.benchmarks:
            raise ValueError("the service needs at least one benchmark (conf/benchmark/*.yaml).")
        if self.default is not None and self.default not in self.benchmarks:
            raise ValueError(
                f"default benchmark {self.default!r} is not among the loaded ones: {', '.join(self.benchmarks)}."
            )
        self.default = self.default or next(iter(self.benchmarks))
        for name, b in list(self.benchmarks.items()):
            epochs = [
                int(v.config.get("epoch") or 0)
                for v in self.store.versions(name)
                if v.config.get("base_version") == b.version
            ]
            current = replace(b, epoch=max(epochs, default=0))  # a renewed version stays the current one
            self.benchmarks[name] = current
            self.store.register(current.name, current.version, current.title, current.record())

    def benchmark(self, name: str) -> Benchmark:
        """The current preset of ``name``; KeyError naming the ones offered."""
        if name not in self.benchmarks:
            raise KeyError(f"unknown benchmark {clip(name, 64)!r}; available: {', '.join(self.benchmarks)}.")
        return self.benchmarks[name]

    def offered(self, name: str) -> Benchmark:
        """:meth:`benchmark` for a benchmark named in a URL: an unknown one is :class:`NotFound`."""
        try:
            return self.benchmark(name)
        except KeyError as err:
            raise NotFound(err.args[0]) from None

    def versions(self, name: str) -> list[str]:
        """The registered versions of benchmark ``name``, newest first."""
        return [v.version for v in self.store.versions(name)]

    def records(self) -> list[dict[str, Any]]:
        """Every offered benchmark's record (:meth:`Benchmark.record`) with the versions registered, newest first, and
        a settled one's reuse budget (:meth:`reuse_budget`)."""
        return [
            b.record() | {"versions": self.versions(b.name), "reuse_budget": self.reuse_budget(b.name, b.version)}
            for b in self.benchmarks.values()
        ]

    def reuse_budget(self, name: str, version: str) -> dict[str, Any] | None:
        """A settled version's reuse budget as stored (its eta and submissions left; both None before two models
        finished), None for a fixed benchmark."""
        bench = self.benchmarks.get(name)
        if bench is None or bench.rule is None:
            return None
        stored = self.store.reuse(name, version)
        if stored is None:
            return {"eta": None, "submissions_left": None, "spent": False, "note": "no two models have finished yet"}
        return stored

    def renew(self, name: str) -> Benchmark:
        """Offer a new version of the settled benchmark ``name`` (its epoch + 1: a new hash and fresh secret round
        seeds) from now on; its earlier versions keep their leaderboards. :class:`NotFound` for an unknown one,
        ValueError for a fixed one."""
        new = self.offered(name).renewed()
        self.store.register(new.name, new.version, new.title, new.record())
        self.benchmarks[name] = new
        return new

    def choices(self) -> dict[str, list[str]]:
        """The model kinds a submission may use and the registered classifier configs ``kind=config`` may name."""
        return {"kinds": list(KINDS), "configs": sorted(self.classifiers)}
