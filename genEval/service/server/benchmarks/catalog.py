"""What one server offers: its benchmark presets (name -> the current :class:`~genEval.service.benchmarks.Benchmark`),
registered as versions when the server starts, the classifier configs a submission may name, and the default
leaderboard."""

from __future__ import annotations

from dataclasses import dataclass
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
        for b in self.benchmarks.values():
            self.store.register(b.name, b.version, b.title, b.record())

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
        """Every offered benchmark's record (:meth:`Benchmark.record`) with the versions registered, newest first."""
        return [b.record() | {"versions": self.versions(b.name)} for b in self.benchmarks.values()]

    def choices(self) -> dict[str, list[str]]:
        """The model kinds a submission may use and the registered classifier configs ``kind=config`` may name."""
        return {"kinds": list(KINDS), "configs": sorted(self.classifiers)}
