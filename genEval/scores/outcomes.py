"""The per-sample record and the outcome table every score is computed from (paper Sec. 3.3; docs/method.md,
"The scores").

:class:`SampleRecord` is the one per-sample record: what the search decided for one source image (the loop's
:class:`~genEval.search.perturb.Outcome` is a SampleRecord with its tensors), one line of ``samples.jsonl``, and
what :attr:`genEval.runs.reader.RunDir.samples` gives back. :class:`Outcomes` holds one model's per-sample decisions
in one run, as arrays;
:meth:`Outcomes.columns` turns them into the 0/1 :data:`COLUMNS` that every score of
:mod:`genEval.scores.definitions` is a function of, summed per source image for the bootstrap
(:mod:`genEval.scores.intervals`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

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
#: How many of the classifier's largest softmax probabilities a record keeps for the clean and the final image (issue
#: 44): top-1 is the maximum softmax probability every confidence score reads (MaxPred, ATC-MC, AURRA, the calibration
#: error, -MSP), top-2 gives SoftGap, and top-5 the standard second accuracy of a 1000-class model; five numbers a
#: record whatever the number of classes.
TOP_K = 5
#: Up to this many classes a record also keeps the whole softmax vector of the final image: SoftmaxCorr (Tu et al.
#: 2024) needs C = P^T P / N, whose norm mixes every pair of classes, so no per-sample summary gives it exactly. 100
#: floats a record (CIFAR-100) is small; above it the record keeps the top-k only and SoftmaxCorr spreads the rest of
#: each row's mass evenly over the other classes (:func:`genEval.scores.label_free.probability_rows`).
FULL_VECTOR_CLASSES = 100


@dataclass(frozen=True)
class SampleRecord:
    """What the search did to one sample (docs/method.md, "One sample"): one line of ``samples.jsonl``.

    Steps count from 1, -1 means "never". ``index``: position of the source in the data set; ``reference``: the
    class the oracle had to keep seeing; ``accepted_steps``: last accepted step (0 = none: not ``validated``);
    ``latent_dist``, ``image_dist`` (L2) and ``image_linf`` are measured from the start of the search; ``part``:
    the run directory's tensor part (latents/images) holding this sample, -1 when none was saved.

    The classifier's confidence (docs/scores.md; None in a record written before it was recorded): ``clean_top_probs`` /
    ``clean_top_classes`` its :data:`TOP_K` largest softmax probabilities (descending) and their classes on the clean
    image, ``clean_entropy`` the entropy of that softmax (nats, in [0, ln K]); the same with ``final_`` for the final
    image (the one ``final_pred`` is the class of), ``final_probs`` its whole softmax vector when the classifier has at
    most :data:`FULL_VECTOR_CLASSES` classes (else None), and ``oracle_final_pred`` the oracle's own class for that
    image (``oracle_score`` is its probability of the reference class there).
    """

    source_id: str
    index: int
    label: int
    reference: int
    clean_pred: int
    recon_pred: int
    start_ok: bool
    validated: bool
    accepted_steps: int
    rejected_at: int
    first_fooled: int
    final_pred: int
    oracle_clean_pred: int
    oracle_start_pred: int
    oracle_score: float
    latent_dist: float
    image_dist: float
    image_linf: float
    part: int = -1
    clean_top_probs: tuple[float, ...] | None = None
    clean_top_classes: tuple[int, ...] | None = None
    clean_entropy: float | None = None
    final_top_probs: tuple[float, ...] | None = None
    final_top_classes: tuple[int, ...] | None = None
    final_entropy: float | None = None
    final_probs: tuple[float, ...] | None = None
    oracle_final_pred: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "") -> SampleRecord:
        """From one ``samples.jsonl`` line. Keys it does not know are ignored; a record without one of the fields
        every score is computed from is refused, naming them (it was written by an older genEval); the
        measurements a score does not need default when absent (``reference``: the label; steps and distances:
        never / NaN; ``index``: -1). Every field is typed strictly, as JSON carries it: a string label, a float
        index or a boolean count is refused naming the field (and ``where``: the file and line it was read from)."""
        lacking = [k for k in REQUIRED if k not in d]
        if lacking:
            raise ValueError(
                f"{where + ': ' if where else ''}the per-sample records (e.g. source {d.get('source_id')!r}) lack "
                f"{', '.join(lacking)}: they were written by an older genEval; rerun the evaluation."
            )
        err = _mistyped(d, where)
        if err is not None:
            raise err
        given = {k: _typed(_KINDS.get(k, "int"), v) for k, v in d.items()}  # JSON writes 1.0 as 1.0, a hand 1
        defaults = {**_DEFAULTS, "reference": d["label"]}
        return cls(**{f.name: given[f.name] if f.name in d else defaults[f.name] for f in fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON carries it (the confidence tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def record(self) -> SampleRecord:
        """The record alone (an :class:`~genEval.search.perturb.Outcome` without its tensors)."""
        return SampleRecord(**{f.name: getattr(self, f.name) for f in fields(SampleRecord)})


#: The fields of a :class:`SampleRecord` every score is computed from: a record without one cannot be read.
REQUIRED = (
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
#: The classifier's (and the oracle's) confidence fields of a record (docs/scores.md): None when not recorded.
CONFIDENCE_FIELDS = (
    "clean_top_probs",
    "clean_top_classes",
    "clean_entropy",
    "final_top_probs",
    "final_top_classes",
    "final_entropy",
    "final_probs",
    "oracle_final_pred",
)
#: What a record written before a measurement existed (or by hand) reads as for the fields no score needs.
_DEFAULTS: dict[str, Any] = {
    "index": -1,
    "accepted_steps": 0,
    "first_fooled": -1,
    "oracle_score": float("nan"),
    "latent_dist": float("nan"),
    "image_dist": float("nan"),
    "part": -1,
} | {k: None for k in CONFIDENCE_FIELDS}


#: How JSON types every :class:`SampleRecord` field that is not a whole number (``int``, never a boolean): a
#: boolean, a number (whole or not, never a boolean) or a string.
_KINDS = (
    {"source_id": "str", "start_ok": "bool", "validated": "bool"}
    | {k: "float" for k in ("oracle_score", "latent_dist", "image_dist", "image_linf")}
    | {k: "float?" for k in ("clean_entropy", "final_entropy")}
    | {k: "floats?" for k in ("clean_top_probs", "final_top_probs", "final_probs")}
    | {k: "ints?" for k in ("clean_top_classes", "final_top_classes")}
    | {"oracle_final_pred": "int?"}
)
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "str": (str,),
    "int?": (int, type(None)),
    "float?": (int, float, type(None)),
    "floats?": (list, tuple, type(None)),
    "ints?": (list, tuple, type(None)),
}
_EXPECTED = {
    "int": "a whole number",
    "bool": "true or false",
    "float": "a number",
    "str": "a string",
    "int?": "a whole number or null",
    "float?": "a number or null",
    "floats?": "a list of numbers or null",
    "ints?": "a list of whole numbers or null",
}
#: The type every entry of a list field must have (exact types, as for the fields themselves).
_ITEM = {"floats?": (int, float), "ints?": (int,)}


def _typed(kind: str, value: Any) -> Any:
    """A field's JSON value as the record holds it: a number as a float, a list as a tuple (records are frozen)."""
    if value is None:
        return None
    if kind in ("float", "float?"):
        return float(value)
    if kind == "floats?":
        return tuple(float(v) for v in value)
    if kind == "ints?":
        return tuple(value)
    return value


