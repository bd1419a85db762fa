"""A run's scores as text: one headline line, then an aligned table (docs/scores.md).

Both read the scores in their JSON form (``results.json``'s ``scores``: one estimate dict per score plus the counts
``n``, ``n_validated``, ...), so ``geneval``, ``geneval merge``, ``geneval runs`` and ``geneval submit`` print the
same lines from a run in memory, a run directory or a service's answer, without torch.

* :func:`headline`: the ranking score with its interval and the counts behind it, e.g.
  ``FMR_v 70.27 [55.26, 84.38]  40 images, 37 validated, PA 26/37``.
* :func:`score_table`: every score with a ``summary`` note in :data:`~genEval.scores.definitions.SCORES`, in their
  order, in aligned columns: label, value, interval, counts ``k/n``, note. An undefined score says why in its note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genEval.scores.definitions import SCORE, SCORES


def _number(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def interval_text(estimate: Mapping[str, Any], digits: int = 2) -> str:
    """``[low, high]``, or empty when the estimate has no interval."""
    low, high = estimate.get("low"), estimate.get("high")
    return "" if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def headline(scores: Mapping[str, Any], key: str) -> str:
    """The one line a run ends with: score ``key`` (a comparison's ``rank_by``, e.g. ``fmr_validated``) with its
    interval, then how many images there were, how many the oracle validated and PA's counts."""
    label = SCORE[key].label if key in SCORE else key
    est = scores.get(key) or {}
    value = est.get("value")
    shown = f"{label} undefined ({est.get('reason') or 'not recorded'})" if value is None else f"{label} {value:.2f}"
    if value is not None and interval_text(est):
        shown += f" {interval_text(est)}"
    pa = scores.get("pa") or {}
    counts = [f"{scores.get('n', 0)} images", f"{scores.get('n_validated', 0)} validated"]
    if pa.get("k") is not None and pa.get("n"):
        counts.append(f"PA {pa['k']}/{pa['n']}")
    return f"{shown}  ({', '.join(counts)})"


def _note(template: str, estimate: Mapping[str, Any], counts: Mapping[str, Any]) -> str:
    """The summary note of a score without the ``k/n`` it starts with (those have their own column)."""
    text = template.removeprefix("{k}/{n}").removeprefix(":").strip()
    try:
        return text.format(**{**counts, "k": estimate.get("k"), "n": estimate.get("n")})
    except (KeyError, IndexError):  # a hand-written results.json without some count
        return text


def score_rows(scores: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(label, value, interval, counts, note) of every score the summary shows, in :data:`SCORES` order."""
    counts = {k: v for k, v in scores.items() if not isinstance(v, Mapping)}
    rows = []
    for score in SCORES:
        if score.summary is None:
            continue
        est = scores.get(score.key)
        if not isinstance(est, Mapping):
            rows.append((score.label, "", "", "", "not recorded"))
            continue
        value, note = est.get("value"), _note(score.summary, est, counts)
        if value is None:
            value_text, note = "undefined", est.get("reason") or note
        else:
            value_text = _number(value)
            if not interval_text(est) and est.get("reason"):
                note = f"no interval: {est['reason']}" + (f"; {note}" if note else "")
        k, n = est.get("k"), est.get("n")
        rows.append((score.label, value_text, interval_text(est), f"{k}/{n}" if k is not None else "", note))
    return rows


def aligned(rows: Sequence[Sequence[str]], right: Sequence[int] = (), indent: str = "  ") -> list[str]:
    """``rows`` of cells in columns as wide as their widest cell (columns in ``right`` right-aligned); trailing
    blanks cut."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    lines = []
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def score_table(scores: Mapping[str, Any], level: str = "95%") -> list[str]:
    """The aligned table of :func:`score_rows`, under a header line."""
    header = ("score", "value", f"{level} interval", "counts", "")
    return aligned([header, *score_rows(scores)], right=(1,))
