"""The per-sample outcome table every score is computed from (paper Sec. 3.3; METHOD.md "Scores").

:class:`Outcomes` holds one model's per-sample decisions in one run (read from ``samples.jsonl`` records);
:meth:`Outcomes.columns` turns them into the 0/1 :data:`COLUMNS` that every score of
:mod:`genEval.scores.definitions` is a function of, summed per source image for the bootstrap
(:mod:`genEval.scores.intervals`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

#: Per-sample 0/1 columns summed per source image; every score is a function of their sums.
COLUMNS = (
    "n",
    "clean",
    "recon",
    "start_ok",
    "validated",
    "perturbed_correct",
    "rejected",
    "clean_validated",
    "oracle_clean",
    "oracle_recon",
    "unchanged",
)
#: Column name -> its position in :data:`COLUMNS`.
COLUMN = {c: i for i, c in enumerate(COLUMNS)}
#: A validated sample whose final image moved less than this (L-inf, images in [0, 1]) from the start
#: reconstruction counts as unchanged: below one 8-bit grey level, so a saved image would not differ at all.
UNCHANGED_LINF = 1.0 / 255


@dataclass(frozen=True)
class Outcomes:
    """Per-sample outcomes of one model in one run: the one per-sample shape every score is computed from.

    All fields are arrays of length N (one entry per sample): ``ids`` the source-image id (str; samples of
    one source are resampled together), ``labels`` the true class, and booleans ``clean`` f(x) correct,
    ``recon`` f(D(E(x))) correct, ``start_ok`` the oracle accepted the reconstruction, ``validated`` at least
    one accepted step, ``final`` f correct on the final perturbed image, ``rejected`` the oracle rejected a step,
    ``oracle_clean`` / ``oracle_recon`` the oracle's own verdict on the clean image / on the start
    reconstruction is the true label, ``unchanged`` the final image moved less than :data:`UNCHANGED_LINF`
    (L-inf) from the start reconstruction. ``predictions`` / ``references`` (int, optional): f's class for the
    final image and the class the oracle had to keep seeing (for the label-free diagnostic, :func:`softmax_corr`).
    """

    ids: np.ndarray
    labels: np.ndarray
    clean: np.ndarray
    recon: np.ndarray
    start_ok: np.ndarray
    validated: np.ndarray
    final: np.ndarray
    rejected: np.ndarray
    oracle_clean: np.ndarray
    oracle_recon: np.ndarray
    unchanged: np.ndarray
    predictions: np.ndarray | None = None
    references: np.ndarray | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the arrays once, here
        set_(self, "ids", np.asarray([str(i) for i in self.ids], dtype=object))
        set_(self, "labels", np.asarray(self.labels, dtype=np.int64).reshape(-1))
        n = len(self.ids)
        for name in _FLAGS:
            set_(self, name, np.asarray(getattr(self, name), dtype=bool).reshape(-1))
        for name in ("predictions", "references"):
            if getattr(self, name) is not None:
                set_(self, name, np.asarray(getattr(self, name), dtype=np.int64).reshape(-1))
        for name in ("labels", *_FLAGS, "predictions", "references"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise ValueError(f"Outcomes.{name} has {len(arr)} entries for {n} source ids.")

    @classmethod
    def from_records(cls, records: Sequence[Mapping]) -> Outcomes:
        """From ``samples.jsonl`` rows (:class:`genEval.runs.rundir.SampleRecord` as dicts)."""
        lacking = [k for k in _RECORD_KEYS if records and k not in records[0]]
        if lacking:
            raise ValueError(
                f"the per-sample records (e.g. source {records[0].get('source_id')!r}) lack "
                f"{', '.join(lacking)}: they were written by an older genEval; rerun the evaluation."
            )
        lab = np.asarray([r["label"] for r in records], dtype=np.int64)

        def col(key: str, dtype: type = np.int64) -> np.ndarray:
            return np.asarray([r[key] for r in records], dtype=dtype)

        return cls(
            ids=[r["source_id"] for r in records],
            labels=lab,
            clean=col("clean_pred") == lab,
            recon=col("recon_pred") == lab,
            start_ok=col("start_ok") != 0,
            validated=col("validated") != 0,
            final=col("final_pred") == lab,
            rejected=col("rejected_at") > 0,
            oracle_clean=col("oracle_clean_pred") == lab,
            oracle_recon=col("oracle_start_pred") == lab,
            unchanged=col("image_linf", float) < UNCHANGED_LINF,
            predictions=col("final_pred"),
            references=col("reference") if all("reference" in r for r in records) else lab,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, mask: np.ndarray) -> Outcomes:
        """The samples where ``mask`` is True."""
        return Outcomes(
            **{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[mask] for f in fields(self)}
        )

    def columns(self) -> np.ndarray:
        """(N, len(COLUMNS)) float 0/1 columns, in the order of :data:`COLUMNS`."""
        v = self.validated
        cols = (
            np.ones(len(self), bool),
            self.clean,
            self.recon,
            self.start_ok,
            v,
            v & self.final,
            self.rejected,
            v & self.clean,
            self.oracle_clean,
            self.oracle_recon,
            v & self.unchanged,
        )
        return np.stack(cols, axis=1).astype(float)

    def totals(self, mask: np.ndarray | None = None) -> np.ndarray:
        """(len(COLUMNS),) column sums over all samples (or those where ``mask`` is True)."""
        cols = self.columns()
        return (cols if mask is None else cols[mask]).sum(0)


_FLAGS = ("clean", "recon", "start_ok", "validated", "final", "rejected", "oracle_clean", "oracle_recon", "unchanged")
_RECORD_KEYS = (
    "source_id",
    "label",
    "clean_pred",
    "recon_pred",
    "start_ok",
    "validated",
    "final_pred",
    "rejected_at",
    "oracle_clean_pred",
    "oracle_start_pred",
    "image_linf",
)