_JSON_NAMES = {"str": "string", "int": "number", "float": "number", "bool": "boolean", "list": "list", "dict": "object"}


def _mistyped(d: Mapping[str, Any], where: str) -> ValueError | None:
    """The error for the first field of ``d`` that JSON did not type as the record does (a string label, a float
    index, a boolean count...), naming the field, its value and ``where``; None when every field is typed right."""
    for f in fields(SampleRecord):
        if f.name not in d:
            continue
        kind, value = _KINDS.get(f.name, "int"), d[f.name]
        items = _ITEM.get(kind)
        if type(value) not in _TYPES[kind] or (
            items is not None and value is not None and any(type(v) not in items for v in value)
        ):  # exact types: a bool is an int to isinstance
            given = f"the {_JSON_NAMES.get(type(value).__name__, type(value).__name__)} {json.dumps(value)}"
            return ValueError(
                f"{where + ': ' if where else ''}field {f.name!r} of the record of source {d.get('source_id')!r} must "
                f"be {_EXPECTED[kind]}, got {given}; genEval's writer never writes that, so the record was edited or "
                "written by another program. Fix or remove the line, or move the run directory away and rerun."
            )
    return None


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
    def from_records(cls, records: Sequence[SampleRecord | Mapping[str, Any]]) -> Outcomes:
        """From per-sample records (:class:`SampleRecord`, as ``RunDir.samples`` gives them; a
        ``samples.jsonl`` line as a mapping is read with :meth:`SampleRecord.from_dict`)."""
        records = [r if isinstance(r, SampleRecord) else SampleRecord.from_dict(r) for r in records]
        lab = np.asarray([r.label for r in records], dtype=np.int64)

        def col(key: str, dtype: type = np.int64) -> np.ndarray:
            return np.asarray([getattr(r, key) for r in records], dtype=dtype)

        return cls(
            ids=[r.source_id for r in records],
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
            references=col("reference"),
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
