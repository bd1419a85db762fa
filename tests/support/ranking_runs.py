"""Run directories written by hand where FMR and FMR_v disagree: the weaker model wins on FMR (issue 19).

Ten source images s0..s9 (labels alternate 0/1). The oracle vouches for s0..s5 (start check and steps accepted) and
cannot vouch for s6..s9 (start check failed), the same for every model, as when the oracle removes hard images.

* ``strong``: right on every clean image (SA 100, SA_v 100), right on 4 of the 6 perturbed images
  (PA 66.67): FMR = FMR_v = 66.67.
* ``weak``: right only on the clean images the oracle vouched for (SA 60, SA_v 100), right on 3 of 6 perturbed
  images (PA 50): FMR = 83.33 ranks it first, FMR_v = 50 ranks it last.
* ``mid``: wrong on one clean image the oracle could not vouch for (SA 90, SA_v 100), right on 5 of 6 perturbed
  images (PA 83.33): FMR 92.59, FMR_v 83.33.

Ranks: FMR mid 1, weak 2, strong 3 (the weak model above the strong one); FMR_v and PA mid 1, strong 2, weak 3;
SA strong 1, mid 2, weak 3.
"""

from __future__ import annotations

import json
from pathlib import Path

N, VOUCHED = 10, 6
SPEC = {
    # clean correct per source, final (perturbed) correct per vouched-for source
    "strong": {"clean": [1] * 10, "final": [1, 1, 1, 1, 0, 0]},
    "weak": {"clean": [1] * 6 + [0] * 4, "final": [1, 1, 1, 0, 0, 0]},
    "mid": {"clean": [1] * 9 + [0], "final": [1, 1, 1, 1, 1, 0]},
}


def _record(i: int, clean: int, final: int | None) -> dict:
    y = i % 2
    vouched = final is not None
    return {
        "source_id": f"s{i}",
        "label": y,
        "clean_pred": y if clean else 1 - y,
        "recon_pred": y if clean else 1 - y,
        "start_ok": vouched,
        "validated": vouched,
        "accepted_steps": 3 if vouched else 0,
        "rejected_at": -1,
        "first_fooled": -1 if (final or not vouched) else 1,
        "final_pred": (y if final else 1 - y) if vouched else (y if clean else 1 - y),
        "oracle_start_pred": y if vouched else 1 - y,
        "oracle_clean_pred": y,
        "reference": y,
        "image_linf": 0.1 if vouched else 0.0,
        "oracle_score": 0.9,
    }


#: A model the oracle cannot vouch for as often as the others, robust where it can: SA 60, SA_v 100, PA 83.33 (the PA
#: of ``mid``, but at a lower clean accuracy, so more robust than its accuracy predicts).
Z_ROBUST = {"clean": [1] * 6 + [0] * 4, "final": [1, 1, 1, 1, 1, 0]}


def write_ranking_runs(root: Path, reps: int = 1, generator: str | None = None, models: dict | None = None) -> Path:
    """``runs/<model>/rep<r>`` with the outcomes above (the same in every repetition), or those of ``models``;
    ``generator`` is recorded as a generator ablation would record it."""
    for model, spec in (models or SPEC).items():
        for r in range(reps):
            d = root / "runs" / model / f"rep{r}"
            d.mkdir(parents=True)
            recs = [_record(i, spec["clean"][i], spec["final"][i] if i < VOUCHED else None) for i in range(N)]
            (d / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
            comparison = {"model": model, "repetition": r, "seed": 7 + r}
            if generator is not None:
                comparison["generator"] = generator
            (d / "results.json").write_text(
                json.dumps(
                    {
                        "scores": {"num_classes": 2},
                        "class_names": ["cat", "dog"],
                        "seed": 7 + r,
                        "components": {"data": "hand", "generator": generator or "g", "oracle": "o"},
                        "config": {"search": {"budget": 3}, "comparison": comparison},
                    }
                )
            )
    return root / "runs"
