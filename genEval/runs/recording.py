"""Where a run's samples go as they finish, and what it writes: the one lifecycle of a run's output.

:class:`RunOutput` is the output bundle of ``genEval.evaluate`` (the run directory or none, which tensors to save,
the grid, progress). :meth:`Recording.open` starts the output of one run: a run directory
(:class:`~genEval.runs.writer.RunWriter`: locked, resumed when it holds an unfinished run of the same identity) or,
without one, memory. Then :meth:`Recording.todo` (the positions not done by an earlier attempt), :meth:`add` per
finished sample, :meth:`records` (all of them, in data-set order, flushed) and :meth:`finish` with the result
(``grid.png``, ``samples.jsonl``, ``results.json``). Used as a context manager, an error closes the directory with
what was flushed kept, so a rerun resumes it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from genEval.runs.identity import RunIdentity
from genEval.runs.reader import RESULTS, read_results
from genEval.runs.results import EvalResult
from genEval.runs.settings import RunOutput as RunOutput  # the output bundle, re-exported where it always was
from genEval.runs.writer import RunWriter, save_grid
from genEval.scores.outcomes import SampleRecord


class Recording:
    """The output of one run (see the module docstring): a run directory's writer, or memory."""

    def __init__(self, output: RunOutput, writer: RunWriter | None) -> None:
        self.output, self.writer = output, writer
        self.kept: list[SampleRecord] = []  # without a run directory
        self._grid: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (-position, original, perturbed)
        self._shapes: dict[str, list[int]] = {}

    @classmethod
    def open(
        cls,
        output: RunOutput,
        identity: RunIdentity,
        *,
        generator: str,
        flush_every: int,
        source_ids: Sequence[str] | None = None,
    ) -> Recording:
        """Open ``output.dir`` for the run ``identity`` (lock, check or write run.json, read what an earlier
        attempt finished), or memory when there is no directory. ``source_ids``: the run's sources in position
        order, when the data name them (a resume then refuses records of other sources)."""
        if output.dir is None:
            return cls(output, None)
        writer = RunWriter.open(
            Path(output.dir),
            identity,
            save_latents=output.save_latents,
            save_images=output.save_images,
            generator=generator,
            flush_every=flush_every,
            source_ids=source_ids,
        )
        return cls(output, writer)

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, kind: type | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if err is not None and self.writer is not None:
            self.writer.close()  # what was flushed stays (samples.partial.jsonl); a rerun resumes it

    @property
    def run_dir(self) -> str | None:
        return None if self.writer is None else str(self.writer.dir)

    @property
    def done(self) -> list[SampleRecord]:
        """The records written so far (by an earlier attempt, then this one)."""
        return self.writer.done if self.writer is not None else self.kept

    def todo(self, positions: Sequence[int]) -> list[int]:
        """The positions an earlier attempt did not finish."""
        done = {r.index for r in self.done}
        return [i for i in positions if i not in done]

    def add(self, outcome: Any) -> None:
        """One finished sample (an :class:`~genEval.search.perturb.Outcome`): its record (and tensors) to the run
        directory, or to memory; a validated sample may go into the grid (the first ``grid_size`` positions)."""
        self._shapes = self._shapes or {
            "original": list(outcome.original.shape),
            "perturbed": list(outcome.image.shape),
        }
        if self.writer is not None:
            self.writer.add(outcome)
        else:
            self.kept.append(outcome.record())
        k = self.output.grid_size
        if outcome.validated and k > 0:
            item = (-outcome.index, outcome.original, outcome.image)
            (heapq.heappush if len(self._grid) < k else heapq.heappushpop)(self._grid, item)

    def records(self) -> list[SampleRecord]:
        """Every record of the run, flushed, in data-set order."""
        if self.writer is not None:
            self.writer.flush()
        return sorted(self.done, key=lambda r: r.index)

    def image_shapes(self) -> dict[str, list[int]] | None:
        """The sizes of the data's and the generator's images: from this attempt's samples, else from the results
        of the attempt that computed them all."""
        if self._shapes or self.writer is None or not (self.writer.dir / RESULTS).is_file():
            return self._shapes or None
        return read_results(self.writer.dir).image_shapes

    def finish(self, result: EvalResult) -> None:
        """The run is done: ``grid.png``, ``samples.jsonl`` (data-set order) and, last, ``results.json``."""
        if self.writer is None:
            return
        if self._grid:
            grid = sorted(self._grid, key=lambda g: -g[0])
            originals, perturbed = torch.stack([g[1] for g in grid]), torch.stack([g[2] for g in grid])
            save_grid(self.writer.dir / "grid.png", originals, perturbed, nrow=self.output.grid_size)
        self.writer.finish(result.samples, result.to_dict())
